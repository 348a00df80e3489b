"""The failures a user can fix (bad settings, missing or unreadable data): one line on stderr, exit status 2."""

from __future__ import annotations


class UserError(RuntimeError):
    """Bad input or missing data: reported as one line, exit status 2."""


class SourceError(UserError):
    """A dataset split that cannot be loaded; the message is one line meant for the user."""


class UnreadableFile(SourceError):
    """A mirror file that exists but cannot be read (truncated, corrupt): never mistaken for missing data."""

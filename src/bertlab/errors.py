"""The failures a user can fix (bad settings, missing or unreadable data): one line on stderr, exit status 2."""

from __future__ import annotations


class UserError(RuntimeError):
    """Bad input or missing data: reported as one line, exit status 2."""


class SourceError(UserError):
    """A dataset split that cannot be loaded; the message is one line meant for the user."""


class UnreadableFile(SourceError):
    """A mirror file that exists but cannot be read (truncated, corrupt): never mistaken for missing data."""


class Interrupted(BaseException):  # not an Exception: no handler of errors may swallow a stop
    """SIGTERM or SIGINT (`bertlab.guards.stop_on_signals`): the stage stops where it is, as a kill would stop it
    (pretraining resumes from its last checkpoint); reported as one line, exit status 128 + the signal's number."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

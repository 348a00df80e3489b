"""What stops a stage cleanly instead of leaving it running or dying in a traceback: SIGTERM/SIGINT, the death of
the DVC process that started it, a full disk."""

from __future__ import annotations

import errno
import logging
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

from bertlab.errors import Interrupted

log = logging.getLogger(__name__)
_installed: set[int] = set()  # the processes whose handlers stop_on_signals has set


def stop_on_signals() -> None:
    """SIGTERM and SIGINT raise `Interrupted` in this process (its forked workers die of them as before), which from
    then on ignores the death of its children: Ctrl-C and `timeout` signal the whole process group, and the data
    loader's SIGCHLD handler would otherwise raise its "DataLoader worker ... is killed by signal" over the one-line
    stop. Under DVC
    (`DVC_STAGE` set), the death of the process that started this one counts as a SIGTERM: `dvc repro` stopped by
    SIGTERM exits at once without passing it on, which left its stage running as an orphan."""
    owner = os.getpid()
    if owner in _installed:  # once a process (a stage's, then each job of its multirun's)
        return
    _installed.add(owner)

    def handler(signum: int, _: Any) -> None:
        if os.getpid() != owner:  # a forked worker inherited this handler: die of the signal, as before
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        raise Interrupted(signum)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, handler)
    if os.environ.get("DVC_STAGE"):
        watch_parent()


def watch_parent(every: float = 1.0) -> None:
    """SIGTERM to this process, from a daemon thread checking every `every` seconds, once the process that started it
    has gone (or, when that is a shell, the shell's parent: DVC runs a stage's command through `$SHELL -c`)."""
    def parent_of(pid: int) -> int | None:
        try:
            return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return None

    def name_of(pid: int) -> str:
        try:
            return Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            return ""

    me, parent = os.getpid(), os.getppid()
    grandparent = parent_of(parent) if name_of(parent) in ("sh", "bash", "dash", "zsh", "fish") else None

    def watch() -> None:
        while True:
            time.sleep(every)
            if os.getppid() != parent or (grandparent is not None and parent_of(parent) != grandparent):
                log.warning("the process that started this stage has ended: stopping")
                os.kill(me, signal.SIGTERM)
                return

    threading.Thread(target=watch, name="bertlab-watch-parent", daemon=True).start()


def disk_full(err: BaseException) -> str | None:
    """The file (or "a file") whose write failed for want of space, if that is what `err` (or its cause) is."""
    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in (errno.ENOSPC, errno.EDQUOT):
            return str(seen.filename or "a file")
        if "No space left on device" in str(seen) or "file write failed" in str(seen):  # torch's zip writer
            return "a file"
        seen = seen.__cause__ or seen.__context__
    return None

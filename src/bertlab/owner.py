"""One writer per run: a training run claims its name before it writes anything, and a second writer of the same run
(a grid job, `dvc repro`, a run by hand) is refused in one line naming the first, its files untouched.

A claim is an advisory lock (`flock`) on `<out_dir>/checkpoints/claims/<stage>/<run>.owner`, beside the scratch folders
and outside every DVC output; the file names its owner (host, process, SLURM job). The kernel drops the lock when the
owner's process ends, however it ends (on NFS, with the client's lease), so the claim of a run whose owner is gone
(killed, its node lost) is taken over by the next writer: nothing to clean by hand.
"""

from __future__ import annotations

import fcntl
import os
import socket
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path

from bertlab.errors import UserError


def claim_path(out_dir: str | Path, stage: str, run: str) -> Path:
    """The file of the claim of run `run` of training stage `stage` writing under `out_dir`."""
    return Path(out_dir) / "checkpoints" / "claims" / stage / f"{run}.owner"


def claim(out_dir: str | Path, stage: str, run: str, rank: int) -> AbstractContextManager[None]:
    """The claim of that run, held by global rank `rank` zero (a distributed run's other ranks are its owner's)."""
    return claimed(claim_path(out_dir, stage, run), run) if rank == 0 else nullcontext()


def owner() -> str:
    """This process, as a claim names it."""
    job = os.environ.get("SLURM_JOB_ID")
    return f"process {os.getpid()} on {socket.gethostname()}" + (f" (SLURM job {job})" if job else "")


@contextmanager
def claimed(path: Path, run: str) -> Iterator[None]:
    """Holds the claim in `path` for the block; a UserError naming the holder if another live process holds it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 1024, 0).decode(errors="replace").strip() or "another process"
            raise UserError(f"{run} is being written by {holder} (its claim: {path}): wait for it to end, or stop "
                            "it; this run was not started") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{owner()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock; the file stays, so no second writer can lock a file unlinked under it

"""A real one-node SLURM cluster on this machine for the slow tests: Debian's `slurm-wlm` and `munge` (installed with
apt-get where they are missing and this is root), munged as user munge with the package's key, slurmctld and slurmd
on localhost with this machine's CPUs. Nothing is touched where another SLURM configuration is in place."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

CONF = Path("/etc/slurm/slurm.conf")
MARK = "# a one-node test cluster written by bertlab's tests (tests/slurm.py)"


def conf_text(host: str, cpus: int) -> str:
    """slurm.conf of a one-node cluster on `host` (the settings that work on these machines: research leads)."""
    spool = Path("/var/spool")
    return "\n".join([
        MARK, "ClusterName=bertlab", f"SlurmctldHost={host}", "SlurmUser=root", "AuthType=auth/munge",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core", f"StateSaveLocation={spool / 'slurmctld'}",
        f"SlurmdSpoolDir={spool / 'slurmd'}", "ReturnToService=2", "SlurmctldLogFile=/var/log/slurm/slurmctld.log",
        "SlurmdLogFile=/var/log/slurm/slurmd.log", f"NodeName={host} CPUs={cpus} State=UNKNOWN",
        "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP", ""])


def why_not() -> str | None:
    """None where a one-node cluster can run here (installing the packages if need be), else the reason."""
    if os.name != "posix" or os.geteuid() != 0:
        return "starting slurmctld, slurmd and munged takes root"
    if CONF.exists() and MARK not in CONF.read_text():
        return f"{CONF} is another SLURM configuration: not touched"
    if not (shutil.which("slurmctld") and shutil.which("munged")):
        if not shutil.which("apt-get"):
            return "slurm-wlm and munge are not installed, and there is no apt-get to install them"
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        for cmd in (["apt-get", "update"], ["apt-get", "install", "-y", "slurm-wlm", "munge"]):
            done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
            if done.returncode != 0:
                return f"`{' '.join(cmd)}` failed: {done.stderr.strip().splitlines()[-1:]}"
    return None


def up() -> bool:
    """Whether the cluster answers with its node idle or busy."""
    done = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True)
    return done.returncode == 0 and bool({"idle", "mixed", "allocated"} & set(done.stdout.split()))


@contextmanager
def cluster(cpus: int = 2) -> Iterator[str | None]:
    """A running one-node cluster for the block: None, or the reason there is none. Daemons it started are stopped
    after it."""
    reason = why_not()
    if reason is not None:
        yield reason
        return
    started: list[subprocess.Popen] = []
    if not up():
        host = socket.gethostname()
        CONF.parent.mkdir(parents=True, exist_ok=True)
        CONF.write_text(conf_text(host, cpus))
        for folder in ("/var/spool/slurmctld", "/var/spool/slurmd", "/var/log/slurm"):
            Path(folder).mkdir(parents=True, exist_ok=True)
        Path("/run/munge").mkdir(parents=True, exist_ok=True)
        shutil.chown("/run/munge", "munge", "munge")
        if subprocess.run(["munge", "-n"], capture_output=True).returncode != 0:
            started.append(subprocess.Popen(["runuser", "-u", "munge", "--", "munged", "-F"]))
            time.sleep(1)
        started += [subprocess.Popen([daemon, "-D"]) for daemon in ("slurmctld", "slurmd")]
        deadline = time.monotonic() + 60
        while not up() and time.monotonic() < deadline:
            time.sleep(1)
    try:
        yield None if up() else "slurmctld and slurmd started, but the node never became idle (/var/log/slurm)"
    finally:
        for proc in reversed(started):
            proc.terminate()
            proc.wait(timeout=30)


@pytest.fixture(scope="module")
def one_node() -> Iterator[None]:
    """A one-node cluster for a test module; its tests skipped, with why, where none can run here."""
    with cluster() as reason:
        if reason is not None:
            pytest.skip(f"no one-node SLURM here: {reason}")
        yield

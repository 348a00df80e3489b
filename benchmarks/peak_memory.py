"""Run a command; print its wall time and the peak summed RSS of it and all its descendants (sampled every 0.2 s):
all resident pages, and the anonymous ones alone (Linux `RssAnon`: the heap, without memory-mapped file pages, which
the kernel can drop and which grow with whatever files a process maps, e.g. its memory-mapped outputs).

Usage: python benchmarks/peak_memory.py python -m bertlab.pretrain_data data_dir=... profile=gpu impl.data_processes=2
"""

import subprocess
import sys
import time

import psutil


def anonymous(pid: int) -> int:
    """Bytes of anonymous resident memory of process `pid`."""
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    return 0


def main() -> int:
    start = time.time()
    proc = subprocess.Popen(sys.argv[1:])
    root = psutil.Process(proc.pid)
    peak = peak_anon = 0
    while proc.poll() is None:
        try:
            procs = [root, *root.children(recursive=True)]
            peak = max(peak, sum(p.memory_info().rss for p in procs))
            peak_anon = max(peak_anon, sum(anonymous(p.pid) for p in procs))
        except (psutil.Error, OSError):  # a process ended between listing and reading it
            pass
        time.sleep(0.2)
    print(f"exit {proc.returncode} wall {time.time() - start:.1f} s peak_rss {peak / 2**30:.2f} GiB "
          f"peak_anonymous {peak_anon / 2**30:.2f} GiB", file=sys.stderr)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())

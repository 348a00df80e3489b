"""Run a command; print its wall time and the peak summed RSS of it and all its descendants (sampled every 0.2 s).

Usage: python benchmarks/peak_memory.py python -m bertlab.pretrain_data data_dir=... profile=gpu impl.data_processes=2
"""

import subprocess
import sys
import time

import psutil


def main() -> int:
    start = time.time()
    proc = subprocess.Popen(sys.argv[1:])
    root = psutil.Process(proc.pid)
    peak = 0
    while proc.poll() is None:
        try:
            peak = max(peak, sum(p.memory_info().rss for p in [root, *root.children(recursive=True)]))
        except psutil.Error:  # a process ended between listing and reading it
            pass
        time.sleep(0.2)
    print(f"exit {proc.returncode} wall {time.time() - start:.1f} s peak_rss {peak / 2**30:.2f} GiB", file=sys.stderr)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())

"""The grid's driver on SLURM against the number of jobs: `sbatch` calls, the time to submit, the driver's own CPU,
`squeue` polls, with jobs that train nothing (each runs `true`), shaped as the study's grid: `--encoders` x
`--runs` pretraining jobs that wait for nothing, and `--cells` cells on each pretraining run that wait for it.

    python benchmarks/grid_driver.py                                  # 20 x 3 pretraining jobs, 16 cells each: 1,020
    python benchmarks/grid_driver.py --encoders 40 --runs 5 --cells 4  # 200 + 800 jobs

Needs a running SLURM (`tests/slurm.py` starts a one-node one here: `python -c "from tests import slurm; ..."`, or
run it under `pytest -m slow` fixtures); prints one table row.
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

from bertlab import slurm_jobs
from bertlab.jobs import Engine, Job


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--encoders", type=int, default=20)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cells", type=int, default=16)
    a = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="grid-driver-"))
    jobs = []
    for e in range(a.encoders):
        for r in range(a.runs):
            run = f"pretrain@e{e}/e{e}-{r}"
            jobs.append(Job(run, ("true",), tmp / "logs" / f"{run}.log", kind="pretrain"))
            jobs += [Job(f"finetune@e{e}/c{c}-{r}", ("true",), tmp / "logs" / f"e{e}-c{c}-{r}.log", (run,), "cell")
                     for c in range(a.cells)]
    polls, submit_seconds = [0], [0.0]
    in_queue, submit = slurm_jobs.in_queue, slurm_jobs.submit

    def counted(ids: list[str]) -> set[str]:
        polls[0] += 1
        return in_queue(ids)

    def timed(*args: object) -> None:
        began = time.perf_counter()
        submit(*args)
        submit_seconds[0] = time.perf_counter() - began

    slurm_jobs.in_queue, slurm_jobs.submit = counted, timed
    engine = Engine("slurm", tmp / "submitit", slurm={"time": 10, "cpus_per_task": 1})
    began = time.perf_counter()
    failures = slurm_jobs.run_slurm_jobs(jobs, engine, tmp)
    wall = time.perf_counter() - began
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    sbatch = len({job_id.split("_")[0] for job_id in slurm_jobs.recorded(engine).values()})
    print("| jobs | sbatch calls | submit (s) | wall (s) | driver CPU (s) | its sbatch/squeue CPU (s) | squeue polls | "
          "failed |\n|---|---|---|---|---|---|---|---|")
    print(f"| {len(jobs):,} | {sbatch} | {submit_seconds[0]:.1f} | {wall:.0f} | {own.ru_utime + own.ru_stime:.1f} | "
          f"{children.ru_utime + children.ru_stime:.1f} | {polls[0]} | {len(failures)} |")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()

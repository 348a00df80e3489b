"""NSP (`bert`) vs no NSP (`nonsp`) at the cpu recipe across pretraining runs: the pipeline's (seed 1, data/) and
run.sh's (seeds 2 and 3, data/hand/), each decided by the ablations report's paired bootstrap over dev items and
fine-tuning seeds (`bertlab.report.stats.compare`), then all runs pooled in one bootstrap that resamples whole runs
(pretraining x fine-tuning) as well as items. With three pretraining runs the pooled interval is a rough one.

    python benchmarks/pilots/pretraining_seeds_2026-11-28/analyse.py [data_dir] > result.txt
"""
import json
import sys
from pathlib import Path

import numpy as np

from bertlab.report.collect import read_items
from bertlab.report.stats import compare, score

DATA = Path(sys.argv[1] if len(sys.argv) > 1 else "data")
TASKS = {"qnli": ("accuracy", [1]), "squad": ("f1", [1]), "sst2": ("accuracy", [1, 2])}  # the cpu cells' seeds
RUNS = {1: (DATA / "finetune", ""), 2: (DATA / "hand" / "finetune", "_s2"), 3: (DATA / "hand" / "finetune", "_s3")}
PAPER = {"qnli": 3.5, "squad": 0.6, "sst2": 0.1}  # the paper's Table 5, BERT_BASE - No NSP


def cells(task: str, encoder: str, run: int) -> list:
    root, suffix = RUNS[run]
    return [read_items(root / f"{task}-{encoder}{suffix}-finetune-{s}" / "items.json") for s in TASKS[task][1]]


result = {}
for task, (metric, _) in TASKS.items():
    rows, pool_a, pool_b = [], [], []
    for run in RUNS:
        a, b = cells(task, "bert", run), cells(task, "nonsp", run)
        kind = a[0].kind
        c = compare([x.model for x in a], [x.model for x in b], kind, metric)
        means = [float(np.mean([score(kind, metric, x.model) for x in side])) for side in (a, b)]
        rows.append({"pretraining_seed": run, "bert": means[0], "nonsp": means[1], "estimate": c.estimate,
                     "low": c.low, "high": c.high, "verdict": c.verdict})
        pool_a += [x.model for x in a]
        pool_b += [x.model for x in b]
        print(f"{task:6s} pretraining seed {run}: bert {means[0]:6.2f} nonsp {means[1]:6.2f}  {c.estimate:+.2f} "
              f"[{c.low:+.2f}, {c.high:+.2f}] {c.verdict}")
    est = np.array([r["estimate"] for r in rows])
    pooled = compare(pool_a, pool_b, kind, metric)
    width = float(np.mean([r["high"] - r["low"] for r in rows]))
    print(f"{task:6s} estimates {np.round(est, 2).tolist()}: mean {est.mean():+.2f}, between-run SD {est.std(ddof=1):.2f}"
          f" (one run's 95% interval is {width:.2f} wide); pooled {pooled.estimate:+.2f} [{pooled.low:+.2f}, "
          f"{pooled.high:+.2f}] {pooled.verdict}; the paper's {PAPER[task]:+.1f}")
    result[task] = {"runs": rows, "between_run_sd": float(est.std(ddof=1)), "pooled": {
        "estimate": pooled.estimate, "low": pooled.low, "high": pooled.high, "verdict": pooled.verdict}}
(Path(__file__).with_name("result.json")).write_text(json.dumps(result, indent=1) + "\n")

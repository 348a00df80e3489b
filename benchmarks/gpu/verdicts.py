"""Pretrained vs scratch from finetune_pilot.sh's runs: per task, each side's mean over seeds beside the task's floor,
and A - B by `bertlab.report.stats.compare` (paired bootstrap over dev items and seeds, 95%), as the report does.

    python benchmarks/gpu/verdicts.py <data_dir> [out.csv]
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import numpy as np

from bertlab.report.stats import compare, floor_status, score

FIELDS = ["task", "metric", "bert_mean", "scratch_mean", "floor", "estimate", "low", "high", "verdict", "seeds",
          "items", "bert_floor_status", "scratch_floor_status"]


def columns(part: dict) -> dict[str, np.ndarray]:
    return {k: np.asarray(v) for k, v in part.items() if k != "name"}


def main(data: Path, out: Path | None) -> None:
    rows = []
    for task in ("sst2", "conll2003", "squad"):
        items = {side: [json.loads(p.read_text()) for p in sorted(data.glob(f"finetune/{task}-{side}-*/items.json"))]
                 for side in ("bert", "scratch")}
        if not items["bert"] or not items["scratch"]:
            print(f"{task}: no runs of a side ({ {k: len(v) for k, v in items.items()} })")
            continue
        kind, metric = items["bert"][0]["kind"], items["bert"][0]["metric"]
        a, b = ([columns(i["model"]) for i in items[side]] for side in ("bert", "scratch"))
        floor = columns(items["bert"][0]["floor"])
        c = compare(a, b, kind, metric)
        rows.append({
            "task": task, "metric": metric, "bert_mean": np.mean([score(kind, metric, x) for x in a]),
            "scratch_mean": np.mean([score(kind, metric, x) for x in b]), "floor": score(kind, metric, floor),
            "estimate": c.estimate, "low": c.low, "high": c.high, "verdict": c.verdict,
            "seeds": f"{c.runs_a}/{c.runs_b}",
            "items": c.n_items, "bert_floor_status": floor_status(a, floor, kind, metric)[0],
            "scratch_floor_status": floor_status(b, floor, kind, metric)[0],
        })
    for r in rows:
        print(f"{r['task']} {r['metric']}: bert {r['bert_mean']:.1f} ({r['bert_floor_status']}), scratch "
              f"{r['scratch_mean']:.1f} ({r['scratch_floor_status']}), floor {r['floor']:.1f}; bert - scratch "
              f"{r['estimate']:+.1f} [{r['low']:+.1f}, {r['high']:+.1f}] {r['verdict']} ({r['seeds']} seeds, "
              f"{r['items']} items)")
    if out:
        with out.open("w", newline="") as f:
            writer = csv.DictWriter(f, FIELDS)
            writer.writeheader()
            writer.writerows({k: round(v, 3) if isinstance(v, float) else v for k, v in r.items()} for r in rows)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]) if len(sys.argv) > 2 else None)

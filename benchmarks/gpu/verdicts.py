"""Pretrained vs scratch from finetune_pilot.sh's runs, read and decided as the scaling report decides a cell pair
(`report.scaling.read_cell`, `report.cells.with_floor`, `report.claims.contrast`, with the report's columns and
bootstrap settings from conf/ablations/default.yaml): per task, each side's mean over seeds beside the task's floor
on the same dev items, and bert - scratch with its paired 95% interval over dev items and seeds.

    python benchmarks/gpu/verdicts.py <data_dir> [out.csv]
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

from omegaconf import OmegaConf

from bertlab.report.cells import with_floor
from bertlab.report.claims import contrast
from bertlab.report.scaling import read_cell
from bertlab.stage import CONF_DIR

TASKS = ("sst2", "conll2003", "squad")
FIELDS = ["task", "metric", "bert_mean", "scratch_mean", "floor", "estimate", "low", "high", "verdict", "seeds",
          "items", "bert_floor_status", "scratch_floor_status", "reason"]


def main(data: Path, out: Path | None) -> None:
    settings = OmegaConf.load(Path(CONF_DIR) / "ablations" / "default.yaml")
    columns = OmegaConf.to_container(settings.columns, resolve=True)
    bootstrap = OmegaConf.to_container(settings.bootstrap, resolve=True)
    rows = []
    for task in TASKS:
        sides = {side: with_floor(read_cell(data / "finetune", [f"{task}-{side}-{s}" for s in (1, 2)], task, columns),
                                  bootstrap) for side in ("bert", "scratch")}
        if not any(cell.n for cell in sides.values()):
            continue  # not run
        bert, scratch = sides["bert"], sides["scratch"]
        c, reason = contrast(bert, scratch, "bert", "scratch", bootstrap)
        rows.append({"task": task, "metric": columns[task]["metric"], "bert_mean": bert.mean,
                     "scratch_mean": scratch.mean, "floor": bert.floor_value, "estimate": c.estimate, "low": c.low,
                     "high": c.high, "verdict": c.verdict, "seeds": f"{c.runs_a}/{c.runs_b}", "items": c.n_items,
                     "bert_floor_status": bert.floor_status, "scratch_floor_status": scratch.floor_status,
                     "reason": reason})
        floor = "none" if bert.floor_value is None else f"{bert.floor_value:.1f}"
        print(f"{task} {columns[task]['metric']}: bert {bert.mean:.1f} ({bert.floor_status}), scratch "
              f"{scratch.mean:.1f} ({scratch.floor_status}), floor {floor}; bert - scratch "
              f"{c.estimate:+.1f} [{c.low:+.1f}, {c.high:+.1f}] {c.verdict} ({c.runs_a}/{c.runs_b} seeds, "
              f"{c.n_items} items){'; ' + reason if reason else ''}")
    if out:
        with out.open("w", newline="") as f:
            writer = csv.DictWriter(f, FIELDS)
            writer.writeheader()
            writer.writerows({k: round(v, 3) if isinstance(v, float) else v for k, v in r.items()} for r in rows)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]) if len(sys.argv) > 2 else None)

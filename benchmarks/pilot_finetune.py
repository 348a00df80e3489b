"""A fine-tuning pilot: encoders A and B on one task over seeds, from a composed cell config, in a pilot data
directory; prints each cell's headline metric beside its floor and A - B with its paired 95% interval.

    python benchmarks/pilot_finetune.py --data /work/pilots/ds \
        --config data/configs/finetune/bert/cell/sst2-bert-finetune-1-1.yaml --a bert_x --b scratch_x --seeds 1 2 \
        --csv benchmarks/pilots/margins.csv -- finetune.max_train_examples=null

`--data` must hold `tokenizer/`, `download/tasks/<task>/` and, for both encoders, the pretraining run the config
reads, `pretrain/<encoder>/<encoder>-<finetune.pretrain_seed>/`. A cell whose `finetune/<encoder>/<name>/metrics.json`
exists is read, not retrained (names: <task>-<encoder>-<tag>-<seed>).
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
from pathlib import Path

from bertlab.report import stats
from bertlab.report.collect import read_items


def run_cell(a: argparse.Namespace, encoder: str, seed: int) -> Path:
    name = f"{a.task}-{encoder}-{a.tag}-{seed}"
    out = a.data / "finetune" / encoder / name
    if not (out / "metrics.json").exists():
        cmd = [sys.executable, "-m", "bertlab.finetune", "-cd", str(a.config.parent.resolve()), "-cn", a.config.stem,
               f"name={name}", f"data_dir={a.data}", f"finetune.encoder={encoder}", f"seed={seed}",
               "logger.kind=none", *a.overrides]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode:
            sys.exit(f"error: cell {name} failed:\n{done.stderr[-3000:]}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--config", type=Path, required=True, help="a composed cell config (its task is used)")
    parser.add_argument("--a", required=True)
    parser.add_argument("--b", required=True)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--tag", default="pilot", help="names the cells (one tag per recipe)")
    parser.add_argument("--csv", type=Path, help="append the contrast here")
    parser.add_argument("overrides", nargs="*")
    a = parser.parse_args()
    a.task = a.config.stem.split("-")[0]
    sides = {}
    for encoder in (a.a, a.b):
        cells = [run_cell(a, encoder, seed) for seed in a.seeds]
        records = [json.loads((c / "metrics.json").read_text()) for c in cells]
        sides[encoder] = ([read_items(c / "items.json") for c in cells], records)
        print(f"{a.task} {encoder:24s} {[round(r['headline'], 2) for r in records]} floor {records[0]['floor']} "
              f"train {sum(r['train_seconds'] for r in records):.0f} s, {records[0]['steps']} updates")
    (items_a, records), (items_b, _) = sides[a.a], sides[a.b]
    metric = records[0]["headline_metric"]
    c = stats.compare([i.model for i in items_a], [i.model for i in items_b], items_a[0].kind, metric, draws=4000)
    print(f"{a.task}: {a.a} - {a.b} = {c.estimate:+.2f} [{c.low:+.2f}, {c.high:+.2f}] ({c.verdict}; {c.n_items} items)")
    if a.csv:
        new = not a.csv.exists()
        with a.csv.open("a", newline="") as f:
            writer = csv.writer(f)
            if new:
                writer.writerow(["task", "a", "b", "tag", "seeds", "updates", "estimate", "low", "high", "overrides"])
            writer.writerow([a.task, a.a, a.b, a.tag, len(a.seeds), records[0]["steps"], round(c.estimate, 2),
                             round(c.low, 2), round(c.high, 2), " ".join(a.overrides)])


if __name__ == "__main__":
    main()

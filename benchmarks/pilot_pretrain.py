"""A pretraining pilot: run the `pretrain` stage from a run's composed config with overrides, in a pilot data
directory (never the pipeline's `data/`), and print its learning curve as held-out [MASK]-position perplexity over
the unigram floor of the same positions, against tokens.

    python benchmarks/pilot_pretrain.py --data /work/pilots/data --config data/configs/pretrain/bert/run/bert-1.yaml \
        --name p_base --csv benchmarks/pilots/mask_curves.csv -- pretrain.max_steps=1200 pretrain.val_every_steps=200

`--data` must hold `tokenizer/` and `pretrain_data/` (links to the pipeline's are fine); the run writes
`pretrain/<name>/<name>-<seed>/` there (the config's seed, or a `seed=` override's). The floor is the held-out
set's unigram perplexity at the same positions (`heldout_unigram_ppl` of `pretrain_data/stats.json`, the format the
objective reads); every row of the curve is one validation of the run (`val/ppl` of its `metrics.csv`).
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import time
from pathlib import Path

import yaml

from bertlab.runs import pretrain_dir


def curve(run_dir: Path, floor: float, batch: int, seq: int) -> list[dict[str, float]]:
    """One row per validation: step, tokens (positions), held-out ppl and its ratio to the floor."""
    with (run_dir / "metrics.csv").open(newline="") as f:
        rows = [r for r in csv.DictReader(f) if r.get("val/ppl")]
    return [{"step": int(float(r["step"])), "tokens": int(float(r["step"])) * batch * seq,
             "val_ppl": round(float(r["val/ppl"]), 2), "ratio": round(float(r["val/ppl"]) / floor, 4)} for r in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--config", type=Path, required=True,
                        help="a composed run config, e.g. data/configs/pretrain/bert/run/bert-1.yaml")
    parser.add_argument("--name", required=True)
    parser.add_argument("--csv", type=Path, help="append the curve here")
    parser.add_argument("overrides", nargs="*")
    a = parser.parse_args()
    cmd = [sys.executable, "-m", "bertlab.pretrain", "-cd", str(a.config.parent.resolve()), "-cn", a.config.stem,
           f"name={a.name}", f"data_dir={a.data}", "logger.kind=none", *a.overrides]
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode:
        sys.exit(f"error: pilot {a.name} failed:\n{done.stderr[-3000:]}")
    seed = next((int(o.split("=", 1)[1]) for o in a.overrides if o.startswith("seed=")),
                yaml.safe_load(a.config.read_text())["seed"])
    run_dir = pretrain_dir(a.data, a.name, seed)
    metrics = json.loads((run_dir / "metrics.json").read_text())
    stats = json.loads((a.data / "pretrain_data" / "stats.json").read_text())
    fmt = "nsp" if metrics["nsp"] else "packed"
    floor = stats["heldout_unigram_ppl"]["packed_next_token" if metrics["heldout_kind"] == "next-token" else fmt]
    rows = curve(run_dir, floor, metrics["global_batch"], metrics["max_seq_length"])
    extra = {"run": a.name, "overrides": " ".join(a.overrides), "train_seconds": metrics["train_seconds"],
             "wall_seconds": round(wall, 1)}
    for row in rows:
        print(f"{a.name:24s} step {row['step']:6d} tokens {row['tokens'] / 1e6:6.2f}M ppl {row['val_ppl']:9.1f} "
              f"x unigram {row['ratio']:.3f}")
    print(f"{a.name}: final {metrics['heldout_ppl']:.1f} / floor {metrics['heldout_unigram_ppl']:.1f} = "
          f"{metrics['heldout_ppl'] / metrics['heldout_unigram_ppl']:.3f}; train {metrics['train_seconds']:.0f} s")
    if a.csv:
        new = not a.csv.exists()
        with a.csv.open("a", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=["run", "step", "tokens", "val_ppl", "ratio", "train_seconds",
                                                   "wall_seconds", "overrides"])
            if new:
                writer.writeheader()
            writer.writerows({**row, **extra} for row in rows)


if __name__ == "__main__":
    main()

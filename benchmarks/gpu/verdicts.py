"""The paper's claims at BERT-base from the short GPU runs of `claim.sh`, decided as the scaling report decides a cell
pair (`report.scaling_rows.read_cell`, `report.cells.with_floor`, `report.claims.contrast`, with the report's columns and
bootstrap settings from conf/ablations/default.yaml): per claim and task, each side's mean over seeds beside the
task's floor on the same dev items, and A - B (A: the side the paper finds better) with its paired 95% interval over
dev items and seeds. An encoder whose held-out perplexity at its end is above 0.5 x unigram is collapsed: its cells
test nothing.

    python benchmarks/gpu/verdicts.py --runs <data_dir> --claim a     # one run's verdicts, printed (claim.sh's end)
    python benchmarks/gpu/verdicts.py [--out reports/gpu.md]          # every run under reports/gpu/, as markdown

A committed run is a folder of reports/gpu/ holding what claim.sh's tarball brings back: run.json, pretrain/<encoder>/
(metrics.json, heldout_items.json) and finetune/<task>-<encoder>-<seed>/ (metrics.json, items.json).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from bertlab.files import read_json
from bertlab.report.cells import with_floor
from bertlab.report.claims import contrast
from bertlab.report.scaling_rows import read_cell
from bertlab.stage import CONF_DIR

REPO = Path(__file__).resolve().parents[2]
# claim -> (its name, the paper's better side, the other side, its tasks)
CLAIMS = {"a": ("pretrained vs scratch", "bert", "scratch", ("sst2", "conll2003", "squad", "qnli")),
          "b": ("NSP vs no NSP", "bert", "nonsp", ("qnli", "squad", "sst2")),
          "c": ("MLM vs left-to-right", "nonsp", "ltr", ("squad", "sst2"))}
COLLAPSED = 0.5  # held-out perplexity over the unigram floor above which a pretrained encoder learned nothing
HEADER = ["claim", "task", "metric", "A", "B", "A mean", "B mean", "floor", "A - B [95%]", "verdict", "seeds",
          "items", "run"]


def encoders(run: Path) -> dict[str, dict[str, Any]]:
    """Per encoder of `run`: shape, steps, tokens, held-out perplexity over the unigram, whether it collapsed."""
    out = {}
    for path in sorted((run / "pretrain").glob("*/metrics.json")):
        m = read_json(path)
        ratio = m["heldout_ppl"] / m["heldout_unigram_ppl"]
        shape = "{num_layers}/{hidden_size}/{num_heads}".format(**m["shape"])
        out[path.parent.name] = {"shape": shape, "steps": m["steps"], "tokens": m.get("train_tokens"), "ratio": ratio,
                                 "collapsed": m["steps"] > 0 and not ratio <= COLLAPSED,
                                 "tokens_per_second": (m.get("throughput") or {}).get("tokens_per_second")}
    return out


def verdicts(run: Path, claim: str, seeds: list[int], settings: Any) -> list[list[str]]:
    """The rows of `claim` decided on `run`'s cells."""
    columns = OmegaConf.to_container(settings.columns, resolve=True)
    bootstrap = OmegaConf.to_container(settings.bootstrap, resolve=True)
    _, a, b, tasks = CLAIMS[claim]
    state = encoders(run)
    rows = []
    for task in tasks:
        cells = [with_floor(read_cell(run / "finetune", [f"{task}-{side}-{s}" for s in seeds], task, columns),
                             bootstrap) for side in (a, b)]
        if not any(cell.n for cell in cells):
            continue  # not run
        c, reason = contrast(*cells, a, b, bootstrap)
        verdict = c.verdict
        collapsed = [side for side in (a, b) if state.get(side, {}).get("collapsed")]
        if collapsed:
            verdict = f"tests nothing: {', '.join(collapsed)} collapsed (> {COLLAPSED} x unigram)"
        elif reason:
            verdict += f" ({reason})"
        floor = cells[0].floor_value
        rows.append([claim, task, columns[task]["metric"], a, b, number(cells[0].mean), number(cells[1].mean),
                     number(floor), f"{number(c.estimate, '+')} [{number(c.low, '+')}, {number(c.high, '+')}]",
                     verdict, f"{c.runs_a}/{c.runs_b}", str(c.n_items), run.name])
    return rows


def number(value: float | None, sign: str = "") -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:{sign}.1f}"


def report(root: Path) -> str:
    """reports/gpu.md: every committed run's verdicts, and the runs (device, commit, encoders, time)."""
    settings = OmegaConf.load(Path(CONF_DIR) / "ablations" / "default.yaml")
    runs = sorted(d for d in root.glob("*/") if (d / "run.json").exists()) if root.exists() else []
    lines = ["## BERT-base on one GPU", "",
             "The paper's claims at BERT-base (12/768/12, vocabulary 30,522), one short GPU run a claim: `bash "
             "benchmarks/gpu/claim.sh <claim>` runs the stages at a short-run setting of the `gpu` profile's recipe "
             "(rotary positions, 40% masking, lr 5e-4 decaying to zero at the budget, 256 x 128 tokens a step) and "
             "fine-tunes every encoder on the claim's tasks, one epoch of BERT's recipe, full dev sets. A - B: A is "
             "the side the paper finds better, its 95% interval a paired bootstrap over dev items and seeds (the "
             "ablations report's). An encoder above 0.5 x unigram at the end of its pretraining is collapsed: its "
             "cells test nothing.", ""]
    if not runs:
        return "\n".join(lines + [
            f"No run has been committed yet ({root.relative_to(REPO) if root.is_relative_to(REPO) else root} holds "
            "none): no claim of the paper is tested at BERT-base. On a GPU: `bash benchmarks/gpu/claim.sh a` "
            "(then b, c), its `claim_<claim>.tar.gz` unpacked into reports/gpu/<date>-<claim>/, then this script."
        ]) + "\n"
    rows, about = [], []
    for run in runs:
        meta = read_json(run / "run.json")
        rows += verdicts(run, meta["claim"], meta["seeds"], settings)
        state = ", ".join(f"`{name}` {e['shape']}, {e['steps']:,} steps, {(e['tokens'] or 0) / 1e6:.1f}M tokens, "
                          f"{e['ratio']:.3f} x unigram{' (collapsed)' if e['collapsed'] else ''}"
                          for name, e in encoders(run).items())
        about.append(f"- `{run.name}`: claim {meta['claim']} ({CLAIMS[meta['claim']][0]}), {meta['device']}, commit "
                     f"`{meta['commit']}`, `{meta['command']}` in {meta['seconds']} s; {state}")
    table = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    table += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines + table + ["", "Runs:", "", *about]) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=Path, help="one run's data_dir (claim.sh's): print its claim's verdicts")
    p.add_argument("--claim", choices=sorted(CLAIMS))
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    p.add_argument("--root", type=Path, default=REPO / "reports" / "gpu", help="the committed runs")
    p.add_argument("--out", type=Path, default=REPO / "reports" / "gpu.md")
    args = p.parse_args()
    if args.runs is not None:
        if args.claim is None:
            p.error("--runs needs --claim")
        settings = OmegaConf.load(Path(CONF_DIR) / "ablations" / "default.yaml")
        for name, e in encoders(args.runs).items():
            print(f"{name}: {e['steps']} steps, {e['ratio']:.3f} x unigram{' (collapsed)' if e['collapsed'] else ''}"
                  f", {e['tokens_per_second'] or '-'} tokens/s")
        for row in verdicts(args.runs, args.claim, args.seeds, settings):
            print(" | ".join(f"{h}: {v}" for h, v in zip(HEADER[1:-1], row[1:-1])))
        return
    args.out.write_text(report(args.root))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

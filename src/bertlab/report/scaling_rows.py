"""The scaling sweep's rows, read from its runs: each claim at each pretraining budget x fine-tuning budget, its A - B
decided by a paired bootstrap over dev items and seeds (`bertlab.report.stats`), each side with its floor on the same
items and its encoder's held-out perplexity over the unigram floor; rendered by `bertlab.report.scaling`."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertlab.files import read_json
from bertlab.report import stats
from bertlab.report.cells import PPL, Cell, finetune_cell, pretrain_cell, with_floor
from bertlab.report.claims import contrast
from bertlab.report.collect import NO_DATA, NOT_RUN, Results, read_items
from bertlab.report.sweep import PRETRAIN_SEED, budgets, cell_name, encoder_name, no_data
from bertlab.runs import pretrain_dir

UNMEASURED = stats.Contrast(math.nan, math.nan, math.nan, stats.NOT_MEASURED, 0, 0, 0)


@dataclass(frozen=True)
class Row:
    """One claim at one pretraining budget and one fine-tuning budget."""

    claim: dict[str, Any]
    a: str
    b: str
    metric: str
    steps: int
    budget: dict[str, Any]  # {examples, lr?}, or HELDOUT
    pretrain: tuple[dict[str, Any], dict[str, Any]]  # A's and B's encoder's metrics.json ({}: not run, or scratch)
    contrast: stats.Contrast
    reason: str
    cells: tuple[Cell, Cell] = (Cell(NOT_RUN), Cell(NOT_RUN))  # A's and B's, each with its floor on the same items
    paper: float | None = None  # the paper's own A - B (None: it gives no comparable number)

    @property
    def compressed(self) -> bool:
        """Whether a side is at or below its floor, where effects are compressed."""
        return any(c.at_floor for c in self.cells)

    @property
    def trained(self) -> dict[str, Any]:
        """The metrics of the first side's encoder that was pretrained at this budget ({} if none was run)."""
        return next((p for p in self.pretrain if p.get("train_tokens")), {})

    @property
    def tokens(self) -> int | None:
        return self.trained.get("train_tokens")

    @property
    def floor_ratio(self) -> float | None:
        """The pretrained side's held-out perplexity over the unigram perplexity of the same positions."""
        return ratio(self.trained)

    @property
    def ratios(self) -> tuple[float | None, float | None]:
        """Each side's held-out perplexity over its unigram floor (None: not run, or never pretrained)."""
        return tuple(ratio(p) if p.get("train_tokens") else None for p in self.pretrain)


def ratio(pretrain: dict[str, Any]) -> float | None:
    """A pretraining run's held-out perplexity over the unigram perplexity of the same positions."""
    ppl, unigram = pretrain.get("heldout_ppl"), pretrain.get("heldout_unigram_ppl")
    return ppl / unigram if ppl is not None and unigram else None


def read_cell(finetune_dir: Path, names: list[str], task: str, columns: dict[str, Any]) -> Cell:
    """The cell of the fine-tuning runs `names` (seeds) that exist, as the ablations report reads a cell."""
    runs = [finetune_dir / n for n in names if (finetune_dir / n / "metrics.json").exists()]
    records = [read_json(d / "metrics.json") for d in runs]
    items = {d.name: read_items(d / "items.json") for d in runs if (d / "items.json").exists()}
    return finetune_cell(Results(records, items, {}, {}, {}, {}, ""), columns, task, {})


def read_encoder(work_dir: Path, name: str) -> tuple[dict[str, Any], Cell]:
    """A pretraining run's metrics.json ({} if not finished) and its held-out perplexity as a cell."""
    run = pretrain_dir(work_dir, name, PRETRAIN_SEED)
    metrics = read_json(run / "metrics.json") if (run / "metrics.json").exists() else {}
    heldout = {run.name: read_items(run / "heldout_items.json")} if (run / "heldout_items.json").exists() else {}
    return metrics, pretrain_cell(Results([], {}, {run.name: metrics} if metrics else {}, heldout, {}, {}, ""), name)


def rows(spec: dict[str, Any], work_dir: Path, columns: dict[str, Any], bootstrap: dict[str, Any],
         papers: dict[str, float | None]) -> list[Row]:
    """Every claim of `spec` (the `scaling` config) at every budget pair, decided on the runs under `work_dir`, beside
    its effect in the paper (`papers`, by claim id: `sweep.paper_effects`)."""
    out, floored = [], {}  # each side's cell with its floor, read and bootstrapped once however many claims show it

    def floored_side(key: tuple[Any, ...], read: Callable[[], Cell]) -> Cell:
        if key not in floored:
            floored[key] = with_floor(read(), bootstrap)
        return floored[key]

    for claim in spec["claims"]:
        task = claim["task"]
        metric = PPL if task == PPL else columns[task]["metric"]
        why = None if task == PPL else no_data(work_dir, task)
        for steps in spec["pretrain_steps"]:
            names = [encoder_name(side[0], steps) for side in (claim["a"], claim["b"])]
            encoders = [read_encoder(work_dir, name) for name in names]
            pretrain = tuple(metrics for metrics, _ in encoders)
            for budget in budgets(spec, task):
                sides = []  # (label, cell with its floor) of A and B
                for name, (_, cell), (_, *mode) in zip(names, encoders, (claim["a"], claim["b"])):
                    if task == PPL:
                        sides.append((name, floored_side((name,), lambda: cell)))  # called at once: no late binding
                        continue
                    runs = [cell_name(task, name, mode[0], budget["examples"], s) for s in spec["seeds"]]
                    sides.append((f"{name} {mode[0]}", floored_side(tuple(runs), lambda: read_cell(
                        work_dir / "finetune" / name, runs, task, columns))))
                (a, cell_a), (b, cell_b) = sides
                if why is None:
                    result, reason = contrast(cell_a, cell_b, a, b, bootstrap)
                else:  # nothing ran: one reason for both sides
                    result, reason = UNMEASURED, f"{task}: {NO_DATA} ({why})"
                out.append(Row(claim, a, b, metric, steps, budget, pretrain, result, reason, (cell_a, cell_b),
                               papers.get(claim["id"])))
    return out

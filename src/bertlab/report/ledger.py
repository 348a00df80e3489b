"""The budget ledger: where a run of the pipeline spent its time, and what each encoder and cell got for it.

Reads the per-process times every stage leaves in `<data_dir>/timing/<stage>/<run>.json` (`bertlab.stage.main`:
`startup_seconds`, the interpreter, imports and config composition before the stage's code ran, and
`process_seconds`, all of it) beside the pretraining and fine-tuning metrics: steps, tokens, seeds, updates.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from bertlab.report.collect import OK, STAGES, Results, identity
from bertlab.report.markdown import table


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f}"


def _span(values: list[int | None]) -> str:
    """"lo-hi" of the recorded values ("" if none is)."""
    known = [v for v in values if v is not None]
    if not known:
        return ""
    lo, hi = min(known), max(known)
    return str(lo) if lo == hi else f"{lo}-{hi}"


def stage_rows(results: Results) -> list[list[str]]:
    """Per stage kind: processes, their time and its start-up share; only the runs the report reads (a stale
    record of a run no longer in the pipeline is not counted)."""
    used = {"pretrain": set(results.pretrain), "finetune": {r["name"] for r in results.finetune}}
    rows, total, startup = [], 0.0, 0.0
    for stage in STAGES[:-1]:  # not `ablations`: this report is its run
        records = [t for run, t in results.timing.get(stage, {}).items() if stage not in used or run in used[stage]]
        if not records:
            continue
        proc = sum(t["process_seconds"] for t in records)
        start = sum(t["startup_seconds"] for t in records)
        total, startup = total + proc, startup + start
        rows.append([f"`{stage}`", str(len(records)), _minutes(proc), _minutes(start)])
    if rows:
        rows.append(["**all stages**", str(sum(int(r[1]) for r in rows)), f"**{_minutes(total)}**",
                     f"**{_minutes(startup)}** ({startup / max(total, 1e-9):.0%})"])
    return rows


def _trained(run: dict[str, Any]) -> bool:
    """Whether the run trained (a twin's outputs are copied from the run named by its `trained_as`)."""
    return "trained_as" not in run


def pretrain_rows(results: Results) -> list[list[str]]:
    """Per pretraining run: objective, steps, tokens seen, training time (a twin's: the run it copies), the training
    loop's non-padding tokens per second and model FLOP utilisation (where the run recorded them), held-out ppl
    against its unigram floor."""
    rows = []
    for name, m in sorted(results.pretrain.items()):
        tokens = m.get("train_tokens")
        ratio = m["heldout_ppl"] / m["heldout_unigram_ppl"] if m.get("heldout_unigram_ppl") else None
        minutes = _minutes(m.get("train_seconds") or 0.0) if _trained(m) else f"copy of `{m['trained_as']}`"
        rate = (m.get("throughput") or {}) if _trained(m) else {}
        speed = "" if rate.get("tokens_per_second") is None else f"{rate['tokens_per_second']:,}"
        mfu = "" if rate.get("mfu") is None else f"{rate['mfu']:.1%}"
        rows.append([f"`{name}`", m["objective"], str(m["steps"]), "" if tokens is None else f"{tokens / 1e6:.2f}",
                     minutes, speed, mfu, f"{m['heldout_ppl']:.1f}", "" if ratio is None else f"{ratio:.3f}"])
    return rows


def finetune_rows(results: Results) -> list[list[str]]:
    """Per task: cells (runs x seeds; "n (k trained)" when some are twins' copies), seeds per cell, updates per
    run, and the training and evaluation time of the runs that trained."""
    by_task: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for run in results.finetune:
        by_task[run["task"]].append(run)
    rows = []
    for task, runs in sorted(by_task.items()):
        done = [r for r in runs if r.get("status") == OK]
        if not done:
            rows.append([task, "0", "", "", "", f"{len(runs)} runs: {', '.join(sorted({r['status'] for r in runs}))}"])
            continue
        seeds: dict[tuple, int] = defaultdict(int)
        for r in done:
            seeds[identity(r)] += 1
        trained = [r for r in done if _trained(r)]
        cells = str(len(seeds))
        if len(trained) < len(done):
            cells += f" ({len({identity(r) for r in trained})} trained)"
        rows.append([task, cells, _span(list(seeds.values())), _span([r.get("steps") for r in done]),
                     _minutes(sum(r.get("train_seconds") or 0.0 for r in trained)),
                     _minutes(sum(r.get("eval_seconds") or 0.0 for r in trained))])
    return rows


def ledger_section(results: Results) -> list[str]:
    """Markdown lines of the ledger."""
    lines = ["## Budget ledger", ""]
    stages = stage_rows(results)
    if stages:
        lines += ["Process time per stage kind, by the runs that did work (an encoder's runs share its stage's "
                  "processes, `impl.jobs` at once, each process's start-up counted once; start-up = interpreter, "
                  "imports and config composition before the stage's own code; runs at once add up to more than the "
                  "wall time). DVC's own bookkeeping and the install are outside these numbers.",
                  ""]
        lines += table(["stage", "runs", "minutes", "of which start-up"], stages)
    else:
        lines += ["No stage timings were recorded (`data/timing/` is absent: results checked out, not run here)."]
    lines += ["", "Pretraining: each encoder's budget (tokens = steps × global batch × sequence length) and the "
              "training loop's rate (non-padding tokens per second, without validation, checkpoints or the first "
              "step; MFU: matmul FLOPs against the device's dense peak, where it is known).", ""]
    lines += table(["encoder", "objective", "steps", "tokens (M)", "train min", "tokens/s", "MFU", "held-out ppl",
                    "ppl / unigram"], pretrain_rows(results))
    lines += ["", "Fine-tuning: per task, the table cells run (encoder × mode), seeds per cell and updates per run.",
              ""]
    lines += table(["task", "cells", "seeds", "updates", "train min", "eval min"], finetune_rows(results))
    return lines


"""The scaling sweep's declaration (`conf/scaling/base.yaml`) read once for its stage and its report: its runs are
named here (`encoder_name`, `cell_name`), so the stage that runs them (`bertlab.scaling`) and the report that reads them
(`bertlab.report.scaling_rows`) agree, and each claim's effect in the paper is looked up here in the study's declaration
(`ablations.tables`), where the paper's numbers live."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bertlab.errors import UserError
from bertlab.report.tables import PPL, paper_effect, rows

SCRATCH = "scratch"  # the one encoder of `scaling.encoders` never pretrained: one run, whatever the budget
PRETRAIN_SEED = 1  # every pretraining run of the sweep's: it varies budgets, not pretraining runs
HELDOUT = {"examples": None, "heldout": True}  # a `ppl` claim's one "budget": the held-out set, no fine-tuning


def encoder_name(encoder: str, steps: int) -> str:
    """The sweep's pretraining run of `encoder` at a budget of `steps`: `<encoder>-<steps>`, or `scratch`."""
    return SCRATCH if encoder == SCRATCH else f"{encoder}-{steps}"


def budget_label(examples: int | None) -> str:
    """A fine-tuning budget in run names and tables: its training examples, or `all`."""
    return "all" if examples is None else str(examples)


def budgets(spec: dict[str, Any], task: str) -> list[dict[str, Any]]:
    """`task`'s fine-tuning budgets: its own under `task_budgets`, else the sweep's `finetune_budgets`; `ppl`'s one
    pseudo-budget, the held-out set."""
    if task == PPL:
        return [HELDOUT]
    return (spec.get("task_budgets") or {}).get(task) or spec["finetune_budgets"]


def cell_name(task: str, encoder: str, mode: str, examples: int | None, seed: int) -> str:
    """The sweep's fine-tuning run `<task>-<encoder run>-<mode>-<examples>-<seed>`."""
    return f"{task}-{encoder}-{mode}-{budget_label(examples)}-{seed}"


def no_data(work_dir: Path, task: str) -> str | None:
    """Why `task` has no data (the note the download stage leaves in its folder), or None if it has."""
    note = work_dir / "download" / "tasks" / task / "NO_DATA"
    return note.read_text().strip() if note.exists() else None


def paper_effects(spec: dict[str, Any], ablations: dict[str, Any]) -> dict[str, float | None]:
    """Each claim's effect in the paper by id: A - B in its task between the two rows of `ablations.tables` its
    `paper` names ({table, a, b}), as `tables.paper_effect` gives it (None where the paper has no such number, and for
    perplexity); None for a claim without `paper`. A bad `paper` is a one-line UserError naming it."""
    out = {}
    for i, claim in enumerate(spec["claims"]):
        ref = claim.get("paper")
        if ref is not None and not (isinstance(ref, dict) and set(ref) == {"table", "a", "b"}
                                    and ref["table"] in ablations["tables"]
                                    and {ref["a"], ref["b"]} <= set(rows(ablations, ref["table"]))):
            raise UserError(f"scaling.claims[{i}].paper={ref!r}: expected {{table: a table of ablations.tables, a: "
                            "one of its rows, b: another}")
        out[claim["id"]] = None if ref is None else paper_effect(ablations, ref["table"], ref["a"], ref["b"],
                                                                 claim["task"])
    return out

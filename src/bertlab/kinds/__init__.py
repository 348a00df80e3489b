"""Task kinds: what a kind is, from its data's columns to the report's per-item scores, in one module a kind
(`bertlab.kinds.base.Kind`); `KINDS` registers them by the name a task's `kind:` gives."""

from __future__ import annotations

from bertlab.errors import UserError
from bertlab.kinds import classification, multiple_choice, regression, span, tagging
from bertlab.kinds.base import Kind
from bertlab.settings import Config, select

KINDS: dict[str, Kind] = {k.name: k for k in (
    classification.KIND, regression.KIND, span.KIND, tagging.KIND,
    multiple_choice.KIND,
)}


def check(cfg: Config) -> None:
    """What `bertlab.settings` checks without importing the kinds (it names them by their modules): a linear probe
    (`finetune.mode=probe`) on a kind whose outputs it cannot predict, as a one-line UserError."""
    kind = select(cfg, "task.kind")
    if select(cfg, "finetune.mode") == "probe" and kind in KINDS and KINDS[kind].probe is None:
        raise UserError(f"finetune.mode=probe: a linear probe predicts a class per example or a tag per word, not "
                        f"task {select(cfg, 'task.name')}'s {kind} outputs")

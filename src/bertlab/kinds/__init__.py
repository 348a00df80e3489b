"""Task kinds: what a kind is, from its data's columns to the report's per-item scores, in one module a kind
(`bertlab.kinds.base.Kind`); `KINDS` registers them by the name a task's `kind:` gives."""

from __future__ import annotations

from bertlab.kinds import classification, multiple_choice, regression, span, tagging
from bertlab.kinds.base import Kind

KINDS: dict[str, Kind] = {k.name: k for k in (
    classification.KIND, regression.KIND, span.KIND, tagging.KIND,
    multiple_choice.KIND,
)}

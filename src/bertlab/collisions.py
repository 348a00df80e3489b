"""Two runs that would be one, refused at `configs`: encoders, rows or a claim's two sides whose composed result
settings are equal at the profile.

A run's model is its result settings (`settings.RESULT_KEYS`) without the names that label it (`NAMES`: an
objective's or a model preset's name names curves and cards, not what trains); a cell's is its fine-tuning settings
without its encoder's name and pretraining seed, with that encoder's model in their place. Two encoders that run
at this profile and are one model (a new Table 6 size that the profile's scale shrinks to an existing row's shape, a
copied objective the profile's values make equal), two rows that are one fine-tuning run on a task, or a claim whose
sides are one model, each stop `configs` in one line naming both, unless the study declares the encoders twins
(`ablations.twins`: then one training serves both names, `bertlab.runs.find_twin`); a claim never compares a model
with itself.
"""

from __future__ import annotations

import json
from typing import Any

from bertlab import study
from bertlab.errors import UserError
from bertlab.runs import values_at
from bertlab.settings import RESULT_KEYS

NAMES = ("objective.name", "model.name")  # labels of a pretraining run, not what it trains
CELL_NAMES = ("encoder", "pretrain_seed")  # of `finetune`: the encoder enters as its model


def _drop(values: dict[str, Any], dotted: str) -> None:
    section, _, key = dotted.partition(".")
    if isinstance(values.get(section), dict):
        values[section] = {k: v for k, v in values[section].items() if k != key}


class Models:
    """The models of the study's runs at one profile, gathered as `configs` composes them (every encoder's runs before
    any cell), and `check`ed when all are in."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.twins = {frozenset(pair) for pair in (spec.get("twins") or {}).items()}
        self.encoders: dict[tuple[str, int], str] = {}  # (encoder, pretraining seed) -> its model
        self.shapes: dict[str, str] = {}
        self.cells: dict[str, str] = {}  # a cell's name -> its model
        self.running: set[str] = set()  # the encoders' and cells' runs the profile runs

    def add(self, stage: str, name: str, cfg: dict[str, Any], runs: bool) -> None:
        """Run `name` of `stage` (pretrain or finetune; others are ignored), composed and resolved as `cfg`
        (`settings.resolved`), which the profile runs where `runs`."""
        if stage not in ("pretrain", "finetune"):
            return
        values = values_at(cfg, RESULT_KEYS[stage])
        if stage == "pretrain":
            for dotted in NAMES:
                _drop(values, dotted)
            encoder, seed = cfg["name"], cfg["seed"]
            self.encoders[encoder, seed] = json.dumps(values, sort_keys=True, default=str)
            self.shapes[encoder] = "/".join(str(cfg["model"][k]) for k in ("num_layers", "hidden_size", "num_heads"))
        else:
            if not self.cells:  # every encoder's runs are in: refuse colliding encoders before composing the cells
                self._check_encoders()
            for key in CELL_NAMES:
                _drop(values, f"finetune.{key}")
            ft = cfg["finetune"]
            model = self.encoders[ft["encoder"], ft["pretrain_seed"]]
            self.cells[name] = json.dumps([model, values], sort_keys=True, default=str)
        if runs:
            self.running.add(name)

    def twin(self, a: str, b: str) -> bool:
        return a == b or frozenset((a, b)) in self.twins

    def check(self) -> None:
        """A one-line UserError for the first two encoders, rows or claim sides that are one model."""
        self._check_encoders()
        cells: dict[str, str] = {}
        for name, model in self.cells.items():
            if name not in self.running:
                continue
            other = cells.setdefault(model, name)
            (a, ra), (b, rb) = ((study.split_row(_row(n))[0], _row(n)) for n in (other, name))
            if ra != rb and not (a != b and self.twin(a, b)):
                raise UserError(f"ablations.tables: rows {ra} and {rb} compose to one fine-tuning run ({other} = "
                                f"{name}): make their modes or encoders differ, or remove one")
        for claim in self.spec.get("claims") or []:
            self._check_claim(claim)

    def _check_encoders(self) -> None:
        seen: dict[str, str] = {}
        for (encoder, seed), model in self.encoders.items():
            run = study.pretrain_name(encoder, seed)
            if run not in self.running:
                continue
            other = seen.setdefault(model, encoder)
            if not self.twin(other, encoder):
                raise UserError(
                    f"ablations.encoders: {other} and {encoder} compose to one model at this profile (both "
                    f"{self.shapes[encoder]} layers/hidden/heads, the same objective and pretraining settings): a "
                    "claim between them would compare a model with itself; make them differ, leave one out "
                    "(ablations.cells.skip), or declare one the other's twin (ablations.twins)")

    def _check_claim(self, claim: dict[str, Any]) -> None:
        rows = self.spec["tables"].get(claim.get("table"), {}).get("rows", {})
        sides = [[s for s in ([s] if isinstance(s, str) else list(s or [])) if s in rows]  # the report checks the rest
                 for s in (claim.get("better"), claim.get("than"))]
        tasks = self.spec["tables"][claim["table"]]["tasks"] if rows else []
        seed, first = self.spec["pretrain_seeds"][0], self.spec["seeds"][0]
        for a in sides[0]:
            for b in sides[1]:
                models = [(self.encoders.get((study.split_row(r)[0], seed)),
                           [self.cells.get(study.cell_name(t, r, seed, first)) for t in tasks]) for r in (a, b)]
                if a != b and models[0][0] is not None and models[0] == models[1]:
                    raise UserError(f"ablations.claims {claim.get('id')!r}: {a} and {b} are one model at this "
                                    "profile (the same composed settings): the claim would compare a model with "
                                    "itself")


def _row(cell: str) -> str:
    """The row `<encoder>-<mode>` of a cell's name `<task>-<encoder>-<mode>-<pretraining seed>-<seed>`."""
    return study.SEP.join(cell.split(study.SEP)[1:3])

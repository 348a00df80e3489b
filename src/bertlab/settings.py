"""Validation at the door: every run's settings are checked before any stage spends compute.

Hydra composes whatever it is given (`pretrain.lr=abc` is a string; `name=..` a path), so each stage, and the
`configs` stage for every run of the pipeline at once, calls `check` first: a bad setting stops the run with one
line naming it (`UserError`, exit status 2), and nothing is written or deleted: numbers by type and range
(`SETTINGS`), choices by name (`CHOICES`), the settings that must agree, and each model preset named by its shape
(`L12_H768_A12`) against its numbers. Hydra's structured configs (dataclass schemas) would check types only:
OmegaConf validates no range, choice or agreement, which is most of what is checked here.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException

from bertlab.errors import UserError

NAME = re.compile(r"[A-Za-z0-9_.=-]+")  # a run name is one safe path component
Config = DictConfig | dict[str, Any]  # a composed config, or the plain dict it resolves to (`resolved`)
CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
PRESET = re.compile(r"L(\d+)_H(\d+)_A(\d+)")  # a paper shape's model preset: conf/model/L<layers>_H<hidden>_A<heads>

# `${shrink:768,4}` = 192: how profiles shrink the paper's model shapes (never below 1).
OmegaConf.register_new_resolver("shrink", lambda size, by: max(1, int(size) // int(by)), replace=True)


@dataclass(frozen=True)
class Number:
    """A numeric setting: integer or real, within [lo, hi] (an open bound where `open_lo`/`open_hi`)."""

    integer: bool
    lo: float = -math.inf
    hi: float = math.inf
    open_lo: bool = False
    open_hi: bool = False
    nullable: bool = False

    def problem(self, value: Any) -> str | None:
        """Why `value` is not acceptable, or None."""
        if value is None:
            return None if self.nullable else "must be set"
        kind = "an integer" if self.integer else "a number"
        if isinstance(value, bool) or not isinstance(value, int if self.integer else (int, float)):
            return f"expected {kind}"
        if not math.isfinite(value):
            return "expected a finite number"
        below = value <= self.lo if self.open_lo else value < self.lo
        above = value >= self.hi if self.open_hi else value > self.hi
        if not (below or above):
            return None
        lo = f"{'>' if self.open_lo else '>='} {self.lo:g}" if math.isfinite(self.lo) else ""
        hi = f"{'<' if self.open_hi else '<='} {self.hi:g}" if math.isfinite(self.hi) else ""
        return f"expected {kind} {' and '.join(b for b in (lo, hi) if b)}"


def count(lo: int = 1, nullable: bool = False) -> Number:
    return Number(True, lo, nullable=nullable)


POSITIVE = Number(False, 0.0, open_lo=True)
FRACTION = Number(False, 0.0, 1.0, open_hi=True)  # [0, 1): dropout, warmup share, probabilities
SHARE = Number(False, 0.0, 1.0)  # [0, 1]

SETTINGS: dict[str, Number] = {
    "seed": count(0),
    "corpus.max_chars": count(nullable=True), "corpus.heldout_documents": count(), "corpus.seed": count(0),
    "corpus.task_text_lines": count(),
    "tokenizer.vocab_size": count(16), "tokenizer.min_frequency": count(), "tokenizer.max_chars": count(nullable=True),
    "pretrain_data.max_seq_length": count(8), "pretrain_data.short_seq_length": count(8, nullable=True),
    "pretrain_data.short_seq_prob": FRACTION, "pretrain.short_seq_fraction": FRACTION,
    "pretrain_data.dupe_factor": count(), "pretrain_data.heldout_instances": count(), "pretrain_data.seed": count(0),
    "pretrain_data.masked_lm_prob": Number(False, 0.0, 1.0, open_lo=True, open_hi=True),
    "pretrain_data.max_predictions_per_seq": count(),
    "pretrain_data.shard_chars": count(), "impl.data_processes": count(),
    "model.num_layers": count(), "model.hidden_size": count(), "model.num_heads": count(),
    "model.intermediate_size": count(),
    "objective.mlm_probability": FRACTION,  # 0 only for the causal (LTR) objective, checked below
    "objective.heldout_mlm_probability": FRACTION,
    "objective.mask_replace_prob": SHARE, "objective.random_replace_prob": SHARE,
    "pretrain.batch_size": count(), "pretrain.max_steps": count(0), "pretrain.size_study_steps": count(0),
    "pretrain.size_study_warmup_steps": count(0), "pretrain.lr": POSITIVE,
    "pretrain.warmup_steps": count(0), "pretrain.weight_decay": Number(False, 0.0), "pretrain.eps": POSITIVE,
    "pretrain.grad_clip": Number(False, 0.0, open_lo=True, nullable=True), "pretrain.dropout": FRACTION,
    "pretrain.val_every_steps": count(),
    "pretrain.checkpoint_every_steps": count(),
    "finetune.max_seq_length": count(8), "finetune.squad_max_seq_length": count(16), "finetune.batch_size": count(),
    "finetune.epochs": count(), "finetune.lr": POSITIVE, "finetune.head_lr": Number(False, 0.0, open_lo=True,
                                                                                     nullable=True),
    "finetune.feature_head_lr": Number(False, 0.0, open_lo=True, nullable=True),
    "finetune.warmup_ratio": FRACTION, "finetune.weight_decay": Number(False, 0.0), "finetune.eps": POSITIVE,
    "finetune.grad_clip": Number(False, 0.0, open_lo=True, nullable=True), "finetune.dropout": FRACTION,
    "finetune.head_dropout": FRACTION, "finetune.max_train_examples": count(nullable=True),
    "finetune.max_eval_examples": count(nullable=True), "finetune.squad_max_train_examples": count(nullable=True),
    "finetune.squad_max_eval_examples": count(nullable=True), "finetune.subsample_seed": count(0),
    "finetune.bilstm_hidden": count(nullable=True), "finetune.bilstm_layers": count(),
    "finetune.doc_stride": count(), "finetune.max_query_length": count(), "finetune.n_best_size": count(),
    "finetune.max_answer_length": count(), "finetune.probe_folds": count(2), "finetune.probe_tol": POSITIVE,
    "finetune.probe_cv_tol": POSITIVE,
    "finetune.probe_max_iter": count(),
    "impl.threads": count(nullable=True), "impl.jobs": count(), "impl.eval_batch_size": count(),
    "impl.num_workers": count(0),
    "impl.num_nodes": count(nullable=True), "impl.max_device_batch": count(nullable=True),
    "impl.peak_tflops": Number(False, 0.0, open_lo=True, nullable=True),
}


# Every setting that names one of a few choices, and its choices (the code's tables are keyed by these names).
CHOICES: dict[str, tuple[str, ...]] = {
    "tokenizer.kind": ("wordpiece", "bpe"),
    "objective.data": ("nsp", "packed"),
    "task.kind": tuple(sorted(p.stem for p in (Path(__file__).parent / "kinds").glob("*.py")
                              if p.stem not in ("__init__", "base"))),  # a module a kind (bertlab.kinds), by name
    "finetune.mode": ("finetune", "feature_based", "probe"), "finetune.pooling": ("cls", "mean"),
    "finetune.features": ("embeddings", "last", "second_to_last", "sum_last_four", "concat_last_four", "sum_all"),
    "logger.kind": ("wandb", "csv", "none"), "pretrain.positions": ("absolute", "rotary"),
}


# The config sections each stage reads that can change its outputs (upstream outputs are DVC deps): its run keys and
# key files (`bertlab.runs`, `bertlab.configs`) and, with what else it reads, its --help (`bertlab.stage`).
RESULT_KEYS: dict[str, list[str]] = {
    "download": ["mirror", "corpus.sources", "download"],
    "tokenizer": ["corpus", "tokenizer"],
    "pretrain_data": ["corpus", "pretrain_data"],
    "pretrain": ["model", "objective", "pretrain", "seed"],
    "finetune": ["finetune", "task", "seed"],
    "ablations": ["ablations", "profile_name", "model_scale", "corpus", "tokenizer", "pretrain_data", "objective",
                  "pretrain", "finetune"],  # the report lists the profile's departures from the paper's recipe
}

def check_name(name: Any, key: str = "name") -> str:
    """`name` if it is a single safe path component (it names output directories that reruns replace, or the folder
    under `data_dir` that a run reads: nothing outside `data_dir` is reached through a name)."""
    if not isinstance(name, str) or not NAME.fullmatch(name) or name in (".", ".."):
        what = "a run name" if key == "name" else "it names a folder or file and"
        raise UserError(f"{key}={name!r}: {what} must be one path component of letters, digits and _ . = - "
                        "(not empty, '.' or '..')")
    return name


def preset_shape(name: str) -> tuple[int, int, int] | None:
    """(layers, hidden, heads) that a model preset's name says (`L12_H768_A12`), or None for a name of another form."""
    found = PRESET.fullmatch(name)
    return (int(found[1]), int(found[2]), int(found[3])) if found else None


def check_presets() -> None:
    """Each model preset named by a shape, conf/model/L<layers>_H<hidden>_A<heads>.yaml, has that shape before the
    profile shrinks it (`model_scale` 1) and its own `name`: a new size copied from another and not fully edited
    stops every stage at the door."""
    for path in sorted((CONF_DIR / "model").glob("*.yaml")):
        if not (shape := preset_shape(path.stem)):
            continue
        where = f"{CONF_DIR.name}/model/{path.name}"
        preset = OmegaConf.merge({"model_scale": {"depth": 1, "width": 1}}, {"model": OmegaConf.load(path)}).model
        if preset.get("name") != path.stem:
            raise UserError(f"{where}: name: {preset.get('name')!r}, not {path.stem!r} (the file's name)")
        found = (preset.get("num_layers"), preset.get("hidden_size"), preset.get("num_heads"))
        if found != shape:
            raise UserError(f"{where}: the shape is {'/'.join(map(str, found))} (layers/hidden/heads), not the "
                            f"{'/'.join(map(str, shape))} its name says")


def check(cfg: Config, presets: bool = True) -> None:
    """Raise a one-line UserError for the first bad setting of a composed run config, or of the plain dict it resolves
    to (`resolved`: faster, for a caller that has it), and of conf/model's presets unless `presets` is False (a caller
    checking many configs checks them once)."""
    values = cfg if isinstance(cfg, dict) else resolved(cfg)
    check_name(select(values, "name"))
    if presets:
        check_presets()
    for key, rule in SETTINGS.items():
        if not has(values, key):  # a stage's config may lack a group
            continue
        if isinstance(value := select(values, key), dict | list):
            raise UserError(f"{key}: expected a single value, got {json.dumps(value)}")
        if why := rule.problem(value):
            raise UserError(f"{key}={value!r}: {why}")
    for key, choices in CHOICES.items():
        if has(values, key) and (value := select(values, key)) not in choices:
            raise UserError(f"{key}={value!r}: expected one of {', '.join(choices)}")
    if has(values, "objective.name"):  # names the objective's loss curves (reports/pretrain_loss/<name>.csv)
        check_name(select(values, "objective.name"), "objective.name")
    causal, nsp = select(values, "objective.causal"), select(values, "objective.nsp")
    if nsp and (causal or select(values, "objective.data") != "nsp"):
        raise UserError("objective.nsp=true: next-sentence prediction needs sentence pairs (objective.data=nsp) and "
                        "a bidirectional model (objective.causal=false)")
    if select(values, "objective.mlm_probability") == 0 and not causal:
        raise UserError("objective.mlm_probability=0: a masked-LM objective needs a masking rate > 0")
    if select(values, "objective.heldout_mlm_probability") == 0 and not causal:
        raise UserError("objective.heldout_mlm_probability=0: a masked-LM objective is scored on masked held-out "
                        "positions and needs a rate > 0 (the paper's 0.15)")
    steps, warmup = select(values, "pretrain.max_steps"), select(values, "pretrain.warmup_steps")
    if steps and warmup is not None and warmup > steps:  # max_steps=0: never trained, no schedule
        raise UserError(f"pretrain.warmup_steps={warmup} exceeds pretrain.max_steps={steps}: the learning rate would "
                        "never reach pretrain.lr")
    for key in ("finetune.encoder", "task.name"):  # each names a folder under data_dir
        if has(values, key):
            check_name(select(values, key), key)
    for key in ("seed", "finetune.pretrain_seed"):  # a pretraining run's folder is <encoder>-<seed>
        value = select(values, key)
        if has(values, key) and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise UserError(f"{key}={value!r}: expected an integer >= 0")
    shares = [select(values, f"objective.{k}_replace_prob") for k in ("mask", "random")]
    if None not in shares and sum(shares) > 1:
        raise UserError(f"objective.mask_replace_prob={shares[0]} + objective.random_replace_prob={shares[1]} "
                        "exceed 1 (the rest of the chosen tokens stay as they are)")
    length, short = (select(values, f"pretrain_data.{k}_seq_length") for k in ("max", "short"))
    if length and short and (length % short or short >= length):
        raise UserError(f"pretrain_data.short_seq_length={short}: must divide max_seq_length={length} and be shorter "
                        "(a short batch holds the same tokens)")
    check_probe(values)
    heads, hidden = select(values, "model.num_heads"), select(values, "model.hidden_size")
    if heads and hidden and hidden % heads:
        raise UserError(f"model.hidden_size={hidden} is not divisible by model.num_heads={heads}")


def check_jobs(cfg: Config, jobs: int, setting: str = "impl.jobs") -> None:
    """Refuse `jobs` runs at once (as `setting` says: the pipeline's sweeps' `impl.jobs`, a multirun's own launcher)
    beside several devices (DDP, on any accelerator): they share one device."""
    if jobs > 1 and (devices := select(cfg, "impl.devices")) != 1:
        raise UserError(f"{setting}={jobs}: runs at once share one device; with impl.devices={devices!r} (several: "
                        f"DDP) set {setting}=1")


def check_probe(values: dict[str, Any]) -> None:
    """A linear probe's settings (`bertlab.training.probe`) in a resolved config: its grid of C, and features it can
    read (the task's kind: `bertlab.kinds.check`, which the fine-tuning and `configs` stages run)."""
    if has(values, "finetune.probe_cs"):
        cs = select(values, "finetune.probe_cs")
        if not isinstance(cs, list) or not cs or any(POSITIVE.problem(c) for c in cs):
            raise UserError(f"finetune.probe_cs={cs!r}: expected a list of numbers > 0 (the inverse L2 strengths the "
                            "probe's cross-validation chooses from)")
    if select(values, "finetune.mode") != "probe":
        return
    if (features := select(values, "finetune.features")) in ("sum_last_four", "sum_all"):
        raise UserError(f"finetune.features={features}: a probe reads fixed features (embeddings, last, "
                        "second_to_last, concat_last_four); a scalar mix is learned")


def resolved(cfg: DictConfig) -> dict[str, Any]:
    """`cfg` resolved to plain dicts and lists; a value that does not resolve (`${shrink:abc,4}`, `???`) is a
    one-line UserError naming its setting."""
    try:
        return OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)  # type: ignore[return-value]
    except OmegaConfBaseException as err:
        why = "no value (???): set it" if isinstance(err, MissingMandatoryValue) else str(err).splitlines()[0]
        raise UserError(f"{getattr(err, 'full_key', None) or 'the config'}: {why}") from err


def select(cfg: Config, key: str) -> Any:
    """The value at the dotted `key` of `cfg`, a composed config or the plain dict it resolves to (None: not there)."""
    if not isinstance(cfg, dict):
        return OmegaConf.select(cfg, key)
    node: Any = cfg
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def check_appended(overrides: Sequence[str], compose: Callable[[list[str]], DictConfig], conf_dir: Path) -> None:
    """A UserError for an override that appends a setting the config does not have (`+key=value`, or `++key=value`
    where the key is new): Hydra refuses a misspelt `key=value`, but `+` adds whatever it names, so `+pretrain.lrr=0.5`
    would train with the learning rate unchanged. `compose(overrides)` composes the run's config with `overrides`;
    a config-group choice (`+profile_task=cpu_mrpc`, a folder of `conf_dir`) is not a setting."""
    added = [o for o in overrides if o.startswith("+")]
    if not added:
        return
    base = compose([o for o in overrides if not o.startswith("+")])
    for override in added:
        key = override.lstrip("+").split("=", 1)[0]
        if "." not in key and (conf_dir / key.split("@")[0]).is_dir():
            continue
        if not has(base, key):
            raise UserError(f"{override}: there is no setting {key} (a '+' adds one that nothing reads): check its "
                            "spelling")


def has(cfg: Config, key: str) -> bool:
    """Whether `cfg` (a config, unresolved, or a plain dict) defines the dotted `key`."""
    node: Any = cfg
    for part in key.split("."):
        if not (isinstance(node, dict) or OmegaConf.is_dict(node)) or part not in node:
            return False
        node = node[part] if isinstance(node, dict) else node._get_node(part)
    return True

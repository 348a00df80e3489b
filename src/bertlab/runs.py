"""What identifies a run's result: its run key (the code, the result settings, the input files) and its twins,
finished runs under another name with the same key, whose outputs it reuses (both training stages). A finished run's
record (`metrics.json`) keeps the sha256 of each file it wrote (`files`): a run whose files are no longer those bytes
(damaged, replaced, deleted) is never reused, and a cell's key holds its encoder's bytes."""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import logging
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from bertlab.errors import UserError
from bertlab.files import atomic_dir, read_json, require, write_json
from bertlab.modeling.features import feature_signature
from bertlab.settings import RESULT_KEYS, Config, select
from bertlab.study import pretrain_name

log = logging.getLogger(__name__)


def values_at(cfg: Config, keys: list[str]) -> dict[str, Any]:
    """The resolved values at dotted `keys` of `cfg` (a config, or the plain dict it resolves to), the caller's own."""
    values = {k: select(cfg, k) for k in keys}
    return {k: OmegaConf.to_container(v, resolve=True) if OmegaConf.is_config(v) else copy.deepcopy(v)
            for k, v in values.items()}


def pretrain_dir(root: Path, encoder: str, seed: int) -> Path:
    """The folder of pretraining run `encoder` at pretraining seed `seed` under `root` (a `data_dir` or `out_dir`):
    `pretrain/<encoder>/<encoder>-<seed>/`."""
    return Path(root) / "pretrain" / encoder / pretrain_name(encoder, seed)


def cell_fields(cfg: DictConfig) -> dict[str, Any]:
    """What a fine-tuning cell is, as its metrics.json records it and the report's table rows select it."""
    ft = cfg.finetune
    frozen = ft.mode != "finetune"
    return {"encoder": ft.encoder, "pretrain_seed": ft.pretrain_seed, "task": cfg.task.name, "mode": ft.mode, "features": ft.features if frozen else None,
            "bilstm": ft.mode == "feature_based" or (not frozen and bool(ft.bilstm))}


def code_hash() -> str:
    """sha256 of the bertlab package's source files (their paths and contents)."""
    root = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(f"{path.relative_to(root)}\0".encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def run_key(settings: dict[str, Any], inputs: Iterable[Path]) -> str:
    """sha256 of all that decides a run's result: the bertlab code, its result `settings` and its input files
    (directories: every file in them)."""
    h = hashlib.sha256(code_hash().encode())
    h.update(json.dumps(settings, sort_keys=True, default=str).encode())
    for top in inputs:
        for path in sorted(top.rglob("*")) if top.is_dir() else [top]:
            if path.is_file():
                h.update(f"{path.name}\0".encode())
                stat = path.stat()
                h.update(input_digest(str(path.resolve()), stat.st_size, stat.st_mtime_ns))
    return h.hexdigest()


@functools.lru_cache(maxsize=4096)
def input_digest(path: str, size: int, mtime_ns: int) -> bytes:
    """sha256 of an input file, once a process for its size and time of change (the runs of one process, a stage's
    multirun or the grid's plan, share their inputs)."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").digest()


def pretrain_inputs(cfg: DictConfig) -> list[Path]:
    """The input files of pretraining run `cfg`: the tokenizer, its objective's instances (and the short ones, where
    it trains on them first), the held-out set and the unigram counts; a UserError naming a stage not run yet."""
    data = Path(cfg.data_dir)
    tokenizer = require(data / "tokenizer" / "tokenizer.json", "tokenizer")
    instances = require(data / "pretrain_data", "pretrain_data")
    fmt, p = cfg.objective.data, cfg.pretrain
    short = instances / f"train_{fmt}_short"
    if round(p.short_seq_fraction * p.max_steps) and not short.exists():
        raise UserError(f"pretrain.short_seq_fraction={p.short_seq_fraction}: {short} does not exist (set "
                        f"pretrain_data.short_seq_length and rerun the pretrain_data stage)")
    return [tokenizer, instances / f"train_{fmt}", instances / f"heldout_{fmt}",
            require(instances / "unigram_counts.npy", "pretrain_data"),
            *([short] if round(p.short_seq_fraction * p.max_steps) else [])]


def pretrain_key(cfg: DictConfig, inputs: Iterable[Path]) -> str:
    """The run key of a pretraining run: its result settings (with the held-out masks' seed) and input files."""
    return run_key(values_at(cfg, [*RESULT_KEYS["pretrain"], "pretrain_data.seed"]), inputs)


def cell_key(cfg: DictConfig, encoder: Path, reads: Sequence[str]) -> str | None:
    """The run key of a fine-tuning cell on the pretraining run in folder `encoder`: the code, its result settings
    but the encoder's name and pretraining seed, the encoder's own run key (a twin encoder, copied from another run, has the same) and the
    bytes of its files the cell `reads` (its weights and config), the tokenizer and the task's data. Frozen features
    enter as what they compute (`feature_signature`), and not at all when fine-tuning. None if the encoder has no key
    or no readable config (it was not written by the pretrain stage; loading it then says what is wrong); a UserError
    naming the first file of `reads` that is missing or is not what the encoder's run recorded (damaged, replaced)."""
    ft, metrics = cfg.finetune, encoder / "metrics.json"
    record = read_json(metrics) if metrics.exists() else {}
    try:
        num_layers = json.loads((encoder / "config.json").read_text(encoding="utf-8"))["num_layers"]
    except (OSError, ValueError, TypeError, KeyError):  # missing, not JSON, not a model's config
        num_layers = None
    if record.get("run_key") is None or not isinstance(num_layers, int):
        return None
    found = {name: file_digest(encoder / name) for name in reads}
    recorded = record.get("files", {})  # none in an older bertlab's record: the key still holds the bytes
    for name, digest in found.items():
        if digest is None or (name in recorded and recorded[name] != digest):
            raise UserError(f"{altered(encoder / name, digest)}: rerun its pretraining (`dvc repro pretrain`, or "
                            f"`python -m bertlab.pretrain name={ft.encoder} seed={ft.pretrain_seed}`)")
    settings = values_at(cfg, RESULT_KEYS["finetune"])
    settings["finetune"] = {k: v for k, v in settings["finetune"].items() if k not in ("encoder", "pretrain_seed")}
    settings["finetune"]["features"] = feature_signature(ft.features, num_layers) if ft.mode != "finetune" else None
    data_dir = Path(cfg.data_dir)
    inputs = [data_dir / "tokenizer" / "tokenizer.json", data_dir / "download" / "tasks" / cfg.task.name]
    return run_key({"settings": settings, "encoder": record["run_key"], "encoder_files": found}, inputs)


def file_digest(path: Path) -> str | None:
    """sha256 (hex) of the file at `path`; None where there is none."""
    try:
        with Path(path).open("rb") as f:
            return hashlib.file_digest(f, "sha256").hexdigest()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None


def run_files(directory: Path) -> dict[str, str]:
    """{path relative to `directory`: sha256} of every file a run wrote there but its record, which keeps this as
    `files`."""
    directory = Path(directory)
    paths = sorted(p for p in directory.rglob("*") if p.is_file() and p.relative_to(directory) != Path("metrics.json"))
    return {p.relative_to(directory).as_posix(): file_digest(p) for p in paths}


def altered(path: Path, digest: str | None) -> str:
    """In words, why file `path` (now of sha256 `digest`, None: absent) is not what its run recorded."""
    if digest is None:
        return f"{path} is missing"
    record = path.parent / "metrics.json"
    return f"{path} is not the file its run wrote (its sha256 differs from the one in {record}: damaged or replaced)"


def unaltered(run: Path, record: dict[str, Any]) -> bool:
    """Whether every file `record` (run folder `run`'s metrics.json) lists under `files` has its recorded bytes;
    logs the first that does not."""
    for name, recorded in sorted(record.get("files", {}).items()):
        if (digest := file_digest(run / name)) != recorded:
            log.warning("%s: not reused", altered(run / name, digest))
            return False
    return True


def reuse(out: Path, key: str, fields: dict[str, Any], copy: bool, depth: int = 1) -> Path | None:
    """The finished run whose outputs are those of the run in folder `out`, or None when it has to train: `out`
    itself, finished with `key` (nothing to do), else a twin with `key` (`find_twin`), whose outputs are copied to
    `out` (with `fields`) where `copy` (the first process of a multi-process run)."""
    twin = find_twin(out, key, depth)
    if twin == Path(out):
        log.info("%s is finished with this code, these settings and inputs: nothing to do", twin)
    elif twin is not None and copy:
        copy_twin(twin, Path(out), fields)
    return twin


def find_twin(out: Path, key: str, depth: int = 1) -> Path | None:
    """A finished run whose metrics.json has run key `key` (the same code, result settings and inputs) and whose
    files are the bytes it recorded, if any: the one in `out` first (a rerun of a finished run, which has nothing to
    do), else another in a folder `depth` levels below `out`'s root (`out`'s parent for depth 1; its grandparent for
    2: pretraining runs and cells, in their encoders' folders), whose outputs are this run's too (e.g. Table 6's
    12/768/12 row where a profile gives the size study `bert`'s budget), so one training can serve both names."""
    out = Path(out)
    root = out.parents[depth - 1]
    for metrics in dict.fromkeys([out / "metrics.json", *sorted(root.glob("/".join(["*"] * depth) + "/metrics.json"))]):
        if not metrics.exists() or (record := read_json(metrics)).get("run_key") != key:
            continue
        if unaltered(metrics.parent, record):
            return metrics.parent
    return None


def copy_twin(twin: Path, out: Path, fields: dict[str, Any]) -> None:
    """`twin`'s outputs as `out`, its metrics.json updated with `fields` and naming the run that trained them."""
    record = read_json(twin / "metrics.json")
    with atomic_dir(out) as tmp:
        shutil.copytree(twin, tmp, dirs_exist_ok=True)
        write_json(tmp / "metrics.json", record | fields | {"trained_as": record.get("trained_as", record["name"])})
    log.info("%s: the same run (code, settings and inputs) as %s, which is finished: its outputs copied, nothing "
             "trained", out, twin)

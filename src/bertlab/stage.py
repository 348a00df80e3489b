"""What every stage shares: its Hydra entry point, one-line errors, all-or-nothing outputs, loggers."""

from __future__ import annotations

import errno
import functools
import hashlib
import json
import logging
import math
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, TypeVar

import hydra
import torch
from omegaconf import DictConfig, OmegaConf

T = TypeVar("T")
CONF_DIR = str(Path(__file__).resolve().parents[2] / "conf")
log = logging.getLogger(__name__)

# `${shrink:768,4}` = 192: how profiles shrink the paper's model shapes (never below 1).
OmegaConf.register_new_resolver("shrink", lambda size, by: max(1, int(size) // int(by)), replace=True)


class UserError(RuntimeError):
    """Bad input or missing data: reported as one line, exit status 2."""


class Interrupted(BaseException):  # not an Exception: no handler of errors may swallow a stop
    """SIGTERM or SIGINT (`stop_on_signals`): the stage stops where it is, as a kill would stop it (pretraining
    resumes from its last checkpoint); reported as one line, exit status 128 + the signal's number."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def main(fn: Callable[[DictConfig], None]) -> Callable[[], None]:
    """A stage's Hydra entry point: `python -m bertlab.<stage> key=value ...` (and `-m` for multirun).

    Settings are checked first (`bertlab.settings.check`), and the stage's output directory
    (`<data_dir>/<stage>`) must be writable, before any compute is spent. Known failures (UserError,
    SourceError) print one line to stderr and exit with status 2. A run that completes leaves its process's
    time, start-up included, in `<data_dir>/timing/<stage>/<run>.json` for the report's budget ledger (global
    rank zero only; `<run>` is the run's name for the training stages, else the stage's).
    """
    from bertlab import settings
    from bertlab.data.sources import SourceError

    stage_name = Path(fn.__code__.co_filename).stem  # its module's name, also when run as __main__ (`python -m`)

    @functools.wraps(fn)
    def task(cfg: DictConfig) -> None:
        startup, began = process_age(), time.perf_counter()
        logging.raiseExceptions = False  # a log file on a full disk: not thousands of lines of "Logging error"
        try:
            stop_on_signals()
            settings.check(cfg)
            settings.check_appended(*composed_overrides())
            if stage_name != "ablations":  # which writes into ablations.report_dir, checked there
                check_writable(Path(cfg.data_dir) / stage_name)
                check_free_space(Path(cfg.data_dir), MIN_FREE_BYTES, f"the {stage_name} stage")
            if stage_name in ("pretrain", "finetune"):  # their work folders, before any training
                check_writable(Path(cfg.data_dir) / "checkpoints" / stage_name)
            fn(cfg)
            if startup is not None and all(os.environ.get(v, "0") == "0" for v in ("RANK", "LOCAL_RANK", "NODE_RANK")):
                run = cfg.name if stage_name in ("pretrain", "finetune") else stage_name
                write_json(Path(cfg.data_dir) / "timing" / stage_name / f"{run}.json", {
                    "startup_seconds": round(startup, 2),
                    "process_seconds": round(startup + time.perf_counter() - began, 2)})
        except (UserError, SourceError) as err:
            print(f"error: {err}", file=sys.stderr)
            sys.exit(2)
        except Interrupted as stop:
            print(f"error: stopped by {signal.Signals(stop.signum).name}: rerun the same command to finish "
                  "(pretraining resumes from its last checkpoint)", file=sys.stderr)
            sys.exit(128 + stop.signum)
        except Exception as err:
            if (full := disk_full(err)) is None:
                raise
            print(f"error: no space left on the device of {full} ({cfg.data_dir}): free some and rerun the same "
                  "command (pretraining resumes from its last checkpoint)", file=sys.stderr)
            sys.exit(2)

    return hydra.main(config_path=CONF_DIR, config_name="config", version_base="1.3")(task)


def stop_on_signals() -> None:
    """SIGTERM and SIGINT raise `Interrupted` in this process (its forked workers die of them as before). Under DVC
    (`DVC_STAGE` set), the death of the process that started this one counts as a SIGTERM: `dvc repro` stopped by
    SIGTERM exits at once without passing it on, which left its stage running as an orphan."""
    owner = os.getpid()

    def handler(signum: int, _: Any) -> None:
        if os.getpid() != owner:  # a forked worker inherited this handler: die of the signal, as before
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        raise Interrupted(signum)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, handler)
    if os.environ.get("DVC_STAGE"):
        watch_parent()


def watch_parent(every: float = 1.0) -> None:
    """SIGTERM to this process, from a daemon thread checking every `every` seconds, once the process that started it
    has gone (or, when that is a shell, the shell's parent: DVC runs a stage's command through `$SHELL -c`)."""
    def parent_of(pid: int) -> int | None:
        try:
            return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return None

    def name_of(pid: int) -> str:
        try:
            return Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            return ""

    me, parent = os.getpid(), os.getppid()
    grandparent = parent_of(parent) if name_of(parent) in ("sh", "bash", "dash", "zsh", "fish") else None

    def watch() -> None:
        while True:
            time.sleep(every)
            if os.getppid() != parent or (grandparent is not None and parent_of(parent) != grandparent):
                log.warning("the process that started this stage has ended: stopping")
                os.kill(me, signal.SIGTERM)
                return

    threading.Thread(target=watch, name="bertlab-watch-parent", daemon=True).start()


def disk_full(err: BaseException) -> str | None:
    """The file (or "a file") whose write failed for want of space, if that is what `err` (or its cause) is."""
    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in (errno.ENOSPC, errno.EDQUOT):
            return str(seen.filename or "a file")
        if "No space left on device" in str(seen) or "file write failed" in str(seen):  # torch's zip writer
            return "a file"
        seen = seen.__cause__ or seen.__context__
    return None


MIN_FREE_BYTES = 64 << 20  # every stage writes logs, a timing record and its outputs


def check_free_space(directory: Path, needed: int, what: str) -> None:
    """A UserError unless the filesystem of `directory` (or where it would be created) has `needed` bytes free."""
    probe = Path(directory)
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        free = shutil.disk_usage(probe).free
    except OSError:
        return  # not measurable: writing will tell
    if free < needed:
        raise UserError(f"{directory}: {free / 2**20:,.0f} MiB free on its device, {what} needs about "
                        f"{needed / 2**20:,.0f} MiB: free some space first")


def composed_overrides() -> tuple[list[str], Callable[[list[str]], DictConfig]]:
    """This Hydra run's command-line overrides, and a function that composes its config with other overrides."""
    from hydra.core.hydra_config import HydraConfig

    hydra_cfg = HydraConfig.get()
    return list(hydra_cfg.overrides.task), lambda overrides: hydra.compose(hydra_cfg.job.config_name, overrides)


def process_age() -> float | None:
    """Seconds since this process started (Linux's /proc), or None where that cannot be read."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return max(0.0, uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK"))  # field 22: start time, in ticks
    except (OSError, ValueError, IndexError):
        return None


def check_writable(directory: Path) -> None:
    """A UserError naming `directory` unless files can be created in it (or where it would be created)."""
    probe = directory
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        if not probe.is_dir():
            raise NotADirectoryError(f"{probe} is not a directory")
        tempfile.TemporaryFile(dir=probe).close()
    except OSError as err:
        raise UserError(f"cannot write the output directory {directory} ({err})") from err


def remove_tree(path: Path, root: Path) -> None:
    """`shutil.rmtree(path)` for a `path` strictly inside `root`; anything else is refused (a bug, not bad input)."""
    path, root = Path(path).resolve(), Path(root).resolve()
    if root not in path.parents:
        raise RuntimeError(f"refusing to delete {path}: it is not inside {root}")
    shutil.rmtree(path, ignore_errors=True)


@contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """Yield a scratch directory that replaces `path` only if the block completes: no half-written outputs.

    The scratch directory is `<parent>/.partial/<name>`, where no stage or report looks for outputs; a killed
    run's leftover is removed by the next run of the same output. `path` must end in a plain name (not `.`
    or `..`): only it and its scratch copy are ever deleted.
    """
    path = Path(path)
    if path.name in ("", ".", "..") or path.resolve().parent != path.parent.resolve():
        raise RuntimeError(f"refusing to replace {path}: not a plain directory name")
    scratch_root = path.parent / ".partial"
    tmp = scratch_root / path.name
    remove_tree(tmp, scratch_root)
    tmp.mkdir(parents=True)
    try:
        yield tmp
        remove_tree(path, path.parent)
        tmp.rename(path)
    finally:
        remove_tree(tmp, scratch_root)
        with suppress(OSError):
            scratch_root.rmdir()  # only when no other run is writing there


def require(path: str | Path, stage: str) -> Path:
    """`path`, which stage `stage` writes; a UserError naming that stage when it is missing."""
    if not Path(path).exists():
        raise UserError(f"{path} not found: run `dvc repro {stage}` (or `python -m bertlab.{stage}`) first")
    return Path(path)


def finite(obj: Any) -> Any:
    """`obj` with every NaN or infinite float replaced by None: JSON has no literal for them."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    return obj


def write_json(path: str | Path, obj: Any) -> None:
    """Write `obj` as indented, valid JSON (non-finite numbers as null), creating parent directories."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(finite(obj), indent=2, sort_keys=True, allow_nan=False) + "\n")


def read_json(path: str | Path) -> Any:
    """The JSON in `path`; a UserError naming it when it is not JSON (garbage, truncated)."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as err:  # json.JSONDecodeError is a ValueError
        raise UserError(f"{path} is not valid JSON ({err})") from err


def read_tokenizer(path: str | Path) -> Any:
    """The `tokenizers.Tokenizer` saved in `path` (the tokenizer stage's); a UserError naming the file when it is
    not one (garbage, truncated)."""
    from tokenizers import Tokenizer

    try:
        return Tokenizer.from_file(str(path))
    except Exception as err:  # the Rust side raises plain Exceptions
        raise UserError(f"{path} is not a readable tokenizer ({str(err).splitlines()[0] if str(err) else err!r}): "
                        "rerun `dvc repro tokenizer` (or `python -m bertlab.tokenizer`)") from err


def apply_impl(impl: DictConfig) -> None:
    """Speed-only process settings."""
    if impl.threads:
        torch.set_num_threads(int(impl.threads))


def num_nodes(impl: DictConfig) -> int:
    """`impl.num_nodes`, or when it is null the launcher's node count, else 1; Lightning checks it against the
    processes the launcher started. Launchers in Lightning's order of detection: torchrun (`GROUP_WORLD_SIZE`, its
    number of nodes, else `WORLD_SIZE / LOCAL_WORLD_SIZE`), then SLURM (`SLURM_NNODES`)."""
    from lightning.fabric.plugins.environments import SLURMEnvironment, TorchElasticEnvironment

    if impl.get("num_nodes") is not None:
        return int(impl.num_nodes)
    env = os.environ
    if TorchElasticEnvironment.detect():
        if "GROUP_WORLD_SIZE" in env:
            return int(env["GROUP_WORLD_SIZE"])
        return max(1, int(env["WORLD_SIZE"]) // int(env.get("LOCAL_WORLD_SIZE", env["WORLD_SIZE"])))
    if SLURMEnvironment.detect() and "SLURM_NNODES" in env:
        return int(env["SLURM_NNODES"])
    return 1


def trainer_devices(impl: DictConfig) -> dict[str, Any]:
    """The Trainer's accelerator, devices, num_nodes, strategy and precision from `impl` (both training stages).
    Every parameter a run trains is in its loss (the code freezes the rest), so plain DDP needs no unused-parameter
    search."""
    return {"accelerator": impl.accelerator, "devices": impl.devices, "num_nodes": num_nodes(impl),
            "strategy": impl.strategy, "precision": impl.precision}


def split_batch(global_batch: int, world_size: int, max_device_batch: int | None, setting: str) -> tuple[int, int]:
    """(per-device micro-batch, gradient accumulation) giving the result setting `setting`=`global_batch` on
    `world_size` processes: the fewest accumulation steps that keep the micro-batch within `max_device_batch`
    (`impl.max_device_batch`, speed only; None: no limit). A UserError unless the processes share it evenly."""
    if global_batch % world_size:
        raise UserError(f"{setting}={global_batch} (the global batch) is not divisible by the {world_size} "
                        "processes present (devices x nodes)")
    per_process = global_batch // world_size
    limit = max_device_batch or per_process
    accumulate = next(a for a in range(1, per_process + 1) if per_process % a == 0 and per_process // a <= limit)
    return per_process // accumulate, accumulate


def fit_global_batch(trainer: Any, global_batch: int, max_device_batch: int | None, setting: str) -> int:
    """The per-device micro-batch of `global_batch` on the trainer's devices x nodes; sets the trainer's gradient
    accumulation to match (as Lightning's GradientAccumulationScheduler does), before `fit`."""
    micro, accumulate = split_batch(global_batch, trainer.num_devices * trainer.num_nodes, max_device_batch, setting)
    trainer.accumulate_grad_batches = accumulate
    log.info("%s=%d: %d x %d device(s) x %d node(s) x %d accumulation step(s)", setting, global_batch, micro,
             trainer.num_devices, trainer.num_nodes, accumulate)
    return micro


def on_cuda(trainer: Any) -> bool:
    """Whether the trainer runs on CUDA devices (pinned host memory, no host syncs in training steps)."""
    return trainer.strategy.root_device.type == "cuda"


def progress_bar():
    """Lightning's tqdm bar: unlike the rich one it also reports progress when output is a log, not a terminal."""
    from lightning.pytorch.callbacks import TQDMProgressBar

    return TQDMProgressBar(refresh_rate=10)


def fused_adamw(module: Any) -> bool:
    """Whether a LightningModule may use a fused AdamW (one kernel for all parameters: faster). Not under mixed
    precision, where Lightning cannot clip a fused optimizer's gradients."""
    trainer = getattr(module, "_trainer", None)
    return trainer is None or str(trainer.precision).startswith("32")


def warmup_then_decay(opt: torch.optim.Optimizer, warmup: int, total: int) -> dict[str, Any]:
    """Lightning's scheduler config for BERT's schedule: linear warmup over `warmup` steps, then linear decay to 0
    at step `total` (torch's LinearLR, stepped every optimizer step)."""
    decay = torch.optim.lr_scheduler.LinearLR(opt, 1.0, 0.0, total_iters=max(1, total - warmup))
    sched: torch.optim.lr_scheduler.LRScheduler = decay
    if warmup > 0:
        ramp = torch.optim.lr_scheduler.LinearLR(opt, start_factor=1.0 / warmup, total_iters=warmup)
        sched = torch.optim.lr_scheduler.SequentialLR(opt, [ramp, decay], milestones=[warmup])
    return {"scheduler": sched, "interval": "step"}


def make_loggers(cfg: DictConfig, job_type: str, save_dir: str | Path, tables: list[str]) -> list:
    """Lightning loggers: always a CSVLogger into `save_dir` (the report reads it) plus the chosen one. A W&B run is
    grouped by the first of the ablation `tables` that use it (else by `job_type`) and tagged with all of them."""
    from lightning.pytorch.loggers import CSVLogger, WandbLogger

    loggers: list = [CSVLogger(save_dir=str(save_dir), name="", version="")]
    if cfg.logger.kind == "wandb":
        Path(cfg.logger.save_dir).mkdir(parents=True, exist_ok=True)

        def start(offline: bool) -> WandbLogger:
            logger = WandbLogger(
                project=cfg.logger.project, name=cfg.name, group=tables[0] if tables else job_type,
                job_type=job_type, tags=tables, save_dir=cfg.logger.save_dir, offline=offline,
                config=OmegaConf.to_container(cfg, resolve=True), settings=wandb_settings(),
            )
            if not offline:
                logger.experiment  # noqa: B018  (starts the online run now: a failure falls back before training)
            return logger

        loggers.append(start_wandb(start, cfg.logger.offline, cfg.logger.save_dir))
    elif cfg.logger.kind == "csv":
        loggers.append(CSVLogger(save_dir=cfg.logger.save_dir, name=job_type, version=cfg.name))
    return loggers


WANDB_INIT_TIMEOUT = 20  # seconds W&B may take to start an online run (its default: 90, then a traceback)


def wandb_settings() -> Any:
    import wandb

    return wandb.Settings(init_timeout=WANDB_INIT_TIMEOUT)


def start_wandb(start: Callable[[bool], T], offline: bool, save_dir: str) -> T:
    """`start(offline)`. Online, when W&B's server cannot be reached (checked in at most 5 s) or refuses or times out
    the run (no API key, a wrong one), it logs offline instead, with one warning line: a pipeline never stops, nor
    waits minutes, for its logger."""
    if not offline:
        why = wandb_unreachable()
        if why is None:
            try:
                return start(False)
            except Exception as err:  # wandb raises UsageError, CommError, ...
                why = f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else ''}"
                with suppress(Exception):
                    import wandb

                    wandb.finish(exit_code=1)
        log.warning("W&B cannot log online (%s): logging offline under %s instead (upload later with `wandb sync`)",
                    why, save_dir)
    return start(True)


def wandb_unreachable(timeout: float = 5.0) -> str | None:
    """Why W&B's server cannot be reached from here, or None (also when WANDB_MODE keeps W&B offline anyway)."""
    import socket
    from urllib.parse import urlparse

    if os.environ.get("WANDB_MODE", "").lower() in ("offline", "disabled", "dryrun"):
        return None
    import wandb

    url = urlparse(str(wandb.Settings().base_url))
    try:
        socket.create_connection((url.hostname, url.port or (443 if url.scheme == "https" else 80)), timeout).close()
    except (OSError, TypeError, ValueError) as err:
        return f"{url.hostname} unreachable: {err}"
    return None


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
                with path.open("rb") as f:
                    h.update(hashlib.file_digest(f, "sha256").digest())
    return h.hexdigest()


def find_twin(runs_dir: Path, name: str, key: str) -> Path | None:
    """Another finished run in `runs_dir` whose metrics.json has run key `key` (the same code, result settings and
    inputs), if any: its outputs are this run's too (e.g. Table 6's 12/768/12 row where a profile gives the size
    study `bert`'s budget), so one training can serve both names."""
    for metrics in sorted(Path(runs_dir).glob("*/metrics.json")):
        if metrics.parent.name != name and read_json(metrics).get("run_key") == key:
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

"""A stage's Hydra entry point: settings checked at the door, one-line errors, the process's time for the ledger."""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import signal
import sys
import textwrap
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import hydra
import yaml
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf

from bertlab import settings
from bertlab.errors import Interrupted, UserError
from bertlab.files import MIN_FREE_BYTES, check_free_space, check_writable, write_json
from bertlab.guards import disk_full, stop_on_signals
from bertlab.hydra_errors import one_line

log = logging.getLogger(__name__)
_timed: list[str] = []  # the runs whose time this process has recorded (a multirun's jobs: several)
_notices: list[str] = []  # said once the command line composes (a bad one gets its one line alone)
CONF_DIR = str(settings.CONF_DIR)
StageFn = Callable[[DictConfig], bool | None]  # True: the run was finished already, nothing was done


def main(*, named_runs: bool = False, run_name: Callable[[DictConfig], str] = lambda cfg: cfg.name,
         own_output: bool = False, reads: Sequence[str] = ()) -> Callable[[StageFn], Callable[[], None]]:
    """A stage's Hydra entry point: `python -m bertlab.<stage> key=value ...` (and `-m` for multirun); its `--help`
    lists the settings it reads, with their values: its result settings (`settings.RESULT_KEYS`), then `reads`
    (speed, logging, its run's name).

    Settings are checked first (`bertlab.settings.check`, and settings appended with `+key=value`), and the stage's
    output directory (`<data_dir>/<stage>`, a training stage's `<out_dir>/<stage>`; a stage with `own_output` writes
    elsewhere and checks that itself) must be
    writable with room on its disk, before any compute is spent; `impl.threads` (speed only) sets torch's threads for
    the whole process (null, with `impl.jobs` > 1 jobs of a multirun at once: its cores shared among them). A
    UserError or a full disk prints one line to stderr and exits with status 2; SIGTERM/SIGINT (or, under DVC, the
    death of DVC: `bertlab.guards`) one line and status 128 + the signal. A run that completes
    leaves its process's time, start-up included, in `<data_dir or out_dir>/timing/<stage>/<run>.json` for the
    report's budget ledger (one that finds itself finished already leaves that of the run that did the work; global
    rank zero only; `<run>` is the run's `run_name` for a stage of `named_runs`, else the stage's; the jobs of a multirun
    share a process (`impl.jobs` > 1: each of theirs), whose time before a job is counted once, in the first record
    it leaves).
    """
    def entry(fn: StageFn) -> Callable[[], None]:
        stage_name = Path(fn.__code__.co_filename).stem  # its module's name, also when run as __main__ (`python -m`)
        keys = [*settings.RESULT_KEYS.get(stage_name, []), *reads]

        @functools.wraps(fn)
        def task(cfg: DictConfig) -> None:
            # a multirun's jobs share the process: its time before a job counts once, in the first job's record
            startup, began = job_startup(), time.perf_counter()
            logging.raiseExceptions = False  # a log file on a full disk: not thousands of lines of "Logging error"
            try:
                stop_on_signals()
                settings.check(cfg)
                settings.check_jobs(cfg, jobs_at_once(), "hydra.launcher.n_jobs")  # as this multirun runs
                settings.check_appended(*composed_overrides(), Path(CONF_DIR))
                while _notices:  # on stdout: stderr is the errors' (a refused run's, one line)
                    print(_notices.pop(0))
                if threads := OmegaConf.select(cfg, "impl.threads") or cores_per_job():
                    import torch  # only then: the data stages need no torch

                    torch.set_num_threads(int(threads))
                root = Path(cfg.out_dir if named_runs else cfg.data_dir)
                if named_runs and root != Path(cfg.data_dir):
                    log.info("a run by hand: its outputs go to %s, the pipeline's in %s stay as they are", root,
                             cfg.data_dir)
                if not own_output:
                    check_writable(root / stage_name)
                    check_free_space(root, MIN_FREE_BYTES, f"the {stage_name} stage")
                if named_runs:  # the training stages' work folders, before any training
                    check_writable(root / "checkpoints" / stage_name)
                finished_before = fn(cfg)
                ranks = ("RANK", "LOCAL_RANK", "NODE_RANK")
                at_rank_zero = all(os.environ.get(v, "0") == "0" for v in ranks)
                if not finished_before and startup is not None and at_rank_zero:
                    run = run_name(cfg) if named_runs else stage_name
                    write_json(root / "timing" / stage_name / f"{run}.json", {
                        "startup_seconds": round(startup, 2),
                        "process_seconds": round(startup + time.perf_counter() - began, 2)})
                    timed(run)
            except UserError as err:
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

        app = hydra.main(config_path=CONF_DIR, config_name="config", version_base="1.3")(task)

        @functools.wraps(app)
        def start() -> None:
            sys.argv[1:] = follow_params(sys.argv[1:])
            quiet_notices()  # once a process, not once a job of a multirun
            # `${stage_keys:}` in conf/config.yaml's help template
            OmegaConf.register_new_resolver("stage_keys", lambda *, _root_: keys_help(keys, _root_), replace=True)
            os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra's refusals reach us, for one line each
            try:
                stop_on_signals()  # also where the jobs run in processes of their own (`impl.jobs` > 1)
                app()
            except HydraException as err:
                print(f"error: {one_line(err, Path(CONF_DIR), sys.argv[1:])}", file=sys.stderr)
                sys.exit(2)
            except Interrupted as stop:  # jobs in processes of their own: each stopped and said so itself
                sys.exit(128 + stop.signum)

        return start

    return entry


def keys_help(keys: Sequence[str], cfg: DictConfig, width: int = 118) -> str:
    """The settings at `keys` of `cfg` (sections or single settings), a line or more for each, for --help: each
    `key=value` as a command line sets it, or its key alone where it holds mappings (`--cfg job --package <key>`
    shows them)."""
    lines = []
    for key in keys:
        node = OmegaConf.select(cfg, key)
        items = []
        for name in [f"{key}.{k}" for k in node] if OmegaConf.is_dict(node) else [key]:
            value = OmegaConf.select(cfg, name)
            if OmegaConf.is_dict(value) or OmegaConf.is_list(value) and any(OmegaConf.is_dict(v) for v in value):
                items.append(name)
                continue
            value = OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
            items.append(f"{name}={value if isinstance(value, str) else json.dumps(value, separators=(',', ':'))}")
        lines.append(textwrap.fill(" ".join(items), width, initial_indent="  ", subsequent_indent="    ",
                                   break_long_words=False, break_on_hyphens=False))
    return "\n".join(lines).replace("$", "$$")  # the template's own `$` marks Hydra's substitutions


def global_rank() -> int:
    """This process's rank in a distributed run before its Trainer exists (0 alone), read from the launcher's
    environment as Lightning reads it (`lightning.fabric.utilities.rank_zero`), without importing Lightning (~4 s)."""
    ranks = ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK")  # in Lightning's order
    return int(next((os.environ[v] for v in ranks if v in os.environ), "0"))

# Notices every stage process would repeat, with nothing in them for a user to act on.
NOTICES = (r"`isinstance\(treespec, LeafSpec\)` is deprecated",  # Lightning's use of torch, for Lightning to fix
           r"Experiment logs directory .* Previous log files")  # a resumed run: RunRecord keeps its whole curve
LOG_NOTICES = ("💡 Tip:",  # Lightning's advertisement of its cloud logger
               "GPU available: False", "TPU available", "HPU available",  # no accelerator: nothing to say
               "`Trainer.fit` stopped: `max_", "Loading `train_dataloader` to estimate")  # as asked


def quiet_notices() -> None:
    """Silence NOTICES and LOG_NOTICES, and W&B's start-up banner (its warnings and errors stay)."""
    for pattern in NOTICES:
        warnings.filterwarnings("ignore", message=pattern)
    logging.getLogger("lightning.pytorch.utilities.rank_zero").addFilter(
        lambda record: not record.getMessage().startswith(LOG_NOTICES))
    os.environ.setdefault("WANDB_SILENT", "true")


def follow_params(argv: list[str], params: Path = Path("params.yaml")) -> list[str]:
    """`argv` of a run by hand (its config composed from conf/, not one `configs` wrote) with the profile of
    `params.yaml` (in the working directory), where the command line names none; says so in one line. Its --help too
    shows that profile's values."""
    config_flags = ("-cd", "--config-dir", "-cp", "--config-path", "-cn", "--config-name")
    if any(a.startswith(config_flags) or re.match(r"[+~]*profile=", a) for a in argv):
        return argv
    try:
        profile = yaml.safe_load(params.read_text(encoding="utf-8"))["profile"]
    except (OSError, UnicodeDecodeError, yaml.YAMLError, TypeError, KeyError):
        return argv
    if not isinstance(profile, str):
        return argv
    _notices.append(f"profile={profile} (params.yaml's; name another on the command line to change it)")
    # beside the command line's own overrides: Hydra's parser takes them as one run of arguments, before or after its
    # flags (`x=1 --cfg job`, `-m x=1`), so one appended after a flag's value would be an unrecognised argument
    at = next((i for i, a in enumerate(argv) if "=" in a and not a.startswith("-")
               and (i == 0 or argv[i - 1] not in ("-sc", "--shell-completion"))), len(argv))
    return [*argv[:at], f"profile={profile}", *argv[at:]]


def composed_overrides() -> tuple[list[str], Callable[[list[str]], DictConfig]]:
    """This Hydra run's command-line overrides, and a function that composes its config with other overrides."""
    from hydra.core.hydra_config import HydraConfig

    hydra_cfg = HydraConfig.get()
    return list(hydra_cfg.overrides.task), lambda overrides: hydra.compose(hydra_cfg.job.config_name, overrides)


def jobs_at_once() -> int:
    """How many jobs of this multirun run at once (Hydra's joblib launcher: its `n_jobs`, `impl.jobs` in the pipeline's
    sweeps); 1 otherwise."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    hydra_cfg = HydraConfig.get()
    if hydra_cfg.mode != RunMode.MULTIRUN or "joblib" not in str(OmegaConf.select(hydra_cfg, "launcher._target_")):
        return 1
    from joblib import effective_n_jobs  # n_jobs -1 (its default): one a core

    return effective_n_jobs(hydra_cfg.launcher.n_jobs)


def cores_per_job() -> int | None:
    """Torch's threads for a job of a multirun whose jobs run at once (`jobs_at_once` > 1): this process's cores
    shared among them, at least one each; None otherwise (torch's default)."""
    jobs = jobs_at_once()
    return max(1, len(os.sched_getaffinity(0)) // jobs) if jobs > 1 else None


# A job of a multirun launched in another process (Hydra's joblib launcher) gets `task` pickled by value, and with it a
# copy of every module global it names: this process's record of timed runs is reached through module-level functions,
# which travel by reference.
def job_startup() -> float | None:
    """The start-up to count for this process's next run: its age for the first run it records, 0 after."""
    return 0.0 if _timed else process_age()


def timed(run: str) -> None:
    _timed.append(run)


def process_age() -> float | None:
    """Seconds since this process started (Linux's /proc), or None where that cannot be read."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return max(0.0, uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK"))  # field 22: start time, in ticks
    except (OSError, ValueError, IndexError):
        return None

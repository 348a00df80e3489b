"""W&B that never stops nor stalls a pipeline: an online run that cannot start (no network, no key) logs offline
instead, with one warning line, and the process sends that server nothing more; each job of a Hydra multirun logs
a run of its own, grouped by the sweep."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, TypeVar

from bertlab.files import lasting_dir

log = logging.getLogger(__name__)
T = TypeVar("T")

WANDB_INIT_TIMEOUT = 20  # seconds W&B may take to start an online run (its default: 90, then a traceback)
# W&B's usage telemetry (wandb 0.31: its service's and the SDK's OpenTelemetry posts to the run's server, offline runs
# included), off unless set: a refused online start's, queued in W&B's service, would reach that server at exit.
ERROR_REPORTING = "WANDB_ERROR_REPORTING"
fell_back: list[str] = []  # why this process's W&B could not log online: its later runs start offline, untried


def wandb_settings() -> Any:
    import wandb

    return wandb.Settings(init_timeout=WANDB_INIT_TIMEOUT)


def start_wandb(start: Callable[[bool], T], offline: bool, save_dir: str) -> T:
    """`start(offline)`. Online, when W&B's server does not answer (checked in at most 5 s) or refuses or times out
    the run (no API key, a wrong one), it logs offline instead, with one warning line: a pipeline never stops, nor
    waits minutes, for its logger. `start` must pass `mode="offline"` to `wandb.init` when offline: after an online
    try, W&B reads no environment variable (Lightning's `WANDB_MODE`) again in this process. Once fallen back, the
    process's later starts (the next jobs of a multirun) log offline at once, with the same warning: W&B's server
    hears nothing more from it (nor, unless `WANDB_ERROR_REPORTING` is set, W&B's usage telemetry at all)."""
    os.environ.setdefault(ERROR_REPORTING, "false")  # read when W&B starts its service, at its first run
    logging.getLogger("asyncio").setLevel(logging.ERROR)  # W&B's client: a warning a send to a service that stopped
    if offline:
        return start(True)
    import wandb

    why = fell_back[0] if fell_back else wandb_unreachable()
    if why is None:
        try:
            return start(False)
        except Exception as err:  # wandb raises UsageError, CommError, ...
            why = f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else ''}"
            with suppress(Exception):
                wandb.finish(exit_code=1)
    fell_back[:] = [why]
    log.warning("W&B cannot log online (%s): logging offline under %s instead (upload later with `wandb sync`)",
                why, save_dir)
    wandb.setup(wandb.Settings(mode="offline"))  # all of this process's W&B from now on
    return start(True)


@contextmanager
def one_run_per_job() -> Iterator[None]:
    """Around a stage's job: the W&B run it started (a Lightning logger's) ends with it, failed where it raised, so
    the next job of a Hydra multirun, in the same process, starts a run of its own (Lightning would reuse it)."""
    try:
        yield
    except BaseException:
        _finish_failed()
        raise
    finish_run(0)


def _finish_failed() -> None:
    """Finish the W&B run of a job that failed or was stopped. Where W&B cannot (its service stopped with the job, as
    SLURM stops every process of a requeued one), one line says so, and W&B's exit hook goes with the service: the
    job's own error stays the last word, not two of W&B's tracebacks."""
    try:
        finish_run(1)
    except Exception as err:
        log.warning("W&B could not close its run (%s: %s): its offline files keep what was logged",
                    type(err).__name__, err)
        with suppress(Exception):
            sys.modules["wandb"].teardown()


def finish_run(exit_code: int) -> None:
    """Finish this process's W&B run, if one is on (W&B is imported only where a run was started)."""
    wandb = sys.modules.get("wandb")
    if wandb is not None and wandb.run is not None:
        wandb.finish(exit_code=exit_code)


def sweep_group(stage: str) -> str | None:
    """The W&B group of a Hydra multirun's jobs: `<stage>-<its sweep folder's name>` (`multirun-<time>` unless
    `hydra.sweep.dir` names another); None outside a multirun."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized() or HydraConfig.get().mode != RunMode.MULTIRUN:
        return None
    return f"{stage}-{Path(HydraConfig.get().sweep.dir).name}"


def log_report(logger: Any, group: str, name: str, config: dict[str, Any],
               values: Callable[[Any], dict[str, Any]]) -> None:
    """One W&B run of a report stage (`logger`: the composed `logger` config, its runs in `lasting_dir`): `config`,
    and `values(wandb)` (tables, images) logged once."""
    import wandb

    save_dir = lasting_dir(logger.save_dir)
    save_dir.mkdir(parents=True, exist_ok=True)
    with start_wandb(lambda offline: wandb.init(
        project=logger.project, group=group, job_type="report", name=name, dir=str(save_dir),
        mode="offline" if offline else None, config=config, settings=wandb_settings(),
    ), logger.offline, str(save_dir)) as run:
        run.log(values(wandb))


def wandb_unreachable(timeout: float = 5.0) -> str | None:
    """Why W&B's server (the base URL a run resolves: `WANDB_BASE_URL`, `wandb login --host`, else W&B's cloud) does
    not answer from here within `timeout` seconds, or None (also when WANDB_MODE keeps W&B offline anyway). Any HTTP
    answer counts, a refusal too (the online start reports that); one that accepts and never answers would hold the
    start for W&B's init timeout, and its exit for as long again."""
    import urllib.error
    import urllib.request

    if os.environ.get("WANDB_MODE", "").lower() in ("offline", "disabled", "dryrun"):
        return None
    from wandb.sdk import wandb_setup

    url = str(wandb_setup.singleton().settings.base_url)  # loaded as wandb.init loads it, no service started
    try:
        urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout).close()
    except urllib.error.HTTPError:
        return None  # it answered
    except (OSError, ValueError) as err:  # URLError, a timeout, a malformed URL
        return f"{url} does not answer: {getattr(err, 'reason', err)}"
    return None

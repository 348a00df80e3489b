"""W&B online that cannot start falls back to offline in one warning line (`bertlab.tracking`)."""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from bertlab import tracking
from bertlab.files import lasting_dir
from bertlab.stage import CONF_DIR
from bertlab.training.run_settings import LogSettings
from bertlab.training.trainer import make_loggers


def test_an_online_wandb_start_that_fails_falls_back_to_offline_in_one_line(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A wrong W&B key waited 107 s for a traceback; no key, 6 s."""
    calls: list[bool] = []

    def start(offline: bool) -> str:
        calls.append(offline)
        if not offline:
            raise RuntimeError("401: invalid API key\nmore detail")
        return "the offline run"

    monkeypatch.setattr(tracking, "wandb_unreachable", lambda: None)
    monkeypatch.setattr(tracking, "fell_back", [])
    monkeypatch.setenv(tracking.ERROR_REPORTING, "")  # restored (unset) after the test
    monkeypatch.delenv(tracking.ERROR_REPORTING)
    assert tracking.start_wandb(start, False, "data/wandb") == "the offline run" and calls == [False, True]
    assert os.environ[tracking.ERROR_REPORTING] == "false"  # W&B's usage telemetry: off unless set
    warning = ("W&B cannot log online (RuntimeError: 401: invalid API key): logging offline under data/wandb instead "
               "(upload later with `wandb sync`)")
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [warning]
    calls.clear()
    assert tracking.start_wandb(start, True, "data/wandb") == "the offline run" and calls == [True]
    calls.clear()  # the process's next online start (a multirun's next job): offline at once, with the same warning
    monkeypatch.setattr(tracking, "wandb_unreachable", lambda: pytest.fail("the server was checked again"))
    assert tracking.start_wandb(start, False, "data/wandb") == "the offline run" and calls == [True]
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [warning, warning]


def test_logger_offline_false_without_a_network_logs_offline_within_seconds(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setattr(tracking, "fell_back", [])
    if tracking.wandb_unreachable() is None:
        pytest.skip("W&B's server answers from here: this test needs a machine without network")
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose("config", overrides=["logger=wandb", "logger.offline=false", f"data_dir={tmp_path}"])
    start = time.perf_counter()
    loggers = make_loggers(LogSettings.of(cfg), "pretrain", tmp_path / "run")
    assert time.perf_counter() - start < 15
    assert loggers[1]._offline and "W&B cannot log online" in caplog.text
    loggers[1].experiment.finish()


class NotFound(BaseHTTPRequestHandler):
    def do_HEAD(self) -> None:
        self.send_response(404)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_the_server_checked_is_wandb_base_url_and_any_answer_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    """`wandb.Settings().base_url` ignores WANDB_BASE_URL: a self-hosted server was never the one checked."""
    import wandb

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), NotFound)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        refused = f"http://127.0.0.1:{closed.getsockname()[1]}"
    monkeypatch.delenv("WANDB_MODE")
    try:
        for url, why in ((f"http://127.0.0.1:{httpd.server_address[1]}", None),
                         (refused, f"{refused} does not answer: [Errno 111] Connection refused")):
            monkeypatch.setenv("WANDB_BASE_URL", url)
            wandb.teardown()  # W&B reads its environment once a process
            assert tracking.wandb_unreachable() == why
    finally:
        httpd.shutdown()
        httpd.server_close()
        monkeypatch.undo()
        wandb.teardown()


def test_a_dvc_experiments_wandb_runs_go_to_the_repository_not_its_temporary_copy(tmp_path: Path) -> None:
    copy = tmp_path / "repo/.dvc/tmp/exps/tmpab12/sub"
    assert lasting_dir("data/wandb", copy) == tmp_path / "repo/data/wandb"
    assert lasting_dir("data/wandb", tmp_path / "repo") == Path("data/wandb")
    assert lasting_dir(tmp_path / "w", copy) == tmp_path / "w"


def test_each_job_finishes_its_wandb_run_failed_where_it_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    """A multirun's next job reused the run still on (Lightning's WandbLogger), after a success or a failure."""
    finished: list[int] = []

    class Wandb:  # the wandb module as a job leaves it: a run on until finished
        run: object | None = "a run"

        def finish(self, exit_code: int) -> None:
            finished.append(exit_code)
            self.run = None

    monkeypatch.setitem(sys.modules, "wandb", Wandb())
    with tracking.one_run_per_job():
        pass
    sys.modules["wandb"].run = "the next job's run"
    with pytest.raises(RuntimeError, match="diverged"), tracking.one_run_per_job():
        raise RuntimeError("diverged")
    with tracking.one_run_per_job():  # a job that started no run: nothing to finish
        pass
    assert finished == [0, 1]


def test_a_stopped_job_whose_wandb_service_is_gone_ends_with_its_own_error(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """SLURM stops every process of a requeued job, W&B's service too: finishing the run then raised
    ConnectionResetError over the job's own error, and W&B's exit hook printed a second traceback (~180 lines). Now
    one warning line, W&B torn down (its exit hook gone with it), and the job's error raised as it was; asyncio's
    warning a send to the stopped service (W&B's client), off from W&B's start."""
    import logging

    monkeypatch.setattr(logging.getLogger("asyncio"), "level", logging.NOTSET)
    tracking.start_wandb(lambda offline: None, True, "data/wandb")
    assert logging.getLogger("asyncio").level == logging.ERROR
    calls: list[str] = []

    class Wandb:  # the wandb module of a job whose W&B service was stopped
        run: object | None = "a run"

        def finish(self, exit_code: int) -> None:
            calls.append(f"finish {exit_code}")
            raise ConnectionResetError("Connection lost")

        def teardown(self) -> None:
            calls.append("teardown")
            raise ConnectionResetError("Connection lost")

    monkeypatch.setitem(sys.modules, "wandb", Wandb())
    with pytest.raises(KeyboardInterrupt, match="stopped"), tracking.one_run_per_job():
        raise KeyboardInterrupt("stopped")
    assert calls == ["finish 1", "teardown"]
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [
        "W&B could not close its run (ConnectionResetError: Connection lost): its offline files keep what was logged"]

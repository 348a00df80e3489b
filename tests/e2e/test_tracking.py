"""W&B online against a server that refuses the key or never answers (a fake one on 127.0.0.1, no outside traffic):
the stage warns once, logs offline and succeeds, its run kept for `wandb sync`."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.helpers import TINY

WARNING = "W&B cannot log online"


class Refuses(BaseHTTPRequestHandler):
    """W&B's answer to a wrong API key, to every request."""

    def answer(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = b'{"data": null, "errors": [{"message": "user is not logged in"}]}'
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = answer

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[tuple[str, str, list[float]]]:
    """A fake W&B server on 127.0.0.1: its kind, one that answers 401 ("refuses") or one that accepts and never
    answers ("silent"), its URL and when it was first contacted (`time.perf_counter()`)."""
    contacts: list[float] = []
    if request.param == "refuses":
        class Counted(Refuses):
            def answer(self) -> None:
                contacts.append(time.perf_counter())
                super().answer()

            do_GET = do_POST = do_PUT = do_HEAD = answer

        httpd = ThreadingHTTPServer(("127.0.0.1", 0), Counted)
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        yield request.param, f"http://127.0.0.1:{httpd.server_address[1]}", contacts
        httpd.shutdown()
        httpd.server_close()
        return
    silent, held = socket.create_server(("127.0.0.1", 0), backlog=64), []

    def accept() -> None:
        while True:
            try:
                held.append(silent.accept()[0])  # held open, never answered
            except OSError:
                return
            contacts.append(time.perf_counter())

    threading.Thread(target=accept, daemon=True).start()
    yield request.param, f"http://127.0.0.1:{silent.getsockname()[1]}", contacts
    silent.close()
    for conn in held:
        conn.close()


@pytest.mark.parametrize("server", ["refuses", "silent"], indirect=True)
def test_wandb_online_that_cannot_start_logs_offline_in_one_warning_and_succeeds(
        server: tuple[str, str, list[float]], prepared: Path, tmp_path: Path) -> None:
    """It ended in a traceback: `CommError ... 401` at ~10 s, and at ~73 s against a server that never answers.
    `WANDB_BASE_URL` is the server checked and tried. The warning comes within 30 s of the server's first contact
    (the process's start-up before it is the machine's, 6-8 s unloaded)."""
    kind, url, contacts = server
    env = {k: v for k, v in os.environ.items() if k != "WANDB_MODE"} | {
        "WANDB_BASE_URL": url, "WANDB_API_KEY": "x" * 40, "WANDB_CONFIG_DIR": str(tmp_path / "config")}
    save_dir = tmp_path / "wandb"
    proc = subprocess.Popen(
        [sys.executable, "-m", "bertlab.pretrain", f"data_dir={prepared}", *TINY, "name=wandb-online",
         "impl.reuse_twins=false", "logger=wandb", "logger.offline=false", f"logger.save_dir={save_dir}"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    lines, seen = [], {}  # when the warning and the result line came (the fixture's clock)
    for line in proc.stdout:
        lines.append(line)
        for what in (WARNING, "held-out perplexity"):
            if what in line:
                seen.setdefault(what, time.perf_counter())
    code = proc.wait(timeout=600)
    exited = time.perf_counter()
    output = "".join(lines)
    assert code == 0 and "Traceback" not in output, output[-3000:]
    problems = [line for line in lines if any(w in line for w in ("WARNING", "ERROR", "wandb: "))]
    assert len(problems) == 1 and WARNING in problems[0] and str(save_dir) in problems[0], output[-3000:]
    why = {"refuses": "CommError: ", "silent": f"{url} does not answer: timed out"}[kind]
    assert why in problems[0] and (kind == "silent" or "401" in problems[0]), problems[0]
    assert seen[WARNING] - contacts[0] < 30, f"warned {seen[WARNING] - contacts[0]:.1f} s after the first contact"
    assert exited - seen["held-out perplexity"] < 20, "W&B held the stage's exit"  # it was ~25 s (its telemetry)
    [run] = save_dir.glob("wandb/offline-run-*")  # for `wandb sync`
    [log] = run.glob("run-*.wandb")
    assert b"val/ppl" in log.read_bytes() and b"wandb-online" in log.read_bytes()  # the metrics, the run's name

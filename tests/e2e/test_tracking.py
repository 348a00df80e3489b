"""W&B online against a server that refuses the key or never answers (a fake one on 127.0.0.1, no outside traffic):
the stage warns once, logs offline and succeeds, its run kept for `wandb sync`; a Hydra multirun logs a W&B run per
job, grouped by the sweep."""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.helpers import ENV, TINY

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


# Two jobs in one process, as a multirun's, each starting W&B online: print when each has its run.
JOBS = """
import sys, time, wandb
from bertlab import tracking
for job in range(2):
    run = tracking.start_wandb(lambda offline: wandb.init(
        project="p", dir=sys.argv[1], mode="offline" if offline else None, settings=tracking.wandb_settings()),
        False, sys.argv[1])
    print("started", time.time(), flush=True)
    run.log({"job": job})
    run.finish()
"""


def test_after_a_fall_back_to_offline_that_server_hears_nothing_more(tmp_path: Path) -> None:
    """W&B's usage telemetry reached the server that had refused the run, at exit, and every later job of the
    process tried that server again."""
    heard: list[tuple[float, str, str]] = []

    class Heard(Refuses):
        def answer(self) -> None:
            heard.append((time.time(), self.command, self.path))
            super().answer()

        do_GET = do_POST = do_PUT = do_HEAD = answer

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Heard)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    env = {k: v for k, v in os.environ.items() if k not in ("WANDB_MODE", "WANDB_ERROR_REPORTING")} | {
        "WANDB_BASE_URL": f"http://127.0.0.1:{httpd.server_address[1]}", "WANDB_API_KEY": "x" * 40,
        "WANDB_CONFIG_DIR": str(tmp_path / "config")}
    try:
        done = subprocess.run([sys.executable, "-c", JOBS, str(tmp_path)], capture_output=True, text=True, env=env,
                              timeout=300)
        time.sleep(1)  # anything W&B's service would still send
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert done.returncode == 0, done.stderr[-3000:]
    started = [float(line.split()[1]) for line in done.stdout.splitlines() if line.startswith("started ")]
    assert len(started) == 2 and done.stderr.count(WARNING) == 2, done.stderr[-3000:]
    assert [m for _, m, _ in heard].count("HEAD") == 1 and heard[-1][0] < started[0], heard  # the first try only
    assert not [p for _, _, p in heard if "otel" in p], heard
    assert len(list(tmp_path.glob("wandb/offline-run-*"))) == 2


def run_records(path: Path) -> Iterator:
    """The records of an offline run's `run-<id>.wandb`: W&B's log format (a 7-byte file header, then 32 KiB blocks
    of chunks, each a 7-byte header, crc32, length and kind, and its bytes; a block's last < 7 bytes are padding)."""
    from wandb.proto import wandb_internal_pb2

    data, pos, chunks, block = path.read_bytes(), 7, b"", 32768
    assert data[:4] == b":W&B"
    while pos + 7 <= len(data):
        if block - pos % block < 7:
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        chunks += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a whole record, or its last chunk
            yield wandb_internal_pb2.Record.FromString(chunks)
            chunks = b""


def test_a_multirun_logs_a_wandb_run_per_job_grouped_by_its_sweep(finetune_data: Path, tmp_path: Path) -> None:
    """Each job of a sweep its own W&B run, grouped by the sweep; its config records the encoder it fine-tuned."""
    save_dir, sweep = tmp_path / "wandb", tmp_path / "sweep-lr"
    done = subprocess.run(
        [sys.executable, "-m", "bertlab.finetune", "-m", "profile=smoke", f"data_dir={finetune_data}",
         f"out_dir={tmp_path}", "finetune.encoder=tiny", "task=sst2", "seed=1,2", "name=sweep_seed${seed}",
         "finetune.max_train_examples=32", "finetune.max_eval_examples=32", "impl.threads=1", "logger=wandb",
         f"logger.save_dir={save_dir}", f"hydra.sweep.dir={sweep}"],
        capture_output=True, text=True, env=ENV, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "already in progress" not in done.stdout + done.stderr
    runs, models = {}, []
    for folder in sorted(save_dir.glob("wandb/offline-run-*")):
        [file] = folder.glob("run-*.wandb")
        [run] = [r.run for r in run_records(file) if r.WhichOneof("record_type") == "run"]
        config = {item.key: json.loads(item.value_json) for item in run.config.update}
        runs[run.run_id] = (run.run_group, run.display_name, config["seed"])
        models.append(config["model"])
    encoder = finetune_data / "pretrain/tiny/tiny-1"  # the model each job ran, not the composed default's block
    assert models == [{**json.loads((encoder / "config.json").read_text()), "pretrained": str(encoder)}] * 2
    assert len(runs) == 2 and all(folder.name.endswith(i) for folder, i in
                                  zip(sorted(save_dir.glob("wandb/offline-run-*")), runs, strict=True))
    assert sorted(runs.values()) == [("finetune-sweep-lr", "sweep_seed1", 1), ("finetune-sweep-lr", "sweep_seed2", 2)]
    for seed in (1, 2):  # each job's own curve and metrics, beside its run
        assert json.loads((tmp_path / f"finetune/tiny/sweep_seed{seed}/metrics.json").read_text())["seed"] == seed

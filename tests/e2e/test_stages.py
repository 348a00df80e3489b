"""The stages as users run them (`python -m bertlab.<stage> ...`), on the synthetic mirror, in a temp data dir
(pretrain: test_pretrain.py; bad inputs: test_bad_inputs.py)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml
from tokenizers import Tokenizer

from bertlab.runs import pretrain_dir
from bertlab.stage import process_age
from tests.helpers import ENV, REPO, TINY, cell_dir, stage
from tests.report_data import write_data


def test_download_writes_corpus_tasks_and_marks_missing_ones(prepared: Path) -> None:
    manifest = json.loads((prepared / "download/manifest.json").read_text())
    assert manifest["corpus"]["documents"] == 44
    assert manifest["tasks"]["sst2"] == {"status": "ok", "rows": {"train": 64, "validation": 32}}
    assert manifest["tasks"]["mnli"]["status"] == "no data"
    assert "nyu-mll/glue/mnli/train is not in the mirror" in manifest["tasks"]["mnli"]["reason"]
    assert (prepared / "download/tasks/mrpc/validation").is_dir()
    assert (prepared / "download/tasks/mnli/NO_DATA").read_text().startswith("nyu-mll/glue/mnli/train is not in")


def test_download_without_mirror_or_network_fails_fast_in_one_line(tmp_path: Path) -> None:
    start = time.perf_counter()
    done = stage("download", tmp_path)
    assert done.returncode != 0 and time.perf_counter() - start < 60
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "BERTLAB_DATA_MIRROR" in lines[0]
    assert not (tmp_path / "download").exists() and not list(tmp_path.glob("download*"))


def test_tokenizer_has_bert_special_tokens_first(prepared: Path) -> None:
    tok = Tokenizer.from_file(str(prepared / "tokenizer/tokenizer.json"))
    assert [tok.id_to_token(i) for i in range(5)] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert tok.get_vocab_size() <= 300
    assert tok.encode("the cat", "sat").tokens == ["[CLS]", "the", "cat", "[SEP]", "sat", "[SEP]"]


def test_pretrain_data_stats(prepared: Path) -> None:
    stats = json.loads((prepared / "pretrain_data/stats.json").read_text())
    assert stats["documents"] == {"train": 36, "heldout": 8, "from_task_text": 0}
    assert stats["instances"]["heldout_nsp"] == stats["instances"]["heldout_packed"] == 16  # as asked
    assert 0.3 < stats["nsp"]["not_next_ratio_multi_sentence_chunks"] < 0.7
    assert stats["heldout_unigram_ppl"]["nsp"] > 1


def test_a_missing_input_names_the_stage_to_run(tmp_path: Path) -> None:
    done = stage("pretrain", tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip() == f"error: {tmp_path}/tokenizer/tokenizer.json not found: " \
                                  "run `dvc repro tokenizer` (or `python -m bertlab.tokenizer`) first"


def test_a_stage_process_records_its_start_up_and_total_time(tmp_path: Path, mirror: Path) -> None:
    """Real stage processes: a completed one leaves its times (start-up: at least the interpreter and imports), a
    refused one leaves none."""
    assert 0 < process_age() < 24 * 3600
    run = [sys.executable, "-m", "bertlab.download", f"data_dir={tmp_path}", f"mirror={mirror}", "logger=none"]
    assert subprocess.run(run, capture_output=True, text=True).returncode == 0
    record = json.loads((tmp_path / "timing" / "download" / "download.json").read_text())
    assert 0.3 < record["startup_seconds"] < record["process_seconds"] < 300
    refused = subprocess.run([sys.executable, "-m", "bertlab.tokenizer", f"data_dir={tmp_path}", "logger=none",
                              "tokenizer.kind=nope"], capture_output=True, text=True)
    assert refused.returncode == 2 and not (tmp_path / "timing" / "tokenizer").exists()


def test_missing_task_data_is_a_no_data_record_and_exit_0(finetune_data: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "bertlab.finetune", "profile=smoke", "logger=none", f"data_dir={finetune_data}",
         "out_dir=${data_dir}",
         "task=mnli", "name=nodata", "finetune.encoder=missing"],
        capture_output=True, text=True, env=ENV, cwd=finetune_data,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "mnli: no data (nyu-mll/glue/mnli/train is not in the mirror)"
    record = json.loads((cell_dir(finetune_data, "nodata") / "metrics.json").read_text())
    assert record["status"] == "no data" and record["headline"] is None and record["task"] == "mnli"
    assert record["reason"] == "nyu-mll/glue/mnli/train is not in the mirror"
    assert record["floor"] is None and not (cell_dir(finetune_data, "nodata") / "items.json").exists()



# `python -c LOADED <module> <overrides>`: the stage as `python -m` runs it, printing at exit whether Lightning came in
LOADED = ("import atexit, runpy, sys\n"
          "atexit.register(lambda: print('lightning imported:', 'lightning' in sys.modules))\n"
          "runpy.run_module(sys.argv.pop(1), run_name='__main__', alter_sys=True)\n")


def lightning_imported(module: str, data_dir: Path, *overrides: str) -> bool:
    done = subprocess.run([sys.executable, "-c", LOADED, module, f"data_dir={data_dir}", *overrides],
                          capture_output=True, text=True, env=ENV, cwd=data_dir, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return {"lightning imported: True": True, "lightning imported: False": False}[done.stdout.splitlines()[-1]]


def test_a_run_that_trains_nothing_starts_without_lightning(prepared: Path, tmp_path: Path) -> None:
    """A pretraining run or fine-tuning cell finished already, a run its profile leaves out and a cell without data
    decide so before importing Lightning and the model (~4 s of each stage process, ~80 cells a study); only a run
    that trains imports them."""
    prepared = Path(shutil.copytree(prepared, tmp_path / "data"))  # its runs stay out of the module's data dir
    run = [*TINY, "name=twice", "pretrain.max_steps=2"]
    assert lightning_imported("bertlab.pretrain", prepared, *run)
    assert not lightning_imported("bertlab.pretrain", prepared, *run)  # finished: nothing to do
    assert json.loads((pretrain_dir(prepared, "twice", 1) / "metrics.json").read_text())["steps"] == 2
    assert not lightning_imported("bertlab.pretrain", prepared, *run, "name=out", "not_run=left out")
    assert json.loads((pretrain_dir(prepared, "out", 1) / "metrics.json").read_text())["status"] == "not run"
    cell = [*TINY, "task=sst2", "name=twice", "finetune.encoder=twice", "finetune.max_train_examples=32"]
    assert lightning_imported("bertlab.finetune", prepared, *cell)
    assert not lightning_imported("bertlab.finetune", prepared, *cell)  # finished: nothing to do
    assert json.loads((prepared / "finetune/twice/twice/metrics.json").read_text())["status"] == "ok"  # <encoder>/<cell>
    assert not lightning_imported("bertlab.finetune", prepared, *cell, "task=mnli", "name=none")  # no data
    assert json.loads((prepared / "finetune/twice/none/metrics.json").read_text())["status"] == "no data"

def test_cli_names_the_hydra_profile(tmp_path: Path) -> None:
    write_data(tmp_path / "data")
    env = os.environ | {"WANDB_MODE": "offline", "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    subprocess.run(
        [sys.executable, "-m", "bertlab.ablations", "profile=smoke", f"data_dir={tmp_path / 'data'}",
         f"ablations.report_dir={tmp_path / 'reports'}", "logger=none", f"hydra.run.dir={tmp_path / 'hydra'}",
         "ablations.bootstrap.draws=200"],
        check=True, env=env, capture_output=True,
    )
    assert "- Profile: `smoke`;" in (tmp_path / "reports" / "ablations.md").read_text()


def test_the_report_by_hand_writes_under_data_hand_and_leaves_the_committed_reports_as_they_are(
        tmp_path: Path) -> None:
    """`python -m bertlab.ablations` by hand, in a copy of the repository's committed `reports/` beside `data/`,
    rewrote that `reports/`; now it writes `data/hand/reports/`, or the folder an override names."""
    def hashes(folder: Path) -> dict[str, str]:
        return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.rglob("*")
                if p.is_file()}

    shutil.copytree(REPO / "reports", tmp_path / "reports")
    write_data(tmp_path / "data")
    committed = hashes(tmp_path / "reports")
    by_hand = [sys.executable, "-m", "bertlab.ablations", "profile=smoke", "logger=none",
               "ablations.bootstrap.draws=200"]
    done = subprocess.run(by_hand, env=ENV, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert hashes(tmp_path / "reports") == committed and len(committed) > 100
    report = (tmp_path / "data/hand/reports/ablations.md").read_text()
    # Table 5's MRPC of `bert` at the study's seeds (1, 2): the data's seed-3 run is not in the grid, so not read
    assert "- Profile: `smoke`;" in report and "81.0 ± 1.4 (2 seeds)" in report
    assert "report -> data/hand/reports/ablations.md" in done.stdout
    told = subprocess.run([*by_hand, "ablations.report_dir=mine"], env=ENV, cwd=tmp_path, capture_output=True,
                          text=True, timeout=600)
    assert told.returncode == 0, told.stderr[-3000:]
    assert (tmp_path / "mine/ablations.md").read_text() == report and hashes(tmp_path / "reports") == committed


def test_the_configs_stage_imports_a_light_report_module() -> None:
    code = "import sys; import bertlab.report; print(sorted({'matplotlib', 'numpy', 'torch'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "[]"


def assert_quiet(done: subprocess.CompletedProcess) -> None:
    """A training stage's output in a log: no third-party notice a process would repeat, no progress bar redraws
    (a short run logs no progress line either), its own one result line."""
    out = done.stdout + done.stderr
    assert not [n for n in ("`Trainer.fit` stopped", "Tip:", "GPU available", "LeafSpec", "steps:") if n in out], out
    assert len(out.splitlines()) <= 4, out


def test_runs_by_hand_write_under_out_dir_and_never_over_the_pipelines(prepared: Path, tmp_path: Path) -> None:
    """A pretraining run by hand (the README's sweep) writes `<data_dir>/hand/`, at params.yaml's profile (in the
    working directory), and leaves every pipeline output as it was; a fine-tune by hand finds that encoder there."""
    def files() -> dict[str, int]:
        return {str(p.relative_to(prepared)): p.stat().st_mtime_ns for p in prepared.rglob("*")
                if p.is_file() and p.relative_to(prepared).parts[0] not in ("hand", "hydra", "wandb")}

    before = files()
    (tmp_path / "params.yaml").write_text("profile: smoke\n")
    by_hand = [a for a in TINY if not a.startswith(("out_dir=", "profile="))]
    done = subprocess.run([sys.executable, "-m", "bertlab.pretrain", f"data_dir={prepared}", *by_hand, "name=byhand"],
                          capture_output=True, text=True, env=ENV, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "profile=smoke (params.yaml's" in done.stdout  # a notice: stdout (stderr is a refusal's)
    assert_quiet(done)
    record = json.loads((pretrain_dir(prepared / "hand", "byhand", 1) / "metrics.json").read_text())
    assert record["steps"] == 4 and (prepared / "hand/timing/pretrain/byhand-1.json").exists()
    assert files() == before and not (prepared / "pretrain" / "byhand").exists()
    (config,) = (prepared / "hydra/pretrain").glob("*/.hydra/config.yaml")
    assert yaml.safe_load(config.read_text())["profile_name"] == "smoke"


def test_a_finetune_by_hand_reads_the_pipelines_encoder_and_writes_under_out_dir(finetune_data: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bertlab.finetune", "profile=smoke", "logger=none", f"data_dir={finetune_data}",
         "task=sst2", "name=byhand", "finetune.encoder=tiny", "finetune.max_train_examples=32"],
        capture_output=True, text=True, env=ENV, cwd=finetune_data, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert_quiet(done)
    record = json.loads((finetune_data / "hand/finetune/tiny/byhand/metrics.json").read_text())  # <encoder>/<cell>
    assert record["status"] == "ok" and record["encoder"] == "tiny" and record["train_examples"] == 32
    assert not cell_dir(finetune_data, "byhand").exists()

"""A catalogue of bad inputs, as a user would type them: each stops with one line naming the setting or file,
exit status 2, in seconds, and leaves every earlier output in `data/` as it was."""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from bertlab.runs import pretrain_dir
from tests.helpers import REPO, TINY, document, stage, write_split

# (case id, stage, overrides, what the one line must name)
SETTINGS_CASES = [
    ("lr-not-a-number", "pretrain", ["pretrain.lr=abc"], "pretrain.lr='abc'"),
    ("lr-negative", "pretrain", ["pretrain.lr=-1e-3"], "pretrain.lr=-0.001"),
    ("batch-zero", "pretrain", ["pretrain.batch_size=0"], "pretrain.batch_size=0"),
    ("steps-negative", "pretrain", ["pretrain.max_steps=-5"], "pretrain.max_steps=-5"),
    ("dropout-above-one", "pretrain", ["pretrain.dropout=1.5"], "pretrain.dropout=1.5"),
    ("mask-rate-zero", "pretrain", ["objective.mlm_probability=0"], "objective.mlm_probability=0"),
    ("heads-do-not-divide", "pretrain", ["model.num_heads=3"], "model.num_heads=3"),
    ("layers-zero", "pretrain", ["model.num_layers=0"], "model.num_layers=0"),
    ("name-dotdot", "pretrain", ["name=.."], "name='..'"),
    ("name-empty", "pretrain", ["name="], "name=''"),
    ("name-with-slash", "finetune", ["name=a/b"], "name='a/b'"),
    ("name-dot", "finetune", ["name=."], "name='.'"),
    ("seed-negative", "finetune", ["seed=-1"], "seed=-1"),
    ("max-seq-length-zero", "finetune", ["finetune.max_seq_length=0"], "finetune.max_seq_length=0"),
    ("epochs-zero", "finetune", ["finetune.epochs=0"], "finetune.epochs=0"),
    ("finetune-lr-text", "finetune", ["finetune.lr=fast"], "finetune.lr='fast'"),
    ("warmup-ratio-two", "finetune", ["finetune.warmup_ratio=2"], "finetune.warmup_ratio=2"),
    ("batch-size-text", "finetune", ["finetune.batch_size=abc"], "finetune.batch_size='abc'"),
    ("unknown-mode", "finetune", ["finetune.mode=frozen"], "finetune.mode='frozen'"),
    ("unknown-encoder", "finetune", ["finetune.encoder=nosuch"], "/pretrain/nosuch/nosuch-1; pretrain it first"),
    ("threads-zero", "pretrain", ["impl.threads=0"], "impl.threads=0"),
    ("vocab-three", "tokenizer", ["tokenizer.vocab_size=3"], "tokenizer.vocab_size=3"),
    ("vocab-below-alphabet", "tokenizer", ["tokenizer.vocab_size=20"], "tokenizer.vocab_size=20"),
    ("unknown-tokenizer-kind", "tokenizer", ["tokenizer.kind=sentencepiece"], "tokenizer.kind='sentencepiece'"),
    ("heldout-documents-zero", "pretrain_data", ["corpus.heldout_documents=0"], "corpus.heldout_documents=0"),
    ("seq-length-four", "pretrain_data", ["pretrain_data.max_seq_length=4"], "pretrain_data.max_seq_length=4"),
    ("mirror-missing", "download", ["mirror=/nonexistent/mirror"], "/nonexistent/mirror"),
    # issue 29: accepted silently before
    ("appended-typo", "pretrain", ["+pretrain.lrr=0.5"], "+pretrain.lrr=0.5: there is no setting pretrain.lrr"),
    ("force-appended-typo", "finetune", ["++finetune.lrr=0.1"], "there is no setting finetune.lrr"),
    ("encoder-outside-the-project", "finetune", ["finetune.encoder=../../../../other/data/pretrain/bert"],
     "finetune.encoder='../../../../other/data/pretrain/bert'"),
    ("task-name-a-path", "finetune", ["task.name=../sst2"], "task.name='../sst2'"),
    ("warmup-beyond-the-steps", "pretrain", ["pretrain.max_steps=10", "pretrain.warmup_steps=20"],
     "pretrain.warmup_steps=20 exceeds pretrain.max_steps=10"),
    ("heldout-mask-rate-zero", "pretrain", ["objective.heldout_mlm_probability=0"],
     "objective.heldout_mlm_probability=0"),
    ("probe-of-a-learned-mix", "finetune", ["finetune.mode=probe", "finetune.features=sum_all"],
     "finetune.features=sum_all: a probe reads fixed features"),
    ("probe-grid-empty", "finetune", ["finetune.mode=probe", "finetune.probe_cs=[]"], "finetune.probe_cs=[]"),
]


def snapshot(data: Path) -> dict[str, tuple[int, int]]:
    """Every file under `data` (but Hydra's own run logs, and the claims a run holds while it runs, `bertlab.owner`:
    locks naming their last owner, not outputs) with its size and modification time."""
    return {str(p.relative_to(data)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(data.rglob("*")) if p.is_file() and p.relative_to(data).parts[0] != "hydra"
            and p.suffix != ".owner"}


def run_in_process(name: str, data: Path, overrides: list[str], mirror: Path | None) -> tuple[int, str]:
    """`python -m bertlab.<name> ...` in this process (imports paid once): its exit status and stderr."""
    module = importlib.import_module(f"bertlab.{name}")
    argv = [name, f"data_dir={data}", *TINY, f"mirror={mirror}" if mirror else "mirror=null", *overrides]
    err = io.StringIO()
    old, sys.argv = sys.argv, argv
    code: int | str | None = 0
    try:
        with contextlib.redirect_stderr(err):
            module.run()
    except SystemExit as exit_:
        code = exit_.code
    finally:
        sys.argv = old
    return int(code or 0) if not isinstance(code, str) else 1, err.getvalue()


@pytest.fixture(scope="module")
def data(mirror: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data dir with every upstream output and a pretrained encoder, as `dvc repro` would leave it."""
    data = tmp_path_factory.mktemp("data")
    for name, extra in (("download", ()), ("tokenizer", ()), ("pretrain_data", ()),
                        ("pretrain", ("name=bert", "pretrain.max_steps=2"))):
        done = stage(name, data, *extra, mirror=mirror)
        assert done.returncode == 0, done.stderr[-3000:]
    return data


def expect_one_line_error(run: Callable[[], tuple[int, str]], data: Path, names: str) -> str:
    before = snapshot(data)
    start = time.perf_counter()
    code, stderr = run()
    assert time.perf_counter() - start < 30
    lines = [line for line in stderr.splitlines() if line.strip()]  # progress bars may come first
    errors = [line for line in lines if line.startswith("error: ")]
    assert code == 2 and errors == lines[-1:] and "Traceback" not in stderr, f"exit {code}:\n{stderr[-3000:]}"
    assert names in errors[0], errors[0]
    assert snapshot(data) == before, "a bad input changed data/"
    assert not list(data.rglob(".partial")), "debris left behind"
    return errors[0]


@pytest.mark.parametrize("case, name, overrides, names", SETTINGS_CASES, ids=[c[0] for c in SETTINGS_CASES])
def test_a_bad_setting_stops_at_the_door(case: str, name: str, overrides: list[str], names: str, data: Path,
                                         mirror: Path) -> None:
    expect_one_line_error(lambda: run_in_process(name, data, overrides, mirror), data, names)


def test_a_truncated_parquet_shard_is_named(data: Path, mirror: Path, tmp_path: Path) -> None:
    broken = tmp_path / "mirror"
    shutil.copytree(mirror, broken)
    shard = next((broken / "nyu-mll/glue/sst2").glob("validation-*.parquet"))
    shard.write_bytes(shard.read_bytes()[:200])
    expect_one_line_error(lambda: run_in_process("download", data, [], broken), data, str(shard))


def test_an_all_blank_corpus_is_refused(data: Path, mirror: Path, tmp_path: Path) -> None:
    blank = tmp_path / "mirror"
    shutil.copytree(mirror, blank)
    for hub_id, cols in (("bertlab/wiki-text", {"id": ["0", "1"]}), ("bertlab/gutenberg-books", {"title": ["a", "b"]})):
        for f in (blank / hub_id / "default").glob("*.parquet"):
            f.unlink()
        write_split(blank, hub_id, "default", "train", {**cols, "text": ["   ", "\n\n"]})
    expect_one_line_error(lambda: run_in_process("download", data, [], blank), data, "no non-blank document")


def test_one_sentence_documents_are_refused_for_next_sentence_pairs(mirror: Path, tmp_path: Path) -> None:
    import random

    rng = random.Random(1)
    single = tmp_path / "mirror"
    shutil.copytree(mirror, single)
    for hub_id, cols in (("bertlab/wiki-text", {"id": [str(i) for i in range(30)]}),
                         ("bertlab/gutenberg-books", {"title": [str(i) for i in range(30)]})):
        for f in (single / hub_id / "default").glob("*.parquet"):
            f.unlink()
        write_split(single, hub_id, "default", "train", {**cols, "text": [document(rng, 1) for _ in range(30)]})
    data = tmp_path / "data"
    for name in ("download", "tokenizer"):
        assert stage(name, data, mirror=single).returncode == 0
    expect_one_line_error(lambda: run_in_process("pretrain_data", data, [], single), data, "two or more sentences")


def test_an_unwritable_output_directory_is_refused_before_training(data: Path, mirror: Path, tmp_path: Path) -> None:
    blocked = tmp_path / "data"
    shutil.copytree(data, blocked)
    shutil.rmtree(blocked / "pretrain")
    (blocked / "pretrain").write_text("not a directory")
    expect_one_line_error(lambda: run_in_process("pretrain", blocked, ["name=other"], mirror), blocked,
                          f"{blocked}/pretrain")


@pytest.mark.parametrize("tokenizer", ["smaller", "larger"])
def test_a_tokenizer_other_than_the_encoders_is_refused(tokenizer: str, data: Path, mirror: Path,
                                                         tmp_path: Path) -> None:
    """The encoder `bert` was pretrained with data/tokenizer; `small` with one of 10 fewer tokens."""
    from tokenizers import Tokenizer

    other = tmp_path / "data"
    shutil.copytree(data, other)
    original = (other / "tokenizer/tokenizer.json").read_bytes()
    size = Tokenizer.from_file(str(other / "tokenizer/tokenizer.json")).get_vocab_size()
    assert stage("tokenizer", other, f"tokenizer.vocab_size={size - 10}", mirror=mirror).returncode == 0
    encoder = "bert"
    if tokenizer == "larger":
        for name, extra in (("pretrain_data", ()), ("pretrain", ("name=small", "pretrain.max_steps=1"))):
            assert stage(name, other, *extra, mirror=mirror).returncode == 0
        (other / "tokenizer/tokenizer.json").write_bytes(original)
        encoder = "small"
    expect_one_line_error(lambda: run_in_process("finetune", other, [f"finetune.encoder={encoder}"], mirror), other,
                          "vocab_size")


def test_a_bad_run_name_is_refused_as_a_real_command_and_deletes_nothing(data: Path, mirror: Path) -> None:
    before = snapshot(data)
    for name in ("..", ""):
        done = stage("finetune", data, f"name={name}", "finetune.encoder=bert", mirror=mirror)
        assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr[-2000:]
        assert f"name={name!r}" in done.stderr
    assert snapshot(data) == before and (pretrain_dir(data, "bert", 1) / "model.pt").exists()


def configs_with(tmp_path: Path, edit: Callable[[dict], None]) -> subprocess.CompletedProcess:
    """`python -m bertlab.configs` on a copy of the code and conf/ whose declaration (conf/ablations) `edit` changed,
    the repository's params.yaml, in `tmp_path`."""
    import yaml

    for part in ("src", "conf"):
        shutil.copytree(REPO / part, tmp_path / part, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    declaration = tmp_path / "conf/ablations/default.yaml"
    study = yaml.safe_load(declaration.read_text())
    edit(study)
    declaration.write_text(yaml.safe_dump(study, sort_keys=False))
    shutil.copy(REPO / "params.yaml", tmp_path / "params.yaml")
    return subprocess.run([sys.executable, "-m", "bertlab.configs"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(tmp_path / "src")})


@pytest.mark.parametrize(("edit", "message"), [
    (lambda s: s["encoders"]["bert"].append("pretrain.lr=abc"),
     "pretrain run 'bert-1': pretrain.lr='abc': expected a number"),
    (lambda s: s["encoders"]["bert"].append("+pretrain.lrr=0.5"),
     "pretrain run 'bert-1': +pretrain.lrr=0.5: there is no setting pretrain.lrr"),
    (lambda s: s["tables"]["table5"]["rows"].update({"bert-bilstmx": {}}),
     "ablations.tables.table5.rows: 'bert-bilstmx' is not <encoder>-<mode> of ablations.modes"),
])
def test_the_configs_stage_checks_the_study_and_every_run_before_the_pipeline_starts(
        tmp_path: Path, edit: Callable[[dict], None], message: str) -> None:
    done = configs_with(tmp_path, edit)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"error: {message}"), done.stderr[-3000:]
    assert not (tmp_path / "data").exists() or not list((tmp_path / "data").rglob("*.yaml"))


# ------------------------------------------------------------------ issue 29: inputs checked where they enter


def broken_task(mirror: Path, tmp_path: Path, rows: dict[str, list], schema=None) -> Path:
    """A copy of the mirror whose SST-2 validation split is `rows` (its one file: the one an error must name)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    broken = tmp_path / "mirror"
    shutil.copytree(mirror, broken)
    (shard,) = (broken / "nyu-mll/glue/sst2").glob("validation-*.parquet")
    pq.write_table(pa.table(rows, schema=schema), shard)
    return shard


TASK_FILE_CASES = [
    ("wrong-columns", {"text": ["good"], "label": [1]}, "has no column 'sentence'"),
    ("label-out-of-range", {"sentence": ["good", "bad"], "label": [1, 7]}, "holds the label 7, outside 0 .. 1"),
    ("labels-as-text", {"sentence": ["good"], "label": ["positive"]}, "column 'label' is string"),
    ("non-utf8-text", {"sentence": ["caf\xe9".encode("latin-1")], "label": [1]}, "column 'sentence' is binary"),
    ("no-rows", {"sentence": [], "label": []}, "has no rows"),
]


@pytest.mark.parametrize("case, rows, names", TASK_FILE_CASES, ids=[c[0] for c in TASK_FILE_CASES])
def test_a_bad_task_file_is_refused_at_download_naming_it(case: str, rows: dict, names: str, data: Path,
                                                           mirror: Path, tmp_path: Path) -> None:
    """Each was accepted by `download` and failed later, inside fine-tuning (`IndexError: Target 7 is out of bounds`),
    or was reported as unreadable."""
    import pyarrow as pa

    schema = pa.schema([("sentence", pa.string()), ("label", pa.int64())]) if case == "no-rows" else None
    shard = broken_task(mirror, tmp_path, rows, schema)
    line = expect_one_line_error(lambda: run_in_process("download", data, [], shard.parents[3]), data, str(shard))
    assert names in line


def test_text_that_is_not_utf8_in_a_string_column_is_refused(data: Path, mirror: Path, tmp_path: Path) -> None:
    import pyarrow as pa

    bad = pa.Array.from_buffers(pa.string(), 1, [None, pa.py_buffer(b"\x00\x00\x00\x00\x02\x00\x00\x00"),
                                                 pa.py_buffer(b"\xff\xfe")])
    shard = broken_task(mirror, tmp_path, {"sentence": pa.chunked_array([bad]), "label": [1]})
    expect_one_line_error(lambda: run_in_process("download", data, [], shard.parents[3]), data, str(shard))


def test_an_overlong_single_line_document_is_warned_about_in_one_line(mirror: Path, tmp_path: Path) -> None:
    from tests.helpers import document

    import random

    long = tmp_path / "mirror"
    shutil.copytree(mirror, long)
    (shard,) = (long / "bertlab/wiki-text/default").glob("*.parquet")
    rows = datasets_rows(shard)
    rows["text"][3] = document(random.Random(3), 3000)  # one line of ~140k characters
    write_split(long, "bertlab/wiki-text", "default", "train", rows)
    done = stage("download", tmp_path / "data", mirror=long)
    assert done.returncode == 0, done.stderr[-2000:]
    warnings = [line for line in (done.stdout + done.stderr).splitlines() if "hold a line of over" in line]
    assert len(warnings) == 1 and "1 corpus document(s)" in warnings[0] and "bertlab/wiki-text" in warnings[0]
    quiet = stage("download", tmp_path / "quiet", mirror=mirror)
    assert "hold a line of over" not in quiet.stdout + quiet.stderr


def datasets_rows(shard: Path) -> dict[str, list]:
    import pyarrow.parquet as pq

    return pq.read_table(shard).to_pydict()


@pytest.mark.parametrize("case", ["garbage", "truncated"])
@pytest.mark.parametrize("name", ["pretrain_data", "pretrain", "finetune"])
def test_a_bad_tokenizer_file_is_named(case: str, name: str, data: Path, mirror: Path, tmp_path: Path) -> None:
    bad = tmp_path / "data"
    shutil.copytree(data, bad)
    path = bad / "tokenizer/tokenizer.json"
    path.write_bytes(b"\x00 not json" if case == "garbage" else path.read_bytes()[:500])
    expect_one_line_error(lambda: run_in_process(name, bad, ["name=other"] if name == "pretrain" else [], mirror),
                          bad, f"{path} is not a readable tokenizer")


def damage_weights(model: Path, case: str) -> None:
    """`model` (an encoder's model.pt) truncated, garbage, of another model size or deleted."""
    import torch

    if case == "model-truncated":
        model.write_bytes(model.read_bytes()[:2000])
    elif case == "model-garbage":
        model.write_bytes(b"\x80\x04 garbage")
    elif case == "model-of-another-size":  # embeddings twice as wide: what config.json says no longer fits
        state = torch.load(model, weights_only=True)
        weight = state["encoder.embeddings.word_embeddings.weight"]
        state["encoder.embeddings.word_embeddings.weight"] = torch.cat([weight, weight], dim=-1)
        torch.save(state, model)
    else:
        model.unlink()


@pytest.mark.parametrize("recorded", [True, False], ids=["recorded", "unrecorded"])
@pytest.mark.parametrize("case, names", [
    ("model-truncated", "model.pt is not a readable state dict"),
    ("model-garbage", "model.pt is not a readable state dict"),
    ("model-of-another-size", "encoder.embeddings.word_embeddings.weight has shape"),
    ("model-deleted", "model.pt"),
    ("config-garbage", "config.json is not a model config"),
    ("config-not-a-config", "config.json is not a model config"),
])
def test_a_bad_encoder_file_is_named(case: str, names: str, recorded: bool, data: Path, mirror: Path,
                                     tmp_path: Path) -> None:
    """Weights the pretraining run recorded (their sha256 in its metrics.json) are named as not its own before they
    load; an encoder whose record has no digests (an older bertlab's) as they load."""
    bad = tmp_path / "data"
    shutil.copytree(data, bad)
    encoder = pretrain_dir(bad, "bert", 1)
    model, config = encoder / "model.pt", encoder / "config.json"
    if not recorded:
        record = json.loads((encoder / "metrics.json").read_text())
        (encoder / "metrics.json").write_text(json.dumps({k: v for k, v in record.items() if k != "files"}))
    if case.startswith("model"):
        damage_weights(model, case)
        if recorded:
            names = f"{model} is missing" if case == "model-deleted" else f"{model} is not the file its run wrote"
    elif case == "config-garbage":
        config.write_text('{"vocab_size": 300, "num_la')
    else:
        config.write_text('{"vocab_size": 300, "colour": "red"}')
    line = expect_one_line_error(lambda: run_in_process("finetune", bad, ["finetune.encoder=bert"], mirror), bad,
                                 names)
    if case == "model-of-another-size" and not recorded:
        vocab = json.loads(config.read_text())["vocab_size"]
        assert str(model) in line and str(config) in line and f"({vocab}, 64)" in line and f"({vocab}, 32)" in line


@pytest.fixture(scope="module")
def finished(data: Path, mirror: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`data` with a finished fine-tuning cell on the encoder `bert`, run as a user runs it."""
    finished = tmp_path_factory.mktemp("finished") / "data"
    shutil.copytree(data, finished)
    done = stage("finetune", finished, "finetune.encoder=bert", mirror=mirror)
    assert done.returncode == 0, done.stderr[-3000:]
    return finished


@pytest.mark.parametrize("case", ["model-truncated", "model-garbage", "model-of-another-size", "model-deleted"])
def test_a_finished_cell_on_damaged_weights_stops_in_one_line_naming_them(case: str, finished: Path, mirror: Path,
                                                                        tmp_path: Path) -> None:
    """It exited 0 with "... is finished with this code, these settings and inputs: nothing to do": the cell's key
    held its encoder's run key and config, never its weights. The weights put back, it is finished again."""
    bad = tmp_path / "data"
    shutil.copytree(finished, bad)
    model = pretrain_dir(bad, "bert", 1) / "model.pt"
    weights = model.read_bytes()
    damage_weights(model, case)
    said = f"{model} is missing" if case == "model-deleted" else f"{model} is not the file its run wrote"
    line = expect_one_line_error(lambda: run_in_process("finetune", bad, ["finetune.encoder=bert"], mirror), bad,
                                 said)
    assert "nothing to do" not in line and "python -m bertlab.pretrain name=bert seed=1" in line
    model.write_bytes(weights)
    again = stage("finetune", bad, "finetune.encoder=bert", mirror=mirror)
    assert again.returncode == 0 and "nothing to do" in again.stdout, again.stderr[-3000:]


@pytest.mark.parametrize("case", ["missing", "garbage"])
def test_the_exports_load_functions_name_what_is_wrong(case: str, tmp_path: Path) -> None:
    from bertlab.modeling.export import load_hf, load_plain
    from bertlab.errors import UserError

    if case == "garbage":
        for name in ("config.json", "model.pt", "model.safetensors"):
            (tmp_path / name).write_bytes(b"\xff garbage")
    for load in (load_plain, load_hf):
        with pytest.raises(UserError, match=str(tmp_path / "config.json")):
            load(tmp_path)
    (tmp_path / "config.json").write_text('{"vocab_size": 10, "num_layers": 1, "hidden_size": 8, "num_heads": 2}')
    with pytest.raises(UserError, match=str(tmp_path / "model.pt")):
        load_plain(tmp_path)


def test_a_read_only_checkpoint_folder_is_found_before_fine_tuning_starts(data: Path, mirror: Path,
                                                                         tmp_path: Path) -> None:
    blocked = tmp_path / "data"
    shutil.copytree(data, blocked)
    (blocked / "checkpoints").mkdir(exist_ok=True)
    (blocked / "checkpoints/finetune").write_text("not a directory")
    expect_one_line_error(lambda: run_in_process("finetune", blocked, ["finetune.encoder=bert"], mirror), blocked,
                          f"{blocked}/checkpoints/finetune")


def test_too_little_free_space_is_found_before_work_starts(data: Path, mirror: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    import collections

    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda _: usage(1 << 30, (1 << 30) - (5 << 20), 5 << 20))
    for name in ("tokenizer", "pretrain", "finetune"):
        expect_one_line_error(lambda: run_in_process(name, data, ["name=other"] if name == "pretrain" else [], mirror),
                              data, f"{data}: 5 MiB free on its device")


def test_a_full_disk_during_pretraining_is_one_line(data: Path, mirror: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The disk fills up while a checkpoint is written: one line naming the file (it was 2,032 lines of `--- Logging
    error ---` and a traceback), and the outputs as they were."""
    import errno

    from bertlab.training.callbacks import EpochEndCheckpoint

    def full(self, trainer, module) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(self.path))

    monkeypatch.setattr(EpochEndCheckpoint, "on_train_epoch_end", full)
    outputs = {p: p.read_bytes() for p in (data / "pretrain").rglob("*") if p.is_file()}
    code, stderr = run_in_process("pretrain", data, ["name=full", "impl.reuse_twins=false"], mirror)
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert code == 2 and "Traceback" not in stderr and "Logging error" not in stderr, stderr[-3000:]
    assert lines[-1].startswith("error: no space left on the device of ") and "last.ckpt" in lines[-1]
    assert {p: p.read_bytes() for p in (data / "pretrain").rglob("*") if p.is_file()} == outputs


@pytest.mark.parametrize("case", ["invalid-yaml", "empty", "no-corpus", "old-layout"])
def test_a_bad_params_yaml_is_one_line_naming_it(case: str, tmp_path: Path) -> None:
    import yaml

    params = yaml.safe_load((REPO / "params.yaml").read_text())
    path = tmp_path / "params.yaml"
    if case == "invalid-yaml":
        path.write_text("profile: cpu\npretrain:\n  bert: [objective=mlm_nsp\n")
    elif case == "empty":
        path.write_text("# nothing yet\n")
    elif case == "no-corpus":
        path.write_text(yaml.safe_dump({k: v for k, v in params.items() if k != "corpus"}))
    else:  # the encoders as params.yaml held them before the study had one declaration
        path.write_text(yaml.safe_dump(params | {"pretrain": {"bert": ["objective=mlm_nsp"]}}))
    (tmp_path / "data/configs").mkdir(parents=True)
    (tmp_path / "data/configs/earlier.yaml").write_text("an earlier output\n")
    done = subprocess.run([sys.executable, "-m", "bertlab.configs", str(path)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), done.stderr[-3000:]
    assert {"invalid-yaml": f"{path} is not valid YAML at line 4", "empty": f"{path} is empty",
            "no-corpus": f"{path} has no corpus",
            "old-layout": f"{path}: unknown key 'pretrain' (the study: conf/ablations/default.yaml)"}[case] in lines[0]
    assert [p.name for p in (tmp_path / "data/configs").iterdir()] == ["earlier.yaml"]

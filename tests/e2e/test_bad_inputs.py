"""A catalogue of bad inputs, as a user would type them: each stops with one line naming the setting or file,
exit status 2, in seconds, and leaves every earlier output in `data/` as it was."""

from __future__ import annotations

import contextlib
import importlib
import io
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

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
    ("unknown-encoder", "finetune", ["finetune.encoder=nosuch"], "encoder 'nosuch'"),
    ("threads-zero", "pretrain", ["impl.threads=0"], "impl.threads=0"),
    ("vocab-three", "tokenizer", ["tokenizer.vocab_size=3"], "tokenizer.vocab_size=3"),
    ("vocab-below-alphabet", "tokenizer", ["tokenizer.vocab_size=20"], "tokenizer.vocab_size=20"),
    ("unknown-tokenizer-kind", "tokenizer", ["tokenizer.kind=sentencepiece"], "tokenizer.kind='sentencepiece'"),
    ("heldout-documents-zero", "pretrain_data", ["corpus.heldout_documents=0"], "corpus.heldout_documents=0"),
    ("seq-length-four", "pretrain_data", ["pretrain_data.max_seq_length=4"], "pretrain_data.max_seq_length=4"),
    ("mirror-missing", "download", ["mirror=/nonexistent/mirror"], "/nonexistent/mirror"),
]


def snapshot(data: Path) -> dict[str, tuple[int, int]]:
    """Every file under `data` (but Hydra's own run logs) with its size and modification time."""
    return {str(p.relative_to(data)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(data.rglob("*")) if p.is_file() and p.relative_to(data).parts[0] != "hydra"}


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


def expect_one_line_error(run: Callable[[], tuple[int, str]], data: Path, names: str) -> None:
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
    assert snapshot(data) == before and (data / "pretrain/bert/model.pt").exists()


def test_the_configs_stage_checks_every_run_before_the_pipeline_starts(tmp_path: Path) -> None:
    import yaml

    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["pretrain"]["bert"] = [*params["pretrain"]["bert"], "pretrain.lr=abc"]
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    done = subprocess.run([sys.executable, "-m", "bertlab.configs", str(tmp_path / "params.yaml")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == ["error: pretrain run 'bert': pretrain.lr='abc': expected a number"]
    assert not (tmp_path / "data").exists() or not list((tmp_path / "data").rglob("*.yaml"))

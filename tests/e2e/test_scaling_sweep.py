"""End to end: the scaling sweep (`python -m bertlab.scaling`) at the smoke profile, two tiny budgets on each axis,
on the data dir the first stages prepared from the synthetic mirror (SST-2 and MRPC; CoNLL-2003, QNLI and SQuAD have
no data): every claim of the sweep's grid, its SST-2 and held-out perplexity claims measured."""

from __future__ import annotations

import csv
import json
import math
import os
import re
import shutil
from pathlib import Path

import pytest

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from bertlab.report.scaling import FIELDS
from bertlab.report.sweep import PRETRAIN_SEED
from bertlab.stage import CONF_DIR
from bertlab.runs import file_digest, pretrain_dir
from tests.helpers import stage

with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
    GRID = OmegaConf.to_container(compose("config", ["profile=smoke"]).scaling, resolve=True)
CLAIMS = tuple(c["id"] for c in GRID["claims"])
MEASURED = {c["id"] for c in GRID["claims"] if c["task"] in ("sst2", "ppl")}  # the synthetic mirror's
ENCODERS = {side[0] for c in GRID["claims"] if c["id"] in MEASURED for side in (c["a"], c["b"])}
VERDICTS = {"reproduced", "contradicted", "unresolved at this scale"}


@pytest.fixture(scope="module")
def sweep(prepared: Path, mirror: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """The whole smoke sweep, once: its work dir, its report dir and its output."""
    reports = tmp_path_factory.mktemp("reports")
    done = stage("scaling", prepared, f"scaling.report_dir={reports}", mirror=mirror, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    return prepared / "scaling", reports, done.stdout + done.stderr


def read_rows(reports: Path) -> list[dict[str, str]]:
    with (reports / "scaling.csv").open(newline="") as f:
        return list(csv.DictReader(f))


def test_the_sweep_writes_one_row_per_claim_and_budget_pair(sweep: tuple[Path, Path, str]) -> None:
    work, reports, _ = sweep
    rows = read_rows(reports)
    assert tuple(rows[0]) == FIELDS
    assert {(r["claim"], r["pretrain_steps"], r["examples"]) for r in rows} == {  # claims x pretraining x fine-tuning
        (c["id"], s, e) for c in GRID["claims"] for s in ("2", "4") for e in (("",) if c["task"] == "ppl" else ("32", "64"))}
    assert "held-out perplexity" in (work / "logs" / "pretrain-bert-4.log").read_text()  # two workers: logs there
    for r in rows:  # smoke: batches of 16 x 64 tokens (TINY: 8 x 64)
        assert int(r["tokens"]) == int(r["pretrain_steps"]) * 8 * 64
        assert float(r["heldout_ppl"]) > 0 and float(r["heldout_unigram_ppl"]) > 0
    sst2 = [r for r in rows if r["task"] == "sst2"]
    assert all(r["verdict"] in VERDICTS and r["n_items"] == "32" and r["seeds"] == "1/1" for r in sst2)
    ppl = [r for r in rows if r["task"] == "ppl"]  # the held-out instances, paired (seeds: one run a side)
    assert ppl and all(r["verdict"] in VERDICTS and r["n_items"] == "16" and r["seeds"] == "1/1" for r in ppl)
    assert all(math.isfinite(float(r[k])) for r in sst2 + ppl for k in ("estimate", "low", "high"))
    assert all(float(r["low"]) <= float(r["estimate"]) <= float(r["high"]) for r in sst2 + ppl)
    assert {(r["A"], r["B"]) for r in sst2 if r["pretrain_steps"] == "4" and r["claim"] == "pretraining_sst2"} == {
        ("bert-4 finetune", "scratch finetune")}
    others = [r for r in rows if r["claim"] not in MEASURED]  # the synthetic mirror has no CoNLL-2003, QNLI, SQuAD
    assert others and all(r["verdict"] == "not measured" and "no data" in r["reason"] and not r["estimate"]
                          for r in others)
    # the sweep's own runs, beside the pipeline's inputs (links), never in data/pretrain or data/finetune
    assert sorted(p.name for p in (work / "pretrain").iterdir()) == sorted(
        "scratch" if e == "scratch" else f"{e}-{s}" for e in ENCODERS for s in ("2", "4") if e != "scratch" or s == "2")
    assert (work / "finetune" / "bert-4" / "sst2-bert-4-finetune-64-1" / "items.json").exists()
    assert not list((work / "finetune").glob("*/conll2003-*")) and not list((work / "finetune").glob("*/qnli-*"))
    assert all((work / name).is_symlink() for name in ("download", "tokenizer", "pretrain_data"))
    assert not (work.parent / "pretrain").exists() and not (work.parent / "finetune").exists()


def test_the_report_has_a_figure_per_claim_and_a_table(sweep: tuple[Path, Path, str]) -> None:
    _, reports, _ = sweep
    for claim in CLAIMS:
        assert (reports / "scaling" / f"{claim}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = (reports / "scaling.md").read_text()
    assert "Profile `smoke`" in text and "| 4 steps, 2,048 tokens |" in text and "not measured: " in text
    assert "![pretraining_sst2](scaling/pretraining_sst2.png)" in text


def run_records(work: Path) -> dict[Path, int]:
    """Every run's metrics.json (an encoder's `pretrain/<encoder>/<encoder>-<seed>/`, a cell's
    `finetune/<encoder>/<cell>/`): its mtime."""
    return {p: p.stat().st_mtime_ns for p in [*work.glob("pretrain/*/*/metrics.json"),
                                               *work.glob("finetune/*/*/metrics.json")]}


def test_a_rerun_trains_nothing(sweep: tuple[Path, Path, str], prepared: Path, mirror: Path,
                                tmp_path: Path) -> None:
    """One budget of each axis again (4 runs, to keep it short), one at a time (their output here): every run finds
    itself finished."""
    work, _, _ = sweep
    outputs = run_records(work)
    cells = {(e, m) for c in GRID["claims"] if c["task"] == "sst2" for e, m in (c["a"], c["b"])}
    assert len(outputs) == (2 * len(ENCODERS) - 1) + (2 * len(cells) - 1) * 2  # encoders; SST-2 cells x 2 budgets
    done = stage("scaling", prepared, f"scaling.report_dir={tmp_path}", "scaling.pretrain_steps=[4]",
                 "scaling.finetune_budgets=[{examples: 64}]", "scaling.workers=1", mirror=mirror, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    assert run_records(work) == outputs
    # every encoder at 4 steps and scratch, their SST-2 cells at 64 examples
    assert (done.stdout + done.stderr).count("nothing to do") == len(ENCODERS) + len(cells)
    assert [(r["claim"], r["pretrain_steps"], r["examples"]) for r in read_rows(tmp_path)] == [
        (c["id"], "4", "" if c["task"] == "ppl" else "64") for c in GRID["claims"]]


def test_report_only_reports_the_finished_runs_and_starts_none(sweep: tuple[Path, Path, str], prepared: Path,
                                                                mirror: Path, tmp_path: Path) -> None:
    """A budget never run (8 steps) beside one run: its rows are "not measured", the run's as the sweep found them;
    with `logger=wandb`, one offline W&B run holds the rows as a table and the figures."""
    work, reports, _ = sweep
    before = sorted(p.name for p in work.glob("*/*") if p.is_dir())
    done = stage("scaling", prepared, f"scaling.report_dir={tmp_path}", "scaling.pretrain_steps=[4,8]",
                 "scaling.report_only=true", "logger=wandb", f"logger.save_dir={tmp_path / 'wandb'}", mirror=mirror,
                 timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(p.name for p in work.glob("*/*") if p.is_dir()) == before
    rows = read_rows(tmp_path)
    assert {r["verdict"] for r in rows if r["pretrain_steps"] == "8"} == {"not measured"}
    interim = r"\*\*An interim report: \d+ of the sweep's \d+ runs are finished"
    assert re.search(interim, (tmp_path / "scaling.md").read_text())
    assert "interim" not in (reports / "scaling.md").read_text()
    ran = {(r["claim"], r["examples"]): r for r in read_rows(reports) if r["pretrain_steps"] == "4"}
    assert {(r["claim"], r["examples"]): r for r in rows if r["pretrain_steps"] == "4"} == ran
    [media] = (tmp_path / "wandb").glob("wandb/offline-run-*/files/media")  # offline: no summary file, the media
    [table] = media.glob("table/scaling_*.table.json")
    logged = json.loads(table.read_text())
    assert logged["columns"] == list(FIELDS) and len(logged["data"]) == len(rows)
    assert {p.name.rsplit("_", 2)[0] for p in media.glob("images/scaling/*.png")} == set(CLAIMS)


def other_size_weights(path: Path) -> None:
    """A 2-layer, 16-wide encoder's weights saved as `path`."""
    import torch

    from bertlab.modeling.model import BertConfig, BertForPretraining

    config = BertConfig(vocab_size=300, num_layers=2, hidden_size=16, num_heads=2, intermediate_size=32)
    torch.save(BertForPretraining(config).state_dict(), path)


DAMAGES = {"truncated": lambda p: p.write_bytes(p.read_bytes()[:1000]),
           "random bytes": lambda p: p.write_bytes(os.urandom(p.stat().st_size)),
           "another size's": other_size_weights, "deleted": Path.unlink}


@pytest.mark.parametrize("damaged, threads", [({"bert-4": "truncated", "scratch": "deleted"}, ["impl.threads=1"]),
                                              ({"bert-4": "random bytes", "scratch": "another size's"}, [])],
                         ids=["a", "b"])
def test_an_encoder_whose_weights_are_not_its_own_trains_again(damaged: dict[str, str], threads: list[str],
                                                                sweep: tuple[Path, Path, str], prepared: Path,
                                                                mirror: Path, tmp_path: Path) -> None:
    """Its damaged, replaced or deleted model.pt was "finished: nothing to do", and so were the cells on it. Now the
    sweep names the file in one warning and pretrains the encoder again; a cell on it is reused only when the new
    weights are, byte for byte, the ones it was trained on. With one thread a run, as the two-worker sweep ran them,
    CPU training gives the same bytes; with two, the sums' order and the last bits of `bert-4` differ."""
    copy = tmp_path / "data"
    shutil.copytree(prepared, copy, symlinks=True)  # the sweep's links to the inputs are relative: kept in the copy
    work = copy / "scaling"
    models = {name: pretrain_dir(work, name, PRETRAIN_SEED) / "model.pt" for name in damaged}
    weights = {name: model.read_bytes() for name, model in models.items()}
    cells = {name: work / "finetune" / name / f"sst2-{name}-finetune-64-1" / "metrics.json" for name in damaged}
    written = {name: metrics.stat().st_mtime_ns for name, metrics in cells.items()}
    for name, how in damaged.items():
        DAMAGES[how](models[name])
    done = stage("scaling", copy, f"scaling.report_dir={tmp_path / 'reports'}", "scaling.pretrain_steps=[4]",
                 "scaling.finetune_budgets=[{examples: 64}]", "scaling.workers=1", *threads, mirror=mirror,
                 timeout=1800)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    same = {name: model.read_bytes() == weights[name] for name, model in models.items()}
    for name, how in damaged.items():
        model = models[name]
        said = f"{model} is missing" if how == "deleted" else f"{model} is not the file its run wrote"
        assert [line for line in output.splitlines() if "not reused" in line and f"/{name}/" in line] == [
            next(line for line in output.splitlines() if said in line)], output[-3000:]
        assert f"{model.parent} is finished" not in output
        record = json.loads((model.parent / "metrics.json").read_text())
        assert file_digest(model) == record["files"]["model.pt"]  # trained again, or copied from an intact twin:
        if "trained_as" in record:  # the tests' one tiny shape makes the depth study's encoders `bert`'s twins
            twins = [p for p in (work / "pretrain").glob("*/*/model.pt") if p != model]
            assert any(p.read_bytes() == model.read_bytes() for p in twins)
        cell = json.loads(cells[name].read_text())
        assert (cells[name].stat().st_mtime_ns == written[name]) == same[name] and "trained_as" not in cell
    # the damaged encoders' runs and their cells: "nothing to do" only for a cell whose encoder has its old bytes
    runs = [*(model.parent.name for model in models.values()), *(metrics.parent.name for metrics in cells.values())]
    finished = re.compile(rf"/(?:{'|'.join(map(re.escape, runs))}) is finished with .*: nothing to do")
    assert sum(bool(finished.search(line)) for line in output.splitlines()) == sum(same.values())
    assert same["scratch"] and (same["bert-4"] or not threads)  # seeded, not trained; one thread: the same sums

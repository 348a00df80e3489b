"""The report's evidence (`bertlab.report.evidence`) and `python -m bertlab.report.recompute`: the report on the
synthetic results (tests/report_data.py) writes evidence/, from which every cell, interval and verdict of its
claims.json is recomputed with data/ removed."""

import json
import os
import shutil
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from bertlab import ablations
from bertlab.report import collect, evidence, recompute, rerender
from tests.helpers import REPO
from tests.report_data import FINETUNE, write_data
from tests.unit.test_report import config

DRAWS = "ablations.bootstrap.draws=200"


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory):
    """The stage run on the synthetic data (each fine-tuning record with a key the report does not know), then data/
    removed: (the report folder, the Results it read, the study it used, the bytes of data/'s JSON files)."""
    root = tmp_path_factory.mktemp("evidence")
    write_data(root / "data", finetune=[{**run, "pretrain_seed": 1} for run in FINETUNE])
    cfg = config(root, DRAWS)
    ablations.build(cfg, profile="smoke")
    results = collect.collect(root / "data")
    read = sum(p.stat().st_size for p in (root / "data").rglob("*.json"))
    shutil.rmtree(root / "data")
    return root / "reports", results, OmegaConf.to_container(cfg.ablations, resolve=True), read


def copy(report_dir: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(report_dir, tmp_path / "reports"))


def test_the_evidence_is_written_beside_the_report_and_small(report) -> None:
    files = {p.name: p.stat().st_size for p in (report[0] / "evidence").iterdir()}
    assert sorted(files) == ["items.npz", "runs.json"]
    assert sum(files.values()) < min(150_000, 0.7 * report[3]), files  # 31 runs, 7 held-out sets: 106 kB


def test_the_evidence_reads_back_as_the_results_and_study_the_report_used(report) -> None:
    report_dir, results, spec, _ = report
    spec_back, back = evidence.load(report_dir / "evidence")
    assert spec_back == spec
    assert all(run["pretrain_seed"] == 1 for run in back.finetune)  # a record's every key, known or not
    assert back.curves == results.curves and isinstance(back.curves["bert-1"][0], tuple)
    for f in fields(collect.Results):
        if f.name not in ("items", "heldout"):
            assert getattr(back, f.name) == getattr(results, f.name), f.name
    for name in ("items", "heldout"):
        mine, theirs = getattr(back, name), getattr(results, name)
        assert list(mine) == list(theirs) and mine
        for run, items in theirs.items():
            assert (mine[run].scored_on, mine[run].kind, mine[run].n, mine[run].floor_name) == (
                items.scored_on, items.kind, items.n, items.floor_name)
            for side in ("model", "floor"):
                a, b = getattr(mine[run], side), getattr(items, side)
                assert list(a) == list(b)
                assert all(np.array_equal(a[c], b[c]) and a[c].dtype == b[c].dtype for c in b), (run, side)


def test_recompute_gives_claims_json_digit_for_digit_without_data(report, tmp_path: Path) -> None:
    """The command as a user runs it, from a folder with no conf/ or data/."""
    out = tmp_path / "again" / "claims.json"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    done = subprocess.run([sys.executable, "-m", "bertlab.report.recompute", str(report[0]), "--out", str(out)],
                          cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    claims = json.loads((report[0] / "claims.json").read_text())
    pairs = sum(len(c["pairs"]) for c in claims["claims"].values())
    assert done.stdout.splitlines()[-1].startswith(f"{pairs} intervals and verdicts and ")
    assert done.stdout.splitlines()[-1].endswith(f"all equal to {report[0] / 'claims.json'}")
    assert len(done.stdout.splitlines()) == 1
    assert out.read_text() == (report[0] / "claims.json").read_text()


def test_a_changed_interval_or_cell_is_named_and_exits_1(report, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture) -> None:
    reports = copy(report[0], tmp_path)
    claims = json.loads((reports / "claims.json").read_text())
    pair = claims["claims"]["nsp_helps"]["pairs"]
    name = next(n for n, p in pair.items() if p["low"] is not None)
    low = pair[name]["low"]
    pair[name]["low"] = round(low + 0.1, 4)
    claims["table5"]["bert"]["mrpc"]["mean"] = 81.0
    (reports / "claims.json").write_text(json.dumps(claims))
    assert recompute.main([str(reports)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert sorted(lines[:-1]) == [
        "cell table5 / bert / mrpc: mean 81.0 in claims.json, 82.0 recomputed",
        f"claim nsp_helps / {name}: low {round(low + 0.1, 4)!r} in claims.json, {low!r} recomputed"]
    assert lines[-1].endswith(f": 2 differ from {reports / 'claims.json'}")


@pytest.mark.parametrize("broken, message", [
    ("runs.json", "not the report's evidence (JSONDecodeError"),
    ("items.npz", "not the report's evidence (BadZipFile"),
    ("format", "not the report's evidence (ValueError: format 0, not 1)"),
    ("column", "not the report's evidence (ValueError: items/"),
    ("gone", "no runs.json and items.npz there"),
])
def test_a_missing_or_garbled_evidence_folder_is_one_line_and_exits_2(
        report, tmp_path: Path, capsys: pytest.CaptureFixture, broken: str, message: str) -> None:
    reports = copy(report[0], tmp_path)
    folder = reports / "evidence"
    runs = json.loads((folder / "runs.json").read_text())
    if broken == "gone":
        shutil.rmtree(folder)
    elif broken == "format":
        (folder / "runs.json").write_text(json.dumps({**runs, "format": 0}))
    elif broken == "column":  # one run's columns of another length than its n
        run = next(iter(runs["results"]["items"]))
        runs["results"]["items"][run]["n"] += 1
        (folder / "runs.json").write_text(json.dumps(runs))
    else:
        (folder / broken).write_bytes((folder / broken).read_bytes()[:100])  # truncated
    assert recompute.main([str(reports)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {folder}: {message}") and err.count("\n") == 1, err


def test_a_report_folder_without_claims_json_exits_2(report, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    reports = copy(report[0], tmp_path)
    (reports / "claims.json").unlink()
    assert recompute.main([str(reports)]) == 2
    assert capsys.readouterr().err == f"error: {reports / 'claims.json'} not found: name the folder the ablations " \
                                      "stage wrote the report into\n"


def test_rerender_writes_the_whole_report_again_from_its_evidence_alone(report, tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture) -> None:
    """Every file but evidence/ removed (no data/ either): `rerender` writes them all again, the same claims.json,
    CSVs and tables, evidence/ byte for byte, and `recompute` agrees; no evidence is one line and exit 2."""
    reports = copy(report[0], tmp_path)
    before = {p.relative_to(reports): p.read_bytes() for p in reports.rglob("*") if p.is_file()}
    for p in list(reports.iterdir()):
        if p.name != "evidence":
            shutil.rmtree(p) if p.is_dir() else p.unlink()
    assert rerender.main([str(reports), "--profile", "smoke"]) == 0
    assert capsys.readouterr().out.endswith(f"re-rendered into {reports} from its evidence\n")
    after = {p.relative_to(reports): p.read_bytes() for p in reports.rglob("*") if p.is_file()}
    assert sorted(after) == sorted(before)
    for name in ("claims.json", "metrics.json", "ablations_findings.csv", "ablations_table5.csv",
                 "evidence/runs.json", "evidence/items.npz"):
        assert after[Path(name)] == before[Path(name)], name
    md, md_before = (text[Path("ablations.md")].decode() for text in (after, before))
    assert md.split("\n", 3)[3] == md_before.split("\n", 3)[3]  # all but the header's commit line
    assert recompute.main([str(reports)]) == 0
    shutil.rmtree(reports / "evidence")
    assert rerender.main([str(reports), "--profile", "smoke"]) == 2
    assert capsys.readouterr().err.startswith(f"error: {reports / 'evidence'}: no runs.json and items.npz there")

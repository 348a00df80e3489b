"""The ablations report on synthetic results whose numbers are worked out by hand in the comments."""

import csv
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from bertlab import ablations, report
from bertlab.report import FAILS, HOLDS, UNMEASURED, Results
from bertlab.stage import CONF_DIR, UserError

SPEC: dict[str, Any] = OmegaConf.to_container(OmegaConf.load(Path(CONF_DIR) / "ablations" / "default.yaml"))
KEYS = ("num_layers", "hidden_size", "num_heads", "intermediate_size")
METRIC = {"squad": "f1", "conll2003": "f1"}  # every other task here: accuracy
SPLIT = {"mnli": "validation_matched"}


def ft(encoder: str, task: str, value: float | None, seed: int = 1, mode: str = "finetune",
       features: str = "last", bilstm: bool = False) -> dict[str, Any]:
    """A finetune metrics.json; value None = the task had no data."""
    split, metric = SPLIT.get(task, "validation"), METRIC.get(task, "accuracy")
    return {
        "name": f"{encoder}-{task}-{mode}-{features}-{bilstm}-{seed}", "encoder": encoder, "task": task,
        "seed": seed, "mode": mode, "features": features, "bilstm": bilstm,
        "status": "ok" if value is not None else "no data", "reason": None if value is not None else "not in mirror",
        "metrics": {split: {metric: value}} if value is not None else {},
        "headline": value, "headline_metric": metric, "train_seconds": 1.0,
    }


def pre(preset: tuple[int, ...], trained: tuple[int, ...], non_embedding: int, ppl: float,
        nsp: bool = True, kind: str = "masked-token") -> dict[str, Any]:
    """A pretrain metrics.json."""
    return {
        "objective": "mlm_nsp" if nsp else "ltr", "nsp": nsp,
        "shape": dict(zip(KEYS, trained)), "preset": "L{}_H{}_A{}".format(*preset),
        "parameters": {"total": non_embedding + 10**6, "non_embedding": non_embedding}, "steps": 2000,
        "train_seconds": 1.0, "heldout_mlm_loss": 3.0, "heldout_ppl": ppl, "heldout_kind": kind,
    }


BASE = (12, 768, 12, 3072)
PRETRAIN = {
    "bert": pre(BASE, (4, 192, 12, 768), 1_800_000, 40.0),
    "ltr": pre(BASE, (4, 192, 12, 768), 1_800_000, 30.0, nsp=False, kind="next-token"),
    "scratch": pre(BASE, (4, 192, 12, 768), 1_800_000, 8000.0),
    "L3_H768_A12": pre((3, 768, 12, 3072), (1, 192, 12, 768), 450_000, 60.0),
    "L6_H768_A3": pre((6, 768, 3, 3072), (2, 192, 3, 768), 900_000, 52.0),
    "L6_H768_A12": pre((6, 768, 12, 3072), (2, 192, 12, 768), 900_000, 50.0),
}
FINETUNE = [
    *(ft("bert", "mrpc", v, seed=s) for s, v in [(1, 80.0), (2, 82.0), (3, 84.0)]),  # 82.0 ± 2.0
    ft("bert", "sst2", 85.0, seed=1), ft("bert", "sst2", 86.0, seed=2),  # 85.5 ± 0.7071
    ft("bert", "squad", 70.0), ft("bert", "mnli", None),  # bert qnli: never run
    ft("ltr", "mrpc", 70.0), ft("ltr", "squad", 40.0), ft("ltr", "squad", 50.0, bilstm=True),
    ft("scratch", "mrpc", 68.0), ft("scratch", "sst2", 80.0),
    ft("L3_H768_A12", "mrpc", 70.0), ft("L6_H768_A3", "mrpc", 75.0),
    ft("bert", "conll2003", 90.0),
    *(ft("bert", "conll2003", v, mode="feature_based", features=f, bilstm=True)
      for f, v in [("embeddings", 60.0), ("last", 80.0), ("concat_last_four", 85.0)]),
]
MANIFEST = {
    "source": "/mirror", "tasks": {"mnli": {"status": "no data", "reason": "nyu-mll/glue/mnli: not in the mirror"}},
    "deviations": {"nyu-mll/glue/qnli/train": "QNLI train REBUILT from SQuAD v1.1 train"},
}
LOSS_CSV = "epoch,step,train/loss,train/mlm_loss,val/ppl\n0,9,8.0,7.5,\n0,19,6.0,5.5,\n0,19,,,300.0\n0,29,5.0,4.5,\n"


def results(finetune: list[dict] = FINETUNE, pretrain: dict[str, dict] = PRETRAIN) -> Results:
    return Results(finetune=list(finetune), pretrain=pretrain, curves={}, manifest=MANIFEST,
                   unigram={"nsp": 900.0, "packed": 880.0}, as_of="2025-01-01 00:00 UTC")


def write_data(root: Path, finetune: list[dict] = FINETUNE) -> None:
    """The synthetic results as the other stages lay them out under data/."""
    def dump(path: Path, obj: Any) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(obj))

    dump(root / "download" / "manifest.json", MANIFEST)
    dump(root / "pretrain_data" / "stats.json", {"heldout_unigram_ppl": {"nsp": 900.0, "packed": 880.0}})
    for name, metrics in PRETRAIN.items():
        dump(root / "pretrain" / name / "metrics.json", {"name": name, **metrics})
        if name != "scratch":  # never trained: no curve
            (root / "pretrain" / name / "metrics.csv").write_text(LOSS_CSV)
    for run in finetune:
        dump(root / "finetune" / run["name"] / "metrics.json", run)


def entry(entries: list[report.Entry], table: str, key: str, column: str) -> report.Entry:
    (found,) = [e for e in entries if (e.table, e.key, e.column) == (table, key, column)]
    return found


# ---------------------------------------------------------------------------------------------- cells


def test_mean_and_sample_std_over_seeds() -> None:
    entries = report.build_entries(SPEC, results())
    mrpc = entry(entries, "table5", "bert", "mrpc").cell
    # 80, 82, 84: mean 82, sample variance (4 + 0 + 4) / 2 = 4 -> std 2
    assert (mrpc.n, mrpc.mean, mrpc.std) == (3, 82.0, 2.0)
    assert mrpc.text() == "82.0 ± 2.0 (3 seeds)"
    sst2 = entry(entries, "table5", "bert", "sst2").cell
    # 85, 86: mean 85.5, sample variance 0.5 -> std 0.7071
    assert sst2.mean == 85.5 and sst2.std == pytest.approx(0.5**0.5)
    assert sst2.text() == "85.5 ± 0.7 (2 seeds)"
    squad = entry(entries, "table5", "bert", "squad").cell
    assert (squad.std, squad.text()) == (None, "70.0 (1 seed)")
    assert entry(entries, "table5", "bert", "mrpc").paper == 86.7


def test_no_data_and_not_run_are_never_numbers() -> None:
    entries = report.build_entries(SPEC, results())
    mnli, qnli = entry(entries, "table5", "bert", "mnli"), entry(entries, "table5", "bert", "qnli")
    assert (mnli.cell.status, mnli.cell.text(), mnli.cell.mean) == ("no data", "no data", None)
    assert (qnli.cell.status, qnli.cell.text(), qnli.cell.mean) == ("not run", "—", None)
    # an ok seed beside a "no data" one counts alone
    mixed = report.cell([ft("bert", "mrpc", None, seed=1), ft("bert", "mrpc", 81.0, seed=2)], SPEC["columns"],
                        "mrpc", encoder="bert")
    assert (mixed.status, mixed.values) == ("ok", (81.0,))


def test_rows_pick_runs_by_mode_features_and_bilstm() -> None:
    entries = report.build_entries(SPEC, results())
    assert entry(entries, "table5", "ltr", "squad").cell.values == (40.0,)  # not the BiLSTM run
    assert entry(entries, "table5", "ltr_bilstm", "squad").cell.values == (50.0,)
    assert entry(entries, "table7", "finetune", "conll2003").cell.values == (90.0,)
    assert entry(entries, "table7", "concat_last_four", "conll2003").cell.values == (85.0,)
    assert entry(entries, "table7", "sum_all", "conll2003").cell.status == "not run"


@pytest.mark.parametrize(("run", "tables"), [
    ({"encoder": "bert"}, ["table5", "table6", "table7"]),                    # a pretraining run
    ({"encoder": "L3_H768_A12"}, ["table6"]),
    ({"encoder": "unused"}, []),
    (ft("bert", "mrpc", 80.0), ["table5", "table6"]),
    (ft("bert", "qnli", 80.0), ["table5"]),
    (ft("ltr", "squad", 80.0, bilstm=True), ["table5"]),
    (ft("L24_H1024_A16", "sst2", 80.0), ["table6"]),
    (ft("bert", "conll2003", 80.0, mode="feature_based", features="sum_all"), ["table7"]),
    (ft("bert", "conll2003", 80.0), ["table7"]),
    (ft("nonsp", "conll2003", 80.0), []),
    (ft("bert", "cola", 80.0), []),
])
def test_tables_of_a_run(run: dict[str, Any], tables: list[str]) -> None:
    assert report.tables_of(SPEC, run) == tables


def test_table6_perplexity_and_unigram_baseline() -> None:
    entries = report.build_entries(SPEC, results())
    assert entry(entries, "table6", "L3_H768_A12", "ppl").cell.values == (60.0,)
    assert entry(entries, "table6", "L3_H768_A12", "ppl").paper == 5.84
    assert entry(entries, "table6", "bert", "unigram_ppl").cell.values == (900.0,)  # NSP-format held-out data
    assert entry(entries, "table6", "L24_H1024_A16", "ppl").cell.status == "not run"


def test_table6_rejects_a_run_of_another_size() -> None:
    wrong = PRETRAIN | {"L3_H768_A12": pre(BASE, (4, 192, 12, 768), 1, 1.0)}
    with pytest.raises(UserError, match="3/768/12.*used model L12_H768_A12, not L3_H768_A12"):
        report.build_entries(SPEC, results(pretrain=wrong))


def test_two_runs_of_one_cell_and_seed_are_an_error(tmp_path: Path) -> None:
    twin = ft("bert", "mrpc", 1.0) | {"name": "twin"}
    write_data(tmp_path, [*FINETUNE, twin])
    with pytest.raises(UserError, match="same cell and seed"):
        report.collect(tmp_path)


def test_missing_manifest_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="download stage"):
        report.collect(tmp_path)


def test_loss_curve_skips_rows_without_the_loss(tmp_path: Path) -> None:
    path = tmp_path / "metrics.csv"
    path.write_text(LOSS_CSV)
    assert report.read_curve(path) == [(9, 8.0), (19, 6.0), (29, 5.0)]
    assert report.read_curve(path, "val/ppl") == [(19, 300.0)]


# ---------------------------------------------------------------------------------------------- findings


def verdicts(finetune: list[dict] = FINETUNE, pretrain: dict[str, dict] = PRETRAIN) -> list[str]:
    return [f.verdict for f in report.check_findings(SPEC, results(finetune, pretrain))]


def without(*names: str) -> list[dict]:
    return [r for r in FINETUNE if r["name"] not in names]


def test_all_findings_hold() -> None:
    found = report.check_findings(SPEC, results())
    assert [f.verdict for f in found] == [HOLDS] * 5
    # sizes 0.45M (60) < 0.90M (52, 50) < 1.80M (40): 5 pairs of different sizes, all in order
    assert "5 of 5 size-ordered pairs in order" in found[0].evidence
    assert found[1].evidence == "MRPC: LTR 70.0 < BERT 82.0; SQuAD: LTR 40.0 < BERT 70.0"
    assert found[3].evidence == "concat last four 85.0 ≥ last hidden 80.0; last hidden 80.0 > embeddings 60.0"
    # scratch has MRPC and SST-2 beside BERT; SQuAD only for BERT, so it is not compared
    assert found[4].evidence == "MRPC: pretrained 82.0 > scratch 68.0; SST-2: pretrained 85.5 > scratch 80.0"


def test_size_finding() -> None:
    bigger_worse = PRETRAIN | {"bert": pre(BASE, (4, 192, 12, 768), 1_800_000, 55.0)}
    found = report.size_finding(SPEC, results(pretrain=bigger_worse))
    # bert (1.8M, 55) is above L6_H768_A3 (52) and L6_H768_A12 (50): 2 of 5 pairs out of order
    assert found.verdict == FAILS and "3 of 5 size-ordered pairs in order" in found.evidence
    only_one_size = {k: PRETRAIN[k] for k in ("L6_H768_A3", "L6_H768_A12")}  # equal sizes: no pair
    assert report.size_finding(SPEC, results(pretrain=only_one_size)).verdict == UNMEASURED


@pytest.mark.parametrize(
    ("finetune", "expected"),
    [
        # LTR above BERT on MRPC: falsified even though SQuAD agrees
        ([*without("ltr-mrpc-finetune-last-False-1"), ft("ltr", "mrpc", 90.0)], FAILS),
        # no LTR SQuAD run: MRPC agrees, SQuAD unmeasured
        (without("ltr-squad-finetune-last-False-1"), UNMEASURED),
    ],
)
def test_ltr_finding(finetune: list[dict], expected: str) -> None:
    assert verdicts(finetune)[1] == expected


@pytest.mark.parametrize(
    ("finetune", "expected"),
    [
        ([*without("ltr-squad-finetune-last-True-1"), ft("ltr", "squad", 30.0, bilstm=True)], FAILS),  # 30 < 40
        (without("ltr-squad-finetune-last-True-1"), UNMEASURED),
    ],
)
def test_bilstm_finding(finetune: list[dict], expected: str) -> None:
    assert verdicts(finetune)[2] == expected


@pytest.mark.parametrize(
    ("concat", "expected"),
    [(80.0, HOLDS), (79.9, FAILS), (None, UNMEASURED)],  # concat = last (80) still holds: the paper's ≥
)
def test_feature_finding(concat: float | None, expected: str) -> None:
    runs = without("bert-conll2003-feature_based-concat_last_four-True-1")
    if concat is not None:
        runs.append(ft("bert", "conll2003", concat, mode="feature_based", features="concat_last_four"))
    assert verdicts(runs)[3] == expected


def test_pretraining_finding() -> None:
    worse = [*without("scratch-sst2-finetune-last-False-1"), ft("scratch", "sst2", 90.0)]
    assert verdicts(worse)[4] == FAILS  # scratch 90 > BERT 85.5 on SST-2
    no_scratch = [r for r in FINETUNE if r["encoder"] != "scratch"]
    found = report.check_findings(SPEC, results(no_scratch))[4]
    assert (found.verdict, found.evidence) == (UNMEASURED, "no task with data for both")


# ---------------------------------------------------------------------------------------------- the stage


@pytest.fixture
def stage_cfg(tmp_path: Path):
    write_data(tmp_path / "data")
    (tmp_path / "reports" / "figures").mkdir(parents=True)
    (tmp_path / "reports" / "README.md").write_text("committed by someone else\n")
    (tmp_path / "reports" / "figures" / "stale.png").write_text("from an old run")
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return compose("config", overrides=[
            "profile=smoke", f"data_dir={tmp_path / 'data'}", f"ablations.report_dir={tmp_path / 'reports'}",
            "logger=none",
        ])


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def test_stage_outputs(stage_cfg, tmp_path: Path) -> None:
    ablations.build(stage_cfg, profile="smoke")
    out = tmp_path / "reports"
    assert (out / "README.md").read_text() == "committed by someone else\n"
    assert sorted(p.name for p in (out / "figures").iterdir()) == ["pretrain_loss.png", "table6.png", "table7.png"]
    assert sorted(p.name for p in (out / "pretrain_loss").iterdir()) == [f"{n}.csv" for n in sorted(PRETRAIN) if n != "scratch"]
    assert (out / "pretrain_loss" / "bert.csv").read_text() == "step,loss\n9,8.0\n19,6.0\n29,5.0\n"
    assert not list(out.glob(".ablations-*"))

    t5 = read_csv(out / "ablations_table5.csv")
    assert len(t5) == 5 * 5  # rows x tasks
    by_cell = {(r["row"], r["column"]): r for r in t5}
    assert by_cell["BERT_BASE", "mrpc"] == {"table": "table5", "row": "BERT_BASE", "column": "mrpc", "paper": "86.7",
                                           "mean": "82.0", "std": "2.0", "n": "3", "status": "ok"}
    assert by_cell["BERT_BASE", "mnli"] == {"table": "table5", "row": "BERT_BASE", "column": "mnli",
                                                "paper": "84.4", "mean": "", "std": "", "n": "0", "status": "no data"}
    assert by_cell["From scratch (ours)", "mrpc"]["paper"] == ""
    assert len(read_csv(out / "ablations_table6.csv")) == 6 * (2 + 3)  # rows x (ppl, unigram, 3 tasks)
    assert len(read_csv(out / "ablations_table7.csv")) == 7

    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["table5"]["bert"] == {"mrpc": 82.0, "sst2": 85.5, "squad": 70.0}
    assert metrics["table5"]["ltr_bilstm"] == {"squad": 50.0}
    assert metrics["table6"]["L3_H768_A12"] == {"ppl": 60.0, "unigram_ppl": 900.0, "mrpc": 70.0}
    assert metrics["table7"]["concat_last_four"] == {"conll2003": 85.0}
    assert "second_to_last" not in metrics["table7"]


def test_markdown(stage_cfg, tmp_path: Path) -> None:
    ablations.build(stage_cfg, profile="smoke")
    md = (tmp_path / "reports" / "ablations.md").read_text()
    links = re.findall(r"!\[[^]]*\]\(([^)]+)\)", md)
    assert links == ["figures/table6.png", "figures/table7.png", "figures/pretrain_loss.png"]
    assert all((tmp_path / "reports" / link).is_file() for link in links)
    assert "- Profile: `smoke`; commit: `" in md
    assert "- Data: a local mirror of the hub (`/mirror`)" in md
    assert "- Deviation: `nyu-mll/glue/qnli/train`: QNLI train REBUILT from SQuAD v1.1 train" in md
    assert "- No data for mnli: nyu-mll/glue/mnli: not in the mirror" in md
    assert ("| BERT_BASE | 84.4 | no data | 88.4 | — | 86.7 | 82.0 ± 2.0 (3 seeds) | 92.7 | 85.5 ± 0.7 (2 seeds) "
            "| 88.5 | 70.0 (1 seed) |") in md
    assert ("| 3/768/12 | `L3_H768_A12` 1/192/12 | 0.45M | 2000 | 5.84 | 60.00 | 900.00 | 77.9 | — | 79.8 "
            "| 70.0 (1 seed) | 88.4 | — |") in md
    assert "| 24/1024/16 | `L24_H1024_A16` — | — | — | 3.23 | — | — |" in md
    assert "| Concat Last Four Hidden | 96.1 | 85.0 (1 seed) |" in md
    assert md.count("| **holds** |") == 5


def test_markdown_without_results_embeds_no_figure(stage_cfg, tmp_path: Path) -> None:
    for p in (tmp_path / "data").glob("*/*/metrics.*"):
        p.unlink()
    built = ablations.build(stage_cfg, profile="smoke")
    md = (tmp_path / "reports" / "ablations.md").read_text()
    assert built.figures == [] and "![" not in md and not list((tmp_path / "reports" / "figures").iterdir())
    assert [f.verdict for f in built.findings] == [UNMEASURED] * 5


def test_stage_twice_gives_the_same_markdown(stage_cfg, tmp_path: Path) -> None:
    md = tmp_path / "reports" / "ablations.md"
    ablations.build(stage_cfg, profile="smoke")
    first = md.read_text()
    ablations.build(stage_cfg, profile="smoke")
    assert md.read_text() == first


def test_cli_names_the_hydra_profile(tmp_path: Path) -> None:
    write_data(tmp_path / "data")
    env = os.environ | {"WANDB_MODE": "offline", "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    subprocess.run(
        [sys.executable, "-m", "bertlab.ablations", "profile=smoke", f"data_dir={tmp_path / 'data'}",
         f"ablations.report_dir={tmp_path / 'reports'}", "logger=none", f"hydra.run.dir={tmp_path / 'hydra'}"],
        check=True, env=env, capture_output=True,
    )
    assert "- Profile: `smoke`;" in (tmp_path / "reports" / "ablations.md").read_text()


def test_wandb_offline_run(stage_cfg, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    stage_cfg.logger = {"kind": "wandb", "project": "bertlab", "offline": True, "save_dir": str(tmp_path / "wandb")}
    ablations.log_wandb(stage_cfg, ablations.build(stage_cfg, profile="smoke"))
    (run_dir,) = (tmp_path / "wandb" / "wandb").glob("offline-run-*")
    media = sorted(p.name.split("_")[0] for p in (run_dir / "files" / "media").rglob("*.json"))
    assert media == ["findings", "table5", "table6", "table7"]
    assert len(list((run_dir / "files" / "media" / "images").rglob("*.png"))) == 3

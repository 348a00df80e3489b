"""The ablations report on synthetic results (tests/report_data.py) of the tests' own study (tests/study.yaml):
tables, floors, files, W&B."""

import csv
import json
import re
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf, open_dict

from bertlab import ablations
from bertlab.errors import UserError
from bertlab.report import cells, collect, stats
from bertlab.report.collect import Results
from bertlab.stage import CONF_DIR
from tests.report_data import (BASE, FINETUNE, LOSS_CSV, MANIFEST, PRETRAIN, SMALL, ft, pre, pretrain_runs, study,
                               write_data)

SPEC: dict[str, Any] = study()


def config(tmp_path: Path, *overrides: str):
    """The report stage's config at the smoke profile, its study the tests' own (the bootstrap: as `overrides` set
    it)."""
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose("config", overrides=[
            "profile=smoke", f"data_dir={tmp_path / 'data'}", f"ablations.report_dir={tmp_path / 'reports'}",
            "logger=none", *overrides])
    with open_dict(cfg):
        for key, value in SPEC.items():
            if key != "bootstrap":
                cfg.ablations[key] = value
    return cfg


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory):
    """The stage run once on the synthetic data (full 2000-draw bootstrap): (its Report, the report directory)."""
    root = tmp_path_factory.mktemp("report")
    write_data(root / "data")
    (root / "reports" / "figures").mkdir(parents=True)
    (root / "reports" / "README.md").write_text("committed by someone else\n")
    (root / "reports" / "figures" / "stale.png").write_text("from an old run")
    return ablations.build(config(root), profile="smoke"), root / "reports"


def entry(entries: list[cells.Entry], table: str, key: str, column: str) -> cells.Entry:
    (found,) = [e for e in entries if (e.table, e.key, e.column) == (table, key, column)]
    return found


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


# ---------------------------------------------------------------------------------------------- cells


def test_mean_and_sample_std_over_seeds(built) -> None:
    entries = built[0].entries
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


def test_floors_beside_every_cell(built) -> None:
    entries = built[0].entries
    # MRPC: 120 of the 200 labels are the majority class 1, so always answering 1 scores 60.0
    mrpc = entry(entries, "table5", "bert", "mrpc").cell
    assert (mrpc.floor_value, mrpc.floor_status, mrpc.floor_text()) == (60.0, stats.ABOVE_FLOOR, "60.0")
    scratch = entry(entries, "table5", "scratch", "mrpc").cell  # a constant predictor: the majority class itself
    assert (scratch.mean, scratch.floor_status, scratch.floor_text()) == (60.0, stats.AT_FLOOR, "60.0, **at floor**")
    below = entry(entries, "table6", "L3_H768_A12", "sst2").cell  # 30.0 against 60.0
    assert (below.floor_status, below.floor_text()) == (stats.BELOW_FLOOR, "60.0, **below floor**")
    squad = entry(entries, "table5", "bert", "squad").cell  # random logits hit 2 of 100 questions
    assert squad.floor_value == pytest.approx(2.0)
    embeddings = entry(entries, "table7", "embeddings", "conll2003").cell  # predicts no entity, as all-"O" does
    assert (embeddings.mean, embeddings.floor_value, embeddings.floor_status) == (0.0, 0.0, stats.AT_FLOOR)
    ppl = entry(entries, "table6", "L12_H768_A12", "ppl").cell  # the unigram floor on the same positions: exactly 900
    assert (ppl.mean, ppl.floor_value) == (pytest.approx(40.0), pytest.approx(900.0))
    assert ppl.floor_status == stats.ABOVE_FLOOR
    no_items = entry(entries, "table5", "ltr_bilstm", "squad").cell
    assert (no_items.mean, no_items.floor_value, no_items.floor_status) == (50.0, None, stats.NOT_MEASURED)
    assert no_items.reason == "no items.json for squad-ltr-bilstm-1-1"


def test_no_data_and_not_run_are_never_numbers(built) -> None:
    entries = built[0].entries
    mnli, qnli = entry(entries, "table5", "bert", "mnli"), entry(entries, "table5", "bert", "qnli")
    assert (mnli.cell.status, mnli.cell.text(), mnli.cell.mean) == ("no data", "no data", None)
    assert mnli.cell.floor_text() == ""
    assert (qnli.cell.status, qnli.cell.text(), qnli.cell.mean) == ("not run", "—", None)
    # an ok seed beside a "no data" one counts alone
    runs = [ft("bert", "mrpc", None, seed=1), ft("bert", "mrpc", 81.0, seed=2)]
    results = Results(runs, {}, {}, {}, {}, MANIFEST, "")
    mixed = cells.finetune_cell(results, SPEC["columns"], "mrpc", {"encoder": "bert"})
    assert (mixed.status, mixed.values) == ("ok", (81.0,))
    assert mixed.reason == "no items.json for mrpc-bert-finetune-1-2"


def test_rows_pick_their_own_runs_by_name(built) -> None:
    entries = built[0].entries
    assert entry(entries, "table5", "ltr", "squad").cell.values == (40.0,)  # not the BiLSTM run
    assert entry(entries, "table5", "ltr_bilstm", "squad").cell.values == (50.0,)
    assert entry(entries, "table7", "finetune", "conll2003").cell.values == (90.0,)
    assert entry(entries, "table7", "concat_last_four", "conll2003").cell.values == (85.0,)
    assert entry(entries, "table7", "sum_all", "conll2003").cell.status == "not run"
    assert entry(entries, "table6", "L24_H1024_A16", "ppl").cell.status == "not run"


def test_a_cell_the_profile_left_out_says_why(tmp_path: Path) -> None:
    """A "not run" record (the profile's `cells`) is no number, and its reason is the cell's, in the tables' notes;
    a seed left out beside a run one leaves the cell its run seed; an encoder left out, its perplexity cell."""
    left = {"status": "not run", "reason": "not run at smoke: qnli: too slow here"}
    capped = {"status": "not run",
              "reason": "not run at smoke: seed 2: sst2 runs the first 1 of ablations.seeds (ablations.cells.seeds)"}
    runs = [ft("bert", "qnli", 70.0) | left, ft("bert", "sst2", 85.0), ft("bert", "sst2", 86.0, seed=2) | capped]
    pretrain = {k: v for k, v in PRETRAIN.items() if k != "L24_H1024_A16"}
    write_data(tmp_path / "data", runs, pretrain)
    skipped = tmp_path / "data" / "pretrain" / "L24_H1024_A16" / "L24_H1024_A16-1"
    skipped.mkdir(parents=True)
    (skipped / "metrics.json").write_text(json.dumps({"name": "L24_H1024_A16-1", "status": "not run",
                                                       "reason": "not run at smoke: L24_H1024_A16: too big"}))
    built = ablations.build(config(tmp_path, "ablations.bootstrap.draws=200"), profile="smoke")
    qnli, sst2 = (entry(built.entries, "table5", "bert", task).cell for task in ("qnli", "sst2"))
    assert (qnli.status, qnli.text(), qnli.reason) == ("not run", "—", left["reason"])
    assert (sst2.status, sst2.values) == ("ok", (85.0,))
    big = entry(built.entries, "table6", "L24_H1024_A16", "ppl").cell
    assert (big.status, big.reason) == ("not run", "not run at smoke: L24_H1024_A16: too big")
    md = (tmp_path / "reports" / "ablations.md").read_text()
    assert "\nNot run at smoke: qnli: too slow here.\n" in md
    assert "\nNot run at smoke: L24_H1024_A16: too big.\n" in md
    nsp = next(f for f in built.findings if f.id == "nsp_helps")
    assert next(p for p in nsp.pairs if p.column == "qnli").reason == f"BERT_BASE: {left['reason']}; No NSP: not run"


def test_table6_rejects_a_run_of_another_size() -> None:
    wrong = PRETRAIN | {"L3_H768_A12": pre("L3_H768_A12", BASE, SMALL, 1, 1.0)}
    with pytest.raises(UserError, match="3/768/12.*used model L12_H768_A12, not L3_H768_A12"):
        cells.build_entries(SPEC, Results([], {}, pretrain_runs(wrong), {}, {}, MANIFEST, ""))


def test_two_runs_of_one_cell_and_seed_are_an_error(tmp_path: Path) -> None:
    twin = ft("bert", "mrpc", 1.0) | {"name": "twin"}
    write_data(tmp_path, [*FINETUNE, twin])
    with pytest.raises(UserError, match="same cell, pretraining run and seed"):
        collect.collect(tmp_path)


def test_missing_manifest_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="download stage"):
        collect.collect(tmp_path)


@pytest.mark.parametrize(("items", "message"), [
    ({"split": "validation", "kind": "classification", "n": 2, "model": {"pred": [1]}, "floor": {"pred": [1]}},
     "n=2 numbers"),
    ({"split": "validation", "kind": "classification", "n": 1, "model": {"pred": [1]}, "floor": {"label": [1]}},
     "same per-item columns"),
    ({"split": "validation", "kind": "ranking", "n": 1, "model": {"pred": [1]}, "floor": {"pred": [1]}},
     "kind 'ranking'"),
    ({"kind": "classification", "n": 1, "model": {"pred": [1]}, "floor": {"pred": [1]}}, "documented format"),
])
def test_a_bad_items_file_is_an_error_naming_it(tmp_path: Path, items: dict, message: str) -> None:
    path = tmp_path / "items.json"
    path.write_text(json.dumps(items))
    with pytest.raises(UserError, match=f"{re.escape(str(path))}: .*{re.escape(message)}"):
        collect.read_items(path)


def test_loss_curve_skips_rows_without_the_loss(tmp_path: Path) -> None:
    path = tmp_path / "metrics.csv"
    path.write_text(LOSS_CSV)
    assert collect.read_curve(path) == [(9, 8.0), (19, 6.0), (29, 5.0)]
    assert collect.read_curve(path, "val/ppl") == [(19, 300.0)]


# ---------------------------------------------------------------------------------------------- the stage


def test_stage_outputs(built) -> None:
    out = built[1]
    assert (out / "README.md").read_text() == "committed by someone else\n"
    assert (out / "figures" / "stale.png").read_text() == "from an old run"  # not the report's to remove
    assert sorted(p.name for p in (out / "figures").iterdir()) == ["claims.png", "pretrain_loss.png", "stale.png",
                                                                   "table6.png", "table7.png"]
    assert sorted(p.name for p in (out / "pretrain_loss").iterdir()) == ["ltr.csv", "mlm_nsp.csv"]  # by objective
    assert (out / "pretrain_loss" / "ltr.csv").read_text() == "step,run,loss\n9,ltr-1,8.0\n19,ltr-1,6.0\n29,ltr-1,5.0\n"
    runs = {line.split(",")[1] for line in (out / "pretrain_loss" / "mlm_nsp.csv").read_text().splitlines()[1:]}
    assert "bert-1" in runs and "ltr-1" not in runs and len(runs) == len(PRETRAIN) - 2  # not scratch (no curve), not ltr
    assert not list(out.glob(".ablations-*"))

    tables = SPEC["tables"]
    t5 = read_csv(out / "ablations_table5.csv")
    assert len(t5) == len(tables["table5"]["rows"]) * len(tables["table5"]["tasks"])
    by_cell = {(r["row"], r["column"]): r for r in t5}
    assert by_cell["BERT_BASE", "mrpc"] == {"table": "table5", "row": "BERT_BASE", "column": "mrpc", "paper": "86.7",
                                           "mean": "82.0", "std": "2.0", "n": "3", "status": "ok", "floor": "60.0",
                                           "floor_status": "above floor"}
    assert by_cell["BERT_BASE", "mnli"] == {"table": "table5", "row": "BERT_BASE", "column": "mnli", "paper": "84.4",
                                           "mean": "", "std": "", "n": "0", "status": "no data", "floor": "",
                                           "floor_status": ""}
    assert by_cell["From scratch (ours)", "mrpc"]["paper"] == ""
    assert by_cell["From scratch (ours)", "mrpc"]["floor_status"] == "at floor"
    for name in ("table6", "table7", "probes"):  # rows x (ppl where the table has it, its tasks)
        columns = len(tables[name]["tasks"]) + bool(tables[name].get("ppl"))
        assert len(read_csv(out / f"ablations_{name}.csv")) == len(tables[name]["rows"]) * columns

    metrics = json.loads((out / "claims.json").read_text())
    assert metrics["table5"]["bert"]["mrpc"] == {"mean": 82.0, "std": 2.0, "n": 3, "floor": 60.0,
                                                 "floor_status": "above floor"}
    assert set(metrics["table5"]["bert"]) == {"mrpc", "sst2", "squad"}  # measured cells only
    assert metrics["table5"]["ltr_bilstm"]["squad"] == {"mean": 50.0, "std": None, "n": 1, "floor": None,
                                                        "floor_status": "not measured"}
    assert metrics["table6"]["L3_H768_A12"]["ppl"] == {"mean": 60.0, "std": None, "n": 1, "floor": 900.0,
                                                      "floor_status": "above floor"}
    assert metrics["table7"]["embeddings"]["conll2003"]["floor_status"] == "at floor"
    assert "second_to_last" not in metrics["table7"]


def test_the_findings_csv_sets_the_papers_effect_beside_each_interval(built) -> None:
    rows = {(r["claim"], r["column"], r["A"], r["B"]): r for r in read_csv(built[1] / "ablations_findings.csv")}
    nsp = rows["nsp_helps", "mrpc", "BERT_BASE", "No NSP"]  # +27 on ours, No NSP at its floor; the paper's +0.2
    assert (nsp["verdict"], nsp["paper_effect"], nsp["paper_vs_interval"], nsp["compressed"]) == (
        "reproduced", "0.2", "below", "True")
    tie = rows["nsp_helps", "sst2", "BERT_BASE", "No NSP"]
    assert (tie["verdict"], tie["paper_effect"], tie["paper_vs_interval"], tie["compressed"]) == (
        "unresolved at this scale", "0.1", "inside", "False")  # one run a side: never called beyond this scale
    assert (tie["size"], tie["label"]) == ("the paper's size holds", "unresolved at this scale; the paper's size holds")
    assert (nsp["size"], nsp["own_check"]) == ("the paper's size ruled out", "False")
    assert rows["pretraining_helps", "mrpc", "BERT_BASE", "From scratch (ours)"]["own_check"] == "True"
    ppl = rows["size_ppl", "ppl", "12/768/12", "3/768/12"]  # the paper's perplexities: not comparable
    assert (ppl["verdict"], ppl["paper_effect"], ppl["paper_vs_interval"]) == ("reproduced", "", "")
    missing = rows["nsp_helps", "mnli", "BERT_BASE", "No NSP"]
    assert (missing["paper_effect"], missing["paper_vs_interval"]) == ("0.5", "")


def test_curves_are_grouped_and_labelled_by_the_objectives_name_and_properties(tmp_path: Path) -> None:
    """A variant objective under its own name gets its own curve file and panel, its loss named by what it is."""
    from bertlab.report.plots import loss_label

    variant = pre("L3_H768_A12", (3, 768, 12, 3072), (1, 192, 12, 768), 450_000, 60.0, nsp=False) | {
        "objective": "mlm_mask_only", "causal": False}
    write_data(tmp_path / "data", pretrain=PRETRAIN | {"L3_H768_A12": variant})
    ablations.build(config(tmp_path, "ablations.bootstrap.draws=200"), profile="smoke")
    curves = sorted(p.name for p in (tmp_path / "reports" / "pretrain_loss").iterdir())
    assert curves == ["ltr.csv", "mlm_mask_only.csv", "mlm_nsp.csv"]
    assert "L3_H768_A12" in (tmp_path / "reports" / "pretrain_loss" / "mlm_mask_only.csv").read_text()
    assert [loss_label(r) for r in (variant, PRETRAIN["bert"], PRETRAIN["ltr"])] == [
        "MLM loss", "MLM + NSP loss", "next-token loss"]


def test_markdown(built) -> None:
    out = built[1]
    md = (out / "ablations.md").read_text()
    links = re.findall(r"!\[[^]]*\]\(([^)]+)\)", md)
    assert links == ["figures/claims.png", "figures/table6.png", "figures/table7.png", "figures/pretrain_loss.png"]
    assert all((out / link).is_file() for link in links)
    assert "- Profile: `smoke`; commit: `" in md
    assert "- Data: a local mirror of the hub (`/mirror`)" in md
    assert "- Deviation: `nyu-mll/glue/qnli/train`: QNLI train REBUILT from SQuAD v1.1 train" in md
    assert "- No data for mnli: nyu-mll/glue/mnli: not in the mirror" in md
    assert ("| BERT_BASE | 84.4 | no data |  | 88.4 | — |  | 86.7 | 82.0 ± 2.0 (3 seeds) | 60.0 | 92.7 "
            "| 85.5 ± 0.7 (2 seeds) | 60.0 | 88.5 | 70.0 (1 seed) | 2.0 |") in md
    assert "| From scratch (ours) |  | no data |  |  | — |  |  | 60.0 (1 seed) | 60.0, **at floor** |" in md
    assert ("| 3/768/12 | `L3_H768_A12` 1/192/12 | 0.45M | 2000 | 5.84 | 60.00 | 900.00 | 77.9 | no data |  | 79.8 "
            "| 70.0 (1 seed) | 60.0 | 88.4 | 30.0 (1 seed) | 60.0, **below floor** |") in md
    assert "| 24/1024/16 | `L24_H1024_A16` — | — | — | 3.23 | — |  |" in md
    assert "| Concat Last Four Hidden | 96.1 | 85.0 (1 seed) | 0.0 |" in md
    assert "| Embeddings | 91.0 | 0.0 (1 seed) | 0.0, **at floor** |" in md
    assert "Floors: MRPC: the floor; SST-2: the floor; SQuAD: the floor." in md  # as items.json names them
    assert "Floors: LM ppl: unigram; MRPC: the floor; SST-2: the floor." in md
    assert re.search(r"\| \d+\.\d (± \d+\.\d )?\(\d seeds?\)", md)  # what the e2e test looks for
    # each verdict states the fine-tuning budget it was measured at
    assert "| items × runs A/B | fine-tuning | verdict |" in md
    assert re.search(r"\| 300 updates, 4,800 examples \| \*\*(reproduced|contradicted|unresolved)", md)


def test_stage_without_results_embeds_no_figure(tmp_path: Path) -> None:
    write_data(tmp_path / "data")
    for p in (tmp_path / "data").rglob("*"):  # every run's files; the manifest stays
        if p.is_file() and p.name != "manifest.json":
            p.unlink()
    built = ablations.build(config(tmp_path, "ablations.bootstrap.draws=200"), profile="smoke")
    md = (tmp_path / "reports" / "ablations.md").read_text()
    assert built.figures == [] and "![" not in md and not list((tmp_path / "reports" / "figures").iterdir())
    verdicts = {p.contrast.verdict for f in built.findings for p in f.pairs}
    assert verdicts == {stats.NOT_MEASURED} and len(built.findings) == len(SPEC["claims"])


def test_stage_twice_gives_the_same_markdown(built, tmp_path: Path) -> None:
    cfg = config(built[1].parent)
    md = built[1] / "ablations.md"
    first = md.read_text()
    ablations.build(cfg, profile="smoke")
    assert md.read_text() == first


def test_wandb_offline_run(built, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    cfg = config(tmp_path)
    cfg.logger = {"kind": "wandb", "project": "bertlab", "offline": True, "save_dir": str(tmp_path / "wandb")}
    report = built[0]
    ablations.log_wandb(cfg, report)
    (run_dir,) = (tmp_path / "wandb" / "wandb").glob("offline-run-*")
    media = {p.name.split("_")[0]: json.loads(p.read_text()) for p in (run_dir / "files" / "media").rglob("*.json")}
    assert sorted(media) == sorted(["findings", *SPEC["tables"]])  # each table of the study, and the findings
    findings = media["findings"]
    assert findings["columns"][7:11] == ["estimate", "low", "high", "verdict"]
    nsp_mrpc = [r for r in findings["data"] if r[0] == "nsp_helps" and r[4] == "mrpc"]
    assert nsp_mrpc[0][7] == 27.0 and nsp_mrpc[0][10] == "reproduced"
    assert media["table5"]["columns"][-2:] == ["floor", "floor_status"]
    images = sorted(p.name.split("_")[0] for p in (run_dir / "files" / "media" / "images").rglob("*.png"))
    assert images == ["claims", "pretrain", "table6", "table7"]  # the forest plot among the figures


def test_deviations_name_each_setting_that_departs_from_the_paper() -> None:
    from bertlab.report.deviations import deviations

    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cpu, paper = compose("config", overrides=["profile=cpu"]), compose("config", overrides=["profile=paper"])
    recipe = OmegaConf.to_container(cpu.ablations.paper_recipe)  # the declared recipe
    lines = deviations(cpu, recipe)
    assert f"pretraining steps (Tables 5 and 7): `pretrain.max_steps` = {cpu.pretrain.max_steps} (the paper: 1000000)" in lines
    assert "masking rate: `objective.mlm_probability` = 0.4 (the paper: 0.15)" in lines
    assert "fine-tuning learning rate: `finetune.lr` = 0.0003 (the paper: 5e-05 or 4e-05 or 3e-05 or 2e-05)" in lines
    assert "encoder dropout while fine-tuning: `finetune.dropout` = 0.0 (the paper: 0.1)" in lines
    # a setting the profile gives one task is named with it (conf/profile_task/cpu_<task>.yaml)
    assert "fine-tuning learning rate (conll2003): `finetune.lr` = 0.001 (the paper: 5e-05 or 4e-05 or 3e-05 or 2e-05)" in lines
    assert "fine-tuning examples per task (null: all) (mrpc): `finetune.max_train_examples` = 800 (the paper: null)" in lines
    assert not any("task_text" in x or "pooling" in x for x in lines)   # the cpu profile keeps these
    assert lines[-len(recipe["always"]):] == recipe["always"]
    google = [x for x in lines if x.startswith("google's create_pretraining_data.py semantics")]
    assert len(google) == 1 and google[0].endswith("`pretrain_data.reference` = False (the paper: True)")
    for difference in ("dynamic masking", "[CLS]/[SEP] included", "max_predictions_per_seq", "any of the vocabulary",
                       "documents not reshuffled"):
        assert difference in google[0]
    # the paper profile departs only where the paper's schedule is not one setting (128 then 512), in the data's
    # random details (dynamic masking) and in the fixed ones
    assert [x.split(":")[0] for x in deviations(paper, recipe)[: -len(recipe["always"])]] == [
        "pretraining sequence length (the paper", "sequence length of pretraining's first phase",
        "share of the pretraining steps in the first, short-sequence phase",
        "google's create_pretraining_data.py semantics (bertlab.data.reference). Without them"]
    assert "position encoding (rotary: RoFormer's rotated queries and keys, Su et al. 2021; the Hugging Face export " \
           "is then a RoFormer): `pretrain.positions` = rotary (the paper: absolute)" in lines
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        reference = compose("config", overrides=["profile=paper", "pretrain_data.reference=true"])
    assert not any(x.startswith("google's") for x in deviations(reference, recipe))
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        full = compose("config", overrides=["profile=cpu_full"])  # its task budgets extend cpu's files
    assert deviations(full, recipe) == lines


def test_the_summary_says_what_the_encoder_learned(built) -> None:
    md = (built[1] / "ablations.md").read_text()
    summary = md.split("## Summary\n\n")[1].split("\n\n")[0].splitlines()
    assert md.index("## Summary") < md.index("## Table 5")
    assert summary[0].startswith("- `bert`'s held-out perplexity at `[MASK]` inputs is 0.044 [")  # 40 / 900
    assert summary[0].endswith("× the unigram floor of the same positions (the claim: at most 0.5 × unigram): it has "
                               "learned well beyond word frequencies.")
    assert summary[1] == ("- Its frozen features against a never-trained encoder's, by a linear probe (A − B): not "
                          "run. Each side's probe is a logistic regression on its frozen, standardised features (a "
                          "sentence's mean real-token vector; a word's first sub-token), fitted to convergence with "
                          "its L2 strength chosen by cross-validated log-loss on the training examples only: the "
                          "same procedure for both encoders.")
    why = r" \(\d+ no data, \d+ not run at this profile(, \d+ otherwise \(below\))?\)"
    counts = (r"\d+ reproduced, \d+ contradicted, \d+ unresolved at this scale, \d+ not measured" + why
              + r" of \d+ pairs")
    holm = r"; family-wise \(Holm within each table\): \d+ reproduced, \d+ contradicted\."
    assert re.fullmatch(r"- The paper's claims on our runs: " + counts + r" \(of the \d+ resolved beside the "
                        r"paper's own A - B: \d+ at its size, \d+ ruling it out\)" + holm, summary[2])
    assert re.fullmatch(r"- The project's own checks \(from scratch, the probes, the perplexity bound; not the "
                        r"paper's\): " + counts + holm, summary[3])


def test_an_encoder_at_its_floor_is_said_to_have_not_learned_enough(tmp_path: Path) -> None:
    pretrain = {**PRETRAIN, "bert": pre("bert", BASE, SMALL, 1_800_000, 800.0)}  # 0.89 x unigram
    probes = [ft(encoder, "sst2", score, mode="probe", seed=seed)
              for encoder, score in (("bert", 70.0), ("scratch", 69.0)) for seed in (1, 2)]
    write_data(tmp_path / "data", finetune=[*FINETUNE, *probes], pretrain=pretrain)
    ablations.build(config(tmp_path), profile="smoke")
    md = (tmp_path / "reports" / "ablations.md").read_text()
    assert "it has **not learned enough beyond word frequencies to test the pretraining claims**" in md
    # the probe cells run on SST-2 only: CoNLL-2003's pair is not listed
    assert re.search(r"by a linear probe \(A − B\): SST-2 \+1\.0 \[[-+]\d+\.\d, [-+]\d+\.\d\] "
                     r"\(unresolved at this scale\)\. Each side's probe", md)
    assert "| probe to convergence, 4,800 examples | **unresolved at this scale** |" in md  # a solver, no updates


def test_the_report_writes_only_its_declared_outputs_and_removes_nothing(tmp_path: Path) -> None:
    """Whatever `ablations.report_dir` names: a user's folder with files where the report's go keeps every one of
    them (the stage used to replace `figures/` and `pretrain_loss/` whole), and what the stage adds is what dvc.yaml
    declares."""
    import yaml

    from tests.helpers import REPO

    write_data(tmp_path / "data")
    mine = tmp_path / "reports"
    user = {"figures/plot.png": b"a user's figure", "pretrain_loss/notes.csv": b"step,loss\n1,2\n",
            "notes.md": b"mine", "sub/deep.txt": b"deeper"}
    for name, content in user.items():
        (mine / name).parent.mkdir(parents=True, exist_ok=True)
        (mine / name).write_bytes(content)
    ablations.build(config(tmp_path, "ablations.bootstrap.draws=200"), profile="smoke")
    assert {name: (mine / name).read_bytes() for name in user} == user
    stage_spec = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]["ablations"]
    declared = [Path(next(iter(o))).relative_to("reports") for o in stage_spec["outs"] + stage_spec["metrics"]]
    added = [p.relative_to(mine) for p in mine.rglob("*") if p.is_file() and str(p.relative_to(mine)) not in user]
    assert added and all(any(p == d or d in p.parents for d in declared) for p in added), added


def test_a_folder_in_the_way_of_a_report_file_stops_the_stage_before_anything_moves(tmp_path: Path) -> None:
    write_data(tmp_path / "data")
    (tmp_path / "reports" / "ablations.md").mkdir(parents=True)
    (tmp_path / "reports" / "ablations.md" / "keep.txt").write_text("keep")
    with pytest.raises(UserError, match="ablations.md is in the way of the report's file ablations.md"):
        ablations.build(config(tmp_path, "ablations.bootstrap.draws=200"), profile="smoke")
    assert sorted(p.name for p in (tmp_path / "reports").iterdir()) == ["ablations.md"]


def test_each_cells_floor_is_bootstrapped_once_for_the_tables_and_the_claims(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_data(tmp_path / "data")
    calls: list[int] = []
    real = stats.floor_status
    monkeypatch.setattr(stats, "floor_status", lambda runs, *a, **k: calls.append(id(runs[0])) or real(runs, *a, **k))
    ablations.build(config(tmp_path, "ablations.bootstrap.draws=200"), profile="smoke")
    # distinct sides: every (row, column) a table shows or a claim compares; a row in two tables is one cell
    assert calls and len(calls) == len(set(calls))


def test_the_report_goes_to_reports_in_the_pipeline_and_under_out_dir_by_hand() -> None:
    """By hand the report replaced the committed `reports/`; the pipeline's run (as the configs stage composes it)
    still writes there, and an override wins either way."""
    from bertlab.configs import PIPELINE_OUTPUTS

    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        assert ablations.report_folder(compose("config")) == Path("data/hand/reports")
        assert ablations.report_folder(compose("config", ["data_dir=d"])) == Path("d/hand/reports")
        assert ablations.report_folder(compose("config", PIPELINE_OUTPUTS)) == Path("reports")
        assert ablations.report_folder(compose("config", ["ablations.report_dir=mine"])) == Path("mine")

"""The scaling sweep's plan (which runs, with which overrides), its table and verdicts on synthetic per-item files, and
its settings checked at the door."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from bertlab.errors import UserError
from bertlab.report import scaling as report
from bertlab.report import scaling_rows
from bertlab.report import sweep
from bertlab import jobs, scaling
from bertlab.runs import pretrain_dir
from bertlab.scaling import check_grid, forwarded, plan
from bertlab.stage import CONF_DIR
from tests.report_data import heldout, items

COLUMNS = {"sst2": {"split": "validation", "metric": "accuracy"}, "conll2003": {"split": "validation", "metric": "f1"}}
MODES = {"finetune": [], "embeddings": ["finetune.mode=feature_based", "finetune.features=embeddings"],
         "concat_last_four": ["finetune.mode=feature_based", "finetune.features=concat_last_four"]}
SPEC: dict[str, Any] = {
    "encoders": {"bert": ["objective=mlm_nsp"], "scratch": ["objective=mlm_nsp"]}, "pretrain_overrides": ["w=1"],
    "modes": MODES, "pretrain_steps": [2, 4], "seeds": [1, 2], "workers": 1, "report_only": False,
    "finetune_budgets": [{"examples": 32}, {"examples": None, "lr": 1e-4}],
    "claims": [{"id": "pretraining_sst2", "text": "Pretraining helps: SST-2", "task": "sst2", "a": ["bert", "finetune"],
                "b": ["scratch", "finetune"]},
               {"id": "concat", "text": "concat beats embeddings", "task": "conll2003",
                "a": ["bert", "concat_last_four"], "b": ["bert", "embeddings"]}],
}
BOOTSTRAP = {"draws": 500, "seed": 0}
PAPERS = {"concat": 96.1 - 91.0}  # Table 7's concat last four - embeddings (`sweep.paper_effects`)


def test_the_plan_pretrains_each_budget_and_runs_each_cell_once() -> None:
    jobs = plan(SPEC)
    pretrain = [j for j in jobs if j.stage == "pretrain"]
    assert [(j.name, j.overrides[-1], j.defaults) for j in pretrain] == [
        ("scratch", "pretrain.max_steps=0", ("objective=mlm_nsp", "w=1")),
        ("bert-2", "pretrain.max_steps=2", ("objective=mlm_nsp", "w=1")),
        ("bert-4", "pretrain.max_steps=4", ("objective=mlm_nsp", "w=1"))]
    cells = {j.name: j.overrides for j in jobs if j.stage == "finetune"}
    # SST-2: 3 encoders (scratch once per budget) x 2 budgets x 2 seeds; CoNLL: 2 encoders x 2 modes x 2 x 2
    assert len(cells) == 3 * 2 * 2 + 2 * 2 * 2 * 2 and len(jobs) == 3 + len(cells)
    assert cells["sst2-scratch-finetune-32-1"] == (
        "name=sst2-scratch-finetune-32-1", "finetune.encoder=scratch", "finetune.pretrain_seed=1", "task=sst2",
        "seed=1", "finetune.max_train_examples=32")
    assert cells["conll2003-bert-4-concat_last_four-all-2"] == (
        "name=conll2003-bert-4-concat_last_four-all-2", "finetune.encoder=bert-4", "finetune.pretrain_seed=1",
        "task=conll2003", "seed=2",
        "finetune.max_train_examples=null", "finetune.lr=0.0001", *MODES["concat_last_four"])
    assert not [j for j in plan(SPEC, {"conll2003"}) if "conll2003" in j.name]


NSP = {**SPEC, "encoders": {**SPEC["encoders"], "nonsp": ["objective=mlm"], "L6": ["model=L6_H768_A12"]},
       "claims": [{"id": "nsp", "text": "NSP helps: SQuAD", "task": "squad", "a": ["bert", "finetune"],
                   "b": ["nonsp", "finetune"]},
                  {"id": "depth", "text": "deeper: ppl", "task": "ppl", "a": ["bert"], "b": ["L6"]}]}


def test_each_encoder_a_claim_names_pretrains_at_every_budget_before_its_cells() -> None:
    """Budget by budget: the encoders, then their cells; a `ppl` claim trains nothing more than its encoders; a span
    task's budget caps its questions; an encoder no claim names is not trained."""
    jobs = plan({**NSP, "encoders": {**NSP["encoders"], "unused": ["objective=ltr"]}})
    order = [j.name for j in jobs]
    assert [j.name for j in jobs if j.stage == "pretrain"] == ["bert-2", "nonsp-2", "L6-2", "bert-4", "nonsp-4", "L6-4"]
    assert all(order.index(j.after) < order.index(j.name) for j in jobs if j.after)
    assert order.index("bert-4") > max(order.index(j.name) for j in jobs if j.after == "bert-2")
    nonsp = next(j for j in jobs if j.name == "squad-nonsp-4-finetune-32-2")
    assert nonsp.after == "nonsp-4" and "finetune.squad_max_train_examples=32" in nonsp.overrides
    assert next(j for j in jobs if j.name == "L6-4").defaults == ("model=L6_H768_A12", "w=1")
    assert len([j for j in jobs if j.stage == "finetune"]) == 2 * 2 * 2 * 2  # squad: 2 encoders x 2 x 2 budgets x 2 seeds
    assert [j.name for j in plan(NSP, {"squad"})] == ["bert-2", "L6-2", "bert-4", "L6-4"]


def test_a_ppl_claim_compares_held_out_perplexity_on_the_same_instances(tmp_path: Path) -> None:
    for name, ppl in (("bert-2", 200.0), ("L6-2", 300.0)):
        run = pretrain_dir(tmp_path, name, sweep.PRETRAIN_SEED)
        run.mkdir(parents=True)
        (run / "heldout_items.json").write_text(json.dumps(heldout(name, ppl)))
        (run / "metrics.json").write_text(json.dumps({"name": run.name, "encoder": name, "seed": 1,
                                                      "train_tokens": 1024, "heldout_ppl": ppl,
                                                      "heldout_unigram_ppl": 1000.0}))
    found = [r for r in scaling_rows.rows(NSP, tmp_path, {"squad": {"split": "validation", "metric": "f1"}}, BOOTSTRAP, {})
             if r.claim["id"] == "depth"]
    assert [(r.steps, r.budget) for r in found] == [(2, sweep.HELDOUT), (4, sweep.HELDOUT)]
    two = found[0]
    assert (two.a, two.b, two.metric, two.ratios) == ("bert-2", "L6-2", "ppl", (0.2, 0.3))
    assert two.contrast.estimate == pytest.approx(-100.0, rel=1e-6) and two.contrast.verdict == "reproduced"
    assert found[1].contrast.verdict == "not measured" and found[1].reason == "bert-4: not run; L6-4: not run"
    text = report.markdown({**NSP, "claims": NSP["claims"][1:]}, found, "smoke", "abc", (3, 3))
    assert "| 2 steps, 1,024 tokens | 0.200 / 0.300 | -100.0 [" in text and "| held-out instances |" in text


def test_the_runs_are_the_engines_jobs_each_cell_after_its_encoder(monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    """Each run is a job of `bertlab.jobs` (which runs them: tests/unit/test_jobs.py): its stage's command with the
    sweep's defaults, then the command line's (with more than one worker each its share of the cores), then where it
    reads and writes and the grid's own; its log in logs/; a cell after its encoder; the first failure stops the sweep
    naming the run's log."""
    runs = [scaling.Job("pretrain", "a", ("name=a",), ("model=tiny",)),
            scaling.Job("finetune", "a-cell", ("name=a-cell",), after="a")]
    monkeypatch.setattr(scaling.os, "cpu_count", lambda: 4)
    [pretrain, cell] = scaling.engine_jobs(runs, ["seed=3"], tmp_path, workers=2)
    assert pretrain.argv == (sys.executable, "-m", "bertlab.pretrain", "model=tiny", "impl.threads=2", "seed=3",
                             f"data_dir={tmp_path}", f"out_dir={tmp_path}", "name=a")
    assert (pretrain.log_file, pretrain.after) == (tmp_path / "logs" / "pretrain-a.log", ())
    assert (cell.name, cell.after) == ("a-cell", ("a",))
    assert cell.argv[2:5] == ("bertlab.finetune", "impl.threads=2", "seed=3")
    assert "impl.threads=2" not in scaling.engine_jobs(runs, [], tmp_path, workers=1)[0].argv
    assert [run.folder(tmp_path) for run in runs] == [tmp_path / "pretrain" / "a" / "a-1",
                                                      tmp_path / "finetune" / "a" / "a-cell"]

    def fail(engine_jobs: list, engine: jobs.Engine, cwd: Path, follow: bool) -> list[jobs.Failure]:
        assert (engine.cluster, engine.workers, follow) == ("local", 3, False)
        return [jobs.Failure(engine_jobs[1], "exit status 3")]

    monkeypatch.setattr(scaling.jobs, "run_jobs", fail)
    with pytest.raises(UserError, match=r"^finetune run a-cell: exit status 3 \(its log: .*finetune-a-cell.log\); "
                                        r"the finished runs are kept"):
        scaling.run_all(runs, [], tmp_path, workers=3)


def test_only_the_sweeps_own_settings_and_data_dir_stay_behind() -> None:
    assert forwarded(["profile=smoke", "data_dir=/d", "scaling.seeds=[1]", "+scaling.x=1", "model=tiny",
                      "finetune.lr=1e-3"]) == ["profile=smoke", "model=tiny", "finetune.lr=1e-3"]


def cell(work: Path, task: str, encoder: str, mode: str, examples: int | None, seed: int, score: float) -> None:
    """A finished fine-tuning run of the sweep scoring `score`% (its metrics.json and items.json)."""
    name = sweep.cell_name(task, encoder, mode, examples, seed)
    per_item = items(name, task, score)
    record = {"name": name, "encoder": encoder, "pretrain_seed": 1, "task": task, "seed": seed, "mode": mode,
              "features": None,
              "bilstm": False, "status": "ok", "metrics": {"validation": {per_item["metric"]: float(score)}}}
    folder = work / "finetune" / encoder / name
    folder.mkdir(parents=True)
    (folder / "metrics.json").write_text(json.dumps(record))
    (folder / "items.json").write_text(json.dumps(per_item))


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """Step 2: SST-2 bert 90, 92 vs scratch 60, 62 at 32 examples (+30), 70 vs 70 on all; step 4 never run.
    CoNLL-2003: concat 40 vs embeddings 80 F1 at step 2, 32 examples, both seeds (-40)."""
    for seed in (1, 2):
        for encoder, scores in (("bert-2", (90, 70)), ("scratch", (60, 70))):
            for examples, score in zip((32, None), scores):
                cell(tmp_path, "sst2", encoder, "finetune", examples, seed, score + (2 * (seed - 1) if examples else 0))
        cell(tmp_path, "conll2003", "bert-2", "concat_last_four", 32, seed, 40)
        cell(tmp_path, "conll2003", "bert-2", "embeddings", 32, seed, 80)
    run = pretrain_dir(tmp_path, "bert-2", sweep.PRETRAIN_SEED)
    run.mkdir(parents=True)
    (run / "metrics.json").write_text(json.dumps({"name": run.name, "encoder": "bert-2", "seed": 1,
                                                  "train_tokens": 2_457_600, "heldout_ppl": 450.0,
                                                  "heldout_unigram_ppl": 900.0}))
    return tmp_path


def test_each_claim_and_budget_pair_gets_its_paired_verdict(work: Path) -> None:
    rows = {(r.claim["id"], r.steps, r.budget["examples"]): r for r in scaling_rows.rows(SPEC, work, COLUMNS, BOOTSTRAP, {})}
    assert len(rows) == 2 * 2 * 2
    helps = rows["pretraining_sst2", 2, 32]
    assert (helps.a, helps.b, helps.metric) == ("bert-2 finetune", "scratch finetune", "accuracy")
    assert helps.contrast.estimate == pytest.approx(30.0) and helps.contrast.verdict == "reproduced"
    assert (helps.contrast.n_items, helps.contrast.runs_a, helps.contrast.runs_b) == (200, 2, 2)
    assert helps.tokens == 2_457_600 and helps.floor_ratio == pytest.approx(0.5)
    tie = rows["pretraining_sst2", 2, None]
    assert tie.contrast.estimate == pytest.approx(0.0) and tie.contrast.verdict == "unresolved at this scale"
    concat = rows["concat", 2, 32]
    assert concat.contrast.estimate == pytest.approx(-40.0) and concat.contrast.verdict == "contradicted"
    never = rows["pretraining_sst2", 4, 32]
    assert never.contrast.verdict == "not measured" and never.reason == "bert-4 finetune: not run"
    assert never.tokens is None and never.floor_ratio is None


def test_a_task_without_data_is_not_measured_with_its_reason(work: Path) -> None:
    (work / "download" / "tasks" / "conll2003").mkdir(parents=True)
    (work / "download" / "tasks" / "conll2003" / "NO_DATA").write_text("eriktks/conll2003: not in the mirror\n")
    concat = [r for r in scaling_rows.rows(SPEC, work, COLUMNS, BOOTSTRAP, {}) if r.claim["id"] == "concat"]
    assert {r.contrast.verdict for r in concat} == {"not measured"}
    assert {r.reason for r in concat} == {"conll2003: no data (eriktks/conll2003: not in the mirror)"}


def test_the_csv_markdown_and_figures(work: Path, tmp_path: Path) -> None:
    found = scaling_rows.rows(SPEC, work, COLUMNS, BOOTSTRAP, PAPERS)
    written = report.write(tmp_path / "reports", SPEC, found, "smoke", "abc1234", (9, 27))
    assert sorted(p.relative_to(tmp_path / "reports").as_posix() for p in written) == [
        "scaling.csv", "scaling.md", "scaling/concat.csv", "scaling/concat.png", "scaling/pretraining_sst2.csv",
        "scaling/pretraining_sst2.png"]
    lines = (tmp_path / "reports" / "scaling.csv").read_text().splitlines()
    assert lines[0] == ",".join(report.FIELDS) and len(lines) == 1 + 8
    assert lines[1].startswith("pretraining_sst2,bert-2 finetune,scratch finetune,sst2,accuracy,2,2457600,32,,30.0,")
    assert ",reproduced,200,2/2,450.0,900.0," in lines[1]
    # each side's mean over seeds beside the floor of the same items (majority class: 60.0), scratch's 61.0 at it
    # ... and each side's held-out perplexity over its unigram floor (scratch: never pretrained)
    # ... and the paper's A - B (none for scratch), where it lies against the interval, and a side at its floor
    assert lines[1].endswith(",91.0,61.0,60.0,above floor,at floor,0.5,,,,True")
    concat = next(line for line in lines if line.startswith("concat,bert-2 concat_last_four,bert-2 embeddings,"))
    assert concat.endswith(",5.1,above,False")  # -40 on ours: the paper's +5.1 is above the interval
    text = (tmp_path / "reports" / "scaling.md").read_text()
    assert "**An interim report: 9 of the sweep's 27 runs are finished**" in text
    report.write(tmp_path / "whole", SPEC, found, "smoke", "abc1234", (27, 27))
    assert "interim" not in (tmp_path / "whole" / "scaling.md").read_text()
    assert "| 2 steps, 2.46M tokens | 0.500 / — | +30.0 [" in text
    assert "] reproduced; a side is at its floor, where effects are compressed (91.0 vs 61.0; B **at floor**) |" in text
    assert "Floor (the floor): 60.0." in text
    assert "| 4 steps, not run | — / — | not measured: bert-4 finetune: not run |" in text
    assert "| pretraining | held-out ppl / unigram (A / B) | 32 examples | all examples (lr 0.0001) |" in text
    assert ("| Pretraining helps: SST-2 | 32 examples | reproduced at every budget measured (2.46M tokens); 1 of 2 "
            "budgets measured | none |") in text
    assert "contradicted; the paper's size ruled out: its +5.1 is above the interval (40.0 vs 80.0) |" in text
    assert "The paper's A − B: +5.1." in text and "The paper's A − B: none." in text
    assert "| concat beats embeddings | all examples (lr 0.0001) | not measured |" in text
    points = (tmp_path / "reports" / "scaling" / "pretraining_sst2.csv").read_text().splitlines()
    assert points[0] == ",".join(report.PLOT_FIELDS) and len(points) == 1 + 2  # step 2's two budgets; step 4 not run
    assert points[1].startswith("2457600,30.0,") and points[1].endswith(",reproduced,32 examples")
    for png in ("concat", "pretraining_sst2"):
        assert (tmp_path / "reports" / "scaling" / f"{png}.png").read_bytes()[:4] == b"\x89PNG"


def line(*verdicts: str) -> list[scaling_rows.Row]:
    """One claim at one fine-tuning budget over pretraining budgets of 1, 2, ... steps (1M tokens a step)."""
    nan = float("nan")
    return [scaling_rows.Row({}, "a", "b", "accuracy", steps, {"examples": 32}, ({"train_tokens": steps * 1_000_000}, {}),
                       report.stats.Contrast(nan if v == "not measured" else 1.0, nan, nan, v, 10, 1, 1), "")
            for steps, v in enumerate(verdicts, start=1)]


@pytest.mark.parametrize("verdicts, where", [
    (["unresolved at this scale", "unresolved at this scale", "reproduced", "reproduced"],
     "reproduced from 3.00M tokens on (below: unresolved at this scale at 1.00M tokens to 2.00M tokens)"),
    (["reproduced", "unresolved at this scale"],
     "not within the budgets run: unresolved from 2.00M tokens on (below: reproduced at 1.00M tokens)"),
    (["contradicted", "contradicted", "not measured"],
     "contradicted at every budget measured (1.00M tokens to 2.00M tokens); 2 of 3 budgets measured"),
    (["unresolved at this scale"], "not within the budgets run: unresolved at every budget measured (1.00M tokens)"),
    (["not measured", "not measured"], "not measured"),
])
def test_where_a_claim_resolves_is_the_verdict_it_keeps_to_the_largest_budget(verdicts: list[str],
                                                                               where: str) -> None:
    assert report.settles(line(*verdicts)) == where


@pytest.mark.parametrize("key, value, message", [
    ("pretrain_steps", [0, 2], "scaling.pretrain_steps=[0, 2]: expected a list of steps >= 1"),
    ("finetune_budgets", [{"examples": -1}], "scaling.finetune_budgets: {'examples': -1}: expected"),
    ("seeds", [], "scaling.seeds=[]: expected a list of integers"),
    ("workers", 0, "scaling.workers=0: expected runs at once"),
    ("report_only", "yes", "scaling.report_only='yes': expected true or false"),
    ("task_budgets", {"sst2": [{"examples": 0}]}, "scaling.finetune_budgets: {'examples': 0}: expected"),
    ("task_budgets", {"mnli": [{"examples": 8}]}, "scaling.task_budgets.mnli=[{'examples': 8}]: expected a task"),
    ("claims", [{"task": "sst2", "a": ["bert", "probe"], "b": ["scratch", "finetune"]}],
     "scaling.claims[0].a=['bert', 'probe']: expected [encoder, mode]"),
    ("claims", [{"task": "sst2", "a": ["bret", "finetune"], "b": ["scratch", "finetune"]}],
     "scaling.claims[0].a=['bret', 'finetune']: expected [encoder, mode], the mode one of finetune, embeddings, "
     "concat_last_four, the encoder one of scaling.encoders (bert, scratch)"),
    ("claims", [{"task": "ppl", "a": ["bert", "finetune"], "b": ["scratch"]}],
     "scaling.claims[0].a=['bert', 'finetune']: expected [encoder], the encoder one of"),
    ("claims", [{"task": "mnli", "a": ["bert", "finetune"], "b": ["scratch", "finetune"]}],
     "scaling.claims[0].task='mnli': not ppl or a task of ablations.columns"),
    ("encoders", {"bert": "objective=mlm"}, "scaling.encoders={'bert': 'objective=mlm'}: expected names"),
])
def test_a_bad_grid_is_one_line_naming_the_setting(key: str, value: Any, message: str) -> None:
    with pytest.raises(UserError, match=None) as err:
        check_grid({**SPEC, key: value}, COLUMNS, "cpu")
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_a_profile_without_a_grid_names_the_file_to_add() -> None:
    with pytest.raises(UserError, match=r"conf/scaling/paper.yaml"):
        check_grid(None, COLUMNS, "paper")


@pytest.mark.parametrize("profile", ["smoke", "cpu", "gpu"])
def test_each_profiles_grid_is_accepted_and_plans_its_runs(profile: str) -> None:
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from bertlab.stage import CONF_DIR

    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose("config", [f"profile={profile}"])
    spec = OmegaConf.to_container(cfg.scaling, resolve=True)
    columns = OmegaConf.to_container(cfg.ablations.columns, resolve=True)
    check_grid(spec, columns, profile)
    pretrain = [j for j in plan(spec) if j.stage == "pretrain"]
    named = {side[0] for c in spec["claims"] for side in (c["a"], c["b"])}
    assert len(pretrain) == 1 + (len(named) - 1) * len(spec["pretrain_steps"])  # scratch once, the rest per budget
    if profile == "gpu":  # the whole training set is one of the fine-tuning budgets
        assert None in [b["examples"] for b in spec["finetune_budgets"]]
    if profile == "cpu":  # fine-tuning budgets up to a large share of the training set (QNLI: 32k of 105k)
        assert max(b["examples"] for b in sweep.budgets(spec, "qnli")) >= 32_000


def declared(name: str) -> dict[str, Any]:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.load(Path(CONF_DIR) / name))


def test_each_claims_paper_effect_is_looked_up_in_the_studys_declaration() -> None:
    """conf/scaling/base.yaml names the rows; conf/ablations/default.yaml holds the paper's numbers."""
    effects = sweep.paper_effects(declared("scaling/base.yaml"), declared("ablations/default.yaml"))
    assert effects["nsp_qnli"] == pytest.approx(88.4 - 84.9)  # Table 5, QNLI: +3.5
    assert effects["concat_beats_embeddings"] == pytest.approx(96.1 - 91.0)  # Table 7
    assert effects["depth_sst2_12_6"] == pytest.approx(92.9 - 91.3)  # Table 6, 12 vs 6 layers
    assert effects["mlm_beats_ltr_squad"] == pytest.approx(88.5 - 77.8)
    assert effects["depth_qnli_12_6"] is None  # Table 6 has no QNLI
    assert effects["depth_ppl_12_6"] is None  # the paper's perplexities are not comparable with ours
    assert effects["pretraining_sst2"] is None  # no `paper`: never-pretrained is ours, not the paper's


def test_a_claims_paper_effect_goes_beside_each_interval(work: Path) -> None:
    def at(paper: float) -> dict[tuple, scaling_rows.Row]:
        found = scaling_rows.rows(SPEC, work, COLUMNS, BOOTSTRAP, {"pretraining_sst2": paper})
        return {(r.claim["id"], r.steps, r.budget["examples"]): r for r in found}

    near, far = at(3.5), at(30.0)
    tie = near["pretraining_sst2", 2, None]  # 70 vs 70 on 200 items: an interval some points wide
    assert report.stats.reading(tie.contrast, tie.paper, tie.compressed) == (
        "unresolved at this scale; the paper's size holds: the interval admits its +3.5")
    tie = far["pretraining_sst2", 2, None]
    assert report.stats.reading(tie.contrast, tie.paper, tie.compressed) == (
        "unresolved at this scale; the paper's size ruled out: its +30.0 is above the interval")
    assert near["pretraining_sst2", 2, 32].compressed and not tie.compressed  # scratch's 61.0: at its 60.0 floor
    assert near["concat", 2, 32].paper is None  # a claim `papers` does not name
    # the summary sets the paper's effect against the interval of the largest pretraining budget measured
    line = [r for (claim, _, budget), r in far.items() if claim == "pretraining_sst2" and budget is None]
    assert report._paper_at_largest(line) == "+30.0: outside (above) the interval"
    assert report._paper_at_largest([near["concat", 2, 32]]) == "none"


@pytest.mark.parametrize("paper", [{"table": "table9", "a": "bert-finetune", "b": "nonsp-finetune"},
                                   {"table": "table5", "a": "bert-finetune", "b": "bert-probe"}, "table5"])
def test_a_bad_paper_reference_is_one_line_naming_it(paper: Any) -> None:
    spec = {**SPEC, "claims": [{**SPEC["claims"][0], "paper": paper}]}
    with pytest.raises(UserError, match=r"^scaling\.claims\[0\]\.paper=.*: expected \{table: a table of ablations"):
        sweep.paper_effects(spec, declared("ablations/default.yaml"))

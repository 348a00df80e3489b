"""Extending the study never silently trains the wrong model: which layer wins (and each run's provenance), runs
that would be one refused, grids a profile sets, a task in several tables, a kind that owns its metric's direction,
counts beyond their declaration refused. Each test builds its own small study."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml
from hydra import compose, initialize_config_dir

from bertlab import layers, settings, study
from bertlab.configs import write_all
from bertlab.errors import UserError
from bertlab.kinds.base import Scored
from bertlab.report import stats
from bertlab.report.cells import Cell
from bertlab.report.claims import decide
from bertlab.report.multiboot import multi_bootstrap
from bertlab.report.tinterval import run_part
from bertlab.stage import CONF_DIR, follow_params
from tests.unit.test_multiboot import study as runs_study

PARAMS = {"profile": "smoke", "corpus": "mirror"}
DECLARED: dict = yaml.safe_load((Path(CONF_DIR) / "ablations" / "default.yaml").read_text())
VARIANT = "# 15% masking whatever the profile's rate\nname: mlm15\ndata: nsp\nnsp: true\ncausal: false\nmlm_probability: 0.15\n"


def small(**change: object) -> dict:
    """A study of `bert` and `nonsp` on SST-2, one pretraining run and seed each, and no claims."""
    return DECLARED | {"encoders": {"bert": ["objective=mlm_nsp"], "nonsp": ["objective=mlm"]},
                       "modes": {"finetune": []}, "twins": {}, "pretrain_seeds": [1], "seeds": [1],
                       "tables": {"t": {"tasks": ["sst2"], "rows": {"bert-finetune": {}, "nonsp-finetune": {}}}},
                       "cells": {}, "claims": []} | change


@pytest.fixture
def variant_conf(tmp_path: Path) -> Path:
    """conf/ with a new objective file that sets its own masking rate, as docs/design.md says to add one."""
    conf = tmp_path / "conf"
    shutil.copytree(CONF_DIR, conf)
    (conf / "objective" / "mlm15.yaml").write_text(VARIANT)
    return conf


def test_an_objectives_own_setting_wins_over_the_profile_and_the_provenance_says_so(variant_conf: Path) -> None:
    """cpu masks 40% (conf/profile/cpu.yaml); a variant's file that sets 15% trains at 15%, not as `bert`'s twin."""
    with initialize_config_dir(config_dir=str(variant_conf), version_base="1.3"):
        bert = compose(config_name="config", overrides=["profile=cpu", "objective=mlm_nsp"])
        variant = compose(config_name="config", overrides=["profile=cpu", "objective=mlm15"])
        labelled = [("profile=cpu", "params.yaml"), ("objective=mlm15", "ablations.encoders.mlm15"),
                    ("pretrain.max_steps=0", "ablations.encoders.mlm15")]
        composed = compose(config_name="config", overrides=[o for o, _ in labelled])
        where = layers.provenance(variant_conf, settings.resolved(composed), ["objective", "pretrain"], labelled)
    assert (bert.objective.mlm_probability, variant.objective.mlm_probability) == (0.4, 0.15)
    assert where["objective.mlm_probability"] == "conf/objective/mlm15.yaml, over conf/config.yaml, conf/profile/cpu.yaml"
    assert where["objective.nsp"] == "conf/objective/mlm15.yaml"
    assert where["pretrain.max_steps"] == ("ablations.encoders.mlm15, over conf/pretrain/default.yaml, "
                                           "conf/profile/cpu.yaml")
    assert where["pretrain.lr"] == "conf/profile/cpu.yaml, over conf/pretrain/default.yaml"


def test_every_training_runs_config_records_its_provenance(tmp_path: Path) -> None:
    write_all(PARAMS, tmp_path / "configs", small(encoders={"bert": ["objective=mlm_nsp"],
                                                            "nonsp": ["objective=mlm", "pretrain.lr=0.002"]}))
    run = yaml.safe_load((tmp_path / "configs/pretrain/nonsp/run/nonsp-1.yaml").read_text())
    assert run["provenance"]["pretrain.lr"] == ("ablations.encoders.nonsp, over conf/pretrain/default.yaml, "
                                                "conf/profile/smoke.yaml")
    assert run["provenance"]["objective.data"] == "conf/objective/mlm.yaml"
    cell = yaml.safe_load((tmp_path / "configs/finetune/bert/cell/sst2-bert-finetune-1-1.yaml").read_text())
    assert cell["provenance"]["task.name"] == "conf/task/sst2.yaml"
    assert cell["provenance"]["seed"] == "ablations.seeds, over conf/config.yaml"


def test_a_profiles_cell_override_of_what_a_mode_declares_is_refused(tmp_path: Path) -> None:
    spec = small(modes={"finetune": [], "last": ["finetune.mode=feature_based", "finetune.features=last"]},
                 tables={"t": {"tasks": ["sst2"], "rows": {"bert-last": {}, "nonsp-finetune": {}}}},
                 cells={"finetune": {"t": {"sst2": ["finetune.features=sum_all"]}}})
    with pytest.raises(UserError, match=re.escape(
            "ablations.cells.finetune.t.sst2: sets finetune.features, which ablations.modes.last declares "
            "(finetune.features=last): a profile's cell overrides set a budget, never what a row is")):
        write_all(PARAMS, tmp_path / "configs", spec)
    assert not (tmp_path / "configs").exists()


def test_two_encoders_that_compose_to_one_model_are_refused_unless_twins(tmp_path: Path) -> None:
    """At smoke's scale (layers / 3) a 2-layer and a 3-layer encoder are both 1 layer: one model under two names."""
    sizes = {"a": ["model=L3_H768_A12"], "b": ["model=L3_H768_A12", "model.num_layers=1"]}
    spec = small(encoders=sizes, tables={"t": {"tasks": [], "rows": {"a-finetune": {}, "b-finetune": {}}}})
    with pytest.raises(UserError, match=re.escape(
            "ablations.encoders: a and b compose to one model at this profile (both 1/48/12 layers/hidden/heads")):
        write_all(PARAMS, tmp_path / "configs", spec)
    assert not (tmp_path / "configs").exists()
    write_all(PARAMS, tmp_path / "configs", spec | {"twins": {"b": "a"}})  # declared: one training serves both
    left_out = spec | {"cells": {"skip": {"b": "not at this profile"}}}
    write_all(PARAMS, tmp_path / "left_out", left_out)  # only one of them runs here


def test_two_rows_that_are_one_run_and_a_claim_of_a_model_against_itself_are_refused(tmp_path: Path) -> None:
    modes = {"finetune": [], "last": ["finetune.mode=feature_based", "finetune.features=last"],
             "top": ["finetune.features=last", "finetune.mode=feature_based"]}
    rows = small(modes=modes, tables={"t": {"tasks": ["sst2"], "rows": {
        "bert-last": {}, "bert-top": {}, "nonsp-finetune": {}}}})
    with pytest.raises(UserError, match=re.escape("ablations.tables: rows bert-last and bert-top compose to one "
                                                  "fine-tuning run (sst2-bert-last-1-1 = sst2-bert-top-1-1)")):
        write_all(PARAMS, tmp_path / "rows", rows)
    twins = small(encoders={"bert": ["objective=mlm_nsp"], "copy": ["objective=mlm_nsp"]}, twins={"copy": "bert"},
                  tables={"t": {"tasks": ["sst2"], "rows": {"bert-finetune": {}, "copy-finetune": {}}}},
                  claims=[{"id": "same", "table": "t", "text": "x", "better": "copy-finetune", "than": "bert-finetune"}])
    with pytest.raises(UserError, match=re.escape("ablations.claims 'same': copy-finetune and bert-finetune are one "
                                                  "model at this profile")):
        write_all(PARAMS, tmp_path / "claim", twins)
    write_all(PARAMS, tmp_path / "configs", twins | {"claims": []})


def test_a_task_may_be_a_column_of_several_tables_its_cell_trained_once(tmp_path: Path) -> None:
    tables = {"t": {"tasks": ["sst2", "mrpc"], "rows": {"bert-finetune": {}, "nonsp-finetune": {}}},
              "u": {"tasks": ["mrpc"], "rows": {"bert-finetune": {}}}}
    spec = small(tables=tables)
    cells = [c for c in study.cells(spec) if c.task == "mrpc" and c.row == "bert-finetune"]
    assert [(c.name, c.tables) for c in cells] == [("mrpc-bert-finetune-1-1", ("t", "u"))]
    write_all(PARAMS, tmp_path / "configs", spec)
    cell = yaml.safe_load((tmp_path / "configs/finetune/bert/cell/mrpc-bert-finetune-1-1.yaml").read_text())
    assert cell["logger"]["tags"] == ["t", "u"]
    budgets = {"finetune": {"u": {"mrpc": ["finetune.max_train_examples=64"]}}}
    with pytest.raises(UserError, match=re.escape("ablations.cells.finetune: mrpc x bert-finetune is a cell of t and "
                                                  "u, which give it [] and ['finetune.max_train_examples=64']")):
        write_all(PARAMS, tmp_path / "budgets", spec | {"cells": budgets})


def test_a_profile_sets_its_own_pretraining_seeds() -> None:
    from bertlab.configs import read_study

    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose(config_name="config", overrides=[
            "profile=smoke", "ablations.pretrain_seeds=[1,2,3,4,5]", "+ablations.cells.pretrain_seeds.bert=5"])
    spec, policy = read_study(cfg)
    assert spec["pretrain_seeds"] == [1, 2, 3, 4, 5] and policy["pretrain_seeds"]["bert"] == 5


def test_runs_paired_on_the_seeds_both_sides_ran_the_rest_drawn_apart() -> None:
    """A with 5 pretraining runs, B with the first 3 of A's seeds, run effects mostly the seed's: pairing the 3
    shared runs takes the shared seeds' variance out of the t interval's run part (on the shared runs' 2 degrees of
    freedom) against drawing all runs apart; all runs shared is the paired bootstrap."""
    parts = {"apart": [], "shared": []}
    for i in range(8):
        a, b = runs_study(np.random.default_rng(i), (0.7, 0.7), runs=5, shared=0.9, sd_run=0.04)
        for key, shared in (("apart", 0), ("shared", 3)):
            c = multi_bootstrap(a, b[:3], "classification", "accuracy", paired=False, shared=shared, draws=500)
            parts[key].append(run_part(np.array(c.scores_a), np.array(c.scores_b), False, shared)[0])
    assert np.mean(parts["shared"]) < 0.5 * np.mean(parts["apart"])
    paired = multi_bootstrap(a, b, "classification", "accuracy", paired=True, draws=500, seed=3)
    shared = multi_bootstrap(a, b, "classification", "accuracy", paired=False, shared=5, draws=500, seed=3)
    assert (paired.low, paired.high) == (shared.low, shared.high)


def cell(side: list, seeds: list[int]) -> Cell:
    """A report cell of `side`'s runs (`tests.unit.test_multiboot.study`'s, one fine-tuning seed each) at `seeds`."""
    return Cell("ok", tuple(float(np.mean(r[0]["pred"] == r[0]["label"])) for r in side), tuple(seeds),
                kind="classification", metric="accuracy", scored_on="validation", n_items=400,
                runs=tuple(r[0] for r in side))


def test_a_claim_pairs_the_seeds_its_sides_share() -> None:
    a, b = runs_study(np.random.default_rng(7), (0.7, 0.7), runs=5, shared=0.9, sd_run=0.04)
    boot = {"draws": 2000, "seed": 0, "level": 0.95}
    mixed, _ = decide(cell(a, [1, 2, 3, 4, 5]), cell([b[2], b[0], b[1]], [3, 1, 2]), "A", "B", boot)
    pairs = multi_bootstrap([[r[0]] for r in a[:3]], [[r[0]] for r in b[:3]], "classification", "accuracy",
                            paired=True, draws=2000, seed=0)
    assert (mixed.estimate, mixed.low, mixed.high) == (pairs.estimate, pairs.low, pairs.high)


def test_more_runs_of_one_side_never_widen_the_interval() -> None:
    """Run effects mostly the pretraining seed's (90% shared): A's 2 runs at seeds B never ran carry their seeds'
    effect, which pairing takes out. Drawn apart beside the 3 paired runs they widen the interval in most studies
    (`multi_bootstrap(shared=3)` on all runs: 16.1 against 9.8 points wide on average, wider in 19 of 20); a claim
    leaves them out of the contrast, so A's interval with 5 runs is its interval with 3."""
    boot, wider = {"draws": 500, "seed": 0, "level": 0.95}, 0
    for i in range(10):
        a, b = runs_study(np.random.default_rng(i), (0.7, 0.7), runs=5, shared=0.9, sd_run=0.04)
        five, _ = decide(cell(a, [1, 2, 3, 4, 5]), cell(b[:3], [1, 2, 3]), "A", "B", boot)
        three, _ = decide(cell(a[:3], [1, 2, 3]), cell(b[:3], [1, 2, 3]), "A", "B", boot)
        assert (five.low, five.high) == (three.low, three.high)
        apart = multi_bootstrap([[r[0]] for r in a], [[r[0]] for r in b[:3]], "classification", "accuracy",
                                paired=False, shared=3, draws=500)
        wider += apart.high - apart.low > three.high - three.low
    assert wider >= 8


def test_a_kind_says_which_of_its_metrics_are_lower_is_better(monkeypatch: pytest.MonkeyPatch) -> None:
    class Errors(Scored):
        name, metrics, lower_is_better = "errors", ("wer",), ("wer",)

        def item_stats(self, metric: str, cols: stats.Columns) -> np.ndarray:
            return np.asarray(cols["pred"], dtype=np.float64)[:, None]

    monkeypatch.setitem(stats.SCORED, "errors", Errors())
    assert not stats.higher_is_better("wer") and not stats.higher_is_better("ppl")
    assert stats.higher_is_better("accuracy")


def test_a_new_kinds_module_is_in_every_stage_that_reads_the_kinds() -> None:
    """dvc.yaml names the kinds' folder, not its files: a new kind's module is a dep of each stage with no edit."""
    for name, stage in yaml.safe_load((Path(CONF_DIR).parent / "dvc.yaml").read_text())["stages"].items():
        deps = stage.get("do", stage)["deps"]
        assert not [d for d in deps if d.startswith("src/bertlab/kinds/")], name


def test_help_shows_the_values_of_params_yamls_profile(tmp_path: Path) -> None:
    params = tmp_path / "params.yaml"
    params.write_text("profile: smoke\ncorpus: auto\n")
    assert follow_params(["--help"], params) == ["--help", "profile=smoke"]
    assert follow_params(["--help", "profile=cpu"], params) == ["--help", "profile=cpu"]

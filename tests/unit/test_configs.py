"""The `configs` stage: every run's composed config, and key files that ignore speed-only settings."""

import re
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from bertlab import stage, study
from bertlab.configs import DUMPER, Dumps, runs, write_all
from bertlab.errors import UserError
from bertlab.runs import RESULT_KEYS, pretrain_key
from bertlab.stage import CONF_DIR, follow_params
from tests.helpers import REPO

PARAMS = {"profile": "smoke", "corpus": "mirror"}
PROFILES = sorted(p.stem for p in (Path(CONF_DIR) / "profile").glob("*.yaml"))
DECLARED: dict = yaml.safe_load((Path(CONF_DIR) / "ablations" / "default.yaml").read_text())
# A small study: two encoders at two pretraining seeds, two modes, three seeds; each encoder runs 1 pretraining seed
# (`bert` 2), each task 1 seed, SST-2 and CoNLL-2003 2 (`cells`).
SPEC = DECLARED | {
    "encoders": {"bert": ["objective=mlm_nsp"], "ltr": ["objective=ltr"]},
    "modes": {"finetune": [], "sum_all": ["finetune.mode=feature_based", "finetune.features=sum_all"]},
    "twins": {},
    "pretrain_seeds": [1, 2],
    "seeds": [1, 2, 3],
    "tables": {"table5": {"tasks": ["sst2", "mrpc"], "rows": {"bert-finetune": {}, "ltr-finetune": {}}},
               "table7": {"tasks": ["conll2003"], "rows": {"bert-sum_all": {}}}},
}
POLICY = {"pretrain_seeds": {"default": 1}, "seeds": {"default": 1, "sst2": 2, "conll2003": 2}, "skip": {}}


def compose_with(*overrides: str):
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


def test_runs_expand_the_pipeline_from_the_declaration() -> None:
    listed = list(runs(PARAMS, SPEC, POLICY))
    names = [(r.stage, r.name) for r in listed]
    assert names[:5] == [("download", "download"), ("tokenizer", "tokenizer"), ("pretrain_data", "pretrain_data"),
                         ("pretrain", "bert-1"), ("pretrain", "bert-2")]
    assert next(r for r in listed if r.name == "ltr-2").overrides == [
        "profile=smoke", "corpus=mirror", "name=ltr", "seed=2", "objective=ltr"]
    cells = sum(len(t["tasks"]) * len(t["rows"]) for t in SPEC["tables"].values()) * len(SPEC["seeds"]) * 2
    assert sum(r.stage == "finetune" for r in listed) == cells  # rows x tasks x pretraining runs x seeds: a job each
    assert ("finetune", "mrpc-ltr-finetune-1-2") in names and names[-1] == ("ablations", "ablations")
    (run,) = [r for r in listed if r.name == "conll2003-bert-sum_all-2-3"]
    assert run.overrides == ["profile=smoke", "corpus=mirror", "name=conll2003-bert-sum_all-2-3",
                             "finetune.encoder=bert", "finetune.pretrain_seed=2", "task=conll2003", "seed=3",
                             "finetune.mode=feature_based", "finetune.features=sum_all"]
    assert run.tags == ("table7",) and run.encoder == "bert"
    assert next(r for r in listed if r.name == "bert-2").tags == ("table5", "table7")


def test_the_profile_leaves_out_seeds_beyond_a_tasks_count_and_what_it_skips() -> None:
    """`ablations.cells`: each encoder its first n pretraining seeds and each task its first n seeds (`default` for the
    rest), and a task or encoder left out, with why."""
    def left_out(policy: dict) -> dict[str, str | None]:
        return {r.name: r.not_run for r in runs(PARAMS, SPEC, policy) if r.stage in ("pretrain", "finetune")}

    capped = left_out(POLICY)
    ran = {name for name, why in capped.items() if why is None}
    assert ran == {"bert-1", "ltr-1", "sst2-bert-finetune-1-1", "sst2-bert-finetune-1-2", "sst2-ltr-finetune-1-1",
                   "sst2-ltr-finetune-1-2", "mrpc-bert-finetune-1-1", "mrpc-ltr-finetune-1-1",
                   "conll2003-bert-sum_all-1-1", "conll2003-bert-sum_all-1-2"}
    assert capped["mrpc-bert-finetune-1-2"] == "seed 2: mrpc runs the first 1 of ablations.seeds (ablations.cells.seeds)"
    second = ("pretraining seed 2: bert runs the first 1 of ablations.pretrain_seeds (ablations.cells.pretrain_seeds)")
    assert capped["bert-2"] == capped["sst2-bert-finetune-2-1"] == second
    both = left_out(POLICY | {"pretrain_seeds": {"default": 1, "bert": 2}})
    assert {n for n, why in both.items() if why is None} - ran == {
        "bert-2", "sst2-bert-finetune-2-1", "sst2-bert-finetune-2-2", "mrpc-bert-finetune-2-1",
        "conll2003-bert-sum_all-2-1", "conll2003-bert-sum_all-2-2"}
    table7 = left_out({"seeds": {}, "pretrain_seeds": {"table7": 1}, "skip": {}})  # a table's cells on fewer runs
    assert table7["bert-2"] is None and table7["sst2-bert-finetune-2-1"] is None
    assert table7["conll2003-bert-sum_all-2-1"] == (
        "pretraining seed 2: table7's cells run on the first 1 of ablations.pretrain_seeds "
        "(ablations.cells.pretrain_seeds)")
    skipped = left_out({"seeds": {}, "skip": {"ltr": "no causal runs here", "mrpc": "at its floor"}})
    assert skipped["ltr-2"] == "ltr: no causal runs here" and skipped["sst2-ltr-finetune-1-3"] == skipped["ltr-2"]
    assert skipped["mrpc-bert-finetune-1-1"] == "mrpc: at its floor"
    assert {n for n, why in skipped.items() if why is None} == {
        "bert-1", "bert-2", *(f"{t}-bert-{m}-{p}-{s}" for t, m in (("sst2", "finetune"), ("conll2003", "sum_all"))
                              for p in (1, 2) for s in (1, 2, 3))}


def test_the_profile_sets_a_tables_budget_on_its_tasks_cells_only() -> None:
    """`ablations.cells.finetune`: a table's task -> overrides, after the mode's, on that table's cells of that task."""
    policy = POLICY | {"finetune": {"table5": {"sst2": ["finetune.max_train_examples=16000"]}}}
    def overrides(policy: dict) -> dict[str, list[str]]:
        return {r.name: r.overrides for r in runs(PARAMS, SPEC, policy) if r.stage == "finetune"}

    budgeted, plain = overrides(policy), overrides(POLICY)
    assert budgeted["sst2-ltr-finetune-1-2"][-2:] == ["seed=2", "finetune.max_train_examples=16000"]
    changed = {name for name in plain if budgeted[name] != plain[name]}
    assert changed == {f"sst2-{row}-{p}-{s}" for row in ("bert-finetune", "ltr-finetune") for p in (1, 2)
                       for s in (1, 2, 3)}


@pytest.mark.parametrize(("change", "message"), [
    ({"tables": {"t": {"tasks": ["sst2"], "rows": {"bert-bilstm": {}}}}},
     "ablations.tables.t.rows: 'bert-bilstm' is not <encoder>-<mode> of ablations.modes (finetune, sum_all)"),
    ({"tables": {"t": {"tasks": ["sst2"], "rows": {"nonsp-finetune": {}}}}},
     "'nonsp-finetune' is not <encoder>-<mode> of ablations.encoders (bert, ltr)"),
    ({"tables": {"t": {"tasks": ["nope"], "rows": {}}}}, "ablations.tables.t.tasks: 'nope' has no entry in"),
    ({"tables": {"a": {"tasks": ["sst2"], "rows": {"bert-finetune": {}}}}},
     "ablations.encoders.ltr: no table has a row on it (its stages would pretrain what nothing reads)"),
    ({"twins": {"ltr": "nonsp"}}, "ablations.twins: ltr: nonsp is not two encoders of ablations.encoders"),
    ({"encoders": {"my-bert": []}}, "ablations.encoders: 'my-bert' is not a name"),
    ({"seeds": [1, 1]}, "ablations.seeds=[1, 1]: expected a list of distinct integers"),
    ({"pretrain_seeds": []}, "ablations.pretrain_seeds=[]: expected a list of distinct integers"),
])
def test_a_declaration_that_makes_no_grid_is_one_line_naming_it(change: dict, message: str) -> None:
    with pytest.raises(UserError, match=re.escape(message)):
        study.check(SPEC | change)


@pytest.mark.parametrize(("policy", "message"), [
    ({"seeds": {"nope": 2}}, "ablations.cells.seeds.nope: not a task of ablations.columns"),
    ({"seeds": {"sst2": 0}}, "ablations.cells.seeds.sst2=0: expected a count from 1 to 3 (ablations.seeds"),
    ({"seeds": {"sst2": 4}}, "ablations.cells.seeds.sst2=4: expected a count from 1 to 3 (ablations.seeds"),
    ({"pretrain_seeds": {"nonsp": 1}}, "ablations.cells.pretrain_seeds.nonsp: not an encoder of ablations.encoders "
                                       "nor a table"),
    ({"pretrain_seeds": {"bert": 3}}, "ablations.cells.pretrain_seeds.bert=3: expected a count from 1 to 2"),
    ({"skip": {"nonsp": "x"}}, "ablations.cells.skip.nonsp: not a task of ablations.columns nor an encoder"),
    ({"skip": {"sst2": ""}}, "ablations.cells.skip.sst2: give the reason the report prints"),
    ({"finetune": {"table6": {}}}, "ablations.cells.finetune.table6: not a table of ablations.tables (table5, table7)"),
    ({"finetune": {"table7": {"sst2": []}}},
     "ablations.cells.finetune.table7.sst2: not a task of ablations.tables.table7"),
    ({"finetune": {"table5": {"sst2": "finetune.lr=1"}}}, "ablations.cells.finetune.table5.sst2: expected a list of"),
    ({"finetune": {"table5": ["sst2"]}}, "ablations.cells.finetune.table5: expected tasks of the table"),
])
def test_a_bad_cells_setting_is_one_line_naming_it(policy: dict, message: str) -> None:
    with pytest.raises(UserError, match=re.escape(message)):
        study.check_policy(policy, SPEC)


def test_written_configs_are_complete_and_keys_are_results_only(tmp_path: Path) -> None:
    assert write_all(PARAMS, tmp_path / "configs", SPEC) == 3 + 2 * 2 + 15 * 2 + 1
    cell = tmp_path / "configs/finetune/ltr/cell/sst2-ltr-finetune-1-2.yaml"
    assert cell.read_text().startswith("# @package _global_\n")  # a config of the group `cell` of ltr's multirun
    full = yaml.safe_load(cell.read_text())
    assert full["finetune"]["encoder"] == "ltr" and full["task"]["name"] == "sst2" and full["seed"] == 2
    assert full["finetune"]["pretrain_seed"] == 1
    assert full["hydra"]["run"]["dir"].endswith("hydra/finetune/sst2-ltr-finetune-1-2")
    assert full["out_dir"] == full["data_dir"]  # the pipeline's runs write its outputs; by hand, data/hand
    assert full["not_run"] is None and full["logger"]["tags"] == ["table5"]
    second = yaml.safe_load((tmp_path / "configs/finetune/ltr/cell/sst2-ltr-finetune-2-1.yaml").read_text())
    assert (second["finetune"]["pretrain_seed"], second["seed"]) == (2, 1)
    assert second["not_run"].startswith("pretraining seed 2: ltr runs the first 1 of ablations.pretrain_seeds")
    assert compose_with().out_dir == "data/hand"
    run = tmp_path / "configs/pretrain/ltr/run/ltr-2.yaml"
    assert run.read_text().startswith("# @package _global_\n")  # a config of the group `run` of ltr's multirun
    assert (yaml.safe_load(run.read_text())["name"], yaml.safe_load(run.read_text())["seed"]) == ("ltr", 2)
    key = yaml.safe_load((tmp_path / "configs/pretrain/ltr/keys/ltr-1.yaml").read_text())
    assert key["objective"]["causal"] is True and key["seed"] == 1
    assert "impl" not in key and "logger" not in key and set(key) == {"overrides", *RESULT_KEYS["pretrain"]}
    # a seed the study's cells leave out: its config and key say why (a key of its own, so running it reruns it)
    left = yaml.safe_load((tmp_path / "configs/finetune/ltr/keys/mrpc-ltr-finetune-1-2.yaml").read_text())
    assert left["not_run"] == "seed 2: mrpc runs the first 1 of ablations.seeds (ablations.cells.seeds)"
    kept = tmp_path / "configs/finetune/ltr/keys/mrpc-ltr-finetune-1-1.yaml"
    assert "not_run" not in yaml.safe_load(kept.read_text())


def test_an_encoders_multirun_composes_each_cell_as_its_own_config(tmp_path: Path) -> None:
    """data/configs/finetune/<encoder>/cells.yaml with `cell=<name>` (a job of `cell=glob(*)`) is that cell's config,
    its Hydra job logs under the encoder's sweep folder."""
    write_all(PARAMS, tmp_path / "configs", SPEC)
    folder = tmp_path / "configs/finetune/ltr"
    names = sorted(p.stem for p in (folder / "cell").glob("*.yaml"))
    assert names == sorted(p.stem for p in (folder / "keys").glob("*.yaml"))
    assert names and all("-ltr-" in n for n in names)
    with initialize_config_dir(config_dir=str(folder), version_base="1.3"):
        job = compose("cells", overrides=[f"cell={names[0]}"], return_hydra_config=True)
    alone = yaml.safe_load((folder / "cell" / f"{names[0]}.yaml").read_text())
    assert {k: v for k, v in OmegaConf.to_container(job).items() if k != "hydra"} == {
        k: v for k, v in alone.items() if k != "hydra"}
    assert job.hydra.sweep.dir.endswith("hydra/finetune/ltr") and job.hydra.sweep.subdir == names[0]
    runs_folder = tmp_path / "configs/pretrain/ltr"  # and its pretraining runs, a job a pretraining seed
    assert sorted(p.stem for p in (runs_folder / "run").glob("*.yaml")) == ["ltr-1", "ltr-2"]
    with initialize_config_dir(config_dir=str(runs_folder), version_base="1.3"):
        job = compose("runs", overrides=["run=ltr-2"], return_hydra_config=True)
    assert (job.name, job.seed, job.objective.name) == ("ltr", 2, "ltr")
    assert job.hydra.sweep.dir.endswith("hydra/pretrain/ltr") and job.hydra.sweep.subdir == "ltr-2"


def test_an_encoders_runs_train_at_once_as_impl_jobs_says(tmp_path: Path) -> None:
    """impl.jobs > 1: the multirun's jobs run that many at once, each its own process (Hydra's joblib launcher);
    1: one after another in the stage's process (Hydra's basic launcher)."""
    from bertlab.configs import write_sweep

    for jobs, launcher in ((3, "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher"),
                           (1, "hydra._internal.core_plugins.basic_launcher.BasicLauncher")):
        folder = tmp_path / str(jobs)
        write_sweep(folder, "pretrain", tmp_path / "logs", jobs)
        (folder / "run").mkdir()
        (folder / "run" / "r-1.yaml").write_text("# @package _global_\nname: r\nseed: 1\n")
        with initialize_config_dir(config_dir=str(folder), version_base="1.3"):
            job = compose("runs", overrides=["run=r-1"], return_hydra_config=True)
        assert job.hydra.launcher._target_ == launcher
        assert job.hydra.launcher.get("n_jobs") == (jobs if jobs > 1 else None)
    write_all(PARAMS, tmp_path / "configs", SPEC)  # the profile's impl.jobs (cpu's, at smoke) reaches each sweep
    jobs = yaml.safe_load((Path(CONF_DIR) / "impl" / "cpu.yaml").read_text())["jobs"]
    for sweep in [*(tmp_path / "configs/pretrain").glob("*/runs.yaml"),
                  *(tmp_path / "configs/finetune").glob("*/cells.yaml")]:
        assert yaml.safe_load(sweep.read_text())["hydra"]["launcher"] == {"n_jobs": jobs}, sweep
    ddp = SPEC | {"encoders": {**SPEC["encoders"], "bert": ["objective=mlm_nsp", "impl.devices=2"]}}
    with pytest.raises(UserError, match=rf"^pretrain run 'bert-1': impl\.jobs={jobs}: runs at once share one device; "
                                        r"with impl\.devices=2 \(several: DDP\) set impl\.jobs=1$"):
        write_all(PARAMS, tmp_path / "ddp", ddp)  # on the CPU too: DDP's processes beside the other runs'
    ddp["encoders"]["bert"].append("impl.jobs=1")  # an encoder's runs one at a time: its sweeps', the rest at once
    write_all(PARAMS, tmp_path / "ddp", ddp)
    assert "launcher" not in yaml.safe_load((tmp_path / "ddp/pretrain/bert/runs.yaml").read_text())["hydra"]
    assert yaml.safe_load((tmp_path / "ddp/pretrain/ltr/runs.yaml").read_text())["hydra"]["launcher"]["n_jobs"] == jobs


def test_a_profile_that_renames_the_encoders_is_refused() -> None:
    """dvc.yaml's stages are the declaration's encoders; seeds and tables a profile may set (`test_grids`)."""
    from bertlab.configs import read_study

    cfg = compose_with("profile=smoke", "~ablations.encoders.scratch", "~ablations.tables.table5.rows.scratch-finetune",
                       "~ablations.tables.table7.rows.scratch-finetune", "~ablations.tables.probes.rows.scratch-probe",
                       "~ablations.claims")
    with pytest.raises(UserError, match=r"ablations.encoders: the profile 'smoke' changes their names, but dvc.yaml"):
        read_study(cfg)
    spec, policy = read_study(compose_with("profile=smoke"))
    assert spec["tables"] == DECLARED["tables"] and policy == DECLARED["cells"] == POLICY
    spec, policy = read_study(compose_with("profile=cpu"))  # cpu leaves runs out with its own `cells`
    own = yaml.safe_load((Path(CONF_DIR) / "profile" / "cpu.yaml").read_text())["ablations"]["cells"]
    assert spec["tables"] == DECLARED["tables"] and policy["seeds"] == own["seeds"] and policy["pretrain_seeds"] == (
        DECLARED["cells"]["pretrain_seeds"] | own["pretrain_seeds"])
    assert set(policy["skip"]) == {"mrpc", "L6_H768_A3", "L12_H1024_A16", "L24_H1024_A16"}
    assert policy["finetune"] == {"table6": {"sst2": ["finetune.max_train_examples=16000"]}}


def test_speed_settings_never_reach_a_key_file(tmp_path: Path) -> None:
    cpu = compose_with("profile=smoke")
    gpu = compose_with("profile=smoke", "impl=gpu")
    assert cpu.impl != gpu.impl
    for stage, keys in RESULT_KEYS.items():
        assert all(not k.startswith(("impl", "logger")) for k in keys), stage


def test_profiles_shrink_the_paper_shapes_keeping_their_order() -> None:
    sizes = {}
    for shape in ("L3_H768_A12", "L6_H768_A3", "L12_H768_A12", "L24_H1024_A16"):
        m = compose_with("profile=cpu", f"model={shape}").model
        sizes[shape] = (m.num_layers, m.hidden_size, m.num_heads)
    assert sizes == {"L3_H768_A12": (1, 192, 12), "L6_H768_A3": (2, 192, 3),
                     "L12_H768_A12": (4, 192, 12), "L24_H1024_A16": (8, 256, 16)}
    paper = compose_with("profile=gpu").model
    assert (paper.num_layers, paper.hidden_size, paper.num_heads) == (12, 768, 12)


@pytest.mark.parametrize("profile", PROFILES)
def test_every_profile_composes(profile: str) -> None:
    cfg = compose_with(f"profile={profile}")
    assert cfg.profile_name == profile
    assert cfg.pretrain.max_steps > 0 and cfg.model.hidden_size % cfg.model.num_heads == 0
    assert cfg.impl.accelerator == ("auto" if profile in ("gpu", "paper") else "cpu")


def test_an_unknown_option_is_a_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="pretrain run 'bad-1'"):
        write_all(PARAMS, tmp_path / "configs", SPEC | {"encoders": {"bad": ["objective=nonsense"]},
                                                        "tables": {"t": {"tasks": [], "rows": {"bad-finetune": {}}}}})
    assert not (tmp_path / "configs").exists()


def test_the_key_holds_the_global_batch_not_how_devices_split_it(tmp_path: Path) -> None:
    keys = {}
    for name, overrides in {
        "one": [], "two": ["impl.devices=2", "impl.strategy=ddp", "impl.jobs=1"],  # DDP: one run at a time
        "nodes": ["impl=gpu", "impl.num_nodes=2"],
        "accumulated": ["impl.max_device_batch=4"], "bigger": ["pretrain.batch_size=32"],
    }.items():
        write_all(PARAMS, tmp_path / name, SPEC | {"encoders": {"bert": ["objective=mlm_nsp", *overrides]},
                                                   "tables": {"t": {"tasks": [], "rows": {"bert-finetune": {}}}}})
        cfg = compose_with("profile=smoke", *overrides)
        keys[name] = ((tmp_path / name / "pretrain/bert/keys/bert-1.yaml").read_text(), pretrain_key(cfg, []))
    assert keys["one"] == keys["two"] == keys["nodes"] == keys["accumulated"]  # key file and run key alike
    assert keys["bigger"][0] != keys["one"][0] and keys["bigger"][1] != keys["one"][1]
    assert yaml.safe_load(keys["bigger"][0])["pretrain"]["batch_size"] == 32
    assert yaml.safe_load(keys["one"][0])["pretrain"]["batch_size"] == 16  # the smoke profile's global batch


@pytest.mark.parametrize(("mirror", "preset"), [("/some/mirror", "mirror"), (None, "online")])
def test_the_auto_corpus_follows_where_the_data_come_from(monkeypatch, mirror: str | None, preset: str) -> None:
    if mirror:
        monkeypatch.setenv("BERTLAB_DATA_MIRROR", mirror)
    else:
        monkeypatch.delenv("BERTLAB_DATA_MIRROR", raising=False)
    download = next(r.overrides for r in runs(PARAMS | {"corpus": "auto"}, SPEC, POLICY) if r.stage == "download")
    assert f"corpus={preset}" in download
    assert "corpus=mirror" in next(r.overrides for r in runs(PARAMS, SPEC, POLICY) if r.stage == "download")


def test_a_profile_gives_one_task_its_own_budget(tmp_path: Path) -> None:
    """conf/profile_task/<profile>_<task>.yaml: the cpu profile's MRPC and QNLI budgets and CoNLL-2003's learning
    rate, in the runs' key files."""
    budget = {t: compose_with("profile=cpu", f"task={t}").finetune.max_train_examples for t in ("sst2", "mrpc", "qnli")}
    assert budget == {"sst2": 4800, "mrpc": 800, "qnli": 1600}
    lr = {t: compose_with("profile=cpu", f"task={t}").finetune.lr for t in ("sst2", "conll2003")}
    assert lr == {"sst2": 3e-4, "conll2003": 1e-3}
    assert compose_with("profile=gpu", "task=mrpc").finetune.max_train_examples is None  # paper's grid: all data
    assert compose_with("profile=cpu", "task=mrpc", "finetune.max_train_examples=64").finetune.max_train_examples == 64
    write_all({**PARAMS, "profile": "cpu"}, tmp_path / "configs", SPEC)
    key = {t: yaml.safe_load((tmp_path / f"configs/finetune/bert/keys/{t}-bert-finetune-1-1.yaml").read_text())
           for t in ("sst2", "mrpc")}
    assert key["sst2"]["finetune"]["max_train_examples"] == 4800
    assert key["mrpc"]["finetune"]["max_train_examples"] == 800
    conll = yaml.safe_load((tmp_path / "configs/finetune/bert/keys/conll2003-bert-sum_all-1-1.yaml").read_text())
    assert conll["finetune"]["lr"] == 1e-3


def test_cpu_full_runs_what_cpu_leaves_out_and_every_cpu_run_with_its_key(tmp_path: Path) -> None:
    """conf/profile/cpu_full.yaml: `cpu`'s recipe, task budgets and cells with its skips (MRPC, Table 6's width rows)
    lifted; every run `cpu` trains composes to the same key but for the profile's name, so on top of a `cpu` run only
    the runs `cpu` left out train."""
    widths = ("L6_H768_A3", "L12_H1024_A16", "L24_H1024_A16")  # the encoders `cpu` skips
    declared = compose_with("profile=cpu").ablations
    spec = SPEC | {"pretrain_seeds": list(declared.pretrain_seeds), "seeds": list(declared.seeds),
                   "encoders": {"bert": ["objective=mlm_nsp"], **{w: ["objective=mlm_nsp", f"model={w}", "study=size"]
                                                                 for w in widths}},
                   "tables": {"table5": {"tasks": ["sst2", "mrpc"], "rows": {"bert-finetune": {}}},
                              "table6": {"tasks": ["sst2", "mrpc"], "rows": {f"{w}-finetune": {} for w in widths}}}}
    keys = {}
    for profile in ("cpu", "cpu_full"):
        cells = OmegaConf.to_container(compose_with(f"profile={profile}").ablations.cells)  # what the profile runs
        write_all({**PARAMS, "profile": profile}, tmp_path / profile, spec | {"cells": cells})
        keys[profile] = {p.relative_to(tmp_path / profile): yaml.safe_load(p.read_text())
                         for p in (tmp_path / profile).rglob("*.yaml") if p.parent.name == "keys"}
        for key in keys[profile].values():
            assert f"profile={profile}" in key["overrides"]
            key["overrides"].remove(f"profile={profile}")
    cpu, full = keys["cpu"], keys["cpu_full"]
    assert cpu.keys() == full.keys() and len(cpu) > 20
    trained = [k for k, key in cpu.items() if not key.get("not_run")]
    skipped = [k for k, key in cpu.items() if str(key.get("not_run")).startswith(("mrpc:", *widths))]
    assert trained and all(cpu[k] == full[k] for k in trained)
    assert {str(k).split("/")[1] for k in skipped} == {"bert", *widths}
    for k in skipped:
        assert full[k].get("not_run") is None or full[k]["not_run"].startswith(("seed ", "pretraining seed "))
        assert {**full[k], "not_run": None} == {**cpu[k], "not_run": None}
    mrpc = [full[k] for k in skipped if str(k).endswith("-1-1.yaml") and "/mrpc-" in str(k)]
    assert mrpc and all(key["finetune"]["max_train_examples"] == 800 for key in mrpc)  # cpu's MRPC budget
    sst2 = [full[k] for k in skipped if "/sst2-" in str(k)]
    assert len(sst2) >= 3 and all(key["finetune"]["max_train_examples"] == 16000 for key in sst2)  # Table 6's at cpu


def test_cpu_mrpc_widths_runs_what_cpu_leaves_out_with_the_keys_cpu_full_gives_its_runs(tmp_path: Path) -> None:
    """conf/profile/cpu_mrpc_widths.yaml: every encoder (a width row included) and MRPC train with the keys `cpu_full`
    gives them (so either profile's finished runs serve the other); the tasks the default measures (QNLI here) are
    not run, each record saying why."""
    spec = SPEC | {"pretrain_seeds": [1, 2, 3], "seeds": [1],
                   "encoders": {"bert": ["objective=mlm_nsp"], "nonsp": ["objective=mlm"],
                                "scratch": ["objective=mlm_nsp", "pretrain.max_steps=0"],
                                "L6_H768_A3": ["objective=mlm_nsp", "model=L6_H768_A3", "study=size"]},
                   "tables": {"table5": {"tasks": ["qnli", "mrpc"],
                                         "rows": {f"{e}-finetune": {} for e in ("bert", "nonsp", "scratch")}},
                              "table6": {"tasks": ["mrpc", "sst2"], "rows": {"L6_H768_A3-finetune": {}}}}}
    keys = {}
    for profile in ("cpu_full", "cpu_mrpc_widths"):
        cells = OmegaConf.to_container(compose_with(f"profile={profile}").ablations.cells)
        write_all({**PARAMS, "profile": profile}, tmp_path / profile, spec | {"cells": cells})
        keys[profile] = {str(p.relative_to(tmp_path / profile)): yaml.safe_load(p.read_text())
                         for p in (tmp_path / profile).rglob("*.yaml") if p.parent.name == "keys"}
        for key in keys[profile].values():
            key["overrides"].remove(f"profile={profile}")
    full, ours = keys["cpu_full"], keys["cpu_mrpc_widths"]
    trained = {k for k, key in ours.items() if not key.get("not_run")}
    assert trained == {*(f"pretrain/{e}/keys/{e}-{s}.yaml" for e in ("bert", "nonsp", "scratch", "L6_H768_A3")
                         for s in (1, 2, 3)),  # scratch's: its initialisation
                       *(f"finetune/L6_H768_A3/keys/{t}-L6_H768_A3-finetune-{s}-1.yaml" for t in ("mrpc", "sst2")
                         for s in (1, 2, 3)),
                       *(f"finetune/{e}/keys/mrpc-{e}-finetune-{s}-1.yaml" for e in ("bert", "nonsp", "scratch")
                         for s in (1, 2, 3))}
    assert full.keys() == ours.keys() and all(full[k] == ours[k] for k in trained)
    left = {k: ours[k]["not_run"] for k in ours.keys() - trained}
    assert left.keys() == {f"finetune/{e}/keys/qnli-{e}-finetune-{s}-1.yaml" for e in ("bert", "nonsp", "scratch")
                           for s in (1, 2, 3)}
    assert all(why.startswith("qnli: ") and "the default's (reports/)" in why for why in left.values()), left


@pytest.mark.parametrize("path", ["params.yaml", "conf/ablations/default.yaml",
                                  *(f"conf/profile/{p}.yaml" for p in PROFILES)])
def test_what_dvc_reads_or_sets_has_nothing_it_would_interpolate(path: str) -> None:
    """`dvc exp run -S` resolves `${...}` in the file it sets (DVC issue 11018) and stops on Hydra's interpolations;
    dvc.yaml reads the declaration as its vars."""
    assert "${" not in (REPO / path).read_text()


def test_the_size_study_rows_train_for_the_profiles_size_study_budget() -> None:
    row = compose_with("profile=cpu", *DECLARED["encoders"]["L3_H768_A12"])
    bert = compose_with("profile=cpu", *DECLARED["encoders"]["bert"]).pretrain
    cpu = compose_with("profile=cpu").pretrain  # the cpu profile gives the size study `bert`'s budget
    assert (row.pretrain.max_steps, row.pretrain.warmup_steps) == (cpu.size_study_steps, cpu.size_study_warmup_steps)
    assert (row.pretrain.max_steps, row.pretrain.warmup_steps) == (bert.max_steps, bert.warmup_steps)
    budget = ("pretrain.size_study_steps=77", "pretrain.size_study_warmup_steps=7")  # a profile's own size budget
    row = compose_with("profile=cpu", *budget, *DECLARED["encoders"]["L3_H768_A12"]).pretrain
    assert (row.max_steps, row.warmup_steps) == (77, 7)
    assert compose_with("profile=cpu", *budget, *DECLARED["encoders"]["bert"]).pretrain.max_steps == cpu.max_steps


def test_a_run_by_hand_follows_params_yaml_unless_its_command_line_names_a_profile(tmp_path: Path) -> None:
    params = tmp_path / "params.yaml"
    params.write_text("profile: smoke\n")
    assert follow_params(["-m", "model=tiny"], params) == ["-m", "profile=smoke", "model=tiny"]
    assert stage._notices.pop().startswith("profile=smoke (params.yaml's")  # said once the command line composes
    # with the command line's overrides, whichever side of Hydra's flags they stand
    assert follow_params(["model=tiny", "--cfg", "job"], params) == ["profile=smoke", "model=tiny", "--cfg", "job"]
    assert follow_params(["--cfg", "job"], params) == ["--cfg", "job", "profile=smoke"]
    for argv in (["profile=gpu"], ["-cd", "data/configs/pretrain/bert/run", "-cn", "bert-1"], ["--config-dir=x"]):
        assert follow_params(argv, params) == argv
    assert follow_params(["x=1"], tmp_path / "absent.yaml") == ["x=1"]
    params.write_text("profile: [")
    assert follow_params(["x=1"], params) == ["x=1"]


def test_the_configs_text_is_yaml_dumps_with_each_shared_section_dumped_once() -> None:
    configs = [{"name": f"run-{i}", "seed": [1, 1.0, True][i], "model": {"layers": 4, "lr": 1e-3, "tags": ["a", "b"]},
                "empty": {}, "none": None, "long": "a long path " * 12, "nested": {"a": {"b": [1, {"c": None}]}}}
               for i in range(3)]
    dump = Dumps()
    assert [dump(c) for c in configs] == [yaml.dump(c, Dumper=DUMPER, sort_keys=False) for c in configs]
    assert len({dump(c) for c in configs}) == 3  # 1, 1.0 and true are three values
    assert len(dump.texts) == len(configs[0]) + 4  # each name and seed once more; the other sections once

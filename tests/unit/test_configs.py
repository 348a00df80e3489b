"""The `configs` stage: every run's composed config, and key files that ignore speed-only settings."""

import re
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir

from bertlab.configs import runs, write_all
from bertlab.errors import UserError
from bertlab.runs import RESULT_KEYS, pretrain_key
from bertlab.stage import CONF_DIR, follow_params
from tests.helpers import REPO

PARAMS = {
    "profile": "smoke",
    "corpus": "mirror",
    "pretrain": {"bert": ["objective=mlm_nsp"], "ltr": ["objective=ltr"]},
    "modes": {"finetune": [], "sum_all": ["finetune.mode=feature_based", "finetune.features=sum_all"]},
    "finetune": {
        "sst2": {"seeds": [1, 2], "runs": [["bert", "finetune"], ["ltr", "finetune"]]},
        "mrpc": {"seeds": [1, 2], "runs": [["bert", "finetune"], ["ltr", "finetune"]]},
        "conll2003": {"seeds": [1, 2, 3], "runs": [["bert", "sum_all"]]},
    },
}


def compose_with(*overrides: str):
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


def test_runs_expand_the_pipeline_from_params() -> None:
    names = [(stage, name) for stage, name, _ in runs(PARAMS)]
    assert names[:5] == [("download", "download"), ("tokenizer", "tokenizer"), ("pretrain_data", "pretrain_data"),
                         ("pretrain", "bert"), ("pretrain", "ltr")]
    assert sum(stage == "finetune" for stage, _ in names) == 2 * 2 * 2 + 1 * 3  # each task: runs x its own seeds
    assert ("finetune", "mrpc-ltr-finetune-2") in names and names[-1] == ("ablations", "ablations")
    (overrides,) = [o for stage, name, o in runs(PARAMS) if name == "conll2003-bert-sum_all-3"]
    assert {"finetune.mode=feature_based", "finetune.features=sum_all", "task=conll2003", "seed=3",
            "finetune.encoder=bert"} <= set(overrides)


@pytest.mark.parametrize(("run", "message"), [
    (["bert", "bilstm"], "'bilstm' is not in params.yaml `modes` (finetune, sum_all)"),
    (["nonsp", "finetune"], "'nonsp' is not in params.yaml `pretrain` (bert, ltr)"),
])
def test_a_run_with_an_unknown_encoder_or_mode_is_a_user_error(run: list[str], message: str) -> None:
    params = {**PARAMS, "finetune": {"sst2": {"seeds": [1], "runs": [run]}}}
    with pytest.raises(UserError, match=re.escape(f"finetune.sst2.runs: {message}")):
        list(runs(params))


def test_written_configs_are_complete_and_keys_are_results_only(tmp_path: Path) -> None:
    assert write_all(PARAMS, tmp_path / "configs") == 3 + 2 + 11 + 1
    full = yaml.safe_load((tmp_path / "configs/finetune/sst2-ltr-finetune-2.yaml").read_text())
    assert full["finetune"]["encoder"] == "ltr" and full["task"]["name"] == "sst2" and full["seed"] == 2
    assert full["hydra"]["run"]["dir"].endswith("hydra/finetune/sst2-ltr-finetune-2")
    assert full["out_dir"] == full["data_dir"]  # the pipeline's runs write its outputs; by hand, data/hand
    assert compose_with().out_dir == "data/hand"
    key = yaml.safe_load((tmp_path / "configs/pretrain/ltr.key.yaml").read_text())
    assert key["objective"]["causal"] is True
    assert "impl" not in key and "logger" not in key and set(key) == {"overrides", *RESULT_KEYS["pretrain"]}


def test_training_runs_carry_their_wandb_tags_the_tables_that_use_them(tmp_path: Path) -> None:
    write_all(PARAMS, tmp_path / "configs")

    def tags(stage: str, name: str) -> list[str]:
        return yaml.safe_load((tmp_path / "configs" / stage / f"{name}.yaml").read_text())["logger"]["tags"]

    assert tags("pretrain", "bert") == ["table5", "table7"] and tags("pretrain", "ltr") == ["table5"]
    assert tags("finetune", "sst2-ltr-finetune-1") == ["table5"]
    assert tags("finetune", "conll2003-bert-sum_all-1") == ["table7"]
    assert tags("download", "download") == []


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


@pytest.mark.parametrize("profile", ["smoke", "cpu", "gpu", "paper"])
def test_every_profile_composes(profile: str) -> None:
    cfg = compose_with(f"profile={profile}")
    assert cfg.pretrain.max_steps > 0 and cfg.model.hidden_size % cfg.model.num_heads == 0
    assert cfg.impl.accelerator == ("cpu" if profile in ("smoke", "cpu") else "auto")


def test_an_unknown_option_is_a_one_line_error(tmp_path: Path) -> None:
    from bertlab.errors import UserError

    with pytest.raises(UserError, match="pretrain run 'bad'"):
        write_all({**PARAMS, "pretrain": {"bad": ["objective=nonsense"]}}, tmp_path / "configs")
    assert not (tmp_path / "configs").exists()


def test_the_key_holds_the_global_batch_not_how_devices_split_it(tmp_path: Path) -> None:
    keys = {}
    for name, overrides in {
        "one": [], "two": ["impl.devices=2", "impl.strategy=ddp"], "nodes": ["impl=gpu", "impl.num_nodes=2"],
        "accumulated": ["impl.max_device_batch=4"], "bigger": ["pretrain.batch_size=32"],
    }.items():
        params = {**PARAMS, "pretrain": {"bert": ["objective=mlm_nsp", *overrides]}, "finetune": {}}
        write_all(params, tmp_path / name)
        cfg = compose_with("profile=smoke", *overrides)
        keys[name] = ((tmp_path / name / "pretrain/bert.key.yaml").read_text(), pretrain_key(cfg, []))
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
    download = next(overrides for stage, _, overrides in runs(PARAMS | {"corpus": "auto"}) if stage == "download")
    assert f"corpus={preset}" in download
    assert "corpus=mirror" in next(o for s, _, o in runs(PARAMS) if s == "download")  # a named preset stays


def test_a_profile_gives_one_task_its_own_budget(tmp_path: Path) -> None:
    """conf/profile_task/<profile>_<task>.yaml: the cpu profile's MRPC and QNLI budgets and CoNLL-2003's learning
    rate, in the runs' key files."""
    budget = {t: compose_with("profile=cpu", f"task={t}").finetune.max_train_examples for t in ("sst2", "mrpc", "qnli")}
    assert budget == {"sst2": 4800, "mrpc": 800, "qnli": 1600}
    lr = {t: compose_with("profile=cpu", f"task={t}").finetune.lr for t in ("sst2", "conll2003")}
    assert lr == {"sst2": 3e-4, "conll2003": 1e-3}
    assert compose_with("profile=gpu", "task=mrpc").finetune.max_train_examples is None  # paper's grid: all data
    assert compose_with("profile=cpu", "task=mrpc", "finetune.max_train_examples=64").finetune.max_train_examples == 64
    params = {**PARAMS, "profile": "cpu"}
    write_all(params, tmp_path / "configs")
    key = {t: yaml.safe_load((tmp_path / f"configs/finetune/{t}-bert-finetune-1.key.yaml").read_text())
           for t in ("sst2", "mrpc")}
    assert key["sst2"]["finetune"]["max_train_examples"] == 4800
    assert key["mrpc"]["finetune"]["max_train_examples"] == 800
    conll = yaml.safe_load((tmp_path / "configs/finetune/conll2003-bert-sum_all-1.key.yaml").read_text())
    assert conll["finetune"]["lr"] == 1e-3


def test_params_yaml_has_nothing_dvc_would_interpolate() -> None:
    """`dvc exp run -S` resolves `${...}` in params.yaml (DVC issue 11018) and stops on Hydra's interpolations."""
    assert "${" not in (REPO / "params.yaml").read_text()


def test_the_size_study_rows_train_for_the_profiles_size_study_budget() -> None:
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    row = compose_with("profile=cpu", *params["pretrain"]["L3_H768_A12"])
    assert (row.pretrain.max_steps, row.pretrain.warmup_steps) == (500, 250)
    assert compose_with("profile=cpu", *params["pretrain"]["bert"]).pretrain.max_steps == 2400


def test_a_run_by_hand_follows_params_yaml_unless_its_command_line_names_a_profile(tmp_path: Path, capsys) -> None:
    params = tmp_path / "params.yaml"
    params.write_text("profile: smoke\n")
    assert follow_params(["-m", "model=tiny"], params) == ["-m", "model=tiny", "profile=smoke"]
    assert "profile=smoke (params.yaml's" in capsys.readouterr().err
    for argv in (["profile=gpu"], ["-cd", "data/configs/pretrain", "-cn", "bert"], ["--config-dir=x"]):
        assert follow_params(argv, params) == argv
    assert follow_params(["x=1"], tmp_path / "absent.yaml") == ["x=1"]
    params.write_text("profile: [")
    assert follow_params(["x=1"], params) == ["x=1"]

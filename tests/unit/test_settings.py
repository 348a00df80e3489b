"""bertlab.settings: run names and choice settings checked at the door (the choices by the names the code's tables
implement; the catalogue of bad inputs through the stages: tests/e2e/test_bad_inputs.py)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from bertlab.errors import UserError
from bertlab.kinds import KINDS
from bertlab.modeling.features import FEATURES
from bertlab import kinds, settings
from bertlab.settings import CHOICES, check, check_jobs, check_name, check_presets, preset_shape
from bertlab.stage import CONF_DIR
from bertlab.tokenizer import new_tokenizer


def test_each_choice_names_what_the_code_implements() -> None:
    assert sorted(KINDS) == list(CHOICES["task.kind"])  # settings names them by their modules, without importing them
    assert FEATURES == CHOICES["finetune.features"]
    for kind in CHOICES["tokenizer.kind"]:
        new_tokenizer(kind, lowercase=True)


@pytest.mark.parametrize("key", sorted(CHOICES))
def test_a_choice_outside_its_list_is_a_one_line_error(key: str) -> None:
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose(config_name="config", overrides=["profile=smoke", f"{key}=nosuch"])
    with pytest.raises(UserError, match=f"^{key}='nosuch': expected one of {', '.join(CHOICES[key])}$"):
        check(cfg)


@pytest.mark.parametrize(("overrides", "message"), [
    (["objective.name=mlm_mask_only"], None),  # a variant is its properties: any safe name
    (["name=run", "objective.name=a/b"], "objective.name=.a/b.: it names a folder or file"),
    (["objective=mlm", "objective.nsp=true"], "objective.nsp=true: next-sentence prediction needs sentence pairs"),
    (["objective=ltr", "objective.nsp=true", "objective.data=nsp"], "objective.nsp=true: .* bidirectional"),
])
def test_an_objective_is_checked_by_its_properties_not_its_name(overrides: list[str], message: str | None) -> None:
    checks_as(overrides, message)


@pytest.mark.parametrize(("overrides", "jobs", "message"), [
    (["impl=gpu", "impl.devices=2"], 3, r"^impl\.jobs=3: runs at once share one device; with impl\.devices=2 "
                                        r"\(several: DDP\) set impl\.jobs=1$"),
    (["impl.devices=2"], 3, r"^impl\.jobs=3: .* impl\.devices=2 "),  # DDP on the CPU too
    (["impl=gpu"], 2, r"^impl\.jobs=2: .* impl\.devices='auto' "),
    (["impl=gpu", "impl.devices=1"], 3, None),  # small runs sharing one GPU
    ([], 3, None),  # the CPU's cores shared
    (["impl.devices=2"], 1, None),  # one run at a time (a run by hand: impl.jobs says nothing)
    (["impl.jobs=0"], 1, r"^impl\.jobs=0: expected an integer >= 1"),
])
def test_runs_at_once_are_refused_beside_ddp(overrides: list[str], jobs: int, message: str | None) -> None:
    checks_as(overrides, message, jobs)


def checks_as(overrides: list[str], message: str | None, jobs: int | None = None) -> None:
    """The smoke config with `overrides` passes `check` (`message` None) or is refused with `message`; given `jobs`,
    also `check_jobs`, as one of `jobs` runs at once (a stage's multirun, the pipeline's sweeps)."""
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose(config_name="config", overrides=["profile=smoke", *overrides])

    def checked() -> None:
        check(cfg)  # a run's own settings (alone: DDP or not)
        if jobs is not None:
            check_jobs(cfg, jobs)

    if message is None:
        checked()
    else:
        with pytest.raises(UserError, match=message):
            checked()


@pytest.mark.parametrize(("override", "message"), [
    ("model.num_layers=${shrink:abc,4}", r"model\.num_layers: .*invalid literal for int\(\) .*'abc'"),
    ("pretrain.lr=???", r"pretrain\.lr: no value \(\?\?\?\): set it"),
    ("+note=${nosuch}", r"note: Interpolation key .nosuch. not found"),  # not a checked setting: named too
])
def test_a_value_that_does_not_resolve_is_one_line_naming_its_setting(override: str, message: str) -> None:
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose(config_name="config", overrides=["profile=smoke", override])
    with pytest.raises(UserError) as err:
        check(cfg)
    assert re.fullmatch(message, str(err.value)), str(err.value)


@pytest.mark.parametrize("name", ["bert", "mrpc-bert-finetune-1", "sweep_L2", "lr=1e-3", "v1.2"])
def test_safe_run_names_pass(name: str) -> None:
    assert check_name(name) == name


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "../data", "a b", None, 3])
def test_unsafe_run_names_are_refused(name: object) -> None:
    with pytest.raises(UserError, match="one path component"):
        check_name(name)


@pytest.mark.parametrize(("overrides", "message"), [
    (["task=stsb"], "finetune.mode=probe: a linear probe predicts a class per example or a tag per word, not task "
                    "stsb's regression outputs"),
    (["task=squad"], "finetune.mode=probe: a linear probe predicts a class per example or a tag per word, not task "
                     "squad's span outputs"),
    (["finetune.features=sum_all"], "finetune.features=sum_all: a probe reads fixed features (embeddings, last, "
                                    "second_to_last, concat_last_four); a scalar mix is learned"),
    (["finetune.probe_cs=[]"], "finetune.probe_cs=[]: expected a list of numbers > 0 (the inverse L2 strengths the "
                               "probe's cross-validation chooses from)"),
    (["finetune.probe_cs=[0.1,-1]"], "finetune.probe_cs=[0.1, -1]: expected a list of numbers > 0 (the inverse L2 "
                                     "strengths the probe's cross-validation chooses from)"),
    (["finetune.probe_folds=1"], "finetune.probe_folds=1: expected an integer >= 2"),
])
def test_a_probe_it_cannot_fit_is_refused_at_the_door(overrides: list[str], message: str) -> None:
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose(config_name="config", overrides=["profile=smoke", "finetune.mode=probe", *overrides])
    with pytest.raises(UserError) as err:
        check(cfg)
        kinds.check(cfg)  # what settings cannot tell without the kinds (the fine-tuning and configs stages run it)
    assert str(err.value) == message


@pytest.mark.parametrize("overrides", [["task=sst2"], ["task=conll2003", "finetune.features=concat_last_four"],
                                       ["task=stsb", "finetune.mode=finetune"]])
def test_a_probe_it_can_fit_passes(overrides: list[str]) -> None:
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        check(compose(config_name="config", overrides=["profile=smoke", "finetune.mode=probe", *overrides]))


def test_every_preset_named_by_a_shape_has_it() -> None:
    """conf/model/L<layers>_H<hidden>_A<heads>.yaml: at model_scale 1 its numbers are its name's, and the profile's
    model_scale shrinks layers and widths, never heads."""
    presets = [p.stem for p in (Path(CONF_DIR) / "model").glob("*.yaml") if preset_shape(p.stem)]
    assert presets and preset_shape("L24_H1024_A16") == (24, 1024, 16) and preset_shape("base") is None
    check_presets()
    for name in presets:
        layers, hidden, heads = preset_shape(name)
        with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
            m = compose(config_name="config", overrides=["profile=cpu", f"model={name}"]).model  # depth 3, width 4
        assert (m.name, m.num_layers, m.hidden_size, m.num_heads) == (name, max(1, layers // 3), hidden // 4, heads)


@pytest.mark.parametrize(("edit", "message"), [
    (("shrink:8,", "shrink:6,"), "conf/model/L8_H768_A12.yaml: the shape is 6/768/12 (layers/hidden/heads), not the "
                                 "8/768/12 its name says"),
    (("num_heads: 12", "num_heads: 3"), "conf/model/L8_H768_A12.yaml: the shape is 8/768/3 (layers/hidden/heads), "
                                        "not the 8/768/12 its name says"),
    (("name: L8_H768_A12", "name: L6_H768_A12"), "conf/model/L8_H768_A12.yaml: name: 'L6_H768_A12', not "
                                                 "'L8_H768_A12' (the file's name)"),
])
def test_a_preset_whose_numbers_are_not_its_name_stops_the_run_at_the_door(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, edit: tuple[str, str], message: str) -> None:
    """A new size copied from another preset and not fully edited: any stage stops, whatever model it runs."""
    conf = tmp_path / "conf"
    shutil.copytree(CONF_DIR, conf)
    good = (conf / "model" / "L6_H768_A12.yaml").read_text().replace("6/768/12", "8/768/12").replace(
        "L6_", "L8_").replace("shrink:6,", "shrink:8,")
    (conf / "model" / "L8_H768_A12.yaml").write_text(good)
    monkeypatch.setattr(settings, "CONF_DIR", conf)
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["profile=smoke", "model=L8_H768_A12"])
        base = compose(config_name="config", overrides=["profile=smoke"])  # BERT-base's shape
    check(cfg)  # the preset as it should be
    (conf / "model" / "L8_H768_A12.yaml").write_text(good.replace(*edit))
    for composed in (cfg, base):
        with pytest.raises(UserError) as err:
            check(composed)
        assert str(err.value) == message

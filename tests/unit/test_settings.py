"""bertlab.settings: run names and choice settings checked at the door (the choices by the names the code's tables
implement; the catalogue of bad inputs through the stages: tests/e2e/test_bad_inputs.py)."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir

from bertlab.errors import UserError
from bertlab.kinds import KINDS
from bertlab.modeling.features import FEATURES
from bertlab.settings import CHOICES, check, check_name
from bertlab.stage import CONF_DIR
from bertlab.tokenizer import new_tokenizer


def test_each_choice_names_what_the_code_implements() -> None:
    assert tuple(KINDS) == CHOICES["task.kind"]
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
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose(config_name="config", overrides=["profile=smoke", *overrides])
    if message is None:
        check(cfg)
    else:
        with pytest.raises(UserError, match=message):
            check(cfg)


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
    assert str(err.value) == message


@pytest.mark.parametrize("overrides", [["task=sst2"], ["task=conll2003", "finetune.features=concat_last_four"],
                                       ["task=stsb", "finetune.mode=finetune"]])
def test_a_probe_it_can_fit_passes(overrides: list[str]) -> None:
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        check(compose(config_name="config", overrides=["profile=smoke", "finetune.mode=probe", *overrides]))

"""bertlab.settings: run names and choice settings checked at the door (the choices by the names the code's tables
implement; the catalogue of bad inputs through the stages: tests/e2e/test_bad_inputs.py)."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir

from bertlab.data.masking import OBJECTIVES
from bertlab.errors import UserError
from bertlab.modeling.features import FEATURES
from bertlab.settings import CHOICES, check, check_name
from bertlab.stage import CONF_DIR
from bertlab.tokenizer import new_tokenizer
from bertlab.training.kinds import KINDS


def test_each_choice_names_what_the_code_implements() -> None:
    assert tuple(KINDS) == CHOICES["task.kind"]
    assert FEATURES == CHOICES["finetune.features"]
    assert OBJECTIVES == CHOICES["objective.name"]
    for kind in CHOICES["tokenizer.kind"]:
        new_tokenizer(kind, lowercase=True)


@pytest.mark.parametrize("key", sorted(CHOICES))
def test_a_choice_outside_its_list_is_a_one_line_error(key: str) -> None:
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose(config_name="config", overrides=["profile=smoke", f"{key}=nosuch"])
    with pytest.raises(UserError, match=f"^{key}='nosuch': expected one of {', '.join(CHOICES[key])}$"):
        check(cfg)


@pytest.mark.parametrize("name", ["bert", "mrpc-bert-finetune-1", "sweep_L2", "lr=1e-3", "v1.2"])
def test_safe_run_names_pass(name: str) -> None:
    assert check_name(name) == name


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "../data", "a b", None, 3])
def test_unsafe_run_names_are_refused(name: object) -> None:
    with pytest.raises(UserError, match="one path component"):
        check_name(name)

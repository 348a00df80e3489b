"""bertlab.settings: choice settings checked at the door, by the names the code's tables implement."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir

from bertlab.data.masking import OBJECTIVES
from bertlab.errors import UserError
from bertlab.modeling.heads import FEATURES
from bertlab.settings import CHOICES, check
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

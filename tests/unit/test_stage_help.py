"""`python -m bertlab.<stage> --help` names the settings that stage reads, with their values (`bertlab.stage`)."""

from __future__ import annotations

import importlib
import re

import pytest


def help_of(stage: str, *overrides: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> str:
    """The stage's --help, as its entry point prints it."""
    monkeypatch.setattr("sys.argv", [f"{stage}.py", *overrides, "--help"])
    with pytest.raises(SystemExit) as done:
        importlib.import_module(f"bertlab.{stage}").run()
    assert done.value.code == 0
    return capsys.readouterr().out


def settings_named(text: str) -> dict[str, str | None]:
    """The settings a help lists: key -> its value (None: a key alone)."""
    listed = text.split("The settings this stage reads")[1].split("\n\n")[0].split(":\n", 1)[1]
    return {m[0]: m[2] or None for m in re.findall(r"([\w.]+)(=(\S+))?", listed)}


def test_each_stage_help_names_its_own_settings(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """Every stage printed the same help."""
    pretrain = help_of("pretrain", "profile=smoke", monkeypatch=monkeypatch, capsys=capsys)
    finetune = help_of("finetune", "finetune.lr=5e-05", monkeypatch=monkeypatch, capsys=capsys)
    download = help_of("download", monkeypatch=monkeypatch, capsys=capsys)
    assert pretrain.startswith("python -m bertlab.pretrain [key=value ...]")
    assert finetune.startswith("python -m bertlab.finetune [key=value ...]")
    pretrain, finetune, download = map(settings_named, (pretrain, finetune, download))
    # pretraining's settings at the smoke profile; no fine-tuning setting
    assert pretrain["pretrain.max_steps"] == "20" and pretrain["model.num_layers"] == "4"  # 12 layers / smoke's 3
    assert pretrain["pretrain.betas"] == "[0.9,0.999]" and pretrain["impl.threads"] == "null"
    assert not [k for k in pretrain if k.startswith(("finetune.", "task."))]
    # fine-tuning's, with the command line's learning rate; no pretraining setting
    assert finetune["finetune.lr"] == "5e-05" and finetune["task.name"] == "sst2" and finetune["seed"] == "1"
    assert not [k for k in finetune if k.startswith(("pretrain.", "model.", "objective."))]
    # the download stage's: its mirror and sources, no training setting; a list of mappings named alone
    assert download == {"mirror": download["mirror"], "corpus.sources": None, "download.tasks": None,
                        "download.mirror_deviations": None}

"""`Composer`: Hydra's compose once per set of group choices, each run's values set on it, equal to `hydra.compose`."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from bertlab.composer import Composer

FILES = {
    "config.yaml": "defaults:\n  - task: a\n  - model: small\n  - _self_\nname: ${task.name}-${model.width}\nseed: 1\n"
                   "out: ${data}/${name}/${seed}\ndata: data\nopt: {lr: 0.1, steps: '???', betas: [0.9, 0.99]}\n",
    "task/a.yaml": "name: a\nlabels: 2\n",
    "task/b.yaml": "defaults:\n  - /model@task.head: small\nname: b\nlabels: 3\n",
    "model/small.yaml": "width: 4\ndepth: ${seed}\n",
    "model/big.yaml": "width: 16\ndepth: 8\n",
    "extra/on.yaml": "# @package _global_\nopt: {lr: 0.5}\n",
}
RUNS = [  # interleaved, so a value set for one run must be gone before the next on the same choices
    ["seed=2", "name=x"],
    ["task=b", "seed=3", "opt.lr=0.01"],
    [],
    ["task=b", "model=big", "out=elsewhere"],
    ["seed=2", "opt.steps=10", "data=/d"],
    ["task=b", "seed=4"],
    ["+extra=on", "seed=5"],            # a group appended: its own choices
    ["+opt.wd=0.01", "seed=6"],         # a value appended: a copy, not the cached config
    ["opt={lr: 1, steps: 2}"],          # a mapping merged: a copy
    ["~opt.betas", "seed=7"],           # a deletion: a copy
    ["name=null", "seed=2"],
    ["seed=2", "name=x"],
]


@pytest.fixture
def conf(tmp_path: Path) -> Path:
    for name, text in FILES.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


def resolved(cfg) -> str:
    return OmegaConf.to_yaml(cfg, resolve=False) + OmegaConf.to_yaml(
        OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False))


def test_each_run_composes_as_hydra_composes_it_and_the_cached_configs_stay_as_composed(conf: Path) -> None:
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        expected = [resolved(compose(config_name="config", overrides=o)) for o in RUNS]
        composer = Composer()
        for overrides, want in zip(RUNS, expected, strict=True):
            with composer.applied(overrides) as cfg:
                assert resolved(cfg) == want, overrides
                assert OmegaConf.is_struct(cfg)
            assert resolved(composer(overrides)) == want, overrides
        assert len(composer.composed) == 4  # (), task=b, task=b model=big, +extra=on
        cached = {key: resolved(cfg) for key, cfg in composer.composed.items()}
        assert cached[()] == resolved(compose(config_name="config"))
        assert cached[("task=b",)] == resolved(compose(config_name="config", overrides=["task=b"]))


def test_a_bad_override_is_refused_as_compose_refuses_it_and_leaves_the_cache_as_it_was(conf: Path) -> None:
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        composer = Composer()
        with composer.applied(["seed=3"]):
            pass
        for bad in (["seed=3", "opt.lrr=1"], ["task=nosuch"]):
            with pytest.raises(Exception) as composing:
                compose(config_name="config", overrides=bad)
            with pytest.raises(type(composing.value)), composer.applied(bad):
                pass
        with composer.applied([]) as cfg:
            assert cfg.seed == 1 and "lrr" not in cfg.opt


def test_each_config_file_is_read_once_for_the_composers_life(conf: Path, monkeypatch) -> None:
    """Hydra reads and parses every file again at each compose; a composer's composes share one read of each."""
    from hydra._internal.core_plugins.file_config_source import FileConfigSource

    reads: list[str] = []
    load = FileConfigSource.load_config
    monkeypatch.setattr(FileConfigSource, "load_config", lambda self, config_path: reads.append(config_path) or load(
        self, config_path))
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        composer = Composer()
        for overrides in RUNS:
            composer(overrides)
        assert resolved(Composer()(["task=b", "model=big"])) == resolved(composer(["task=b", "model=big"]))
    assert len(reads) == len(set(reads)) and set(reads) == {"config", *(n.removesuffix(".yaml") for n in FILES)}

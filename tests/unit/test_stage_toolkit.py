"""stage.py: outputs replaced all or nothing, deletions confined, JSON always valid; the global batch split over the
processes present, and the node count a launcher gives."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from bertlab import stage
from bertlab.settings import check_name
from bertlab.stage import UserError, num_nodes, split_batch


def test_atomic_dir_replaces_the_output_only_when_the_block_completes(tmp_path: Path) -> None:
    out = tmp_path / "pretrain" / "bert"
    out.mkdir(parents=True)
    (out / "old.txt").write_text("old")
    with pytest.raises(ValueError), stage.atomic_dir(out) as tmp:
        (tmp / "new.txt").write_text("new")
        raise ValueError("killed half way")
    assert [p.name for p in out.iterdir()] == ["old.txt"]
    with stage.atomic_dir(out) as tmp:
        (tmp / "new.txt").write_text("new")
    assert [p.name for p in out.iterdir()] == ["new.txt"]
    assert sorted(p.name for p in (tmp_path / "pretrain").iterdir()) == ["bert"]  # no scratch left


def test_a_killed_runs_scratch_is_cleared_by_the_next_run(tmp_path: Path) -> None:
    debris = tmp_path / "finetune" / ".partial" / "cell"
    debris.mkdir(parents=True)
    (debris / "metrics.json").write_text("{}")
    with stage.atomic_dir(tmp_path / "finetune" / "cell") as tmp:
        (tmp / "metrics.json").write_text('{"ok": 1}')
    assert not (tmp_path / "finetune" / ".partial").exists()
    assert list((tmp_path / "finetune").glob("*/metrics.json")) == [tmp_path / "finetune" / "cell" / "metrics.json"]


@pytest.mark.parametrize("name", ["..", "x/../.."])  # "." and "" vanish in a Path: check_name refuses them
def test_atomic_dir_refuses_paths_that_do_not_end_in_a_name(tmp_path: Path, name: str) -> None:
    (tmp_path / "data" / "finetune").mkdir(parents=True)
    (tmp_path / "data" / "keep.txt").write_text("keep")
    with pytest.raises(RuntimeError, match="refusing"), stage.atomic_dir(Path(f"{tmp_path}/data/finetune/{name}")):
        pass
    assert (tmp_path / "data" / "keep.txt").read_text() == "keep"


def test_remove_tree_refuses_anything_outside_its_root(tmp_path: Path) -> None:
    (tmp_path / "root" / "a").mkdir(parents=True)
    with pytest.raises(RuntimeError, match="not inside"):
        stage.remove_tree(tmp_path / "root" / "..", tmp_path / "root")
    with pytest.raises(RuntimeError, match="not inside"):
        stage.remove_tree(tmp_path / "root", tmp_path / "root")
    stage.remove_tree(tmp_path / "root" / "a", tmp_path / "root")
    assert not (tmp_path / "root" / "a").exists() and (tmp_path / "root").exists()


def test_write_json_writes_null_for_non_finite_numbers(tmp_path: Path) -> None:
    stage.write_json(tmp_path / "m.json", {"ratio": math.nan, "ppl": [1.5, math.inf], "n": 3})
    assert json.loads((tmp_path / "m.json").read_text()) == {"ratio": None, "ppl": [1.5, None], "n": 3}
    assert "NaN" not in (tmp_path / "m.json").read_text()


def test_check_writable_names_the_directory(tmp_path: Path) -> None:
    stage.check_writable(tmp_path / "new" / "deep")  # creatable: fine, and nothing is created
    assert not (tmp_path / "new").exists()
    (tmp_path / "file").write_text("x")
    with pytest.raises(stage.UserError, match=f"{tmp_path}/file/out"):
        stage.check_writable(tmp_path / "file" / "out")


@pytest.mark.parametrize("name", ["bert", "mrpc-bert-finetune-1", "sweep_L2", "lr=1e-3", "v1.2"])
def test_safe_run_names_pass(name: str) -> None:
    assert check_name(name) == name


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "../data", "a b", None, 3])
def test_unsafe_run_names_are_refused(name: object) -> None:
    with pytest.raises(stage.UserError, match="one path component"):
        check_name(name)


@pytest.mark.parametrize(("global_batch", "world_size", "max_device_batch", "split"), [
    (256, 1, None, (256, 1)), (256, 2, None, (128, 1)), (256, 8, 16, (16, 2)), (256, 8, 32, (32, 1)),
    (48, 2, 10, (8, 3)),  # the fewest accumulation steps within the limit
    (7, 1, 2, (1, 7)),
])
def test_the_global_batch_splits_into_devices_and_accumulation(global_batch: int, world_size: int,
                                                               max_device_batch: int | None,
                                                               split: tuple[int, int]) -> None:
    assert split_batch(global_batch, world_size, max_device_batch, "pretrain.batch_size") == split
    micro, accumulate = split
    assert micro * accumulate * world_size == global_batch


def test_a_global_batch_the_processes_cannot_share_evenly_is_named() -> None:
    with pytest.raises(UserError) as err:
        split_batch(10, 4, None, "finetune.batch_size")
    assert str(err.value) == ("finetune.batch_size=10 (the global batch) is not divisible by the 4 processes present "
                              "(devices x nodes)")


@pytest.mark.parametrize(("env", "setting", "nodes"), [
    ({}, None, 1),
    ({}, 3, 3),
    ({"TORCHELASTIC_RUN_ID": "x", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4", "GROUP_WORLD_SIZE": "2"}, None, 2),
    ({"TORCHELASTIC_RUN_ID": "x", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "2"}, None, 4),
    ({"SLURM_NTASKS": "8", "SLURM_NTASKS_PER_NODE": "4", "SLURM_NNODES": "2", "SLURM_JOB_NAME": "bert"}, None, 2),
    ({"SLURM_NTASKS": "8", "SLURM_NNODES": "2", "SLURM_JOB_NAME": "bash"}, None, 1),  # interactive: not SLURM's
    ({"SLURM_NTASKS": "2", "SLURM_NNODES": "2", "SLURM_JOB_NAME": "bert", "TORCHELASTIC_RUN_ID": "x",
      "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "4", "GROUP_WORLD_SIZE": "1"}, None, 1),  # torchrun inside SLURM
    ({"WORLD_SIZE": "2", "LOCAL_RANK": "1"}, None, 1),  # a rank Lightning itself started on this node
])
def test_num_nodes_reads_the_launcher_lightning_detects(monkeypatch: pytest.MonkeyPatch, env: dict[str, str],
                                                        setting: int | None, nodes: int) -> None:
    for var in ("TORCHELASTIC_RUN_ID", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_WORLD_SIZE", "LOCAL_RANK",
                "SLURM_NTASKS", "SLURM_NTASKS_PER_NODE", "SLURM_NNODES", "SLURM_JOB_NAME"):
        monkeypatch.delenv(var, raising=False)
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    assert num_nodes(OmegaConf.create({"num_nodes": setting})) == nodes


# ------------------------------------------------------------------ issue 29: W&B online that cannot start


def test_an_online_wandb_start_that_fails_falls_back_to_offline_in_one_line(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A wrong W&B key waited 107 s for a traceback; no key, 6 s."""
    calls: list[bool] = []

    def start(offline: bool) -> str:
        calls.append(offline)
        if not offline:
            raise RuntimeError("401: invalid API key\nmore detail")
        return "the offline run"

    monkeypatch.setattr(stage, "wandb_unreachable", lambda: None)
    assert stage.start_wandb(start, False, "data/wandb") == "the offline run" and calls == [False, True]
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [
        "W&B cannot log online (RuntimeError: 401: invalid API key): logging offline under data/wandb instead "
        "(upload later with `wandb sync`)"]
    calls.clear()
    assert stage.start_wandb(start, True, "data/wandb") == "the offline run" and calls == [True]


def test_logger_offline_false_without_a_network_logs_offline_within_seconds(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    import time

    from hydra import compose, initialize_config_dir

    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    if stage.wandb_unreachable() is None:
        pytest.skip("W&B's server answers from here: this test needs a machine without network")
    with initialize_config_dir(config_dir=stage.CONF_DIR, version_base="1.3"):
        cfg = compose("config", overrides=["logger=wandb", "logger.offline=false", f"data_dir={tmp_path}"])
    start = time.perf_counter()
    loggers = stage.make_loggers(cfg, "pretrain", tmp_path / "run", [])
    assert time.perf_counter() - start < 15
    assert loggers[1]._offline and "W&B cannot log online" in caplog.text
    loggers[1].experiment.finish()

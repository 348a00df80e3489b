"""bertlab.training.trainer: the global batch split over the processes present, and the node count a launcher gives."""

from __future__ import annotations

import logging
import re

import pytest

from bertlab.errors import UserError
from bertlab.training.trainer import num_nodes, progress_bar, split_batch


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
    assert num_nodes(setting) == nodes


@pytest.mark.parametrize("terminal", [False, True])
def test_the_progress_is_a_bar_in_a_terminal_and_a_timed_log_line_elsewhere(
        terminal: bool, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]) -> None:
    from lightning.pytorch import Trainer
    from lightning.pytorch.demos.boring_classes import BoringModel

    bar = progress_bar(log_every_s=0.0)  # a line every step where it logs
    bar.terminal = terminal
    trainer = Trainer(max_steps=5, callbacks=[bar], logger=False, enable_checkpointing=False,
                      enable_model_summary=False, limit_val_batches=0, accelerator="cpu")
    with caplog.at_level(logging.INFO, logger="bertlab.training.trainer"):
        trainer.fit(BoringModel())
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("step ")]
    out = capsys.readouterr().out  # where Lightning's bar writes
    if terminal:
        assert not lines and "steps: 100%" in out and "5/5" in out
    else:
        assert [line.split(" (")[0] for line in lines] == [f"step {i}/5" for i in range(1, 6)]
        assert re.fullmatch(r"step 5/5 \(0:00:00 left\)(: .*)?", lines[-1]) and "steps:" not in out

"""The pretrain_data stage as a process, on the first stages' outputs: the same instances built by one process or
two, and reference instances whose static masks the pretrain stage trains on and scores."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

from bertlab.data.instances import load_instances
from bertlab.runs import pretrain_dir
from tests.helpers import stage


def test_sharded_build_is_the_same_with_one_process_or_two(prepared: Path, tmp_path: Path) -> None:
    outputs = []
    for processes in (1, 2):
        data = tmp_path / str(processes)
        for part in ("download", "tokenizer"):
            shutil.copytree(prepared / part, data / part)
        done = stage("pretrain_data", data, "pretrain_data.shard_chars=3000", f"impl.data_processes={processes}")
        assert done.returncode == 0, done.stderr[-3000:]
        outputs.append(data / "pretrain_data")
    one, two = (json.loads((out / "stats.json").read_text()) for out in outputs)
    assert one == two and one["shards"] >= 3
    assert one["documents"]["train"] == json.loads((prepared / "pretrain_data/stats.json").read_text())[
        "documents"]["train"]  # every training document, in some shard
    for name in ("train_nsp", "train_packed", "heldout_nsp"):
        a, b = load_instances(outputs[0] / name), load_instances(outputs[1] / name)
        assert np.array_equal(a.input_ids, b.input_ids) and np.array_equal(a.document_index, b.document_index)


def test_reference_instances_train_on_their_static_masks_and_the_floor_scores_them(
        prepared: Path, tmp_path: Path) -> None:
    for part in ("download", "tokenizer"):
        shutil.copytree(prepared / part, tmp_path / part)
    done = stage("pretrain_data", tmp_path, "pretrain_data.reference=true", "pretrain_data.max_predictions_per_seq=6")
    assert done.returncode == 0, done.stderr[-3000:]
    heldout = load_instances(tmp_path / "pretrain_data/heldout_nsp")
    assert heldout.mlm_mask is not None and (heldout.mlm_mask.sum(1) <= 6).all()
    wrong = stage("pretrain", tmp_path, "name=r", "objective.mlm_probability=0.2")
    assert wrong.returncode == 2 and wrong.stderr.strip().splitlines()[-1].startswith(
        "error: objective.mlm_probability=0.2, whole_word_masking=False: the instances carry static masks")
    done = stage("pretrain", tmp_path, "name=r", "pretrain.max_steps=2")
    assert done.returncode == 0, done.stderr[-3000:]
    items = json.loads((pretrain_dir(tmp_path, "r", 1) / "heldout_items.json").read_text())
    assert items["model"]["count"] == items["floor"]["count"] == heldout.mlm_mask.sum(1).tolist()  # the static masks

"""The tokenizer stage writes the same bytes in every process (huggingface/tokenizers issue 1794 and
`bertlab.tokenizer.seeded_pieces`), run as processes on the local mirror."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def test_the_stage_writes_the_same_bytes_in_every_process(shared_data: Path, tmp_path: Path) -> None:
    """The smoke corpus is one where merge counts tie at the decision: unpatched, 3 of 10 processes wrote a
    tokenizer.json with `##yed` where the others had `##oy`. Eight processes, each with its own hash seeds."""
    env = {**os.environ, "BERTLAB_DATA_MIRROR": str(shared_data)}
    common = ["profile=smoke", "logger=none", "hydra.run.dir=" + str(tmp_path / "hydra")]
    done = subprocess.run([sys.executable, "-m", "bertlab.download", f"data_dir={tmp_path / 'data'}", *common],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    runs = []
    for seed in range(8):
        data = tmp_path / f"run{seed}"
        data.mkdir()
        (data / "download").symlink_to(tmp_path / "data" / "download")
        runs.append((data, subprocess.Popen(
            [sys.executable, "-m", "bertlab.tokenizer", f"data_dir={data}", *common],
            env={**env, "PYTHONHASHSEED": str(seed)}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)))
        if len(runs) % 4 == 0:  # four at a time
            for _, proc in runs[-4:]:
                assert proc.wait(timeout=600) == 0, proc.stderr.read()[-2000:]
    outputs = {(data / "tokenizer" / "tokenizer.json").read_bytes() for data, _ in runs}
    assert len(outputs) == 1

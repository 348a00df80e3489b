"""benchmarks/pretrain_throughput.py at a profile's recipe, on the stage's own batches, as a user runs it on a CPU."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.helpers import REPO

TINY = ["model.num_layers=1", "model.hidden_size=32", "model.num_heads=2", "model.intermediate_size=64",
        "pretrain.batch_size=8"]


def test_the_benchmark_times_the_gpu_profiles_recipe_on_the_stages_batches(prepared: Path) -> None:
    done = subprocess.run([sys.executable, str(REPO / "benchmarks/pretrain_throughput.py"), "--profile", "gpu",
                           "--set", *TINY, "--data", str(prepared), "--rounds", "2", "--warmup", "1", "--threads", "1"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    recipe = re.search(r"recipe: profile gpu .*rotary positions, dropout 0.0; mlm_nsp at 40% masking; batch 8 x seq "
                       r"64 \(the stage's batches of .*, (\d+\.\d)% padding\); clip 0.5;", out)
    assert recipe and float(recipe.group(1)) > 0, out  # NSP pairs: some rows shorter than their batch
    rows = {line[:56].strip(): line[56:].split() for line in out.splitlines() if line.startswith(("bertlab", "trans"))}
    assert {"bertlab (fused AdamW)", "transformers BertForPreTraining (sdpa)"} <= rows.keys(), out
    assert float(rows["transformers BertForPreTraining (sdpa)"][2].rstrip("x")) == 1.0  # the reference
    assert re.search(r"^bertlab \(fused AdamW\) / transformers BertForPreTraining \(sdpa\): \d+\.\d\dx \(tokens/s\)$",
                     out, re.M), out
    bad = subprocess.run([sys.executable, str(REPO / "benchmarks/pretrain_throughput.py"), "--profile", "gpu",
                          "--data", str(prepared / "nowhere")], capture_output=True, text=True, timeout=600)
    assert bad.returncode != 0 and bad.stderr.strip().splitlines()[-1].startswith("error: --data")


def test_the_step_profile_splits_each_runners_step_by_kind_of_work(prepared: Path) -> None:
    """benchmarks/step_profile.py on a CPU: per runner the wall step and its ops' own time (at most the wall), split
    into kinds whose shares sum to 100%, matmuls among them, then its gap to the target MFU of the peak given (rate
    and MFU from the model FLOPs, the matmuls' own rate above it, the ms over target); a bad --data is one line and a
    nonzero exit."""
    out_file = prepared / "profile.txt"
    done = subprocess.run([sys.executable, str(REPO / "benchmarks/step_profile.py"), "--device", "cpu", "--data",
                           str(prepared), "--set", *TINY, "--no-compile", "--transformers", "--steps", "2",
                           "--warmup", "1", "--top", "4", "--peak-tflops", "0.1", "--target-mfu", "0.9",
                           "--out", str(out_file)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    text = out_file.read_text()
    assert text == done.stdout
    heads = re.findall(r"^## (.+?): ([\d.]+) ms a step \(wall, profiled\), ops' own time ([\d.]+) ms$", text, re.M)
    assert [h[0] for h in heads] == ["bertlab (eager)", "transformers BertForPreTraining (sdpa)"], text
    for section, (_, wall, busy) in zip(text.split("\n## ")[1:], heads):
        assert 0 < float(busy) <= float(wall) * 1.05
        shares = dict(re.findall(r"^  (\w[\w ()]*?) +[\d.]+ ms +([\d.]+)%$", section, re.M))
        assert "matmul" in shares and float(shares["matmul"]) > 0, section
        assert abs(sum(map(float, shares.values())) - 100) < 0.5, section
        assert len(re.findall(r"^ +[\d.]+ ms  \S", section, re.M)) == 4  # the top kernels (ops) listed
        rate, mfu = map(float, re.search(r"G a step: ([\d.]+) TFLOP/s, ([\d.]+)% MFU \(peak 0.1 TFLOP/s\)$",
                                         section, re.M).groups())
        assert rate > 0 and abs(mfu - rate / 0.1 * 100) < 0.1 + 0.001 * mfu, section
        dense = r"^  matmul \+ attention kernels [\d.]+ ms at ([\d.]+) TFLOP/s: MFU ([\d.]+)% if everything else were"
        dense_rate, ceiling = map(float, re.search(dense + " free$", section, re.M).groups())
        assert dense_rate > rate and abs(ceiling - dense_rate / 0.1 * 100) < 0.1 + 0.001 * ceiling, section
        goal, over, rest, idle = map(float, re.search(r"^  at 90% MFU a step takes ([\d.]+) ms: ([\d.]+) ms over, "
                                                      r"against ([\d.]+) ms in other kernels and ([\d.]+) ms idle$",
                                                      section, re.M).groups())
        assert abs(goal - float(wall) * mfu / 90) < 0.02 + 0.01 * goal and abs(over - (float(wall) - goal)) < 0.06
        assert 0 <= rest <= float(busy) and idle >= 0, section
    bad = subprocess.run([sys.executable, str(REPO / "benchmarks/step_profile.py"), "--device", "cpu", "--data",
                          str(prepared / "nowhere")], capture_output=True, text=True, timeout=600)
    assert bad.returncode != 0 and bad.stderr.strip().splitlines()[-1].startswith("error: --data")

"""benchmarks/gpu/verdicts.py: the claims of the short GPU runs decided as the report decides, collapsed encoders
testing nothing, and reports/gpu.md saying when no run is committed."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from tests.helpers import REPO
from tests.report_data import UNIGRAM, _dump, ft, pre

spec = importlib.util.spec_from_file_location("verdicts", REPO / "benchmarks/gpu/verdicts.py")
verdicts = importlib.util.module_from_spec(spec)
spec.loader.exec_module(verdicts)


def claim_run(root: Path, name: str, bert_ppl: float, scores: dict[str, tuple[float, float]]) -> Path:
    """A run of `claim.sh a` as its tarball unpacks: run.json, the encoders, the cells `<task>-<encoder>-<seed>`."""
    run = root / name
    _dump(run / "run.json", {"claim": "a", "device": "NVIDIA H100 80GB HBM3", "commit": "abc1234", "steps": 1400,
                             "warmup": 250, "tasks": ["sst2"], "seeds": [1, 2], "extra": "", "seconds": 480,
                             "command": "bash benchmarks/gpu/claim.sh a"})
    for encoder, ppl, steps in (("bert", bert_ppl, 1400), ("scratch", 30000.0, 0)):
        record = pre(encoder, (12, 768, 12, 3072), (12, 768, 12, 3072), 85_000_000, ppl)
        _dump(run / "pretrain" / encoder / "metrics.json", {
            **{k: v for k, v in record.items() if k != "_items"}, "steps": steps, "heldout_unigram_ppl": UNIGRAM,
            "train_tokens": steps * 32768, "throughput": {"tokens_per_second": 300_000 if steps else None}})
    for task, (bert, scratch) in scores.items():
        for encoder, score in (("bert", bert), ("scratch", scratch)):
            for seed in (1, 2):
                cell, name = ft(encoder, task, score + seed - 1, seed=seed), f"{task}-{encoder}-{seed}"
                _dump(run / "finetune" / name / "metrics.json",
                      {k: v for k, v in cell.items() if k != "_items"} | {"name": name})
                _dump(run / "finetune" / name / "items.json", cell["_items"])
    return run


def test_a_claim_is_decided_on_its_runs_cells_and_a_collapsed_encoder_tests_nothing(tmp_path: Path) -> None:
    claim_run(tmp_path, "2026-11-28-a", 90.0, {"sst2": (90.0, 70.0), "conll2003": (80.0, 80.0)})  # 0.1 x unigram
    claim_run(tmp_path, "2026-11-29-a", 600.0, {"sst2": (90.0, 70.0)})  # 0.667 x unigram: collapsed
    text = verdicts.report(tmp_path)
    rows = [line.split(" | ") for line in text.splitlines() if line.startswith("| a |")]
    assert [(r[1], r[9], r[12].rstrip(" |")) for r in rows] == [
        ("sst2", "reproduced", "2026-11-28-a"), ("conll2003", "unresolved at this scale", "2026-11-28-a"),
        ("sst2", "tests nothing: bert collapsed (> 0.5 x unigram)", "2026-11-29-a")]
    assert rows[0][5:8] == ["90.5", "70.5", "60.0"] and rows[0][10:12] == ["2/2", "200"]  # means, the floor
    assert "`2026-11-28-a`: claim a (pretrained vs scratch), NVIDIA H100 80GB HBM3, commit `abc1234`" in text
    assert "`bert` 12/768/12, 1,400 steps, 45.9M tokens, 0.100 x unigram" in text
    assert "0.667 x unigram (collapsed)" in text


def test_with_no_run_committed_the_section_says_so(tmp_path: Path) -> None:
    text = verdicts.report(tmp_path / "gpu")
    assert text.startswith("## BERT-base on one GPU\n") and "No run has been committed yet" in text
    assert "| claim |" not in text
    assert json.loads(json.dumps(verdicts.CLAIMS))["a"][1:3] == ["bert", "scratch"]

"""The budget ledger: per-process times from `stage.main`, summed per stage kind beside each run's budget."""

from __future__ import annotations

from pathlib import Path

from bertlab.files import write_json
from bertlab.report.collect import Results, read_timing
from bertlab.report.ledger import finetune_rows, ledger_section, pretrain_rows, stage_rows


def results(timing: dict) -> Results:
    pretrain = {"bert": {"objective": "mlm_nsp", "steps": 600, "train_tokens": 600 * 32 * 128, "train_seconds": 300.0,
                         "heldout_ppl": 500.0, "heldout_unigram_ppl": 1000.0,
                         "throughput": {"tokens_per_second": 8192, "mfu": 0.4123}},
                "nonsp": {"objective": "mlm", "steps": 600, "train_tokens": None, "train_seconds": 200.0,
                          "heldout_ppl": 400.0, "heldout_unigram_ppl": 1000.0}}  # before throughput was recorded
    ok = {"status": "ok", "mode": "finetune", "features": None, "bilstm": False, "train_seconds": 30.0,
          "eval_seconds": 6.0}
    finetune = [{**ok, "name": f"sst2-{e}-finetune-{s}", "task": "sst2", "encoder": e, "seed": s, "steps": 300}
                for e in ("bert", "scratch") for s in (1, 2)]
    finetune += [{**ok, "name": "squad-bert-finetune-1", "task": "squad", "encoder": "bert", "seed": 1, "steps": 150},
                 {"name": "mnli-bert-finetune-1", "task": "mnli", "encoder": "bert", "seed": 1, "mode": "finetune",
                  "status": "no data"}]
    return Results(finetune=finetune, items={}, pretrain=pretrain, heldout={}, curves={}, manifest={}, as_of="",
                   timing=timing)


def test_stage_rows_sum_process_and_start_up_time_of_the_runs_the_report_reads() -> None:
    t = {"startup_seconds": 6.0, "process_seconds": 60.0}
    timing = {"download": {"download": {"startup_seconds": 3.0, "process_seconds": 30.0}},
              "pretrain": {"bert": {"startup_seconds": 6.0, "process_seconds": 306.0}, "gone": t},  # gone: stale
              "finetune": {r["name"]: t for r in results({}).finetune},
              "ablations": {"ablations": t}}                                  # this report's own earlier run
    rows = stage_rows(results(timing))
    assert rows[:3] == [["`download`", "1", "0.5", "0.1"], ["`pretrain`", "1", "5.1", "0.1"],
                        ["`finetune`", "6", "6.0", "0.6"]]
    assert rows[3] == ["**all stages**", "8", "**11.6**", "**0.8** (6%)"]   # (30 + 306 + 360) s, (3 + 6 + 36) s: 6.5%


def test_budget_rows_give_tokens_updates_and_seeds() -> None:
    r = results({})
    assert pretrain_rows(r) == [["`bert`", "mlm_nsp", "600", "2.46", "5.0", "8,192", "41.2%", "500.0", "0.500"],
                                ["`nonsp`", "mlm", "600", "", "3.3", "", "", "400.0", "0.400"]]
    assert finetune_rows(r) == [["mnli", "0", "", "", "", "1 runs: no data"],
                                ["squad", "1", "1", "150", "0.5", "0.1"],
                                ["sst2", "2", "2", "300", "2.0", "0.4"]]
    assert "No stage timings were recorded" in "\n".join(ledger_section(r))


def test_twins_copies_spend_no_time_in_the_ledger() -> None:
    """A cell or encoder copied from a finished twin (`trained_as`) counts as a cell, not as training time."""
    r = results({})
    twin = {**r.finetune[1], "name": "sst2-bert-sum_all-2", "mode": "feature_based", "features": "sum_all",
            "trained_as": "sst2-bert-sum_last_four-2"}
    r.finetune.append(twin)
    r.pretrain["L12_H768_A12"] = {**r.pretrain["bert"], "trained_as": "bert"}
    assert finetune_rows(r)[2] == ["sst2", "3 (2 trained)", "1-2", "300", "2.0", "0.4"]
    assert pretrain_rows(r)[0][4:7] == ["copy of `bert`", "", ""] and pretrain_rows(r)[1][4:7] == ["5.0", "8,192",
                                                                                                 "41.2%"]


def test_read_timing_reads_what_each_stage_left(tmp_path: Path) -> None:
    write_json(tmp_path / "timing" / "finetune" / "sst2-bert-finetune-1.json",
               {"startup_seconds": 5.5, "process_seconds": 40.0})
    (tmp_path / "timing" / "unknown_stage").mkdir()
    assert read_timing(tmp_path) == {"finetune": {"sst2-bert-finetune-1": {"startup_seconds": 5.5,
                                                                          "process_seconds": 40.0}}}

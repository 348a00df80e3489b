"""benchmarks/gpu/: the short GPU runs' commands (claim.py: the study's own overrides, the last value of a key winning
as Hydra composes them, each encoder at every pretraining seed) and their verdicts (verdicts.py: the study's declared
claims on the run's own encoders and tasks by the Multi-Bootstrap over its pretraining runs, each run's margin beside
it, with the paper's effect against the interval, collapsed runs testing nothing, the runs committed before
pretraining seeds read as seed 1, reports/gpu.md saying when no run is committed)."""

from __future__ import annotations

import importlib.util
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir

from bertlab.files import read_json
from bertlab.report.collect import read_items
from bertlab.report.multiboot import multi_bootstrap
from bertlab.stage import CONF_DIR
from bertlab.study import cell_name
from tests.helpers import ENV, REPO
from tests.report_data import UNIGRAM, _dump, ft, pre, write_data

spec = importlib.util.spec_from_file_location("verdicts", REPO / "benchmarks/gpu/verdicts.py")
verdicts = sys.modules["verdicts"] = importlib.util.module_from_spec(spec)  # as claim.py imports it
spec.loader.exec_module(verdicts)
BASE = (12, 768, 12, 3072)


def claim_run(root: Path, name: str, claim: str, encoders: dict[str, tuple[tuple[int, ...], float]],
              scores: dict[tuple[str, str, str], float], tasks: list[str], pretrain_seeds: tuple[int, ...] = (1,),
              drift: dict[str, tuple[float, ...]] | None = None) -> Path:
    """A run of `claim.sh <claim>` as its tarball unpacks: run.json, the manifest, the encoders (name -> (shape,
    held-out ppl)) pretrained at each of `pretrain_seeds` (`<encoder>-<seed>`) and the cells
    `<task>-<encoder>-<mode>-<pretraining seed>-<seed>` ((task, encoder, mode) -> seed 1's score on pretraining run 1;
    seed 2 scores one more, pretraining run i `drift[encoder][i - 1]` more)."""
    run = root / name
    pretrain = {}
    for encoder, (shape, ppl) in encoders.items():
        steps = 0 if encoder == "scratch" else 1400
        for p in pretrain_seeds:
            pretrain[f"{encoder}-{p}"] = {
                **pre(encoder if p == 1 else f"{encoder}-{p}", shape, shape, shape[0] * 7_000_000, ppl),
                "encoder": encoder, "seed": p, "steps": steps, "heldout_unigram_ppl": UNIGRAM,
                "train_tokens": steps * 32768,
                "throughput": {"tokens_per_second": 300_000, "tokens": steps * 30000} if steps else {}}
    write_data(run, [ft(e, task, score + seed - 1 + (drift or {}).get(e, (0,) * p)[p - 1], seed=seed, mode=mode,
                        pretrain_seed=p)
                     for (task, e, mode), score in scores.items() for p in pretrain_seeds for seed in (1, 2)], pretrain)
    _dump(run / "run.json", {"claim": claim, "device": "NVIDIA H100 80GB HBM3", "commit": "abc1234", "steps": 1400,
                             "warmup": 250, "tasks": tasks, "pretrain_seeds": list(pretrain_seeds), "seeds": [1, 2],
                             "extra": "", "seconds": 480, "command": f"bash benchmarks/gpu/claim.sh {claim}"})
    return run


def to_legacy(run: Path) -> None:
    """`run` (of pretraining seed 1 alone) in the layout claim.sh wrote before pretraining seeds, as the runs of
    2026-11-28 are committed: pretrain/<encoder>/ flat, cells `<task>-<encoder>-<mode>-<seed>`, no seed fields."""
    for folder in list((run / "pretrain").glob("*/*-1")):
        m = read_json(folder / "metrics.json")
        del m["encoder"], m["seed"]
        _dump(folder.parent / "metrics.json", {**m, "name": folder.parent.name})
        shutil.move(folder / "heldout_items.json", folder.parent)
        shutil.rmtree(folder)
    for path in list((run / "finetune").glob("*/*/metrics.json")):
        m = read_json(path)
        name = f"{m['name'].rsplit('-', 2)[0]}-{m['seed']}"  # <task>-<encoder>-<mode>-<seed>
        del m["pretrain_seed"]
        _dump(path.parent / "metrics.json", {**m, "name": name})
        path.parent.rename(path.parent.with_name(name))


def table_rows(text: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip("|").split(" | ")] for line in text.splitlines()
            if line.startswith("| ") and not line.startswith("| claim |")]


def test_a_claim_is_decided_on_its_runs_cells_and_a_collapsed_encoder_tests_nothing(tmp_path: Path) -> None:
    scratch = (BASE, 30000.0)
    claim_run(tmp_path, "2026-11-28-a", "a", {"bert": (BASE, 90.0), "scratch": scratch},  # bert 0.1 x unigram
              {("sst2", "bert", "finetune"): 90.0, ("sst2", "scratch", "finetune"): 70.0,
               ("conll2003", "bert", "finetune"): 80.0, ("conll2003", "scratch", "finetune"): 80.0},
              ["sst2", "conll2003"])
    claim_run(tmp_path, "2026-11-29-a", "a", {"bert": (BASE, 600.0), "scratch": scratch},  # 0.667 x unigram
              {("sst2", "bert", "finetune"): 90.0, ("sst2", "scratch", "finetune"): 70.0}, ["sst2"])
    text = verdicts.report(tmp_path)
    rows = table_rows(text)
    assert [(r[0], r[1], r[9], r[11]) for r in rows] == [  # mnli, qnli, mrpc, squad: not this run's tasks
        ("a (pretraining_helps)", "sst2", "reproduced; " + verdicts.ONE_RUN, "2026-11-28-a"),
        ("a (pretraining_helps)", "conll2003", "unresolved at this scale; " + verdicts.ONE_RUN, "2026-11-28-a"),
        ("a (pretraining_helps)", "sst2", "tests nothing: bert-1 collapsed (> 0.5 x unigram)", "2026-11-29-a")]
    assert rows[0][2:7] == ["BERT_BASE", "From scratch (ours)", "90.5", "70.5", "60.0"]  # means, A's floor
    assert rows[0][8:11:2] == ["1: +20.0", "200 x 2/2"]  # one pretraining run a side: its margin is the estimate
    assert "`2026-11-28-a`: claim a (pretrained vs scratch), NVIDIA H100 80GB HBM3, commit `abc1234`" in text
    assert "`bert-1` 12/768/12, 1,400 steps (42.0M non-padding tokens of 45.9M positions), 0.100 x unigram" in text
    assert "0.667 x unigram (collapsed)" in text


def test_nsp_is_read_against_the_papers_effect(tmp_path: Path) -> None:
    run = claim_run(tmp_path, "2026-11-28-b", "b", {"bert": (BASE, 90.0), "nonsp": (BASE, 95.0)},
                    {("qnli", "bert", "finetune"): 80.0, ("qnli", "nonsp", "finetune"): 80.0,
                     ("sst2", "bert", "finetune"): 85.0, ("sst2", "nonsp", "finetune"): 70.0}, ["qnli", "sst2"])
    rows = {r[1]: r for r in verdicts.verdicts(run, verdicts.study())[0]}
    assert set(rows) == {"qnli", "sst2"}
    # QNLI: a tie on 200 items, whose interval still admits the paper's 88.4 - 84.9 = +3.5
    assert rows["qnli"][9] == ("unresolved at this scale; the paper's size holds: the interval admits its +3.5; one "
                               "pretraining run a side: no between-run variance in the interval")
    assert rows["sst2"][9].startswith("reproduced; the paper's size ruled out: its +0.1 is below the interval")


def test_table7_and_table6_claims_keep_to_the_runs_encoders(tmp_path: Path) -> None:
    modes = {"finetune": 90.0, "embeddings": 70.0, "second_to_last": 86.0, "last": 85.0, "sum_last_four": 87.0,
             "concat_last_four": 88.0, "sum_all": 86.0}
    d = claim_run(tmp_path, "2026-11-28-d", "d", {"bert": (BASE, 90.0)},
                  {("conll2003", "bert", m): v for m, v in modes.items()}, ["conll2003"])
    rows = verdicts.verdicts(d, verdicts.study())[0]
    assert [r[0] for r in rows] == ["d (features_beat_embeddings)"] * 5 + ["d (finetuning_beats_features)"] * 6
    concat = next(r for r in rows if r[2] == "Concat Last Four Hidden" and r[3] == "Embeddings")
    assert concat[9].startswith("reproduced; the paper's size ruled out") and "its +5.1" in concat[9]

    depths = {"L3_H768_A12": ((3, 768, 12, 3072), 60.0), "L6_H768_A12": ((6, 768, 12, 3072), 50.0),
              "L12_H768_A12": (BASE, 40.0)}
    e = claim_run(tmp_path, "2026-11-28-e", "e", depths,
                  {(t, name, "finetune"): 80.0 + 0.5 * shape[0] for name, (shape, _) in depths.items()
                   for t in ("sst2", "mrpc")}, ["sst2", "mrpc"])
    rows = verdicts.verdicts(e, verdicts.study())[0]
    pairs = [(r[1], r[2], r[3]) for r in rows]
    larger = [("6/768/12", "3/768/12"), ("12/768/12", "3/768/12"), ("12/768/12", "6/768/12")]  # no 6/768/3, no 1024
    assert pairs == [(c, a, b) for c in ("ppl", "sst2", "mrpc") for a, b in larger]
    assert all(r[9].startswith("reproduced") for r in rows[:3])  # held-out perplexity: 40 < 50 < 60
    assert [r[8] for r in rows[:3]] == ["1: -10.00", "1: -20.00", "1: -10.00"]  # one run each: 50 - 60, 40 - 60, ...
    assert "its +4.5" in rows[4][9]  # SST-2, 12 vs 3 layers: 92.9 - 88.4


def test_a_run_of_some_encoders_is_decided_with_its_bases_cells_of_the_others(tmp_path: Path) -> None:
    """A run of claim a's `scratch` alone (another fine-tuning lr) names run a as its base: bert's cells and held-out
    result come from the base, scratch's from the run, still paired on the same dev items; a base that is missing or
    of another claim is an error naming it."""
    scratch = (BASE, 30000.0)
    claim_run(tmp_path, "2026-11-28-a", "a", {"bert": (BASE, 90.0), "scratch": scratch},
              {("sst2", "bert", "finetune"): 90.0, ("sst2", "scratch", "finetune"): 70.0}, ["sst2"])
    again = claim_run(tmp_path, "2026-11-29-a-lr", "a", {"scratch": scratch},
                      {("sst2", "scratch", "finetune"): 89.0}, ["sst2"])
    meta = read_json(again / "run.json")
    _dump(again / "run.json", {**meta, "encoders": ["scratch"], "base": "2026-11-28-a",
                               "command": "ENCODERS=scratch BASE=2026-11-28-a bash benchmarks/gpu/claim.sh a"})
    rows = verdicts.verdicts(again, verdicts.study())[0]
    assert [(r[1], r[4], r[5], r[9], r[11]) for r in rows] == [
        ("sst2", "90.5", "89.5", "unresolved at this scale; " + verdicts.ONE_RUN,
         "2026-11-29-a-lr (with 2026-11-28-a)")]
    assert not (again / "pretrain" / "bert").exists()  # the base's files are read, not copied into the run
    text = verdicts.report(tmp_path)
    assert "- `2026-11-29-a-lr`: claim a (pretrained vs scratch) (its other encoders' cells: `2026-11-28-a`)" in text
    for base, error in [("2026-11-27-a", "is not a committed run"), ("2026-11-28-b", "is a run of another claim")]:
        if base.endswith("b"):
            claim_run(tmp_path, base, "b", {"bert": (BASE, 90.0)}, {("sst2", "bert", "finetune"): 90.0}, ["sst2"])
        _dump(again / "run.json", {**meta, "encoders": ["scratch"], "base": base})
        with pytest.raises(SystemExit, match=f"base {base!r} {error}"):
            verdicts.verdicts(again, verdicts.study())


def test_a_claim_over_three_pretraining_runs_is_decided_by_the_multi_bootstrap(tmp_path: Path, capsys,
                                                                             monkeypatch) -> None:
    """Claim b at pretraining seeds 1, 2, 3: A - B is the Multi-Bootstrap over the sides' runs paired by seed, the
    same as `multi_bootstrap` on the cells' items grouped by pretraining run, not run 1's alone, with each run's
    margin beside it; `--runs` prints it and the six pretraining runs."""
    run = claim_run(tmp_path, "2026-11-30-b", "b", {"bert": (BASE, 90.0), "nonsp": (BASE, 95.0)},
                    {("qnli", "bert", "finetune"): 80.0, ("qnli", "nonsp", "finetune"): 76.0}, ["qnli"],
                    pretrain_seeds=(1, 2, 3), drift={"bert": (0, -2, 2), "nonsp": (0, 1, -2)})
    spec = verdicts.study()
    (row,), own = verdicts.verdicts(run, spec)
    groups = [[[read_items(run / "finetune" / e / cell_name("qnli", f"{e}-finetune", p, s) / "items.json").model
                for s in (1, 2)] for p in (1, 2, 3)] for e in ("bert", "nonsp")]
    boot = {k: spec["bootstrap"][k] for k in ("draws", "seed", "level")}
    pooled = multi_bootstrap(*groups, "classification", "accuracy", paired=True, **boot)
    first = multi_bootstrap(*(g[:1] for g in groups), "classification", "accuracy", paired=True, **boot)
    assert (pooled.runs_a, pooled.runs_b, pooled.paired) == (3, 3, True)
    assert row[4:6] == ["80.5", "76.2"]  # each side's mean over 3 runs x 2 seeds: (76.5 + 77.5 + 74.5) / 3
    # t on ~2 degrees of freedom: wider than the percentile's [-1.6, +10.3] over 3 runs
    assert row[7] == f"{pooled.estimate:+.1f} [{pooled.low:+.1f}, {pooled.high:+.1f}]" == "+4.3 [-4.4, +13.1]"
    assert f"{first.estimate:+.1f} [{first.low:+.1f}, {first.high:+.1f}]" == "+4.0 [-3.0, +11.0]"
    assert row[8] == "1: +4.0, 2: +1.0, 3: +8.0"  # 80.5 - 76.5, (80.5 - 2) - (76.5 + 1), (80.5 + 2) - (76.5 - 2)
    assert row[10] == "200 x 3x2/3x2"
    assert list(own) == [f"{e}-{p}" for e in ("bert", "nonsp") for p in (1, 2, 3)]
    monkeypatch.setattr(sys, "argv", ["verdicts.py", "--runs", str(run)])
    verdicts.main()
    out = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in out[:6]] == list(own)
    assert "each pretraining run's A - B: 1: +4.0, 2: +1.0, 3: +8.0 | " in out[6]


def test_a_run_committed_before_pretraining_seeds_is_read_as_pretraining_seed_1(tmp_path: Path) -> None:
    """A run in the layout of 2026-11-28 (pretrain/<encoder>/ flat, cells `<task>-<encoder>-<mode>-<seed>`, no seed
    fields) is decided as the same run at pretraining seed 1, its folder left as it is; as the base of a run at two
    pretraining seeds its encoder is one run against two, unpaired. The committed claim b decides as reports/gpu.md
    says."""
    scores = {("sst2", "bert", "finetune"): 90.0, ("sst2", "scratch", "finetune"): 80.0}
    now = verdicts.verdicts(claim_run(tmp_path / "now", "2026-11-28-a", "a", {"bert": (BASE, 90.0),
                                                                              "scratch": (BASE, 30000.0)},
                                      scores, ["sst2"]), verdicts.study())
    old = claim_run(tmp_path, "2026-11-28-a", "a", {"bert": (BASE, 90.0), "scratch": (BASE, 30000.0)}, scores,
                    ["sst2"])
    to_legacy(old)
    files = sorted(str(f.relative_to(old)) for f in old.rglob("*"))
    assert "pretrain/bert/metrics.json" in files and "finetune/bert/sst2-bert-finetune-2/items.json" in files
    assert verdicts.verdicts(old, verdicts.study()) == now
    assert sorted(str(f.relative_to(old)) for f in old.rglob("*")) == files

    again = claim_run(tmp_path, "2026-11-30-a-lr", "a", {"scratch": (BASE, 30000.0)},
                      {("sst2", "scratch", "finetune"): 85.0}, ["sst2"], pretrain_seeds=(1, 2),
                      drift={"scratch": (0, 2)})
    meta = read_json(again / "run.json")
    _dump(again / "run.json", {**meta, "encoders": ["scratch"], "base": "2026-11-28-a"})
    (row,), own = verdicts.verdicts(again, verdicts.study())
    assert (row[4], row[5], row[8], row[10]) == ("90.5", "86.5", "A 1: 90.5; B 1: 85.5, 2: 87.5", "200 x 2/2x2")
    assert list(own) == ["scratch-1", "scratch-2"]

    (qnli, sst2, squad), _ = verdicts.verdicts(REPO / "reports" / "gpu" / "2026-11-28-b", verdicts.study())
    assert [r[1] for r in (qnli, sst2, squad)] == ["qnli", "sst2", "squad"]
    assert qnli[4:11] == ["58.8", "56.8", "49.5", "+2.1 [+0.3, +3.9]", "1: +2.1",
                          "reproduced; the paper's size holds: the interval admits its +3.5; " + verdicts.ONE_RUN,
                          "5463 x 2/2"]
    assert sst2[7:10] == ["+0.6 [-2.5, +3.7]", "1: +0.6",  # one run a side: not called beyond this scale
                          "unresolved at this scale; the paper's size holds: the interval admits its +0.1; "
                          + verdicts.ONE_RUN]
    assert squad[7:10] == ["+0.3 [-0.2, +0.8]", "1: +0.3",
                           "unresolved at this scale; the paper's size holds: the interval admits its +0.6; "
                           + verdicts.ONE_RUN]


def test_with_no_run_committed_the_section_says_so(tmp_path: Path) -> None:
    text = verdicts.report(tmp_path / "gpu")
    assert text.startswith("## BERT-base on one GPU\n") and "No run has been committed yet" in text
    assert "| claim |" not in text


def commands(claim: str, *args: str) -> list[list[str]]:
    out = subprocess.run([sys.executable, "benchmarks/gpu/claim.py", claim, "--data", "/tmp/d", "--print",
                          "--packed", "profile=gpu", *args], cwd=REPO, env=ENV, capture_output=True, text=True,
                         check=True).stdout
    return [shlex.split(line) for line in out.splitlines()]


def composed(command: list[str]) -> Any:
    """The config the stage composes from a printed command's overrides."""
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return compose(config_name="config", overrides=command[3:])


def test_some_of_a_claims_encoders_run_against_a_committed_base() -> None:
    """--encoders scratch --base <a committed run of claim a>: scratch's commands only, its cells at the --extra lr;
    --encoders alone, an encoder the claim has not, or a base of another claim: one line and exit 2 or 1."""
    scratch = commands("a", "--encoders", "scratch", "--base", "2026-11-28-a", "--extra", "finetune.lr=1e-4")
    assert len(scratch) == 1 + 4 * 2 and all("finetune.encoder=bert" not in c for c in scratch)
    assert composed(scratch[0]).name == "scratch" and composed(scratch[1]).finetune.lr == 1e-4
    for args, error in [(["--encoders", "scratch"], "give both or neither"),
                        (["--encoders", "nonsp", "--base", "2026-11-28-a"], "claim a's encoders are bert, scratch"),
                        (["--encoders", "scratch", "--base", "2026-11-27-a"], "is not a committed run")]:
        out = subprocess.run([sys.executable, "benchmarks/gpu/claim.py", "a", "--data", "/tmp/d", "--print", *args],
                             cwd=REPO, env=ENV, capture_output=True, text=True)
        assert out.returncode in (1, 2) and error in out.stderr.strip().splitlines()[-1], out.stderr


def test_each_claims_commands_compose_the_studys_runs_at_the_short_setting() -> None:
    a = commands("a")
    bert, scratch = (composed(c) for c in a[:2])
    assert (bert.name, bert.pretrain.max_steps, bert.pretrain.warmup_steps, bert.objective.name) == (
        "bert", 1400, 250, "mlm_nsp")
    assert (scratch.name, scratch.pretrain.max_steps) == ("scratch", 0)  # the study's override wins
    assert len(a) == 2 + 2 * 4 * 2  # encoders x tasks x seeds

    e = commands("e", "--steps", "900")
    layers = [(composed(c).model.num_layers, composed(c).model.hidden_size, composed(c).pretrain.max_steps)
              for c in e[:3]]
    assert layers == [(3, 768, 900), (6, 768, 900), (12, 768, 900)]  # equal tokens, though `study=size` is set
    mrpc = composed(next(c for c in e if "name=mrpc-L6_H768_A12-finetune-1-2" in c))
    assert (mrpc.finetune.encoder, mrpc.seed, mrpc.finetune.epochs, mrpc.finetune.max_train_examples) == (
        "L6_H768_A12", 2, 3, None)
    sst2 = composed(next(c for c in e if "name=sst2-L3_H768_A12-finetune-1-1" in c))
    assert (sst2.finetune.epochs, sst2.finetune.max_train_examples, sst2.finetune.lr) == (1, 16000, 2.0e-5)

    d = commands("d", "--extra", "finetune.lr=3e-5")
    assert len(d) == 1 + 7 * 2
    concat = composed(next(c for c in d if "name=conll2003-bert-concat_last_four-1-1" in c))
    assert (concat.finetune.mode, concat.finetune.features, concat.finetune.feature_head_lr, concat.finetune.lr) == (
        "feature_based", "concat_last_four", 1.0e-3, 3e-5)
    assert all("finetune.max_train_examples=null" in c for c in d[1:])  # all 14,041 CoNLL-2003 sentences


def test_claim_b_at_three_pretraining_seeds_pretrains_each_encoder_at_each_and_fine_tunes_every_run() -> None:
    """--pretrain-seeds 1 2 3: bert and nonsp each pretrained at seeds 1, 2, 3 (runs `<encoder>-<seed>`), then every
    cell of claim b on each pretraining run (`finetune.pretrain_seed`), named as the pipeline names it."""
    b = commands("b", "--pretrain-seeds", "1", "2", "3")
    runs = [composed(c) for c in b[:6]]
    assert [(r.name, r.seed, r.objective.name, r.pretrain.max_steps) for r in runs] == [
        (e, s, objective, 1000) for e, objective in (("bert", "mlm_nsp"), ("nonsp", "mlm")) for s in (1, 2, 3)]
    cells = {next(a for a in c if a.startswith("name=")): c for c in b[6:]}
    assert sorted(cells) == sorted(f"name={cell_name(t, f'{e}-finetune', p, s)}" for t in ("qnli", "squad", "sst2")
                                   for e in ("bert", "nonsp") for p in (1, 2, 3) for s in (1, 2))
    assert all(f"finetune.pretrain_seed={n.split('-')[-2]}" in c for n, c in cells.items())
    squad = composed(cells["name=squad-nonsp-finetune-3-2"])
    assert (squad.finetune.encoder, squad.finetune.pretrain_seed, squad.seed) == ("nonsp", 3, 2)


def test_cells_start_when_their_encoder_is_pretrained_and_stop_at_the_deadline(tmp_path: Path) -> None:
    """claim.py's scheduler: a cell starts only after its pretraining run ended well (exit 0, metrics.json in
    pretrain/<encoder>/<encoder>-<seed>/); a failed run's cells never start; what still runs at the deadline is
    stopped and counted failed."""
    spec = importlib.util.spec_from_file_location("claim", REPO / "benchmarks/gpu/claim.py")
    claim = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(claim)
    (tmp_path / "logs").mkdir()
    order = tmp_path / "order.txt"

    def py(code: str) -> list[str]:
        return [sys.executable, "-c", f"import pathlib, time\nd = pathlib.Path({str(tmp_path)!r})\n{code}"]

    def pretrained(encoder: str) -> list[str]:
        run = f"d / 'pretrain' / {encoder!r} / '{encoder}-1'"  # its pretraining run at seed 1
        return py(f"time.sleep(1.0)\n({run}).mkdir(parents=True)\n({run} / 'metrics.json').write_text('{{}}')\n"
                  f"open(d / 'order.txt', 'a').write('pretrained {encoder}\\n')\nprint('held-out 1.0')")

    def cell(name: str, seconds: float = 0.0) -> list[str]:
        return py(f"open(d / 'order.txt', 'a').write('start {name}\\n')\ntime.sleep({seconds})")

    pretrain = {"good-1": pretrained("good"), "bad-1": py("raise SystemExit(3)"), "slow-1": py("time.sleep(60)")}
    finetune = {"sst2-good-finetune-1-1": ("good-1", cell("g1")), "sst2-good-finetune-1-2": ("good-1", cell("g2", 60)),
                "sst2-bad-finetune-1-1": ("bad-1", cell("b1")), "sst2-slow-finetune-1-1": ("slow-1", cell("s1"))}
    claim.started = time.time()
    failed = claim.run_claim(pretrain, finetune, tmp_path, deadline=4.0)
    took = time.time() - claim.started
    assert sorted(failed) == ["ft_sst2-good-finetune-1-2", "pretrain_bad-1", "pretrain_slow-1"]
    assert order.read_text().splitlines()[0] == "pretrained good"
    assert sorted(order.read_text().splitlines()[1:]) == ["start g1", "start g2"]
    assert 4.0 <= took < 10.0


def test_a_call_refuses_a_data_folder_that_holds_an_earlier_calls_runs(tmp_path: Path) -> None:
    """A second claim.py call on a warm machine would reuse and bring back the first call's runs as its own (they
    crashed its verdicts once): it stops with one line naming them and exit 2, before running anything."""
    (tmp_path / "pretrain" / "bert").mkdir(parents=True)
    (tmp_path / "run.json").write_text("{}")
    out = subprocess.run([sys.executable, "benchmarks/gpu/claim.py", "b", "--data", str(tmp_path), "--out",
                          str(tmp_path / "out")], cwd=REPO, env=ENV, capture_output=True, text=True)
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().splitlines()[-1].endswith(f"--data {tmp_path} holds an earlier call's runs (pretrain, "
                                                         "run.json): give a folder with the pack alone unpacked")
    assert not (tmp_path / "logs").exists() and not (tmp_path / "out").exists()

"""What the report says beside each claim pair's verdict, on small studies built here from the synthetic runs
(tests/report_data.py): the power (the MDE, 2.80 x the bootstrap draws' SD, the paper's effect against it and the
pretraining runs a side it needs at the assumed between-run SD), the family-wise reading (Holm within a table), a
contrast repeated through a strategy that is the same model at the encoder's depth counted once, the seeds the
intervals resample said only where a side has several, and verdicts that keep to the bootstrap's seed."""

import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bertlab.report import collect, power, stats, tinterval
from bertlab.report.claims import check_claims
from bertlab.report.markdown import findings_section
from bertlab.report.multiboot import DRAWS
from bertlab.report.pairs import Finding, Pair
from bertlab.report.render import FINDING_FIELDS, details, finding_rows, headline
from tests.report_data import BASE, FINETUNE, METRIC, PRETRAIN, SPLIT, ft, pre, write_data

LABELS = {"mrpc": "MRPC", "sst2": "SST-2", "squad": "SQuAD", "qnli": "QNLI", "cola": "CoLA", "conll2003": "CoNLL-2003"}
COLUMNS = {t: {"label": label, "split": SPLIT.get(t, "validation"), "metric": METRIC.get(t, "accuracy")}
           for t, label in LABELS.items()}
RUN_SD = 1.4
STRATEGIES = ("embeddings", "last", "sum_last_four", "concat_last_four", "sum_all")
TABLE5 = {"tasks": ["mrpc", "sst2", "squad"], "rows": {
    "bert-finetune": {"label": "BERT", "paper": {"mrpc": 86.7, "sst2": 95.0, "squad": 88.5}},
    "nonsp-finetune": {"label": "No NSP", "paper": {"mrpc": 86.5, "sst2": 80.0, "squad": 87.9}},
    "ltr-finetune": {"label": "LTR", "paper": {"mrpc": 77.5, "sst2": 92.1, "squad": 77.8}},
    "scratch-finetune": {"label": "Scratch"}}}
TABLE7 = {"tasks": ["conll2003"], "rows": {
    "bert-finetune": {"label": "Fine-tuning", "key": "finetune", "paper": 96.4},
    **{f"bert-{s}": {"label": s, "key": s, "paper": v} for s, v in zip(STRATEGIES, (91.0, 94.9, 95.9, 96.1, 95.5))}}}
CLAIMS5 = [{"id": "nsp", "table": "table5", "text": "NSP helps", "better": "bert-finetune", "than": "nonsp-finetune"},
           {"id": "mlm", "table": "table5", "text": "MLM beats LTR", "better": "bert-finetune", "than": "ltr-finetune"},
           {"id": "pretraining", "table": "table5", "text": "Pretraining helps", "better": "bert-finetune",
            "than": "scratch-finetune"}]
CLAIMS7 = [{"id": "features", "table": "table7", "text": "Features beat embeddings",
            "better": [f"bert-{s}" for s in STRATEGIES[1:]], "than": "bert-embeddings"},
           {"id": "finetuning", "table": "table7", "text": "Fine-tuning beats features", "better": "bert-finetune",
            "than": [f"bert-{s}" for s in STRATEGIES]}]

SIZES = {"tasks": [], "ppl": True, "rows": {"L6_H768_A12-finetune": {}, "L3_H768_A12-finetune": {}}}  # shapes: presets'
ENCODERS = {name: [f"model={name}"] for name in ("L6_H768_A12", "L3_H768_A12")}
SIZE_PPL = {"id": "size", "table": "t6", "text": "Larger is better", "columns": ["ppl"], "by_size": True}


def study(tables: dict[str, Any], claims: list[dict[str, Any]], **bootstrap: Any) -> dict[str, Any]:
    """A study declaring `tables` and `claims`, its bootstrap at the report's draws and the assumed between-run SD."""
    return {"columns": COLUMNS, "encoders": ENCODERS, "pretrain_seeds": [1, 2, 3], "seeds": [1, 2, 3],
            "tables": tables, "claims": claims,
            "bootstrap": {"draws": DRAWS, "seed": 0, "level": 0.95, "run_sd": RUN_SD} | bootstrap}


def decided(tmp_path: Path, spec: dict[str, Any], finetune: list[dict], pretrain: dict[str, dict] = PRETRAIN
            ) -> dict[str, Finding]:
    write_data(tmp_path, finetune, pretrain)
    return {f.id: f for f in check_claims(spec, collect.collect(tmp_path))}


def pair(finding: Finding, column: str, b: str | None = None) -> Pair:
    (found,) = [p for p in finding.pairs if p.column == column and b in (None, p.b.key)]
    return found


# ---------------------------------------------------------------------------------------------- power


@pytest.fixture(scope="module")
def nsp(tmp_path_factory: pytest.TempPathFactory) -> Finding:
    """BERT against No NSP: SST-2 87 vs 78 (the paper's +15.0), MRPC 82 (3 seeds) vs 55 (the paper's +0.2), SQuAD
    70 vs no No NSP run."""
    runs = [*(r for r in FINETUNE if r["task"] in ("mrpc", "squad") and r["encoder"] in ("bert", "nonsp")),
            ft("bert", "sst2", 87.0), ft("nonsp", "sst2", 78.0)]
    return decided(tmp_path_factory.mktemp("nsp"), study({"table5": TABLE5}, CLAIMS5[:1]), runs)["nsp"]


def test_the_mde_is_2_80_times_the_bootstrap_draws_sd(nsp: Finding) -> None:
    assert power.z_sum() == pytest.approx(2.80, abs=0.005)
    for column in ("sst2", "mrpc"):
        p = pair(nsp, column)
        assert p.mde == pytest.approx(power.z_sum() * np.std(p.contrast.draws, ddof=1), rel=1e-12)
        assert p.mde == pytest.approx(2.8016 * p.contrast.se, rel=1e-4) and 5 < p.mde < 15
    squad = pair(nsp, "squad")
    assert (squad.contrast.verdict, squad.mde, squad.runs_needed, squad.power_note) == (stats.NOT_MEASURED, None,
                                                                                         None, "")


def test_the_papers_effect_against_the_mde_and_the_runs_it_needs(nsp: Finding) -> None:
    """The paper's +15.0 on SST-2 is above this design's MDE: at a between-run SD of 1.4 one pretraining run a side
    detects it. Its +0.2 on MRPC is below: the items' noise alone exceeds it, whatever the number of runs."""
    sst2, mrpc = pair(nsp, "sst2"), pair(nsp, "mrpc")
    assert (sst2.paper, sst2.paper_vs_mde) == (pytest.approx(15.0), "above")
    assert sst2.runs_needed == power.runs_needed(15.0, RUN_SD**2, sst2.contrast.item_var) == 1
    # the runs a side are the textbook sizing with the dev items' noise the Multi-Bootstrap left to every run
    room = 15.0**2 / power.z_sum() ** 2 - sst2.contrast.item_var
    assert sst2.runs_needed == max(1, math.ceil(RUN_SD**2 / room))
    assert sst2.power_note == (f"{power.UNMEASURED}; at the assumed between-run SD of 1.4 the paper's +15.0 needs 1 "
                               "pretraining run a side")
    assert (mrpc.paper_vs_mde, mrpc.runs_needed) == ("below", math.inf)
    assert mrpc.power_note.endswith("the paper's +0.2 reaches 80% power at no number of pretraining runs: with "
                                    f"unlimited runs a side, at least {mrpc.unlimited:.0%}")
    assert 0.05 <= mrpc.unlimited < 0.1  # one run's item noise holds its own luck too: a lower bound
    md = "\n".join(findings_section(study({"table5": TABLE5}, CLAIMS5[:1]), [nsp]))
    assert f"| {sst2.mde:.1f}; the paper's +15.0 above it; 1 run a side |" in md
    assert (f"| {mrpc.mde:.1f}; the paper's +0.2 below it; no number of runs reaches 80%: unlimited runs a side ≥ "
            f"{mrpc.unlimited:.0%} power |") in md
    assert "At an assumed between-run SD of 1.4 points for an A − B margin (`ablations.bootstrap.run_sd`" in md


def test_the_power_in_claims_json_and_the_findings_csv(nsp: Finding) -> None:
    sst2 = details([], [], [nsp])["claims"]["nsp"]["pairs"]["sst2: bert vs nonsp"]
    assert (sst2["mde"], sst2["paper_vs_mde"], sst2["runs_needed"]) == (round(pair(nsp, "sst2").mde, 4), "above", 1)
    assert details([], [], [nsp])["claims"]["nsp"]["pairs"]["mrpc: bert vs nonsp"]["runs_needed"] == "inf"
    rows = {r[FINDING_FIELDS.index("column")]: dict(zip(FINDING_FIELDS, r)) for r in finding_rows([nsp])}
    assert (rows["sst2"]["runs_needed"], rows["mrpc"]["runs_needed"], rows["squad"]["runs_needed"]) == ("1", "inf",
                                                                                                       None)
    assert rows["mrpc"]["paper_vs_mde"] == "below" and rows["mrpc"]["mde"] == round(pair(nsp, "mrpc").mde, 4)


def test_a_tie_no_number_of_runs_resolves_is_beyond_this_scale(tmp_path: Path, nsp: Finding) -> None:
    """Unresolved over three pretraining runs a side where even unlimited runs would have under 50% power to detect
    the paper's effect: "beyond this scale", with that power; it stays in its table's family. A resolved pair keeps its
    verdict however small the paper's effect (MRPC 82 vs 55 against the paper's +0.2). With one run a side the item
    noise holds the run's own luck too: not called beyond (MRPC 80 vs 80 at one pretraining run)."""
    tie = pair(marginal(tmp_path, ["sst2", "mrpc"]), "mrpc")  # 80 vs 80; TABLE5 has no paper numbers here
    assert (tie.contrast.verdict, tie.runs_needed) == (stats.UNRESOLVED, None)
    mrpc = {"tasks": ["mrpc"], "rows": TABLE5["rows"]}
    one = [ft(e, "mrpc", 80.0, seed=s) for e in ("bert", "nonsp") for s in (1, 2, 3)]
    (single,) = decided(tmp_path / "one", study({"table5": mrpc}, CLAIMS5[:1]), one)["nsp"].pairs
    assert (single.contrast.verdict, single.runs_needed) == (stats.UNRESOLVED, math.inf)
    runs = [ft(e, "mrpc", 80.0, pretrain_seed=s) for e in ("bert", "nonsp") for s in (1, 2, 3)]
    (beyond,) = decided(tmp_path / "beyond", study({"table5": mrpc}, CLAIMS5[:1]), runs)["nsp"].pairs
    assert (beyond.contrast.verdict, beyond.runs_needed, beyond.paper) == (stats.BEYOND, math.inf, pytest.approx(0.2))
    assert beyond.unlimited == pytest.approx(power.unlimited_power(0.2, beyond.contrast.item_var))
    assert beyond.unlimited < 0.1
    assert beyond.reading == ("beyond this scale; the paper's size holds: the interval admits its +0.2 (with unlimited "
                              f"pretraining runs a side, {beyond.unlimited:.0%} power to detect it: the dev items' "
                              "noise alone hides it)")
    assert beyond.familywise == stats.BEYOND and beyond.holm_p is not None
    assert (pair(nsp, "mrpc").contrast.verdict, pair(nsp, "mrpc").runs_needed) == (stats.REPRODUCED, math.inf)
    finding = Finding("nsp", "table5", "NSP helps", (beyond,))
    assert headline([finding])["beyond_scale"] == 1
    assert details([], [], [finding])["familywise"]["paper"]["beyond_scale"] == 1
    assert "| **beyond this scale; the paper's size holds**: the interval admits" in "\n".join(
        findings_section(study({}, []), [finding]))


def test_a_tie_on_the_edge_of_the_item_noise_reads_unresolved_with_its_fewest_runs(tmp_path: Path,
                                                                                    monkeypatch) -> None:
    """Where the item variance's Monte-Carlo band spans "some runs decide it" and "none do" (here made to by a band of
    a million SDs), the tie is not called beyond this scale: it reads unresolved, its fewest runs a side stated."""
    monkeypatch.setattr(power, "SETTLED_Z", 1e6)
    runs = [ft(e, "mrpc", 80.0, seed=s) for e in ("bert", "nonsp") for s in (1, 2, 3)]
    mrpc = {"tasks": ["mrpc"], "rows": TABLE5["rows"]}
    (edge,) = decided(tmp_path, study({"table5": mrpc}, CLAIMS5[:1]), runs)["nsp"].pairs
    assert (edge.contrast.verdict, edge.runs_needed) == (stats.UNRESOLVED, math.inf)
    assert edge.runs_edge is not None and 1 <= edge.runs_edge < math.inf
    assert edge.power_note.endswith(f"it needs {edge.runs_edge:.0f} or more runs a side, or no number of runs "
                                    "decides it")
    table = "\n".join(findings_section(study({}, []), [Finding("nsp", "table5", "NSP helps", (edge,))]))
    assert f"edge: {edge.runs_edge:.0f}+ runs a side or none, within the Monte-Carlo error" in table


def test_perplexity_pairs_get_an_mde_but_no_assumed_runs(tmp_path: Path) -> None:
    """The assumed SD is in points of a dev metric: a perplexity pair's MDE stands alone, its variance unmeasured."""
    (p,) = decided(tmp_path, study({"t6": SIZES}, [SIZE_PPL]), [])["size"].pairs
    assert p.contrast.verdict == stats.REPRODUCED and p.mde == pytest.approx(power.z_sum() * p.contrast.se)
    assert (p.paper, p.runs_needed, p.power_note) == (None, None, power.UNMEASURED)


# ---------------------------------------------------------------------------------------------- Holm


def marginal(tmp_path: Path, tasks: list[str]) -> Finding:
    """NSP on `tasks`: SST-2 87 vs 78 (p 0.018, reproduced), every other task a tie (80 vs 80)."""
    runs = [ft("bert", "sst2", 87.0), ft("nonsp", "sst2", 78.0),
            *(ft(e, t, 80.0) for t in tasks if t != "sst2" for e in ("bert", "nonsp"))]
    table = {"tasks": tasks, "rows": {"bert-finetune": {"label": "BERT"}, "nonsp-finetune": {"label": "No NSP"}}}
    return decided(tmp_path, study({"table5": table}, CLAIMS5[:1]), runs)["nsp"]


def test_holm_turns_a_marginal_verdict_unresolved_in_a_family_of_several(tmp_path: Path) -> None:
    alone = pair(marginal(tmp_path / "one", ["sst2"]), "sst2")
    assert (alone.contrast.verdict, alone.familywise, alone.holm_p) == (stats.REPRODUCED, stats.REPRODUCED,
                                                                         alone.contrast.p_value)
    assert 0.0125 < alone.contrast.p_value < 0.05
    family = marginal(tmp_path / "four", ["sst2", "mrpc", "qnli", "cola"])
    sst2 = pair(family, "sst2")
    assert sst2.contrast.p_value == alone.contrast.p_value  # the same draws: only the family grew
    assert (sst2.contrast.verdict, sst2.familywise) == (stats.REPRODUCED, stats.UNRESOLVED)
    assert sst2.holm_p == pytest.approx(4 * sst2.contrast.p_value)  # the smallest of 4 p-values: times 4
    assert {pair(family, t).contrast.verdict for t in ("mrpc", "qnli", "cola")} == {stats.UNRESOLVED}
    assert headline([family])["own_reproduced"] == 1  # its rows have no paper numbers: the project's own
    assert details([], [], [family])["familywise"]["checks"] == {"reproduced": 0, "contradicted": 0, "unresolved": 4,
                                                               "beyond_scale": 0}
    md = "\n".join(findings_section(study({}, []), [family]))
    # 4 x p = 0.071, but one run's p (89 of 10,000 draws past 0) moves by +/-3 binomial SDs to 4 x 0.012 = 0.048
    assert sst2.holm_edge and not alone.holm_edge
    low, high = sst2.contrast.p_band
    assert 4 * low <= 0.05 < 4 * high and low < sst2.contrast.p_value < high
    assert (f"| **reproduced** | {sst2.mde:.1f} | not family-wise (p {sst2.holm_p:.3f}); **edge**: within the "
            "p-values' Monte-Carlo error of the level |") in md
    md_alone = "\n".join(findings_section(study({}, []), [marginal(tmp_path / "again", ["sst2"])]))
    assert f"| holds (p {alone.holm_p:.3f}) |" in md_alone


def test_each_table_is_its_own_family(tmp_path: Path) -> None:
    """Table 5's and Table 7's pairs are corrected apart: a table's family does not grow with another's pairs."""
    found = decided(tmp_path, study({"table5": TABLE5, "table7": TABLE7}, [*CLAIMS5, *CLAIMS7]), FINETUNE)
    for table in ("table5", "table7"):
        members = [p for f in found.values() if f.table == table for p in f.pairs if p.holm_p is not None]
        adjusted = sorted(p.holm_p for p in members)
        raw = sorted(p.contrast.p_value for p in members)
        assert adjusted[0] == pytest.approx(min(1.0, len(members) * raw[0]))  # m: this table's measured pairs only
    assert all(p.holm_p is None for p in pair_list(found) if p.contrast.verdict == stats.NOT_MEASURED)


def pair_list(found: dict[str, Finding]) -> list[Pair]:
    return [p for f in found.values() for p in f.pairs]


# ---------------------------------------------------------------------------------------------- counted once


def strategies(tmp_path: Path, depth: tuple[int, ...]) -> dict[str, Finding]:
    """Table 7 on `bert` trained at `depth`, with both weighted sums run."""
    runs = [ft("bert", "conll2003", 90.0), *(ft("bert", "conll2003", v, mode=s) for s, v in zip(
        STRATEGIES, ("constant", 80.0, 86.0, 85.0, 86.0)))]
    bert = pre("bert", BASE, depth, 1_800_000, 40.0)
    same = {"id": "same", "table": "table7", "text": "The sums differ", "better": "bert-sum_all",
            "than": "bert-sum_last_four"}
    return decided(tmp_path, study({"table7": TABLE7}, [*CLAIMS7, same]), runs, PRETRAIN | {"bert": bert})


def test_a_strategy_that_is_the_same_model_at_4_layers_is_counted_once(tmp_path: Path) -> None:
    found = strategies(tmp_path, (4, 192, 12, 768))
    (sums,) = [p for p in found["features"].pairs if p.a.key == "sum_all"]
    assert sums.same_as == ("sum_all is the same model as sum_last_four at 4 layers: counted in sum_last_four vs "
                            "embeddings")
    (fine,) = [p for p in found["finetuning"].pairs if p.b.key == "sum_all"]
    assert fine.same_as.startswith("sum_all is the same model as sum_last_four at 4 layers")
    (itself,) = found["same"].pairs
    assert itself.same_as == "sum_all and sum_last_four are the same model at 4 layers"
    assert not any(p.counted for p in (sums, fine, itself)) and {p.holm_p for p in (sums, fine, itself)} == {None}
    assert found["features"].summary == ("3 reproduced, 0 contradicted, 0 unresolved at this scale of 3 pairs (of the 3 "
                                         "resolved beside the paper's own A - B: 0 at its size, 3 ruling it out); 1 "
                                         "more repeating a counted pair's models, counted once")
    assert found["same"].summary.startswith("0 reproduced, 0 contradicted, 0 unresolved at this scale of 0 pairs")
    counted = [p for p in pair_list(found) if p.counted]
    measured = [p for p in counted if p.contrast.verdict != stats.NOT_MEASURED]
    assert len(counted) == 3 + 4 and sum(headline(list(found.values()))[k] for k in (
        "reproduced", "contradicted", "unresolved", "beyond_scale")) == len(measured)
    assert len([p for p in counted if p.holm_p is not None]) == 7  # the family: the 7 counted pairs
    md = "\n".join(findings_section(study({"table7": TABLE7}, []), list(found.values())))
    assert "| *counted once*: sum_all is the same model as sum_last_four at 4 layers: counted in" in md
    assert "Counted once: a pair whose sides are the models of an earlier pair's repeats its contrast" in md


def test_at_12_layers_the_two_sums_are_two_models(tmp_path: Path) -> None:
    found = strategies(tmp_path, BASE)
    assert all(p.counted for p in pair_list(found)) and len(pair_list(found)) == 4 + 5 + 1
    assert found["features"].summary == ("4 reproduced, 0 contradicted, 0 unresolved at this scale of 4 pairs (of the 4 "
                                         "resolved beside the paper's own A - B: 0 at its size, 4 ruling it out)")
    assert len([p for p in pair_list(found) if p.holm_p is not None]) == 10
    md = "\n".join(findings_section(study({"table7": TABLE7}, []), list(found.values())))
    assert "counted once" not in md.lower()


def test_the_same_rows_compared_by_two_claims_count_once(tmp_path: Path) -> None:
    again = CLAIMS5[0] | {"id": "again", "text": "NSP helps, said twice"}
    found = decided(tmp_path, study({"table5": TABLE5}, [CLAIMS5[0], again]), FINETUNE)
    assert all(p.counted for p in found["nsp"].pairs)
    assert [p.same_as for p in found["again"].pairs] == ["the same contrast: counted in BERT vs No NSP"] * 3
    measured = [p for p in found["nsp"].pairs if p.contrast.verdict != stats.NOT_MEASURED]
    assert sum(headline(list(found.values()))[k] for k in ("reproduced", "contradicted", "unresolved",
                                                            "beyond_scale")) == len(measured) == 2


# ---------------------------------------------------------------------------------------------- seeds resampled


def legend_of(tmp_path: Path, seeds: dict[str, int]) -> str:
    """The findings' legend where BERT's SST-2 cell has `seeds["bert"]` seeds and No NSP's `seeds["nonsp"]`, beside
    a perplexity pair (one pretraining run a side, no fine-tuning seed)."""
    runs = [ft(e, "sst2", 80.0 + s, seed=s) for e in ("bert", "nonsp") for s in range(1, seeds[e] + 1)]
    spec = study({"table5": TABLE5 | {"tasks": ["sst2"]}, "t6": SIZES}, [CLAIMS5[0], SIZE_PPL])
    md = "\n".join(findings_section(spec, list(decided(tmp_path, spec, runs).values())))
    return md.split("\n\n")[1]


def test_the_seeds_are_said_resampled_only_where_a_side_has_several(tmp_path: Path) -> None:
    one = legend_of(tmp_path / "one", {"bert": 1, "nonsp": 1})
    assert "seeds)" not in one and "each side's fine-tuning seeds" not in one and "of a side that has" not in one
    assert ("resampling the dev items, the same for A and B; each side has one fine-tuning seed, so the variation "
            "between seeds is not in the interval)") in one
    several = legend_of(tmp_path / "two", {"bert": 2, "nonsp": 3})
    assert "resampling the dev items, the same for A and B, and each side's fine-tuning seeds)" in several
    mixed = legend_of(tmp_path / "mixed", {"bert": 2, "nonsp": 1})
    assert ("and the fine-tuning seeds of a side that has more than one; a side with one seed, as the items × runs "
            "column shows, leaves the variation between seeds out of the interval), and a verdict") in mixed


# ---------------------------------------------------------------------------------------------- the bootstrap's seed


def test_verdicts_keep_to_the_bootstrap_seed_on_the_synthetic_report(tmp_path: Path) -> None:
    """Five bootstrap seeds at the report's 10,000 draws: every verdict is the same, and so is its family-wise
    reading. Fine-tuning vs last hidden (CoNLL-2003 F1 in whole points on 100 sentences, +10.0, its low end on +1.0
    or 0.0) is flagged at the edge at every seed, and read unresolved at every seed (not beyond this scale: one
    pretraining run a side)."""
    write_data(tmp_path, FINETUNE, PRETRAIN)
    results = collect.collect(tmp_path)
    runs = []
    for seed in range(5):
        spec = study({"table5": TABLE5, "table7": TABLE7}, [*CLAIMS5, *CLAIMS7], seed=seed)
        runs.append({(f.id, p.name): p for f in check_claims(spec, results) for p in f.pairs})
    edge = {k for run in runs for k, p in run.items() if p.edge}
    assert edge == {("finetuning", "conll2003: finetune vs last")}
    assert all(run[k].edge for run in runs for k in edge)  # flagged at every seed, not at some
    assert {run[k].contrast.verdict for run in runs for k in edge} == {stats.UNRESOLVED}
    for k in runs[0]:
        assert len({(run[k].contrast.verdict, run[k].familywise) for run in runs}) == 1, k
    measured = [k for k, p in runs[0].items() if p.contrast.verdict != stats.NOT_MEASURED]
    assert len(measured) >= 8 and len(edge) == 1
    md = "\n".join(findings_section(spec, [Finding("finetuning", "table7", "t", (runs[4][next(iter(edge))],))]))
    assert re.search(r"\*\*unresolved at this scale; the paper's size holds\*\*: the interval admits its \+1\.5; "
                     r"\*\*edge: within the bootstrap's Monte-Carlo error of 0\*\* \(±\d\.\d\d\)", md)


# ---------------------------------------------------------------------------------------------- pretraining runs


def test_a_claim_over_several_pretraining_runs_is_the_multi_bootstraps_paired_by_seed(tmp_path: Path) -> None:
    """BERT and No NSP each pretrained at seeds 1-3 (SST-2, 2 fine-tuning seeds a run): the pair's interval is
    `multi_bootstrap` over the runs grouped by pretraining seed, paired; its power uses the measured between-run
    variance; each run's margin is shown beside the interval; a side with fewer runs is unpaired."""
    from bertlab.report.multiboot import multi_bootstrap

    margins = {1: 4.0, 2: 0.0, 3: 2.0}
    runs = [ft(e, "sst2", score + (margins[p] if e == "bert" else 0.0) + s, seed=s, pretrain_seed=p)
            for e, score in (("bert", 80.0), ("nonsp", 80.0)) for p in (1, 2, 3) for s in (1, 2)]
    finding = decided(tmp_path, study({"table5": TABLE5}, CLAIMS5[:1]), runs)["nsp"]
    found = pair(finding, "sst2")
    results = collect.collect(tmp_path)
    groups = [[[results.items[r["name"]].model for r in runs if (r["encoder"], r["pretrain_seed"]) == (e, p)]
               for p in (1, 2, 3)] for e in ("bert", "nonsp")]
    direct = multi_bootstrap(*groups, "classification", "accuracy", paired=True, draws=DRAWS, seed=0)
    c = found.contrast
    assert (c.estimate, c.low, c.high, c.verdict) == (direct.estimate, direct.low, direct.high, direct.verdict)
    assert (found.seeds, found.pretrain_runs, c.paired) == ((6, 6), (3, 3), True)
    assert found.run_margins == pytest.approx((4.0, 0.0, 2.0))
    assert np.isfinite(c.run_var) and "assumed" not in found.power_note  # the between-run variance measured
    one = multi_bootstrap(*(g[:1] for g in groups), "classification", "accuracy", paired=True, draws=DRAWS, seed=0)
    assert (c.estimate, c.low, c.high) != (one.estimate, one.low, one.high)  # not the first run's alone
    text = "\n".join(findings_section(study({"table5": TABLE5}, CLAIMS5[:1]), [finding]))
    assert f"| {c.n_items} × 3×2/3×2 |" in text
    assert "; runs +" in text and "Multi-Bootstrap" in text
    # the power's legend: the between-run variance measured (not the one-run text), its runs needed with a range
    assert "Each side is over several pretraining runs, so the variation between them is in the interval" in text
    assert "Each side is one pretraining run" not in text and "assumed between-run SD" not in text
    assert (c.run_df, found.runs_range) == (2, tuple(power.runs_needed(15.0, v, c.item_var)
                                                      for v in power.run_var_interval(c.run_var, 2)))
    assert found.runs_range == (1, 2) and "1 run a side (1-2) |" in text
    assert found.power_note.endswith("the paper's +15.0 needs 1 pretraining run a side (1 to 2 over the between-run "
                                     "variance's 80% interval, 2 degrees of freedom, and the item variance's "
                                     "Monte-Carlo error)")
    assert c.df == pytest.approx(float(tinterval.satterthwaite(c.item_var, c.run_var / 3, 2, c.n_items)))
    fewer = decided(tmp_path / "fewer", study({"table5": TABLE5}, CLAIMS5[:1]),
                    [r for r in runs if r["encoder"] == "bert" or r["pretrain_seed"] == 1])["nsp"]
    assert pair(fewer, "sst2").contrast.paired is False and pair(fewer, "sst2").run_margins == ()

"""The report's verdicts on two runs of the default side by side (issue 55, done-when 5): the committed run and one
of the same commit under another float rounding (`ATEN_CPU_CAPABILITY=avx2`), each read from its evidence folder
with the current report code. Prints each encoder's held-out perplexity per pretraining run; every counted measured
contrast's A - B [95%], verdict and per-run margins under both; then, over all the report's claim pairs, which of the
verdict, the family-wise (Holm) reading, where the paper's effect falls and the runs it needs differ (a moved runs
figure with both runs' ranges over their between-run variance's interval), and each claim's summary.

    python benchmarks/pilots/avx2_default_2026-11-29/compare.py reports/evidence \
        benchmarks/pilots/avx2_default_2026-11-29/evidence
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from bertlab.report import evidence, render, stats
from bertlab.report.pairs import Pair
from bertlab.report.tables import table_names

COLUMNS = ("verdict", "familywise", "paper_vs_interval", "runs_needed")  # a pair's readings in claims.json


def read(folder: Path) -> tuple[dict[str, float], dict[str, Pair], dict[str, Any]]:
    """Held-out perplexity per pretraining run, the counted measured pairs, and the claims.json the evidence gives."""
    spec, results = evidence.load(folder)
    analysed = render.analyse(spec, results)
    ppl = {name: run["heldout_ppl"] for name, run in sorted(results.pretrain.items()) if "heldout_ppl" in run}
    pairs = {f"{f.id} / {p.name}": p for f in analysed[1] for p in f.pairs
             if p.counted and p.contrast.verdict != stats.NOT_MEASURED}
    return ppl, pairs, render.details(table_names(spec), *analysed)["claims"]


def shown(p: Pair) -> str:
    c = p.contrast
    margins = " / ".join(f"{m:+.1f}" for m in p.run_margins)
    return f"{c.estimate:+.2f} [{c.low:+.2f}, {c.high:+.2f}] {c.verdict}" + (f" (runs {margins})" if margins else "")


def inside(x: dict[str, Any], y: dict[str, Any]) -> bool:
    """Whether pair x's runs needed lie within y's range over the between-run variance's interval."""
    lo, hi = y["runs_range"] or (y["runs_needed"], y["runs_needed"])
    return lo <= x["runs_needed"] <= hi


def main(first: Path, second: Path) -> int:
    (ppl_a, a, claims_a), (ppl_b, b, claims_b) = read(first), read(second)
    print(f"held-out perplexity at [MASK] inputs, {first} | {second}")
    for name in ppl_a:
        print(f"  {name}: {ppl_a[name]:.2f} | {ppl_b.get(name, float('nan')):.2f}")
    differ = [k for k in a if k in b and a[k].contrast.verdict != b[k].contrast.verdict]
    print(f"\n{len(a)} measured contrasts (counted once); {len(a) - len(differ)} the same verdict, "
          f"{len(differ)} differ")
    for k in a:
        mark = "  <-- differs" if k in differ else ""
        print(f"  {k}\n    {shown(a[k])}\n    {shown(b[k]) if k in b else 'not in the second'}{mark}")
    rows = [(cid, name, column) for cid, claim in claims_a.items() for name in claim["pairs"] for column in COLUMNS]
    moved = [(cid, name, column) for cid, name, column in rows if claims_a[cid]["pairs"][name][column]
             != claims_b.get(cid, {}).get("pairs", {}).get(name, {}).get(column)]
    n_pairs = sum(len(claim["pairs"]) for claim in claims_a.values())
    print(f"\nall {n_pairs} claim pairs, {len(COLUMNS)} readings each ({', '.join(COLUMNS)}): "
          f"{len(rows) - len(moved)} of {len(rows)} the same")
    for cid, name, column in moved:
        x, y = claims_a[cid]["pairs"][name], claims_b[cid]["pairs"][name]
        within = (f" (ranges {x['runs_range']} | {y['runs_range']}; each inside the other's: "
                  f"{inside(x, y) and inside(y, x)})" if column == "runs_needed" else "")
        print(f"  {cid} / {name}: {column} {x[column]!r} | {y[column]!r}{within}")
    summaries = [cid for cid in claims_a if claims_a[cid]["summary"] != claims_b.get(cid, {}).get("summary")]
    print(f"{len(claims_a)} claims: {len(claims_a) - len(summaries)} the same summary"
          + "".join(f"\n  {cid}: {claims_a[cid]['summary']} | {claims_b[cid]['summary']}" for cid in summaries))
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))

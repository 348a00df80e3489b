"""Recompute every cell, interval and verdict of a report's claims.json from its evidence/ alone (no data/, conf/ or
network), by the report's own statistics, and compare them with claims.json as it stores them.

`python -m bertlab.report.recompute [reports] [--out FILE]`. The evidence (`bertlab.report.evidence`) holds every
record and per-item score the report read and the study it used; `render.analyse` and `render.details` turn it into
claims.json as the `ablations` stage does. Every value is compared exactly as claims.json stores it (rounded to 4
decimals, finer than the Markdown prints; the bootstrap is seeded, so the same evidence gives the same digits). One
line per claim pair, claim or cell that differs, then a summary. Exit status 0 when all are equal, 1 when any differ,
2 (one line) when the evidence or claims.json is missing or unreadable.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from bertlab.errors import UserError
from bertlab.files import read_json, to_json, write_json
from bertlab.report import evidence, render
from bertlab.report.tables import table_names

CLAIMS, FAMILYWISE = "claims", "familywise"  # claims.json's keys for the claims and the family-wise counts; every
# other key is a table of cells


def recompute(report_dir: Path) -> dict[str, Any]:
    """The claims.json that `<report_dir>/evidence/` gives."""
    spec, results = evidence.load(report_dir / "evidence")
    return render.details(table_names(spec), *render.analyse(spec, results))


def units(claims: dict[str, Any]) -> dict[str, Any]:
    """What claims.json states, one entry each: a claim pair (`claim <id> / <pair>`), a claim's own fields (`claim
    <id>`), a cell (`cell <table> / <row> / <column>`), the family-wise counts."""
    out: dict[str, Any] = {FAMILYWISE: claims.get(FAMILYWISE)}
    for cid, claim in claims[CLAIMS].items():
        out[f"claim {cid}"] = {k: v for k, v in claim.items() if k != "pairs"}
        out.update({f"claim {cid} / {name}": pair for name, pair in claim["pairs"].items()})
    for table, by_row in claims.items():
        if table not in (CLAIMS, FAMILYWISE):
            out.update({f"cell {table} / {row} / {column}": cell
                        for row, by_column in by_row.items() for column, cell in by_column.items()})
    return out


def difference(stored: Any, fresh: Any) -> str:
    """What differs between one entry as claims.json stores it and as recomputed ("" when nothing)."""
    if isinstance(stored, dict) and isinstance(fresh, dict):
        keys = [k for k in {**stored, **fresh} if stored.get(k, ...) != fresh.get(k, ...)]
        return "; ".join(f"{k} {stored.get(k, '(none)')!r} in claims.json, {fresh.get(k, '(none)')!r} recomputed"
                         for k in keys)
    return "" if stored == fresh else f"{stored!r} in claims.json, {fresh!r} recomputed"


def compare(stored: Any, fresh: dict[str, Any], where: Path) -> list[str]:
    """One line per entry of claims.json (`stored`, read from `where`) that differs from the recomputed `fresh`."""
    try:
        old = units(stored)
    except (AttributeError, KeyError, TypeError) as err:
        raise UserError(f"{where}: not the report's claims.json ({type(err).__name__}: {err})") from err
    new = units(fresh)
    lines = []
    for name in {**old, **new}:
        if name not in new:
            lines.append(f"{name}: in claims.json, not recomputed")
        elif name not in old:
            lines.append(f"{name}: recomputed, not in claims.json")
        elif why := difference(old[name], new[name]):
            lines.append(f"{name}: {why}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bertlab.report.recompute", description=__doc__.split("\n\n")[0])
    parser.add_argument("report_dir", nargs="?", default=Path("reports"), type=Path,
                        help="the report's folder, holding claims.json and evidence/ (default: reports)")
    parser.add_argument("--out", type=Path, help="also write the recomputed claims.json to this file")
    args = parser.parse_args(argv)
    where = args.report_dir / "claims.json"
    try:
        if not where.is_file():
            raise UserError(f"{where} not found: name the folder the ablations stage wrote the report into")
        stored = read_json(where)
        fresh = recompute(args.report_dir)
        if args.out:
            write_json(args.out, fresh)
        fresh = json.loads(to_json(fresh))  # as claims.json stores it
        lines = compare(stored, fresh, where)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    pairs = sum(len(claim["pairs"]) for claim in fresh[CLAIMS].values())
    cells = sum(1 for name in units(fresh) if name.startswith("cell "))
    for line in lines:
        print(line)
    done = f"{pairs} intervals and verdicts and {cells} cells recomputed from {args.report_dir / 'evidence'}"
    print(f"{done}: {len(lines)} differ from {where}" if lines else f"{done}, all equal to {where}")
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main())

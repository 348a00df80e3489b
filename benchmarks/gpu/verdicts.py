"""The paper's claims at BERT-base from the short GPU runs of `claim.sh`, decided as the ablations report decides
them: a run's folder read as a data dir (`report.collect`), the study's declared claims (conf/ablations/default.yaml;
`CLAIMS` names which decide each short run) checked on it (`report.claims.check_claims`) over the pretraining runs and
fine-tuning seeds it holds: per pair, each side's mean beside its floor on the same dev items, A - B (A: the side the
paper finds better) with its 95% Multi-Bootstrap interval over pretraining runs, seeds and dev items (paired by
pretraining seed where both sides ran the same; with one run a side, the paired bootstrap over items and seeds), each
pretraining run's own A - B beside it, and whether the interval admits the paper's own effect. Only the pairs of the
run's own encoders and tasks are shown. A pretraining run whose held-out perplexity at its end is above 0.5 x unigram
is collapsed: the pairs of its encoder test nothing.

    python benchmarks/gpu/verdicts.py --runs <data_dir>     # one run's verdicts, printed (claim.sh's end)
    python benchmarks/gpu/verdicts.py [--out reports/gpu.md]  # every run under reports/gpu/, as markdown

A committed run is a folder of reports/gpu/ holding what claim.sh's tarball brings back: run.json, download/
manifest.json, pretrain/<encoder>/<encoder>-<pretraining seed>/ (metrics.json, heldout_items.json) and
finetune/<encoder>/<task>-<encoder>-<mode>-<pretraining seed>-<seed>/ (metrics.json, items.json). Runs committed
before pretraining seeds (2026-11-28: pretrain/<encoder>/ flat, cells `<task>-<encoder>-<mode>-<seed>`) are read as
pretraining seed 1, the seed they ran at (`adopt`). A run of some of its claim's encoders (claim.sh's ENCODERS, e.g.
`scratch` again at another fine-tuning lr) names a committed run of the same claim as its `base`, whose files of the
other encoders it is decided with: the same dev items, so still paired where the pretraining seeds are the same.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import shutil
import tempfile
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from bertlab.files import read_json, write_json
from bertlab.report import stats
from bertlab.report.cells import PPL, Cell, CellOf, cell_lookup
from bertlab.report.claims import Pair, check_claims
from bertlab.report.collect import Results, collect
from bertlab.report.multiboot import MultiContrast
from bertlab.report.tables import encoder_of
from bertlab.runs import pretrain_dir
from bertlab.stage import CONF_DIR
from bertlab.study import SEP, cell_name, pretrain_encoder, split_row

REPO = Path(__file__).resolve().parents[2]
LEGACY_SEED = 1  # the pretraining seed of a run committed before pretraining seeds: the config's `seed`, unset then


@dataclass(frozen=True)
class Claim:
    """One short GPU run: the encoders it pretrains (names of the study's `encoders`), the tasks it fine-tunes each on,
    the declared claims that decide it (an id of the study's `claims`, or a claim in their form), its default
    pretraining steps, and `modes_of`: a table whose rows on these encoders give the fine-tuning modes (the study's
    `modes`; none: fine-tuning alone)."""

    title: str
    encoders: tuple[str, ...]
    tasks: tuple[str, ...]
    decided_by: tuple[str | dict[str, Any], ...]
    steps: int
    modes_of: str | None = None

    def modes(self, spec: dict[str, Any]) -> list[str]:
        """The fine-tuning modes each encoder runs in, in the table's row order."""
        if self.modes_of is None:
            return ["finetune"]
        rows = [split_row(row) for row in spec["tables"][self.modes_of]["rows"]]
        return list(dict.fromkeys(mode for encoder, mode in rows if encoder in self.encoders))


CLAIMS = {
    "a": Claim("pretrained vs scratch", ("bert", "scratch"), ("sst2", "conll2003", "squad", "qnli"),
               ("pretraining_helps",), 1400),
    "b": Claim("NSP vs no NSP", ("bert", "nonsp"), ("qnli", "squad", "sst2"), ("nsp_helps",), 1000),
    # MLM against LTR, both without NSP (Table 5's "No NSP" and "LTR & No NSP" rows): one change at a time
    "c": Claim("MLM vs left-to-right", ("nonsp", "ltr"), ("squad", "sst2"), (
        {"id": "mlm_beats_ltr", "table": "table5", "better": "nonsp-finetune", "than": "ltr-finetune",
         "text": "A masked LM beats a left-to-right LM (both without NSP)"},), 1000),
    # Table 7's rows on one encoder (the gpu profile trains the BiLSTM on frozen features at 1e-3, the encoders at 2e-5)
    "d": Claim("Table 7: fine-tuning vs frozen features", ("bert",), ("conll2003",),
               ("features_beat_embeddings", "finetuning_beats_features"), 1400, "table7"),
    # Table 6's depths at BERT-base's width and heads, the same steps (tokens) each
    "e": Claim("Table 6: depth at equal tokens", ("L3_H768_A12", "L6_H768_A12", "L12_H768_A12"), ("sst2", "mrpc"),
               ("size_ppl", "size_sst2", "size_mrpc"), 1000),
}
ONE_RUN = "one pretraining run a side: no between-run variance in the interval"
HEADER = ["claim", "column", "A", "B", "A mean", "B mean", "A's floor", "A - B [95%]", "each pretraining run's A - B",
          "verdict", "items x seeds", "run"]


def study() -> dict[str, Any]:
    """The ablations config (conf/ablations/default.yaml), resolved."""
    return OmegaConf.to_container(OmegaConf.load(Path(CONF_DIR) / "ablations" / "default.yaml"), resolve=True)


def collapse_bound(spec: dict[str, Any]) -> float:
    """Held-out perplexity over the unigram floor above which a pretrained encoder learned nothing: the bound of the
    study's `beyond_unigram` claim (0.5)."""
    return float(next(c["floor_ratio"] for c in spec["claims"] if c["id"] == "beyond_unigram"))


def declared(spec: dict[str, Any], claim: str) -> list[dict[str, Any]]:
    """The claims of the study that decide the short run `claim`, in the study's form."""
    by_id = {c["id"]: c for c in spec["claims"]}
    return [by_id[c] if isinstance(c, str) else c for c in CLAIMS[claim].decided_by]


def base_run(run: Path, meta: dict[str, Any]) -> Path | None:
    """The committed run whose other encoders' files complete `run` (run.json `base`: a sibling folder, else one of
    reports/gpu/), or None for a run of its claim's every encoder."""
    if not meta.get("base"):
        return None
    for base in (run.parent / meta["base"], REPO / "reports" / "gpu" / meta["base"]):
        if (base / "run.json").exists():
            if read_json(base / "run.json")["claim"] != meta["claim"]:
                raise SystemExit(f"error: {run}/run.json: base {meta['base']!r} is a run of another claim")
            return base
    raise SystemExit(f"error: {run}/run.json: base {meta['base']!r} is not a committed run (reports/gpu/)")


def legacy(folder: Path) -> bool:
    """Whether `folder` is a run committed before pretraining seeds: its pretraining runs in pretrain/<encoder>/ flat,
    their records without `encoder` and `seed`, its cells' without `pretrain_seed`."""
    return any((folder / "pretrain").glob("*/metrics.json"))


def adopt(src: Path, into: Path, skip: Collection[str] = ()) -> None:
    """Copy the pretraining runs and cells of `src` (but those of the encoders in `skip`) into `into` in the current
    layout. A legacy run's (`legacy`) become pretraining seed 1's, the seed they ran at: a pretraining run's record
    named `<encoder>-1` with its `encoder` and `seed`, a cell's named `<task>-<encoder>-<mode>-1-<seed>` with its
    `pretrain_seed`, the per-item files as they are."""
    old = legacy(src)
    for d in sorted((src / "pretrain").glob("*/")):
        if d.name in skip:
            continue
        if not old:
            shutil.copytree(d, into / "pretrain" / d.name)
            continue
        out = pretrain_dir(into, d.name, LEGACY_SEED)
        write_json(out / "metrics.json", {**read_json(d / "metrics.json"), "name": out.name, "encoder": d.name,
                                          "seed": LEGACY_SEED})
        if (d / "heldout_items.json").exists():
            shutil.copy(d / "heldout_items.json", out)
    for d in sorted((src / "finetune").glob("*/")):
        if d.name in skip:
            continue
        if not old:
            shutil.copytree(d, into / "finetune" / d.name)
            continue
        for path in sorted(d.glob("*/metrics.json")):
            m = read_json(path)
            row = path.parent.name.rpartition(SEP)[0].removeprefix(m["task"] + SEP)  # <task>-<row>-<seed>
            out = into / "finetune" / d.name / cell_name(m["task"], row, LEGACY_SEED, m["seed"])
            write_json(out / "metrics.json", {**m, "name": out.name, "pretrain_seed": LEGACY_SEED})
            if path.with_name("items.json").exists():
                shutil.copy(path.with_name("items.json"), out)


@contextlib.contextmanager
def whole(run: Path) -> Iterator[Path]:
    """`run` as a data dir in the current layout: itself, or a temporary folder of its files (a legacy run's adopted)
    and, for a run of some of its claim's encoders, its base's files of the claim's other encoders."""
    meta = read_json(run / "run.json")
    base = base_run(run, meta)
    if base is None and not legacy(run):
        yield run
        return
    with tempfile.TemporaryDirectory() as tmp:
        into = Path(tmp)
        shutil.copytree(run / "download", into / "download")
        adopt(run, into)
        if base is not None:
            adopt(base, into, skip=set(meta["encoders"]))
        yield into


def pretraining(folder: Path, bound: float) -> dict[str, dict[str, Any]]:
    """Per pretraining run (`<encoder>-<seed>`) of `folder` (the current layout): shape, steps, tokens, held-out
    perplexity over the unigram, whether it collapsed (above `bound` x unigram)."""
    out = {}
    for path in sorted((folder / "pretrain").glob("*/*/metrics.json")):
        m = read_json(path)
        ratio = m["heldout_ppl"] / m["heldout_unigram_ppl"]
        shape = "{num_layers}/{hidden_size}/{num_heads}".format(**m["shape"])
        rate = m.get("throughput") or {}
        out[path.parent.name] = {"shape": shape, "steps": m["steps"], "positions": m.get("train_tokens") or 0,
                                 "tokens": rate.get("tokens"), "ratio": ratio,
                                 "collapsed": m["steps"] > 0 and not ratio <= bound,
                                 "tokens_per_second": rate.get("tokens_per_second")}
    return out


def trained(e: dict[str, Any]) -> str:
    """What a pretraining run read: non-padding tokens (the ledger's) and positions (padding included); nothing at 0
    steps."""
    if not e["steps"]:
        return ""
    tokens = f"{e['tokens'] / 1e6:.1f}M non-padding tokens of " if e["tokens"] else ""
    return f" ({tokens}{e['positions'] / 1e6:.1f}M positions)"


def per_run(c: stats.Contrast, a: Cell, b: Cell, digits: int) -> str:
    """Each pretraining run's A - B on all items (`<pretraining seed>: <A - B>`) where the sides are paired by
    pretraining seed, else each side's runs' scores; "-" where not measured."""
    if not isinstance(c, MultiContrast) or not math.isfinite(c.estimate):
        return "-"
    seeds = [sorted(set(cell.pretrain_seeds)) for cell in (a, b)]
    if c.paired:
        return ", ".join(f"{s}: {x - y:+.{digits}f}" for s, x, y in zip(seeds[0], c.scores_a, c.scores_b))
    return "; ".join(f"{side} " + ", ".join(f"{s}: {x:.{digits}f}" for s, x in zip(ss, scores))
                     for side, ss, scores in (("A", seeds[0], c.scores_a), ("B", seeds[1], c.scores_b)))


def runs_of(cell: Cell) -> str:
    """How many fine-tuning runs a side's number is over: `k` seeds of one pretraining run, `p`x`k` of p runs."""
    sizes = {len(g) for g in cell.groups}
    if len(cell.groups) <= 1 or len(sizes) > 1:
        return str(len(cell.runs))
    return f"{len(cell.groups)}x{sizes.pop()}"


def row(claim: str, pair: Pair, state: dict[str, dict[str, Any]], bound: float, run: str, cell: CellOf) -> list[str]:
    """One table row: the pair's sides, means, A's floor, A - B with its interval, each pretraining run's A - B and the
    verdict's reading."""
    c, digits = pair.contrast, 2 if pair.column == PPL else 1
    a, b = cell(pair.a.row, pair.column), cell(pair.b.row, pair.column)
    collapsed = [name for e in dict.fromkeys(encoder_of(s.row) for s in (pair.a, pair.b))
                 for name, r in state.items() if pretrain_encoder(name) == e and r["collapsed"]]
    if collapsed:
        verdict = f"tests nothing: {', '.join(collapsed)} collapsed (> {bound} x unigram)"
    else:
        verdict = pair.reading + (f" ({pair.reason})" if pair.reason else "")
        if math.isfinite(c.estimate) and max(pair.pretrain_runs) == 1:
            verdict += f"; {ONE_RUN}"
    interval = "-" if not math.isfinite(c.estimate) else (
        f"{c.estimate:+.{digits}f} [{c.low:+.{digits}f}, {c.high:+.{digits}f}]")
    return [claim, pair.column, pair.a.label, pair.b.label, number(a.mean, digits), number(b.mean, digits),
            number(a.floor_value, digits), interval, per_run(c, a, b, digits), verdict,
            f"{c.n_items} x {runs_of(a)}/{runs_of(b)}", run]


def seeds_in(results: Results) -> dict[str, list[int]]:
    """The pretraining and fine-tuning seeds of a run's results, as the study's `pretrain_seeds` and `seeds`: every
    run it holds is decided on."""
    return {"pretrain_seeds": sorted({r["seed"] for r in results.pretrain.values()}),
            "seeds": sorted({r["seed"] for r in results.finetune})}


def verdicts(run: Path, spec: dict[str, Any]) -> tuple[list[list[str]], dict[str, dict[str, Any]]]:
    """The rows of `run`'s claim: the pairs of its deciding claims on its own encoders and tasks (and held-out
    perplexity), decided on its pretraining runs and cells (and its base's, for the encoders it did not run); and its
    own pretraining runs (`pretraining`; not its base's)."""
    meta = read_json(run / "run.json")
    claim = CLAIMS[meta["claim"]]
    bound = collapse_bound(spec)
    name = run.name + (f" (with {meta['base']})" if meta.get("base") else "")
    with whole(run) as folder:
        results, state, columns = collect(folder), pretraining(folder, bound), {PPL, *meta["tasks"]}
    spec = {**spec, "claims": declared(spec, meta["claim"]), **seeds_in(results)}
    cell = cell_lookup(spec, results)  # shared with check_claims: each side's floor bootstrapped once
    ours = set(claim.encoders)
    rows = [row(f"{meta['claim']} ({f.id})", p, state, bound, name, cell) for f in check_claims(spec, results, cell)
            for p in f.pairs if p.column in columns and {encoder_of(p.a.row), encoder_of(p.b.row)} <= ours]
    own = set(meta["encoders"]) if meta.get("base") else set(claim.encoders)
    return rows, {k: r for k, r in state.items() if pretrain_encoder(k) in own}


def number(value: float | None, digits: int = 1) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.{digits}f}"


def report(root: Path) -> str:
    """reports/gpu.md: every committed run's verdicts, and the runs (device, commit, encoders, time)."""
    spec = study()
    runs = sorted(d for d in root.glob("*/") if (d / "run.json").exists()) if root.exists() else []
    lines = ["## BERT-base on one GPU", "",
             "The paper's claims at BERT-base (vocabulary 30,522), one short GPU run a claim: `bash "
             "benchmarks/gpu/claim.sh <claim>` runs the stages at a short-run setting of the `gpu` profile's recipe "
             "(rotary positions, 40% masking, lr 5e-4 decaying to zero at the budget, 256 x 128 tokens a step) and "
             "fine-tunes every encoder on the claim's tasks, one epoch of BERT's recipe (MRPC three), full dev sets. "
             "Each pair is one of the study's declared claims (conf/ablations/default.yaml) decided as the ablations "
             "report decides it: A - B, A the side the paper finds better, its 95% interval the Multi-Bootstrap over "
             "the sides' pretraining runs, fine-tuning seeds and dev items (paired by pretraining seed; with one run "
             "a side, the paired bootstrap over items and seeds, whose interval holds no variation between pretraining "
             "runs at all: it speaks of these two runs, not of the procedures, and is said so beside its verdict), "
             "each pretraining run's own A - B on all items beside it (`<pretraining seed>: <A - B>`), and the "
             "verdict on the direction and on the paper's size (whether the interval admits the paper's own effect; "
             "with one run a side no pair is called beyond this scale: its item noise holds the run's own luck too); "
             "items x seeds counts a side's fine-tuning runs (3x2: 3 pretraining runs, 2 seeds each). A run "
             "committed before pretraining seeds is pretraining seed 1's. A pretraining run above "
             f"{collapse_bound(spec)} x unigram at its end is collapsed: its encoder's pairs test nothing.",
             ""]
    if not runs:
        return "\n".join(lines + [
            f"No run has been committed yet ({root.relative_to(REPO) if root.is_relative_to(REPO) else root} holds "
            "none): no claim of the paper is tested at BERT-base. On a GPU: `bash benchmarks/gpu/claim.sh a` "
            "(then b to e), its `claim_<claim>.tar.gz` unpacked into reports/gpu/<date>-<claim>/, then this script."
        ]) + "\n"
    rows, about = [], []
    for run in runs:
        meta = read_json(run / "run.json")
        decided, own = verdicts(run, spec)
        rows += decided
        state = ", ".join(f"`{name}` {e['shape']}, {e['steps']:,} steps{trained(e)}, "
                          f"{e['ratio']:.3f} x unigram{' (collapsed)' if e['collapsed'] else ''}"
                          for name, e in own.items())
        base = f" (its other encoders' cells: `{meta['base']}`)" if meta.get("base") else ""
        about.append(f"- `{run.name}`: claim {meta['claim']} ({CLAIMS[meta['claim']].title}){base}, {meta['device']}, "
                     f"commit `{meta['commit']}`, `{meta['command']}` in {meta['seconds']} s; {state}")
    table = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    table += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines + table + ["", "Runs:", "", *about]) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=Path, help="one run's data_dir (claim.sh's): print its claim's verdicts")
    p.add_argument("--root", type=Path, default=REPO / "reports" / "gpu", help="the committed runs")
    p.add_argument("--out", type=Path, default=REPO / "reports" / "gpu.md")
    args = p.parse_args()
    if args.runs is not None:
        rows, own = verdicts(args.runs, study())
        for name, e in own.items():  # its own; its base's are committed
            print(f"{name}: {e['steps']} steps, {e['ratio']:.3f} x unigram{' (collapsed)' if e['collapsed'] else ''}"
                  f", {e['tokens_per_second'] or '-'} tokens/s")
        for r in rows:
            print(" | ".join(f"{h}: {v}" for h, v in zip(HEADER[1:-1], r[1:-1])))
        return
    args.out.write_text(report(args.root))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

"""The paper's claims at BERT-base from the short GPU runs of `claim.sh`, decided as the ablations report decides
them: a run's folder read as a data dir (`report.collect`), the study's declared claims (conf/ablations/default.yaml;
`CLAIMS` names which decide each short run) checked on it (`report.claims.check_claims`): per pair, each side's mean
over seeds beside its floor on the same dev items, A - B (A: the side the paper finds better) with its paired 95%
interval over dev items and seeds, and whether that interval admits the paper's own effect. Only the pairs of the
run's own encoders and tasks are shown. An encoder whose held-out perplexity at its end is above 0.5 x unigram is
collapsed: its pairs test nothing.

    python benchmarks/gpu/verdicts.py --runs <data_dir>     # one run's verdicts, printed (claim.sh's end)
    python benchmarks/gpu/verdicts.py [--out reports/gpu.md]  # every run under reports/gpu/, as markdown

A committed run is a folder of reports/gpu/ holding what claim.sh's tarball brings back: run.json, download/
manifest.json, pretrain/<encoder>/ (metrics.json, heldout_items.json) and finetune/<task>-<encoder>-<mode>-<seed>/
(metrics.json, items.json). A run of some of its claim's encoders (claim.sh's ENCODERS, e.g. `scratch` again at
another fine-tuning lr) names a committed run of the same claim as its `base`, whose files of the other encoders it is
decided with: the same dev items, so still paired.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from bertlab.files import read_json
from bertlab.report.cells import PPL, CellOf, cell_lookup
from bertlab.report.claims import Pair, check_claims
from bertlab.report.collect import collect
from bertlab.report.tables import encoder_of
from bertlab.stage import CONF_DIR
from bertlab.study import split_row

REPO = Path(__file__).resolve().parents[2]


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
HEADER = ["claim", "column", "A", "B", "A mean", "B mean", "A's floor", "A - B [95%]", "verdict", "items x seeds",
          "run"]


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


@contextlib.contextmanager
def whole(run: Path) -> Iterator[Path]:
    """`run`, or for a run of some of its claim's encoders a temporary folder of its files and its base's files of the
    claim's other encoders (pretraining results and cells)."""
    meta = read_json(run / "run.json")
    base = base_run(run, meta)
    if base is None:
        yield run
        return
    own = set(meta["encoders"])
    with tempfile.TemporaryDirectory() as tmp:
        into = Path(tmp)
        shutil.copytree(run, into, dirs_exist_ok=True)
        for kind in ("pretrain", "finetune"):  # a folder an encoder (its cells in finetune/<encoder>/)
            for d in sorted((base / kind).glob("*/")):
                if d.name not in own:
                    shutil.copytree(d, into / kind / d.name)
        yield into


def encoders(run: Path, bound: float) -> dict[str, dict[str, Any]]:
    """Per encoder of `run`: shape, steps, tokens, held-out perplexity over the unigram, whether it collapsed (above
    `bound` x unigram)."""
    out = {}
    for path in sorted((run / "pretrain").glob("*/metrics.json")):
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
    """What an encoder read: non-padding tokens (the ledger's) and positions (padding included); nothing at 0 steps."""
    if not e["steps"]:
        return ""
    tokens = f"{e['tokens'] / 1e6:.1f}M non-padding tokens of " if e["tokens"] else ""
    return f" ({tokens}{e['positions'] / 1e6:.1f}M positions)"


def row(claim: str, pair: Pair, state: dict[str, dict[str, Any]], bound: float, run: str, cell: CellOf) -> list[str]:
    """One table row: the pair's sides, means, A's floor, A - B with its interval and the verdict's reading."""
    c, digits = pair.contrast, 2 if pair.column == PPL else 1
    a, b = cell(pair.a.row, pair.column), cell(pair.b.row, pair.column)
    collapsed = [e for e in dict.fromkeys(encoder_of(s.row) for s in (pair.a, pair.b)) if state[e]["collapsed"]]
    if collapsed:
        verdict = f"tests nothing: {', '.join(collapsed)} collapsed (> {bound} x unigram)"
    else:
        verdict = pair.reading + (f" ({pair.reason})" if pair.reason else "")
    interval = "-" if not math.isfinite(c.estimate) else (
        f"{c.estimate:+.{digits}f} [{c.low:+.{digits}f}, {c.high:+.{digits}f}]")
    return [claim, pair.column, pair.a.label, pair.b.label, number(a.mean, digits), number(b.mean, digits),
            number(a.floor_value, digits), interval, verdict, f"{c.n_items} x {pair.seeds[0]}/{pair.seeds[1]}", run]


def verdicts(run: Path, spec: dict[str, Any]) -> list[list[str]]:
    """The rows of `run`'s claim: the pairs of its deciding claims on its own encoders and tasks (and held-out
    perplexity), decided on its cells (and its base's, for the encoders it did not run)."""
    meta = read_json(run / "run.json")
    claim = CLAIMS[meta["claim"]]
    bound = collapse_bound(spec)
    spec = {**spec, "claims": declared(spec, meta["claim"])}
    name = run.name + (f" (with {meta['base']})" if meta.get("base") else "")
    with whole(run) as folder:
        results, state, columns = collect(folder), encoders(folder, bound), {PPL, *meta["tasks"]}
    cell = cell_lookup(spec, results)  # shared with check_claims: each side's floor bootstrapped once
    ours = set(claim.encoders)
    return [row(f"{meta['claim']} ({f.id})", p, state, bound, name, cell) for f in check_claims(spec, results, cell)
            for p in f.pairs if p.column in columns and {encoder_of(p.a.row), encoder_of(p.b.row)} <= ours]


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
             "report decides it: A - B, A the side the paper finds better, its 95% interval a paired bootstrap over "
             "dev items and seeds, and whether that interval admits the paper's own effect. An encoder above "
             f"{collapse_bound(spec)} x unigram at the end of its pretraining is collapsed: its pairs test nothing.",
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
        rows += verdicts(run, spec)
        state = ", ".join(f"`{name}` {e['shape']}, {e['steps']:,} steps{trained(e)}, "
                          f"{e['ratio']:.3f} x unigram{' (collapsed)' if e['collapsed'] else ''}"
                          for name, e in encoders(run, collapse_bound(spec)).items())
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
        spec = study()
        for name, e in encoders(args.runs, collapse_bound(spec)).items():  # its own; its base's are committed
            print(f"{name}: {e['steps']} steps, {e['ratio']:.3f} x unigram{' (collapsed)' if e['collapsed'] else ''}"
                  f", {e['tokens_per_second'] or '-'} tokens/s")
        for r in verdicts(args.runs, spec):
            print(" | ".join(f"{h}: {v}" for h, v in zip(HEADER[1:-1], r[1:-1])))
        return
    args.out.write_text(report(args.root))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

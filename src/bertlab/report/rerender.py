"""Re-render a report from its evidence alone: every file the `ablations` stage writes (ablations.md, the CSVs,
metrics.json, claims.json, the figures, pretrain_loss/, evidence/ itself), by the report's own code (`render.write`),
from `<report dir>/evidence/` and the profile's recipe, without data/.

`python -m bertlab.report.rerender [reports] [--profile cpu]`: what a change to the report's statistics or words gives
on the same runs, not a fresh run (the header's commit is the code's that rendered it; "results as of" the runs'). The
study is the evidence's (the declaration the report used); the profile (default: params.yaml's) is composed from conf/
(its default corpus preset) only for the recipe's departures from BERT's that the header lists. The files are built in a
scratch folder and moved into place one by one (`render.publish`, as the stage does), so a failure leaves the report as
it was. `python -m bertlab.report.recompute` then agrees with it. Exit status 2 (one line) when the evidence is missing
or unreadable.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import yaml
from hydra import compose, initialize_config_dir

from bertlab.errors import UserError
from bertlab.report import evidence, render
from bertlab.report.deviations import deviations
from bertlab.settings import CONF_DIR

PARAMS = Path("params.yaml")


def profile_of(params: Path = PARAMS) -> str:
    """params.yaml's `profile`, the pipeline's."""
    try:
        return str(yaml.safe_load(params.read_text(encoding="utf-8"))["profile"])
    except (OSError, KeyError, TypeError, yaml.YAMLError) as err:
        raise UserError(f"{params}: no `profile` to read ({type(err).__name__}); give --profile") from err


def rerender(report_dir: Path, profile: str) -> render.Report:
    """Write every report file into `report_dir` from its evidence/, at `profile`'s recipe."""
    spec, results = evidence.load(report_dir / "evidence")
    with initialize_config_dir(config_dir=str(Path(CONF_DIR).resolve()), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[f"profile={profile}"])
    recipe = deviations(cfg, spec.get("paper_recipe", {}))
    with tempfile.TemporaryDirectory(dir=report_dir, prefix=".rerender-") as tmp:
        built = render.write(Path(tmp), spec, results, profile=profile, commit=render.git_commit(), recipe=recipe)
        render.publish(Path(tmp), report_dir)
    return built


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bertlab.report.rerender", description=__doc__.split("\n\n")[0])
    parser.add_argument("report_dir", nargs="?", default=Path("reports"), type=Path,
                        help="the report's folder, holding evidence/ (default: reports)")
    parser.add_argument("--profile", help="the profile the runs were made at (default: params.yaml's)")
    args = parser.parse_args(argv)
    try:
        built = rerender(args.report_dir, args.profile or profile_of())
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    pairs = sum(len(f.pairs) for f in built.findings)
    print(f"{pairs} contrasts and {len(built.entries)} cells re-rendered into {args.report_dir} from its evidence")
    return 0


if __name__ == "__main__":
    sys.exit(main())

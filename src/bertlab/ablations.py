"""Stage `ablations`: the study's tables (the BERT paper's Tables 5, 6 and 7, and ours) beside the paper's numbers with
floors, and its claims as paired contrasts.

Reads `data/pretrain/*/*/{metrics.json,metrics.csv,heldout_items.json}` (`<encoder>/<encoder>-<seed>/`),
`data/finetune/*/*/{metrics.json,items.json}` and `data/download/manifest.json`. Writes into `ablations.report_dir`
(the pipeline's run: the committed `reports/`; unset, as by hand: `<out_dir>/reports`, i.e. `data/hand/reports/`,
leaving the committed report as it is): `ablations.md`, `ablations_<table>.csv` (each table of the study),
`ablations_findings.csv`, `metrics.json` (headline counts), `claims.json` (every cell and contrast, the family-wise
counts), `evidence/` (every record and per-item score it is computed from, and the study: `python -m
bertlab.report.recompute` recomputes it from them), `figures/*.png` and `pretrain_loss/*.csv` (dvc.yaml's outputs),
all built in a scratch directory first and then moved into place file by file; no other file in the report directory,
its `evidence/`, `figures/` or `pretrain_loss/`, is ever replaced or removed. With `logger=wandb`, logs the tables,
the findings (each pair's interval and verdict) and the figures to one W&B run in group "ablations".
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from bertlab import stage
from bertlab.files import check_writable
from bertlab.report import collect, render
from bertlab.report.deviations import deviations
from bertlab.report.tables import table_names
from bertlab.tracking import log_report

log = logging.getLogger(__name__)


def report_folder(cfg: DictConfig) -> Path:
    """`ablations.report_dir`, or where it is unset (a run by hand) `<out_dir>/reports`."""
    return Path(cfg.ablations.report_dir or Path(cfg.out_dir) / "reports")


def build(cfg: DictConfig, profile: str) -> render.Report:
    """Collect the results under `cfg.data_dir` and write the report into `report_folder(cfg)`."""
    spec = OmegaConf.to_container(cfg.ablations, resolve=True)
    results = collect.collect(Path(cfg.data_dir))
    report_dir = report_folder(cfg)
    check_writable(report_dir)
    report_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=report_dir, prefix=".ablations-") as tmp:
        built = render.write(Path(tmp), spec, results, profile=profile, commit=render.git_commit(),
                             recipe=deviations(cfg, spec.get("paper_recipe", {})))
        render.publish(Path(tmp), report_dir)
    figures = [report_dir / "figures" / p.name for p in built.figures]
    return render.Report(built.entries, built.findings, figures)


def log_wandb(cfg: DictConfig, built: render.Report) -> None:
    """One W&B run in group "ablations": each table (with floors) and the findings (each pair's difference, 95%
    interval and verdict) as a wandb.Table, the figures as images."""
    def values(wandb: Any) -> dict[str, Any]:
        tables = {t: wandb.Table(columns=list(render.CSV_FIELDS), data=render.csv_rows(built.entries, t))
                  for t in table_names(OmegaConf.to_container(cfg.ablations, resolve=True))}
        findings = wandb.Table(columns=list(render.FINDING_FIELDS), data=render.finding_rows(built.findings))
        return {**tables, "findings": findings, **{f"figures/{p.stem}": wandb.Image(str(p)) for p in built.figures}}

    log_report(cfg.logger, "ablations", "ablations", OmegaConf.to_container(cfg.ablations, resolve=True), values)


@stage.main(own_output=True, reads=("logger",))  # into report_folder(cfg), checked there
def run(cfg: DictConfig) -> None:
    built = build(cfg, cfg.profile_name)
    for f in built.findings:
        log.info("%s: %s", f.summary, f.text)
    if cfg.logger.kind == "wandb":
        log_wandb(cfg, built)
    log.info("report -> %s", report_folder(cfg) / "ablations.md")


if __name__ == "__main__":
    run()

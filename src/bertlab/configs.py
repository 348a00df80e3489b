"""Stage `configs`: compose, with Hydra, the exact config of every run in the pipeline.

`dvc repro` never composes Hydra configs, so this first stage does it. For each run of the study that conf/ablations
declares (`bertlab.study`: an encoder's pretraining per pretraining seed, a table cell's fine-tuning per pretraining run
and seed) at `params.yaml`'s profile and corpus, it writes the complete resolved config the run starts from and its key
file, the part of it that can change the run's results: a data stage's and the report's as
`data/configs/<stage>/<stage>.yaml` and `.key.yaml` (`python -m bertlab.<stage> -cd data/configs/<stage> -cn <stage>`);
a training run's in its encoder's folder, `data/configs/<stage>/<encoder>/{<group>,keys}/<name>.yaml` (`<group>`: `run`
for pretraining, `cell` for fine-tuning), beside `runs.yaml` or `cells.yaml`, the Hydra multirun over them that the
encoder's DVC stage runs (`run_files`, `write_sweep`). Each DVC stage depends on its key files only, so `dvc repro`
reruns exactly the runs whose effective settings changed, and never one for a speed-only (`impl`) or logging (`logger`)
change: batch sizes are global (all devices and nodes), so a key is the same on any number of GPUs. A run the profile
leaves out (`ablations.cells`) gets `not_run` (why) in its config and key: its stage writes a "not run" record instead
of training.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from hydra import initialize_config_dir
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf

from bertlab import kinds, layers, setting_files, settings, study
from bertlab.collisions import Models
from bertlab.composer import Composer
from bertlab.errors import UserError
from bertlab.files import atomic_dir
from bertlab.hydra_errors import one_line
from bertlab.local import mirror_setting
from bertlab.runs import values_at
from bertlab.stage import CONF_DIR

PARAMS = ("profile", "corpus")  # params.yaml's keys
PIPELINE_OUTPUTS = ["out_dir=${data_dir}", "ablations.report_dir=reports"]  # where the pipeline's runs write
DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml's, where PyYAML has it: the same text, 4x faster
DECLARATION = Path("ablations") / "default.yaml"  # the study, as dvc.yaml reads it (in conf_dir())


def conf_dir() -> Path:
    """The `conf/` this stage composes: the working directory's, where DVC runs it (a queued experiment's copy of the
    project, whose `-S` edits are there), else the package's own (`stage.CONF_DIR`)."""
    here = Path.cwd() / "conf"
    return here if (here / "config.yaml").is_file() else Path(CONF_DIR)


@dataclass(frozen=True)
class Run:
    """One run of the pipeline: its stage, name and Hydra overrides; why the profile leaves it out (None: it runs);
    the tables that use it (its W&B tags, the first its group); a training run's encoder; where each override is
    declared (`sources`, one per override: its provenance)."""

    stage: str
    name: str
    overrides: list[str]
    not_run: str | None = None
    tags: tuple[str, ...] = ()
    encoder: str | None = None
    sources: tuple[str, ...] = ()


def corpus_preset(name: str) -> str:
    """params.yaml's `corpus`; `auto` follows where the data come from: `mirror` when a data mirror is set
    (`bertlab.local`: `BERTLAB_DATA_MIRROR`, else `local.yaml`), else `online`."""
    if name != "auto":
        return name
    return "mirror" if mirror_setting()[0] else "online"


def base_overrides(params: dict[str, Any]) -> list[str]:
    return [f"profile={params['profile']}", f"corpus={corpus_preset(params['corpus'])}"]


def runs(params: dict[str, Any], spec: dict[str, Any], policy: dict[str, Any]) -> Iterator[Run]:
    """Every run of the pipeline: the data stages, each encoder of the study `spec` (the `ablations` config), each
    cell of its tables and seed, the report; `policy` (`cells`: what the profile runs) says which it leaves out."""
    base = [(o, "params.yaml") for o in base_overrides(params)]
    for stage in ("download", "tokenizer", "pretrain_data"):
        yield _run(stage, stage, base)
    for name, overrides in spec["encoders"].items():
        for seed in spec["pretrain_seeds"]:
            grid = [(f"name={name}", "the grid"), (f"seed={seed}", "ablations.pretrain_seeds")]
            yield _run("pretrain", study.pretrain_name(name, seed),
                       [*base, *grid, *[(o, f"ablations.encoders.{name}") for o in overrides]],
                       study.encoder_left_out(policy, name, seed, spec["pretrain_seeds"]),
                       tuple(study.tables_using(spec, name)), name)
    for cell in study.cells(spec):
        grid = [(f"name={cell.name}", "the grid"), (f"finetune.encoder={cell.encoder}", "the grid"),
                (f"finetune.pretrain_seed={cell.pretrain_seed}", "ablations.pretrain_seeds"),
                (f"task={cell.task}", f"ablations.tables.{cell.tables[0]}.tasks"), (f"seed={cell.seed}", "ablations.seeds")]
        mode, profile = spec["modes"][cell.mode], study.cell_overrides(policy, cell)
        where = f"ablations.cells.finetune.{cell.tables[0]}.{cell.task}"
        layers.check_cell_overrides(cell.mode, mode, profile, where)
        yield _run("finetune", cell.name, [*base, *grid, *[(o, f"ablations.modes.{cell.mode}") for o in mode],
                                           *[(o, where) for o in profile]],
                   study.cell_left_out(policy, cell, spec["seeds"], spec["pretrain_seeds"]), cell.tables, cell.encoder)
    yield _run("ablations", "ablations", base)


def _run(stage: str, name: str, labelled: layers.Labelled, not_run: str | None = None, tags: tuple[str, ...] = (),
         encoder: str | None = None) -> Run:
    return Run(stage, name, [o for o, _ in labelled], not_run, tags, encoder, tuple(w for _, w in labelled))


def read_study(cfg: DictConfig, spec: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The study and what the profile runs of it (its `cells`), checked: `spec`, or the composed `cfg`'s `ablations`,
    whose encoders must then be the declaration file's, which dvc.yaml reads as its stages (a profile may narrow or
    widen the seeds, a table's tasks and rows, and leaves encoders out with `cells.skip`)."""
    composed = spec is None
    spec = OmegaConf.to_container(cfg.ablations, resolve=True) if composed else spec
    study.check(spec)
    if composed:
        declared = yaml.safe_load((conf_dir() / DECLARATION).read_text(encoding="utf-8"))
        if list(spec["encoders"]) != list(declared["encoders"]):
            raise UserError(f"ablations.encoders: the profile {cfg.profile_name!r} changes their names, but dvc.yaml's "
                            f"stages are conf/{DECLARATION}'s (a profile leaves encoders out with `cells.skip`)")
    policy = spec.get("cells") or {}
    study.check_policy(policy, spec)
    return spec, policy


def result_overrides(overrides: list[str]) -> list[str]:
    """`overrides` without the speed-only (`impl`) and logging (`logger`) ones."""
    return [o for o in overrides if not re.match(r"[+~]*(impl|logger)[.=]", o)]


def write_all(params: dict[str, Any], out: Path, spec: dict[str, Any] | None = None) -> int:
    """Compose and write the config and key file of every run of the study (`spec`, an `ablations` config; None: the
    declaration) under `out`; returns the number of runs."""
    count = 0
    conf = conf_dir()
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"), atomic_dir(out) as tmp:
        composer, dump = Composer(), Dumps()
        study_cfg = _compose("the study", base := base_overrides(params), lambda: composer(base))
        spec, policy = read_study(study_cfg, spec)
        models = Models(spec)
        settings.check_presets()
        jobs: dict[tuple[str, str], int] = {}  # a training stage's sweep for an encoder -> its runs at once
        for run in runs(params, spec, policy):
            full, key = _compose_run(run, composer, conf, models)
            if run.encoder:  # the fewest any of its runs allows
                where = (run.stage, run.encoder)
                jobs[where] = min(jobs.get(where, full["impl"]["jobs"]), full["impl"]["jobs"])
            config, key_file = run_files(tmp, run)
            header = "# @package _global_\n" if run.encoder else ""
            for path, text in ((config, header + dump(full)),
                               (key_file, yaml.dump(key, Dumper=DUMPER))):
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
            count += 1
        models.check()
        for stage in GROUPS:  # each encoder's runs of a training stage: one Hydra multirun, a job a run
            for encoder in spec["encoders"]:
                write_sweep(tmp / stage / encoder, stage, Path(study_cfg.data_dir) / "hydra" / stage / encoder,
                            jobs.get((stage, encoder), 1))
    return count


class Dumps:
    """`yaml.dump(config, sort_keys=False)` of many run configs, each top-level section dumped once: the runs of a
    study share most of theirs (a block mapping's text is its entries' texts, one after another)."""

    def __init__(self) -> None:
        self.texts: dict[tuple[str, str], str] = {}

    def __call__(self, config: dict[str, Any]) -> str:
        texts = []
        for key, value in config.items():
            if (seen := (key, json.dumps(value))) not in self.texts:
                self.texts[seen] = yaml.dump({key: value}, Dumper=DUMPER, sort_keys=False)
            texts.append(self.texts[seen])
        return "".join(texts)


GROUPS = {"pretrain": ("run", "runs", "pretraining run", "${name}-${seed}"),  # stage -> its runs' config group, the
          "finetune": ("cell", "cells", "fine-tuning cell", "${name}")}       # sweep's name, what a job is, job folder


def run_files(root: Path, run: Run) -> tuple[Path, Path]:
    """Where `run`'s config and key file go under `root`: `<stage>/<name>.yaml` and `<stage>/<name>.key.yaml`; a
    training run's in its encoder's folder, `<stage>/<encoder>/<group>/<name>.yaml` (a config of the group `run` or
    `cell`, at the top level: `# @package _global_`) and `<stage>/<encoder>/keys/<name>.yaml`."""
    if run.encoder is None:
        return root / run.stage / f"{run.name}.yaml", root / run.stage / f"{run.name}.key.yaml"
    folder = root / run.stage / run.encoder
    return folder / GROUPS[run.stage][0] / f"{run.name}.yaml", folder / "keys" / f"{run.name}.yaml"


SWEEP = """# Every {what} of this encoder, a job each, {how} (Hydra's multirun; a finished one does nothing):
#   python -m bertlab.{stage} -m -cd data/configs/{stage}/<encoder> -cn {sweep} '{group}=glob(*)'
# One alone: python -m bertlab.{stage} -cd data/configs/{stage}/<encoder>/{group} -cn <name>
defaults:
  - {group}: ???{launcher}
  - _self_
"""


def write_sweep(folder: Path, stage: str, logs: Path, jobs: int = 1) -> None:
    """`folder/<sweep>.yaml`: the primary config of the multirun over `folder/<group>/` (`GROUPS`), its job logs
    under `logs`; `jobs` (`impl.jobs`) > 1: that many jobs at once, each its own process (Hydra's joblib launcher)."""
    group, name, what, subdir = GROUPS[stage]
    folder.mkdir(parents=True, exist_ok=True)
    sweep: dict[str, Any] = {"hydra": {"sweep": {"dir": str(logs), "subdir": subdir}}}
    how, launcher = "in one process", ""
    if jobs > 1:
        sweep["hydra"]["launcher"] = {"n_jobs": jobs}
        how, launcher = f"{jobs} at once, each its own process", "\n  - override hydra/launcher: joblib"
    text = SWEEP.format(what=what, stage=stage, sweep=name, group=group, how=how, launcher=launcher)
    (folder / f"{name}.yaml").write_text(text + yaml.safe_dump(sweep, sort_keys=False))


def _compose_run(run: Run, composer: Composer, conf: Path, models: Models) -> tuple[dict[str, Any], dict[str, Any]]:
    """`run`'s config, checked (a training run's as one of its `impl.jobs` at once) and added to `models`, and its
    key."""
    # the pipeline's own runs write its outputs, its report the committed reports/ (by hand: under out_dir)
    overrides = [*run.overrides, *PIPELINE_OUTPUTS]
    with ExitStack() as stack:
        what = f"{run.stage} run {run.name!r}"
        cfg = _compose(what, overrides, lambda: stack.enter_context(composer.applied(overrides)))
        try:  # checked resolved: plain look-ups, not OmegaConf's per setting (benchmarks/README.md, configs)
            full = settings.resolved(cfg)
            settings.check(full, presets=False)
            if run.encoder:  # a training stage's runs: a sweep, `impl.jobs` at once
                settings.check_jobs(full, full["impl"]["jobs"])
            kinds.check(full)
            settings.check_appended(run.overrides, composer, conf)
        except UserError as err:
            raise UserError(f"{what}: {err}") from err
    models.add(run.stage, run.name, full, run.not_run is None)
    key = {"overrides": result_overrides(run.overrides), **values_at(full, settings.RESULT_KEYS[run.stage])}
    full["not_run"] = run.not_run
    if run.encoder:  # where each result setting's value came from (docs/design.md, "Which layer wins")
        full["provenance"] = layers.provenance(conf, full, settings.RESULT_KEYS[run.stage],
                                               list(zip(run.overrides, run.sources, strict=True)))
    if "tags" in full["logger"]:
        full["logger"]["tags"] = list(run.tags)
    full["hydra"] = {"run": {"dir": f"{full['data_dir']}/hydra/{run.stage}/{run.name}"}, "output_subdir": None}
    if run.not_run:
        key["not_run"] = run.not_run
    return full, key


def _compose(what: str, overrides: list[str], composed: Callable[[], DictConfig]) -> DictConfig:
    """`composed()`, Hydra's refusal of `overrides` as one line naming `what`."""
    try:
        return composed()
    except HydraException as err:
        raise UserError(f"{what} ({' '.join(overrides)}): {one_line(err, conf_dir(), overrides)}") from err


def read_params(path: Path) -> dict[str, Any]:
    """`params.yaml`, checked for what `runs` reads: its keys (no more, no fewer) and their shapes."""
    try:
        params = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"cannot read {path} ({getattr(err, 'strerror', None) or err})") from err
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise UserError(f"{path} is not valid YAML{where}: {getattr(err, 'problem', None) or err}") from err
    if not isinstance(params, dict):
        raise UserError(f"{path} is {'empty' if params is None else 'not a mapping'}: it needs the keys "
                        f"{', '.join(PARAMS)}")
    if missing := [k for k in PARAMS if k not in params]:
        raise UserError(f"{path} has no {', '.join(missing)} (it needs {', '.join(PARAMS)})")
    if unknown := [k for k in params if k not in PARAMS]:
        moved = " (the study: conf/ablations/default.yaml)" if unknown[0] in ("pretrain", "modes", "finetune") else ""
        raise UserError(f"{path}: unknown key {unknown[0]!r}{moved} (its keys are {', '.join(PARAMS)})")
    for key in PARAMS:
        if not isinstance(params[key], str):
            raise UserError(f"{path}: {key}: expected a name, got {params[key]!r}")
    return params


def composed_corpus(out: Path) -> str | None:
    """The corpus preset the configs under `out` were last composed at (None: none were)."""
    try:
        return yaml.safe_load((out / "tokenizer" / "tokenizer.yaml").read_text(encoding="utf-8"))["corpus"]["name"]
    except (OSError, yaml.YAMLError, TypeError, KeyError):
        return None


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    params_file = Path(argv[0] if argv else "params.yaml")
    out = Path("data") / "configs"
    edited = [f for f in (params_file, Path("conf") / DECLARATION) if f.is_file()]  # what `dvc exp run -S` sets
    before = composed_corpus(out)
    try:
        params = read_params(params_file)
        n = write_all(params, out)
    except (UserError, KeyError) as err:
        back = setting_files.restore(edited, out)
        print(f"error: {err}" + (f" ({', '.join(back)}: put back as last composed)" if back else ""), file=sys.stderr)
        sys.exit(2)
    setting_files.keep(edited, out)
    if before not in (None, after := corpus_preset(params["corpus"])):
        mirror, where = mirror_setting()
        print(f"corpus: {before} -> {after} (params.yaml's corpus: {params['corpus']}; data mirror: "
              f"{mirror or 'none'}, {where})")
    print(f"composed {n} run configs from conf/ and {params_file}")


if __name__ == "__main__":
    main()

"""Stage `configs`: compose, with Hydra, the exact config of every run in the pipeline.

`dvc repro` never composes Hydra configs, so this first stage does it. For each run that `params.yaml`
asks for it writes `data/configs/<stage>/<name>.yaml`, the complete resolved config the run starts from
(`python -m bertlab.<stage> -cd data/configs/<stage> -cn <name>`), and `<name>.key.yaml`, the part of it
that can change the run's results. Each DVC stage depends on its key file only, so `dvc repro` reruns
exactly the runs whose effective settings changed, and never one for a speed-only (`impl`) or logging
(`logger`) change: batch sizes are global (all devices and nodes), so a key is the same on any number of GPUs.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf

from bertlab import settings
from bertlab.data.sources import MIRROR_ENV
from bertlab.errors import UserError
from bertlab.files import atomic_dir
from bertlab.report.tables import tables_of
from bertlab.runs import RESULT_KEYS, cell_fields, values_at
from bertlab.stage import CONF_DIR


PARAMS = ("profile", "corpus", "pretrain", "modes", "finetune")  # params.yaml's keys


def corpus_preset(name: str) -> str:
    """params.yaml's `corpus`; `auto` follows where the data come from: `mirror` when `BERTLAB_DATA_MIRROR` is set,
    else `online`."""
    if name != "auto":
        return name
    return "mirror" if os.environ.get(MIRROR_ENV) else "online"


def runs(params: dict[str, Any]) -> Iterator[tuple[str, str, list[str]]]:
    """(stage, run name, Hydra overrides) of every run in the pipeline, as params.yaml defines them."""
    base = [f"profile={params['profile']}", f"corpus={corpus_preset(params['corpus'])}"]
    for stage in ("download", "tokenizer", "pretrain_data"):
        yield stage, stage, base
    for name, overrides in params["pretrain"].items():
        yield "pretrain", name, [*base, f"name={name}", *overrides]
    for task, grid in params["finetune"].items():
        for encoder, mode in grid["runs"]:
            for kind, value in (("pretrain", encoder), ("modes", mode)):
                if value not in params[kind]:
                    raise UserError(f"finetune.{task}.runs: {value!r} is not in params.yaml `{kind}` "
                                    f"({', '.join(params[kind])})")
            for seed in grid["seeds"]:
                name = f"{task}-{encoder}-{mode}-{seed}"
                yield "finetune", name, [*base, f"name={name}", f"finetune.encoder={encoder}", f"task={task}",
                                         f"seed={seed}", *params["modes"][mode]]
    yield "ablations", "ablations", base


def result_overrides(overrides: list[str]) -> list[str]:
    """`overrides` without the speed-only (`impl`) and logging (`logger`) ones."""
    return [o for o in overrides if not re.match(r"[+~]*(impl|logger)[.=]", o)]


def wandb_tags(stage: str, cfg: DictConfig) -> list[str]:
    """The ablation tables that use a training run (a pretraining run through any row on its encoder, a fine-tuning
    run as a cell): its W&B tags, the first its group."""
    if stage not in ("pretrain", "finetune"):
        return []
    run = {"encoder": cfg.name} if stage == "pretrain" else cell_fields(cfg)
    return tables_of(OmegaConf.to_container(cfg.ablations, resolve=True), run)


def write_all(params: dict[str, Any], out: Path) -> int:
    """Compose and write every run's config and key file under `out`; returns the number of runs."""
    count = 0
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"), atomic_dir(out) as tmp:
        for stage, name, overrides in runs(params):
            try:
                # the pipeline's own runs write its outputs (out_dir is no result setting: not in the key file)
                cfg = compose(config_name="config", overrides=[*overrides, "out_dir=${data_dir}"])
            except HydraException as err:
                raise UserError(f"{stage} run {name!r} ({' '.join(overrides)}): {str(err).splitlines()[0]}") from err
            try:
                settings.check(cfg)
                settings.check_appended(overrides, lambda o: compose(config_name="config", overrides=o), Path(CONF_DIR))
            except UserError as err:
                raise UserError(f"{stage} run {name!r}: {err}") from err
            full = OmegaConf.to_container(cfg, resolve=True)
            if "tags" in full["logger"]:
                full["logger"]["tags"] = wandb_tags(stage, cfg)
            full["hydra"] = {"run": {"dir": f"{cfg.data_dir}/hydra/{stage}/{name}"}, "output_subdir": None}
            (tmp / stage).mkdir(exist_ok=True)
            (tmp / stage / f"{name}.yaml").write_text(yaml.safe_dump(full, sort_keys=False))
            key = {"overrides": result_overrides(overrides), **values_at(cfg, RESULT_KEYS[stage])}
            (tmp / stage / f"{name}.key.yaml").write_text(yaml.safe_dump(key, sort_keys=True))
            count += 1
    return count


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
        raise UserError(f"{path}: unknown key {unknown[0]!r} (its keys are {', '.join(PARAMS)})")
    for key in ("profile", "corpus"):
        if not isinstance(params[key], str):
            raise UserError(f"{path}: {key}: expected a name, got {params[key]!r}")
    for key in ("pretrain", "modes"):
        if not isinstance(params[key], dict) or not all(
                isinstance(v, list) and all(isinstance(o, str) for o in v) for v in params[key].values()):
            raise UserError(f"{path}: {key}: expected names, each with a list of overrides")
    if not isinstance(params["finetune"], dict):
        raise UserError(f"{path}: finetune: expected tasks, each with seeds and runs")
    for task, grid in params["finetune"].items():
        ok = (isinstance(grid, dict) and set(grid) == {"seeds", "runs"} and isinstance(grid["seeds"], list)
              and all(isinstance(s, int) and not isinstance(s, bool) for s in grid["seeds"])
              and isinstance(grid["runs"], list) and all(isinstance(r, list) and len(r) == 2 for r in grid["runs"]))
        if not ok:
            raise UserError(f"{path}: finetune.{task}: expected seeds (a list of integers) and runs (a list of "
                            "[encoder, mode] pairs)")
    return params


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    params_file = Path(argv[0] if argv else "params.yaml")
    try:
        params = read_params(params_file)
        n = write_all(params, Path("data") / "configs")
    except (UserError, KeyError) as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    print(f"composed {n} run configs from conf/ and {params_file}")


if __name__ == "__main__":
    main()

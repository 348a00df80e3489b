"""The run's departures from BERT's recipe: each setting of the profile, and of its per-task budgets
(`conf/profile_task/<profile>_<task>.yaml`, with the files it extends), that differs from `ablations.paper_recipe`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from bertlab.stage import CONF_DIR


def _text(value: Any) -> str:
    return "null" if value is None else str(value)


def _departures(cfg: DictConfig, recipe: dict[str, Any], where: str = "") -> list[str]:
    lines = []
    for entry in recipe.get("settings", []):
        ours = OmegaConf.select(cfg, entry["key"], default="<missing>")
        if ours == "<missing>":
            continue
        ours = OmegaConf.to_container(ours, resolve=True) if OmegaConf.is_config(ours) else ours
        paper = entry["paper"]
        allowed = paper if isinstance(paper, list) and paper else [paper]
        if ours not in allowed:
            shown = " or ".join(_text(v) for v in allowed)
            lines.append(f"{entry['what']}{where}: `{entry['key']}` = {_text(ours)} (the paper: {shown})")
    return lines


def _task_budget(path: Path) -> DictConfig:
    """A `profile_task` file merged over the files beside it that its `defaults` list names (`cpu_full_mrpc.yaml`
    extends `cpu_mrpc`)."""
    own = OmegaConf.load(path)
    extended = [_task_budget(path.with_name(f"{name}.yaml")) for name in own.pop("defaults", []) if name != "_self_"]
    return OmegaConf.merge(*extended, own)


def deviations(cfg: DictConfig, recipe: dict[str, Any], conf_dir: str | Path = CONF_DIR) -> list[str]:
    """One line per setting whose value (in the composed `cfg` of this profile) is not the paper's, then those a
    profile gives one task (`<conf_dir>/profile_task/<profile>_<task>.yaml`), then the fixed differences; settings
    the config does not have are skipped."""
    lines = _departures(cfg, recipe)
    for task in sorted(p.stem for p in Path(conf_dir, "task").glob("*.yaml")):  # not cpu_full_mrpc for cpu's
        if (path := Path(conf_dir, "profile_task", f"{cfg.profile_name}_{task}.yaml")).is_file():
            lines += _departures(_task_budget(path), recipe, f" ({task})")
    return lines + list(recipe.get("always", []))

"""The run's departures from BERT's recipe: each setting of the profile that differs from `ablations.paper_recipe`."""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf


def _text(value: Any) -> str:
    return "null" if value is None else str(value)


def deviations(cfg: DictConfig, recipe: dict[str, Any]) -> list[str]:
    """One line per setting whose value (in the composed `cfg` of this profile) is not the paper's, then the fixed
    differences; settings the config does not have are skipped."""
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
            lines.append(f"{entry['what']}: `{entry['key']}` = {_text(ours)} (the paper: {shown})")
    return lines + list(recipe.get("always", []))

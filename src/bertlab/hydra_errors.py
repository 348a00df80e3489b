"""Hydra's own refusals (a misspelt key, an unknown config-group option, an override it cannot parse, a missing
config folder) as the one line a bad setting gets: it names the setting, what there is instead and the nearest."""

from __future__ import annotations

import difflib
import re
from pathlib import Path

from hydra.errors import HydraException, MissingConfigException, OverrideParseException
from omegaconf import DictConfig, OmegaConf


def one_line(err: HydraException, conf_dir: Path, argv: list[str]) -> str:
    """What `err` (raised composing a config from `conf_dir` with the command line `argv`) says, in one line."""
    text = str(err).strip()
    if isinstance(err, MissingConfigException) and (found := re.search(r"Could not find '([^']+)/([^'/]+)'", text)):
        group, option = found.groups()
        options = list(err.options or sorted(p.stem for p in (conf_dir / group).glob("*.yaml")))
        return (f"{group}={option}: there is no {group} {option!r} in conf/{group}/{_nearest(option, options)}; "
                f"the options: {', '.join(options)}")
    if found := re.match(r"Could not override '([^']+)'", text):
        key = found[1]
        given = next((a for a in argv if a.lstrip("+~").startswith(f"{key}=")), key)
        return (f"{given}: there is no setting {key}{_nearest(key, _keys(conf_dir))}: check its spelling "
                "(`--help` lists the settings)")
    if found := re.search(r"'([^']+)' does not exist", text):
        return f"~{found[1]}: there is no setting {found[1]} to delete{_nearest(found[1], _keys(conf_dir))}"
    if isinstance(err, OverrideParseException) and (found := re.match(r"Error parsing override '(.*)'", text)):
        return f"cannot read the override {found[1]!r}: write key=value (a config group: group=option)"
    return " ".join(text.split())


def _nearest(word: str, words: list[str]) -> str:
    close = difflib.get_close_matches(word, words, n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


def _keys(conf_dir: Path) -> list[str]:
    """Every dotted setting of the config that `conf_dir` composes by default."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    if GlobalHydra.instance().is_initialized():
        cfg = compose(config_name="config")
    else:
        with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
            cfg = compose(config_name="config")
    return _dotted(cfg, "")


def _dotted(node: DictConfig, prefix: str) -> list[str]:
    keys = []
    for key in node:
        child = node._get_node(key)
        keys.append(f"{prefix}{key}")
        if OmegaConf.is_dict(child):
            keys += _dotted(child, f"{prefix}{key}.")
    return keys

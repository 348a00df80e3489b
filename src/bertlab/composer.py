"""Hydra's `compose` for many runs of one study, in seconds: once per set of config-group choices.

Hydra composes a config in two steps: the defaults tree, from the overrides that choose a config group's file
(`task=sst2`, `model=L3_H768_A12`), merged into one config; then every other override (`seed=2`, `name=...`) set on it,
in order (`ConfigLoaderImpl._apply_overrides_to_config`). The runs of a study share a few group choices and differ in
their values, so `Composer` does the first step once per choices and the second on a copy, with Hydra's own code:
each config equals what `hydra.compose` returns for the same overrides (tests/unit/test_composer.py). Hydra reads
and parses every config file again at each compose; for the composer's life it reads each once (`_read_once`).

Light on purpose (no torch): the `configs` stage imports it.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager

from hydra import compose
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.config_repository import ConfigRepository
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.plugins.config_source import ConfigResult
from omegaconf import DictConfig, Node, OmegaConf, ValueNode


class Composer:
    """`compose(config_name, overrides)`, cached by the overrides' group choices. Needs Hydra initialised (one
    `initialize_config_dir` for the composer's life: the cache does not see a change of conf/)."""

    def __init__(self, config_name: str = "config") -> None:
        self.config_name = config_name
        self.parser = OverridesParser.create()
        self.repo = GlobalHydra.instance().config_loader().repository  # type: ignore[attr-defined]
        _read_once(self.repo)
        self.composed: dict[tuple[str, ...], DictConfig] = {}

    def _split(self, overrides: list[str]) -> tuple[DictConfig, list[Override]] | None:
        """The config composed from `overrides`' group choices (cached) and their other overrides, in order; None
        where Hydra would compose them otherwise (a sweep, a `hydra.` setting)."""
        parsed = self.parser.parse_overrides(overrides)
        if any(o.is_sweep_override() or o.is_hydra_override() for o in parsed):
            return None
        # Hydra's own split (defaults_list.Overrides): a group's choice unless the key names no group or the value
        # is a mapping
        choice = [self.repo.group_exists(o.key_or_group) and not isinstance(o.value(), dict) for o in parsed]
        key = tuple(o.input_line for o, c in zip(parsed, choice, strict=True) if c)
        if key not in self.composed:
            self.composed[key] = compose(config_name=self.config_name, overrides=list(key))
        return self.composed[key], [o for o, c in zip(parsed, choice, strict=True) if not c]

    def __call__(self, overrides: list[str]) -> DictConfig:
        """The composed config, the caller's own."""
        if (split := self._split(overrides)) is None:
            return compose(config_name=self.config_name, overrides=overrides)
        cfg = copy.deepcopy(split[0])
        ConfigLoaderImpl._apply_overrides_to_config(split[1], cfg)
        return cfg

    @contextmanager
    def applied(self, overrides: list[str]) -> Iterator[DictConfig]:
        """The composed config, to read within the block: where every other override sets a value that is there
        (`key=value`, not a mapping), the cached config itself, those values set and put back on leaving (no copy:
        most of a run's time); else the caller's own copy."""
        split = self._split(overrides)
        nodes = [_node(split[0], o.key_or_group) for o in split[1]] if split else []
        if split is None or not all(_sets_one_value(o, n) for o, n in zip(split[1], nodes, strict=True)):
            yield self(overrides)
            return
        cfg, values = split
        before = [(o.key_or_group, n._value()) for o, n in zip(values, nodes, strict=True)]  # raw: "${..}" stays one
        try:
            ConfigLoaderImpl._apply_overrides_to_config(values, cfg)
            yield cfg
        finally:
            for key, raw in reversed(before):
                OmegaConf.update(cfg, key, raw, merge=False)


def _read_once(repo: ConfigRepository) -> None:
    """Each config file `repo` loads read and parsed once (the first load kept), a copy of it each time: Hydra edits
    what it loads. The repository is Hydra's own for this `initialize_config_dir` (each compose copies it), so the
    composes and defaults lists within it (`bertlab.layers`) all share the files."""
    if "load_config" in vars(repo):
        return
    load, kept = repo.load_config, {}

    def load_config(config_path: str) -> ConfigResult | None:
        if config_path not in kept:
            kept[config_path] = load(config_path)
        return copy.deepcopy(kept[config_path])

    repo.load_config = load_config  # type: ignore[method-assign]


def _node(cfg: DictConfig, key: str) -> Node | None:
    """The node at the dotted `key` of `cfg`, unresolved (None: there is none)."""
    node: Node | None = cfg
    for part in key.split("."):
        if not isinstance(node, DictConfig):
            return None
        node = node._get_node(part, validate_access=False)  # type: ignore[assignment]
    return node


def _sets_one_value(override: Override, node: Node | None) -> bool:
    """Whether `override` sets the single value `node` (its key's node: `key=value`, no `+`, `~` or mapping)."""
    plain = not (override.is_add() or override.is_force_add() or override.is_delete()) and override.package is None
    value = override.value()
    return plain and (value is None or isinstance(value, str | int | float | bool)) and isinstance(node, ValueNode)

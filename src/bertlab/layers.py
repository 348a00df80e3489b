"""Which layer wins, and where each setting of a composed run came from (its provenance).

A run's config is layers merged in one order, a later layer winning (docs/design.md, "Which layer wins"): the
groups' files, conf/config.yaml, the profile, `profile_task`, `scaling`, what an encoder declares of itself (its
`model` and `objective` files, then `study`), then the command line (in the pipeline: params.yaml's profile, the
grid's names and seeds, the encoder's, mode's and cell's overrides). `provenance` names, for each result-affecting
setting of a composed run, the layer its value came from and the earlier layers it won over; the `configs` stage
writes it into every training run's config, so a reader can check it. `check_cell_overrides` refuses a profile's
cell overrides that would change what a row is.

Light on purpose (no torch): the `configs` stage imports it.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.types import RunMode
from omegaconf import OmegaConf

from bertlab.errors import UserError
from bertlab.settings import has, select

Labelled = Sequence[tuple[str, str]]  # (a Hydra override, the place that declares it)


@cache
def _file(path: Path) -> dict[str, Any]:
    """A config file's own settings (its `defaults` list left out)."""
    node = OmegaConf.to_container(OmegaConf.load(path), resolve=False) or {}
    node.pop("defaults", None)
    return node


def _within(node: Any, package: str) -> Any:
    for part in reversed([p for p in package.split(".") if p]):
        node = {part: node}
    return node


@cache
def layers(conf_dir: Path, choices: tuple[str, ...]) -> list[tuple[str, dict[str, Any]]]:
    """The config files Hydra merges for the config-group `choices` (overrides), in its order (a later one winning),
    each as `conf/<file>` and its settings placed at their package. Needs Hydra initialised on `conf_dir`."""
    loader = GlobalHydra.instance().config_loader()
    found = loader.compute_defaults_list("config", list(choices), RunMode.RUN)
    out = []
    for default in found.defaults:
        path = default.config_path
        if path is None or path.startswith("hydra/") or not (conf_dir / f"{path}.yaml").is_file():
            continue
        out.append((f"{conf_dir.name}/{path}.yaml", _within(_file(conf_dir / f"{path}.yaml"), default.package or "")))
    return out


def leaves(cfg: dict[str, Any], keys: Sequence[str]) -> list[str]:
    """The dotted settings under `keys` of the resolved config `cfg` (a list is one setting)."""
    out: list[str] = []
    for key in keys:
        node = select(cfg, key)
        if isinstance(node, dict):
            out += leaves(cfg, [f"{key}.{k}" for k in node])
        else:
            out.append(key)
    return out


def provenance(conf_dir: Path, cfg: dict[str, Any], keys: Sequence[str], labelled: Labelled) -> dict[str, str]:
    """For each setting under `keys` of the composed config `cfg`, resolved (`settings.resolved`): the layer its value
    came from (`conf/<file>`, or the place that declares a command-line override), then `over` the earlier layers that
    set it too."""
    parsed = OverridesParser.create().parse_overrides([o for o, _ in labelled])
    is_choice = [(conf_dir / o.key_or_group.lstrip("+~").split("@")[0]).is_dir() for o in parsed]
    settings = [(o.key_or_group, where) for o, (_, where), choice in zip(parsed, labelled, is_choice, strict=True)
                if not choice]  # a group's choice is a file's layer
    stack = layers(conf_dir, tuple(o for (o, _), choice in zip(labelled, is_choice, strict=True) if choice))
    out = {}
    for leaf in leaves(cfg, keys):
        setters = [where for where, node in stack if has(node, leaf)]
        setters += [where for key, where in settings if leaf == key or leaf.startswith(f"{key}.")]
        if not setters:
            continue  # set by no file: an interpolation's own node, e.g. of a structured default
        last, earlier = setters[-1], [s for s in dict.fromkeys(setters) if s != setters[-1]]
        out[leaf] = f"{last}, over {', '.join(earlier)}" if earlier else last
    return out


def check_cell_overrides(mode: str, declared: Sequence[str], profile: Sequence[str], where: str) -> None:
    """A profile's overrides of a table's cells (`where`: ablations.cells.finetune.<table>.<task>) set budgets: one
    that sets a setting the row's mode declares (`ablations.modes.<mode>`) would fine-tune another model under the
    row's name, and is refused in one line naming both."""
    parser = OverridesParser.create()
    own = {o.key_or_group: o for o in parser.parse_overrides(list(declared))}
    for override in parser.parse_overrides(list(profile)):
        if (key := override.key_or_group) in own:
            raise UserError(f"{where}: sets {key}, which ablations.modes.{mode} declares ({own[key].input_line}): "
                            "a profile's cell overrides set a budget, never what a row is")

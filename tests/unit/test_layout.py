"""The code's layout, read statically (`ast`, nothing imported): each DVC stage depends on exactly the bertlab
modules it runs, the modules import each other without a loop, and no module imports a stage."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest
import yaml

SRC = Path(__file__).resolve().parents[2] / "src"
STAGES = ("configs", "download", "tokenizer", "pretrain_data", "pretrain", "finetune", "ablations", "scaling")
OUTSIDE_DVC = {"scaling"}  # run by hand (`python -m bertlab.scaling`), never by `dvc repro`


def path_of(module: str) -> Path | None:
    """The source file of a bertlab module or package, None if there is none (a name imported from a module)."""
    base = SRC.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def packages(module: str) -> list[str]:
    """The packages that importing `module` runs first: `bertlab.data.masking` -> `bertlab`, `bertlab.data`."""
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


@cache
def imports(module: str) -> frozenset[str]:
    """The bertlab modules `module` imports, wherever in it (function-level imports too), and their packages."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path_of(module).read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [f"{node.module}.{a.name}" if path_of(f"{node.module}.{a.name}") else node.module
                     for a in node.names]
        else:
            continue
        found |= {n for name in names if name.split(".")[0] == "bertlab" for n in (name, *packages(name))}
    return frozenset(found - {module})


def closure(module: str) -> set[str]:
    """What running `module` runs of bertlab: it, its packages and every module they import, directly or not."""
    seen: set[str] = set()
    todo = [module, *packages(module)]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(imports(name))
    return seen


def every_module() -> list[str]:
    return sorted(".".join(p.relative_to(SRC).with_suffix("").parts).removesuffix(".__init__")
                  for p in (SRC / "bertlab").rglob("*.py"))


def dvc_stages() -> dict[str, tuple[str, set[str]]]:
    """Each stage of dvc.yaml: the module its command runs (`python -m bertlab.<stage>`) and its code deps."""
    found = {}
    for name, stage in yaml.safe_load((SRC.parent / "dvc.yaml").read_text())["stages"].items():
        body = stage.get("do", stage)  # a foreach stage keeps its definition under `do`
        (module,) = re.findall(r"python -m (bertlab\.\w+)", body["cmd"])
        found[name] = module, {f for d in body["deps"] if d.startswith("src/") for f in files(d)}
    return found


def files(dep: str) -> list[str]:
    """The source files a code dep stands for: a folder (DVC hashes all of it) its modules, a file itself."""
    path = SRC.parent / dep
    return sorted(str(p.relative_to(SRC.parent)) for p in path.rglob("*.py")) if path.is_dir() else [dep]


def has_code(path: Path) -> bool:
    """Whether a file holds more than a docstring (a package's `__init__.py` often does not)."""
    body = ast.parse(path.read_text()).body
    return any(not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)) for n in body)


def test_each_stage_depends_on_exactly_the_code_it_runs() -> None:
    problems = []
    for name, (module, listed) in dvc_stages().items():
        code = {str(path.relative_to(SRC.parent)) for path in map(path_of, closure(module)) if has_code(path)}
        problems += [f"{name}: runs {p} (add it to its deps)" for p in sorted(code - listed)]
        problems += [f"{name}: lists {p}, which it does not run" for p in sorted(listed - code)]
    assert not problems, "dvc.yaml's code deps differ from the imports:\n" + "\n".join(problems)


def test_every_stage_module_runs_in_dvc() -> None:
    assert {module.removeprefix("bertlab.") for module, _ in dvc_stages().values()} == set(STAGES) - OUTSIDE_DVC


def test_no_module_imports_a_stage() -> None:
    """Library modules serve the stages, and the stages talk through files: none imports a stage."""
    stages = {f"bertlab.{s}" for s in STAGES}
    wrong = {m: sorted(imports(m) & stages) for m in every_module() if imports(m) & stages}
    assert not wrong, f"modules importing a stage: {wrong}"


def test_the_modules_import_each_other_without_a_loop() -> None:
    """A module's own packages do not count: importing `bertlab.report.cells` runs `bertlab/report/__init__.py`,
    whatever that imports."""
    graph = {m: imports(m) - set(packages(m)) for m in every_module()}
    state: dict[str, int] = {}  # 1: on the path being walked, 2: done

    def visit(module: str, path: list[str]) -> None:
        if state.get(module) == 1:
            pytest.fail("import loop: " + " -> ".join([*path[path.index(module):], module]))
        if state.get(module) is None:
            state[module] = 1
            for dep in sorted(graph[module]):
                visit(dep, [*path, module])
            state[module] = 2

    for module in graph:
        visit(module, [])


def test_test_modules_have_unique_basenames() -> None:
    """pytest imports test files by basename (tests/unit and tests/e2e are not packages): a repeat stops collection."""
    names = [p.name for p in (SRC.parent / "tests").rglob("test_*.py")]
    assert sorted({n for n in names if names.count(n) > 1}) == []

"""Bad command lines as a user types them in the project (issue 68): each, Hydra's own refusals included, is one
line `error: ...` on stderr naming the setting, exit status 2, and nothing on disk changes (a refusal inside a
stage, after Hydra composed the command line, leaves Hydra's log folder under `data/hydra/`: tests/e2e/test_bad_inputs.py). A refused `dvc exp run -S`
leaves `params.yaml` and `data/` as they were."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from tests.helpers import REPO, copy_env, copy_project

# (command line, what its one line must say)
CASES = [
    ("python -m bertlab.pretrain pretrain.max_step=10",
     "error: pretrain.max_step=10: there is no setting pretrain.max_step (did you mean pretrain.max_steps?)"),
    ("python -m bertlab.finetune profile=smok", "error: profile=smok: there is no profile 'smok' in conf/profile/ "
                                                "(did you mean smoke?); the options: "
                                                + ", ".join(sorted(p.stem for p in (REPO / "conf/profile").iterdir()))),
    ("python -m bertlab.finetune task=sst-2", "error: task=sst-2: there is no task 'sst-2' in conf/task/ (did you mean "
                                              "sst2?)"),
    ("python -m bertlab.pretrain model=L3", "error: model=L3: there is no model 'L3' in conf/model/"),
    ("python -m bertlab.pretrain '~pretrain.nope'", "error: ~pretrain.nope: there is no setting pretrain.nope"),
    ("python -m bertlab.tokenizer ==", "error: cannot read the override '=='"),
    ("python -m bertlab.finetune finetune.lrr=0.1", "error: finetune.lrr=0.1: there is no setting finetune.lrr "
                                                    "(did you mean finetune.lr?)"),
    ("python -m bertlab.pretrain objective=mlm-nsp", "error: objective=mlm-nsp: there is no objective 'mlm-nsp' in "
                                                     "conf/objective/ (did you mean mlm_nsp?)"),
    ("python -m bertlab.finetune -m -cd data/configs/finetune/nope -cn cells", "data/configs/finetune/nope' not found"),
    ("python -m bertlab.local mirror=../no/such/mirror", "error: mirror=../no/such/mirror:"),
]


def snapshot(root: Path) -> dict[str, tuple[int, bytes]]:
    """Every file under `root` but git's own: its mode and bytes."""
    return {str(p.relative_to(root)): (p.stat().st_mode, p.read_bytes()) for p in sorted(root.rglob("*"))
            if p.is_file() and ".git" not in p.relative_to(root).parts[:1]}


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_project(tmp_path_factory.mktemp("bad") / "bertlab")


@pytest.mark.parametrize("line,says", CASES, ids=[c[0].split(" ", 3)[-1] for c in CASES])
def test_a_bad_command_line_is_one_line_and_changes_nothing(line: str, says: str, project: Path) -> None:
    before = snapshot(project)
    env = copy_env(project, project) | {"BERTLAB_DATA_MIRROR": ""}
    done = subprocess.run(["bash", "-c", line], cwd=project, env=env, capture_output=True, text=True, timeout=300)
    lines = done.stderr.splitlines()
    assert (done.returncode, len(lines)) == (2, 1), done.stderr[-3000:]
    assert lines[0].startswith("error: ") and says in lines[0]
    assert snapshot(project) == before


@pytest.mark.slow
def test_a_refused_dvc_exp_run_leaves_params_and_data_as_they_were(project: Path) -> None:
    """`dvc exp run -S profile=smok` after the configs were composed: DVC writes the misspelt profile into
    `params.yaml` before `configs` runs; `configs` refuses it in one line and puts the file back, and DVC keeps
    `data/configs` (`persist`)."""
    env = copy_env(project, project) | {"BERTLAB_DATA_MIRROR": ""}

    def run(line: str) -> subprocess.CompletedProcess:
        return subprocess.run(shlex.split(line), cwd=project, env=env, capture_output=True, text=True, timeout=1800)

    subprocess.run(["git", "add", "-A"], cwd=project, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "clone"], cwd=project,
                   check=True)
    assert run("dvc repro configs").returncode == 0
    subprocess.run(["git", "add", "-A"], cwd=project, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "configs"], cwd=project,
                   check=True)
    before = {k: v for k, v in snapshot(project).items() if k == "params.yaml" or k.startswith("data/")}
    done = run("dvc exp run -S profile=smok")
    ours = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert done.returncode != 0 and len(ours) == 1, done.stderr[-3000:]
    assert "profile=smok: there is no profile 'smok'" in ours[0] and "params.yaml: put back" in ours[0]
    after = {k: v for k, v in snapshot(project).items() if k == "params.yaml" or k.startswith("data/")}
    assert after == before

"""The data source is a setting that persists (issue 68): set once as the README says, a new shell without
`BERTLAB_DATA_MIRROR` composes the same configs; a change of corpus is said in one line."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from bertlab import configs
from tests.helpers import readme_section

# The download run's config as `configs` composes it (params.yaml's `corpus: auto`), from a new process.
COMPOSE = """
import json
from hydra import compose, initialize_config_dir
from bertlab import configs
params = {"profile": "smoke", "corpus": "auto"}
with initialize_config_dir(config_dir=str(configs.conf_dir()), version_base="1.3"):
    cfg = compose(config_name="config", overrides=[*configs.base_overrides(params), *configs.PIPELINE_OUTPUTS])
print(json.dumps({"corpus": cfg.corpus.name, "mirror": cfg.mirror}))
"""


def shell(line: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    """`line` run by bash in `cwd`, as a new shell: no `BERTLAB_DATA_MIRROR` but `env`'s."""
    base = {k: v for k, v in os.environ.items() if k != "BERTLAB_DATA_MIRROR"}
    return subprocess.run(["bash", "-c", line], cwd=cwd, env=base | env, capture_output=True, text=True, timeout=300)


def composed(cwd: Path, **env: str) -> dict:
    done = shell(f"{sys.executable} -c '{COMPOSE}'", cwd, **env)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_the_mirror_set_once_is_what_a_new_shell_composes(mirror: Path, tmp_path: Path) -> None:
    project = tmp_path / "bertlab"
    project.mkdir()
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "data").symlink_to(mirror)
    with_variable = composed(project, BERTLAB_DATA_MIRROR="../shared/data")
    assert with_variable == {"corpus": "mirror", "mirror": "../shared/data"}
    assert composed(project) == {"corpus": "online", "mirror": None}  # nothing set: the hub
    set_once = re.search(r"`(python -m bertlab\.local mirror=[^`]+)`", readme_section("Quick start")).group(1)
    done = shell(set_once, project)
    assert done.returncode == 0 and len(done.stdout.splitlines()) == 1, done.stderr
    assert composed(project) == with_variable  # a new shell, without the variable
    assert composed(project, BERTLAB_DATA_MIRROR="") == {"corpus": "online", "mirror": None}  # one command's own
    refused = shell("python -m bertlab.local mirror=../no/such/folder", project)
    assert refused.returncode == 2 and len(refused.stderr.splitlines()) == 1 and "../no/such/folder" in refused.stderr
    assert composed(project) == with_variable  # a refused setting changes nothing


def test_a_change_of_corpus_is_said_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text("profile: smoke\ncorpus: auto\n")

    def write_all(params: dict, out: Path) -> int:  # the configs it writes, but only what says the corpus
        path = out / "tokenizer" / "tokenizer.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump({"corpus": {"name": configs.corpus_preset(params["corpus"])}}))
        return 1

    monkeypatch.setattr(configs, "write_all", write_all)
    monkeypatch.setenv("BERTLAB_DATA_MIRROR", str(tmp_path))
    configs.main([])
    assert "corpus:" not in capsys.readouterr().out  # the first composition: nothing changed
    monkeypatch.delenv("BERTLAB_DATA_MIRROR")
    configs.main([])
    said = [line for line in capsys.readouterr().out.splitlines() if line.startswith("corpus:")]
    assert said == ["corpus: mirror -> online (params.yaml's corpus: auto; data mirror: none, no BERTLAB_DATA_MIRROR, "
                    "no local.yaml)"]

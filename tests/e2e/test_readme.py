"""End to end: the README's commands that the other e2e tests leave out, read from README.md and run as written on a
fresh copy of the project at its committed profile, with `../shared/data` beside it as on our machines: the try-it-first
line (the whole smoke study), DVC's views, `wandb sync` over the pipeline's and the hand runs, the Hugging Face snippet
and the profile switch. (The Experiments section, the run by hand and Scaling out's lines: test_pipeline.py and
test_grid.py; the install lines and the test command: .ci/run, checked against the README by
tests/unit/test_readme_shape.py.)"""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.helpers import REPO, copy_env, copy_project, readme_block, readme_section, stages_run

pytestmark = pytest.mark.slow


def sh(line: str, repo: Path, shared_data: Path, timeout: float = 1800, **env: str | None
       ) -> subprocess.CompletedProcess:
    """A README line run by bash in `repo` as a user runs it: no data mirror set but the line's own; `env` on top
    (None: unset)."""
    environ = copy_env(repo, shared_data) | {"BERTLAB_DATA_MIRROR": None} | env
    return subprocess.run(["bash", "-c", line], cwd=repo, env={k: v for k, v in environ.items() if v is not None},
                          capture_output=True, text=True, timeout=timeout)


def ok(done: subprocess.CompletedProcess) -> str:
    """The output of a command that succeeded."""
    assert done.returncode == 0, f"{done.args[-1]} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout + done.stderr


def profile(repo: Path) -> str:
    return yaml.safe_load((repo / "params.yaml").read_text())["profile"]


def stale(repo: Path, shared_data: Path) -> set[str]:
    """The stages `dvc status` names as stale."""
    return set(json.loads(ok(sh("dvc status --json", repo, shared_data))))


def composed_at(repo: Path) -> set[str]:
    """The profiles the `configs` stage's run configs were composed at."""
    configs = [yaml.safe_load(p.read_text()) for p in (repo / "data/configs").rglob("*.yaml")]
    return {c["profile_name"] for c in configs if "profile_name" in c}


def committed_state(repo: Path) -> dict[str, bytes]:
    """What trying a profile must leave as committed: every file under `reports/`, `dvc.lock` and `params.yaml`."""
    files = [*(p for p in (repo / "reports").rglob("*") if p.is_file()), repo / "dvc.lock", repo / "params.yaml"]
    return {str(p.relative_to(repo)): p.read_bytes() for p in sorted(files)}


@pytest.fixture(scope="module")
def smoked(tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> tuple[Path, str]:
    """A fresh copy of the project (committed, `params.yaml` as committed) after the README's try-it-first line and
    the line that applies its experiment, and the try-it-first line's output. The committed report and lock as
    they were before it, and after it: `TRIED`."""
    root = tmp_path_factory.mktemp("readme")
    repo = copy_project(root / "bertlab")
    shutil.copy2(REPO / "params.yaml", repo / "params.yaml")  # the committed profile, not copy_project's smoke
    (root / "shared").symlink_to(shared_data.parent)  # the README's ../shared/data
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "clone"], cwd=repo, check=True)
    assert profile(repo) == "cpu"
    install, try_it, apply, _ = readme_block("Quick start", 1)
    assert readme_block("Quick start", 0)[0].startswith(install)  # "install the same way"
    ok(sh(install.split(" && ", 3)[3], repo, shared_data))  # the mirror, set once (the install itself: .ci/run's)
    TRIED["before"] = committed_state(repo)
    output = ok(sh(try_it, repo, shared_data, timeout=3600))  # ~7 min alone; a copy, on a shared machine more
    TRIED["after"] = committed_state(repo)
    ok(sh(apply, repo, shared_data))
    return repo, output


TRIED: dict[str, dict[str, bytes]] = {}


def test_trying_smoke_leaves_the_committed_report_and_lock(smoked: tuple[Path, str]) -> None:
    """The try-it-first line runs in a copy (`--temp`): `reports/`, `dvc.lock` and `params.yaml` byte-identical."""
    repo, _ = smoked
    assert len(TRIED["before"]) > 10 and TRIED["after"] == TRIED["before"]
    assert committed_state(repo) != TRIED["before"]  # once applied, the smoke report is here (the tests below)


def test_the_try_it_first_line_runs_the_whole_study_at_smoke(smoked: tuple[Path, str], shared_data: Path) -> None:
    """It sets `params.yaml`'s profile and runs every stage, the encoders and cells the README counts, to the smoke
    report, with nothing stale after it."""
    repo, output = smoked
    stages, runs, cells = map(int, re.search(r"(\d+) stages, (\d+) pretraining runs and (\d+) cells",
                                             " ".join(readme_section("Quick start").split())).groups())
    assert profile(repo) == "smoke"
    assert len(stages_run(output)) == stages
    assert len(list((repo / "data/pretrain").rglob("metrics.json"))) == runs
    assert len(list((repo / "data/finetune").rglob("metrics.json"))) == cells
    seeds = {json.loads(p.read_text())["seed"] for p in (repo / "data/pretrain").rglob("metrics.json")
             if json.loads(p.read_text()).get("status") != "not run"}
    assert seeds == {1}  # the smoke profile pretrains the first of the pretraining seeds
    assert "- Profile: `smoke`" in (repo / "reports/ablations.md").read_text()
    assert stale(repo, shared_data) == set()


def test_dvcs_views(smoked: tuple[Path, str], shared_data: Path) -> None:
    """Each line of "DVC's views": the headline in one short line, the plots page with every figure and loss curve,
    the experiment beside its baseline, nothing stale, every stage in the graph."""
    repo, _ = smoked
    metrics, plots, experiments, status, dag = readme_block("DVC's views", 0)
    shown = ok(sh(metrics, repo, shared_data)).splitlines()
    headline = json.loads((repo / "reports/metrics.json").read_text())
    assert shown[0].split() == ["Path", *sorted(headline)]
    assert shown[1].split() == ["reports/metrics.json", *(str(headline[k]) for k in sorted(headline))]
    assert max(map(len, shown)) < 160
    ok(sh(plots, repo, shared_data))
    page = (repo / "dvc_plots/index.html").read_text()
    drawn = [*(repo / "reports/figures").glob("*.png"), *(repo / "reports/pretrain_loss").glob("*.csv")]
    assert len(drawn) >= 4 and all(str(p.relative_to(repo)) in page for p in drawn)
    compared = ok(sh(experiments, repo, shared_data))
    branch = ok(sh("git rev-parse --abbrev-ref HEAD", repo, shared_data)).strip()
    assert re.search(r"\n\s*└── \w+ \[[\w-]+\].* smoke ", compared)  # the try-it-first experiment
    assert re.search(rf"\n\s*{branch} .* cpu ", compared)  # beside its baseline, the committed report
    assert "Data and pipelines are up to date." in ok(sh(status, repo, shared_data))
    graph = ok(sh(dag, repo, shared_data))
    names = ok(sh("dvc stage list --name-only", repo, shared_data)).split()
    assert len(names) == len(stages_run(smoked[1])) and all(f'["{name}"]' in graph for name in names)


def test_wandb_sync_takes_the_pipelines_runs_and_the_hand_runs(smoked: tuple[Path, str], shared_data: Path,
                                                              tmp_path: Path) -> None:
    """Weights & Biases' line, before and after the README's run by hand: it takes every offline run of the
    pipeline's and, once there are some, of the runs by hand (no account here: it stops at the login after counting
    them; a folder without runs is no error)."""
    repo, _ = smoked
    (sync,) = readme_block("Weights & Biases", 0)
    no_login = {"HOME": str(tmp_path), "WANDB_API_KEY": None}

    def runs(folder: str) -> set[Path]:
        return {p.resolve() for p in (repo / folder).glob("offline-run-*/run-*.wandb")}

    def synced(expected: set[Path]) -> None:
        """The line finds `expected` (it names the first 20, then counts the rest), then asks for a login."""
        done = sh(sync, repo, shared_data, **no_login)
        assert done.returncode == 1 and done.stderr.rstrip().endswith("Error: No API key configured. Use `wandb login` "
                                                                      "to log in."), done.stderr[-3000:]
        assert f"wandb: Syncing {len(expected)} run(s):" in done.stderr
        named = {(repo / p).resolve() for p in re.findall(r"^wandb:   (\S+\.wandb)$", done.stderr, re.M)}
        assert len(named) == min(20, len(expected)) and named <= expected

    pipeline = runs("data/wandb/wandb")
    assert len(pipeline) > 20 and not (repo / "data/hand").exists()
    synced(pipeline)
    hand = re.search(r"`(python -m bertlab\.pretrain [^`]*name=[^`]*)`", readme_section("The pipeline")).group(1)
    ok(sh(hand, repo, shared_data))
    assert len(runs("data/hand/wandb/wandb")) == 1
    synced(pipeline | runs("data/hand/wandb/wandb"))


def test_the_hugging_face_snippet_fills_the_mask_with_the_exported_encoder(smoked: tuple[Path, str],
                                                                             shared_data: Path) -> None:
    """The snippet as written prints five fills of the mask and no warning; the folder it loads gives logits over the
    vocabulary at every position, from the encoder's own shape."""
    transformers = pytest.importorskip("transformers")
    repo, _ = smoked
    snippet = "\n".join(readme_block("Hugging Face", 0, "python"))
    done = subprocess.run(["python", "-c", snippet], cwd=repo, capture_output=True, text=True, timeout=600,
                          env={**copy_env(repo, shared_data), "HF_HUB_OFFLINE": "1"})
    ok(done)
    assert not re.search(r"warn|newly initiali[sz]ed|not used|unexpected|missing", done.stderr, re.I), done.stderr
    fills = ast.literal_eval(done.stdout)
    assert len(fills) == 5 and [f["score"] for f in fills] == sorted((f["score"] for f in fills), reverse=True)
    assert all(f["sequence"].startswith("the cat sat on the") and 0 < f["score"] < 1 for f in fills)
    folder = repo / re.search(r'model="([^"]+)"', snippet).group(1)
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    model = transformers.AutoModelForMaskedLM.from_pretrained(folder).eval()
    inputs = tokenizer("the cat sat on the [MASK].", return_tensors="pt")
    logits = model(**inputs).logits
    assert tuple(logits.shape) == (1, inputs["input_ids"].shape[1], len(tokenizer))
    shape = json.loads((folder.parent / "metrics.json").read_text())["shape"]
    assert (model.config.num_hidden_layers, model.config.hidden_size, model.config.num_attention_heads) == (
        shape["num_layers"], shape["hidden_size"], shape["num_heads"])


def test_the_profile_switch_and_back(smoked: tuple[Path, str], shared_data: Path) -> None:
    """"Choose a profile": `dvc exp run --temp -S profile=gpu` runs in a copy (its first stage only: the rest is hours
    on a GPU), leaving `reports/`, `dvc.lock` and `params.yaml` byte-identical; applied, its profile and configs are
    here and every later stage is stale; the checkout line restores the committed files, after which `configs` is
    stale (its configs are gpu's)."""
    repo, _ = smoked
    to_gpu, apply, checkout = readme_block("Quick start", 3)
    first_stage = "configs"  # appended as a target: `dvc exp run` runs that stage and what it needs (nothing)
    everything = set(ok(sh("dvc stage list --name-only", repo, shared_data)).split())
    before = committed_state(repo)
    command = re.sub(r"\s+#.*$", "", to_gpu)  # its comment off, so the target is not commented out
    ok(sh(f"{command} {first_stage}", repo, shared_data))
    assert committed_state(repo) == before and profile(repo) == "smoke"
    ok(sh(apply, repo, shared_data))
    assert (profile(repo), composed_at(repo)) == ("gpu", {"gpu"})
    assert stale(repo, shared_data) == everything - {"configs"}
    ok(sh(checkout, repo, shared_data))
    committed = subprocess.run(["git", "show", "HEAD:params.yaml"], cwd=repo, capture_output=True, text=True,
                               check=True).stdout
    assert (repo / "params.yaml").read_text() == committed and profile(repo) == "cpu"
    assert "configs" in stale(repo, shared_data)


def test_the_undo_line_brings_back_the_committed_report(smoked: tuple[Path, str], shared_data: Path) -> None:
    """Last: after the experiment was applied (and the profile switched), the try-it-first block's last line puts
    back the committed report, lock and profile, byte for byte."""
    repo, _ = smoked
    ok(sh(readme_block("Quick start", 1)[3], repo, shared_data))
    assert committed_state(repo) == TRIED["before"]

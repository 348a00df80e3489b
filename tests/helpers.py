"""What several test modules share besides fixtures (those are in conftest.py): synthetic text and mirror files, a
stage run as a user runs it, the pretrain stage killed on purpose, and the fine-tuning tests' config."""

from __future__ import annotations

import csv
import os
import random
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import datasets
import torch
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from bertlab.files import write_json
from bertlab.modeling.export import save_plain
from bertlab.modeling.model import BertConfig, BertForPretraining
from bertlab.runs import pretrain_dir
from bertlab.stage import CONF_DIR

REPO = Path(__file__).resolve().parents[1]

# -- synthetic text and mirror files -----------------------------------------------------------------------------

WORDS = "the a cat dog sat ran on under table house river quickly slowly big small red blue saw heard".split()


def sentence(rng: random.Random) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(4, 12))]
    return " ".join(words).capitalize() + "."


def document(rng: random.Random, sentences: int) -> str:
    return " ".join(sentence(rng) for _ in range(sentences))


def write_split(root: Path, hub_id: str, config: str, split: str, rows: dict[str, list]) -> None:
    path = root / hub_id / config / f"{split}-00000-of-00001.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    datasets.Dataset.from_dict(rows).to_parquet(str(path))


# -- stages as processes (`python -m bertlab.<stage>`), with a tiny model and vocabulary -----------------------------

# out_dir: the tests' runs by hand write where the pipeline's would (data_dir), as the pipeline's own runs do.
TINY = ["profile=smoke", "out_dir=${data_dir}", "model=tiny", "model.num_layers=1", "model.hidden_size=32",
        "model.num_heads=2", "model.intermediate_size=64", "tokenizer.vocab_size=300", "pretrain.batch_size=8",
        "pretrain.max_steps=4", "pretrain.warmup_steps=1", "pretrain.val_every_steps=2",
        "pretrain.checkpoint_every_steps=2", "pretrain_data.heldout_instances=16", "corpus.heldout_documents=8",
        "logger=csv"]


def stage(name: str, data_dir: Path, *overrides: str, mirror: Path | None = None,
          timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "BERTLAB_DATA_MIRROR": str(mirror or "")}  # "": none, whatever local.yaml says
    flags = [o for o in overrides if o.startswith("-")]
    overrides = tuple(o for o in overrides if not o.startswith("-"))
    return subprocess.run([sys.executable, "-m", f"bertlab.{name}", *flags, f"data_dir={data_dir}", *TINY, *overrides],
                          capture_output=True, text=True, env=env, timeout=timeout)


# -- the pretrain stage killed on purpose -------------------------------------------------------------------------

# 12 steps, a checkpoint and a validation every 4, dropout 0.1 (the default): the kill lands between checkpoints.
RUN = ["pretrain.max_steps=12", "pretrain.checkpoint_every_steps=4", "pretrain.val_every_steps=4"]
KILL_AT_STEP = 6  # after the step-4 checkpoint: steps 5-6 are lost and must be redone, not double-logged
PINNED = "1" * 64  # a code hash for a kill and its resume: an edit of the package between them changes no key

# Runs `python -m bertlab.pretrain` after a patch: SIGKILL itself at the start of step KILL_AT (a real kill: no
# cleanup, no flush), and/or a changed code hash.
SCRIPT = """
import os, signal, sys
import bertlab.pretrain, bertlab.training.pretrain_module as m, bertlab.runs
kill_at = os.environ.get("KILL_AT")
if kill_at:
    step = m.PretrainModule.training_step
    def training_step(self, batch, i):
        if self.global_step == int(kill_at):
            os.kill(os.getpid(), signal.SIGKILL)
        return step(self, batch, i)
    m.PretrainModule.training_step = training_step
if os.environ.get("CODE_HASH"):
    bertlab.runs.code_hash = lambda: os.environ["CODE_HASH"]
bertlab.pretrain.run()
"""


def pretrain_patched(data: Path, tmp: Path, *args: str, kill_at: int | None = None,
                     code_hash: str | None = None) -> subprocess.CompletedProcess:
    script = tmp / "pretrain_patched.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "KILL_AT": str(kill_at or ""), "CODE_HASH": code_hash or ""}
    # The runs here share settings on purpose: each must train, unless a test asks for twin reuse.
    twins = [] if any(a.startswith("impl.reuse_twins=") for a in args) else ["impl.reuse_twins=false"]
    return subprocess.run([sys.executable, str(script), f"data_dir={data}", *TINY, *RUN, *twins, *args],
                          capture_output=True, text=True, env=env, timeout=600)


def checkpoint(data: Path, name: str, seed: int = 1) -> Path:
    (last,) = (data / "checkpoints/pretrain").glob(f"{name}-{seed}-*/last.ckpt")
    return last


def validated_steps(data: Path, name: str, seed: int = 1) -> list[int]:
    with (pretrain_dir(data, name, seed) / "metrics.csv").open(newline="") as f:
        return [int(r["step"]) for r in csv.DictReader(f) if r.get("val/ppl")]


# -- fine-tuning on the `finetune_data` fixture ---------------------------------------------------------------------

def save_encoder(d: Path, name: str, vocab_size: int, objective: str, *, nsp: bool, causal: bool) -> None:
    """A 4-layer encoder pretrained at seed 1 in `d/pretrain/<name>/<name>-1`, as the pretrain stage leaves one (its
    objective's name and properties in metrics.json)."""
    torch.manual_seed(0)
    config = BertConfig(vocab_size=vocab_size, num_layers=4, hidden_size=32, num_heads=4, intermediate_size=64,
                        max_position_embeddings=64, dropout=0.0, attention_dropout=0.0)  # as the cpu profile pretrains
    out = pretrain_dir(d, name, 1)
    save_plain(BertForPretraining(config, nsp=nsp), config, out)
    write_json(out / "metrics.json", {"name": out.name, "encoder": name, "seed": 1, "objective": objective,
                                      "nsp": nsp, "causal": causal})


ENV = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"}


def finetune_config(data_dir: Path, *overrides: str) -> DictConfig:
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return compose(config_name="config", overrides=[
            "profile=smoke", "logger=none", f"data_dir={data_dir}", "out_dir=${data_dir}", "finetune.encoder=tiny",
            "finetune.max_train_examples=null", "finetune.max_eval_examples=null", "finetune.batch_size=16",
            "impl.threads=1", *overrides,
        ])


def copy_project(dest: Path) -> Path:
    """The project's files as git sees them (committed or not) under `dest`, a fresh git repo at the `smoke`
    profile."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True,
                           text=True, check=True).stdout.split()
    for f in files:
        if (REPO / f).is_file():
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / f, dest / f)
    params = yaml.safe_load((dest / "params.yaml").read_text())
    (dest / "params.yaml").write_text(yaml.safe_dump(params | {"profile": "smoke"}, sort_keys=False))
    subprocess.run(["git", "init", "-q"], cwd=dest, check=True)
    return dest


def copy_env(repo: Path, shared_data: Path) -> dict[str, str]:
    """The environment of a command in a copy of the repo: the real data mirror, W&B offline, the copy's code."""
    return {**os.environ, "BERTLAB_DATA_MIRROR": str(shared_data), "WANDB_MODE": "offline",
            "PYTHONPATH": str(repo / "src"),  # the copy's code and conf/, not the installed checkout's
            "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}


def stages_run(output: str) -> set[str]:
    """The stages a `dvc repro` ran, or restored from DVC's run cache (the same deps and params ran before: here a
    queued experiment of the same change)."""
    return set(re.findall(r"Running stage '([^']+)'", output)) | set(
        re.findall(r"Stage '([^']+)' is cached - skipping run", output))


def readme_section(heading: str) -> str:
    """The text under the README's `## heading`, to the next `## `."""
    return (REPO / "README.md").read_text().split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def readme_block(heading: str, index: int, lang: str = "bash") -> list[str]:
    """The lines (blank ones left out) of the `index`-th `lang` code block under the README's `heading`."""
    block = re.findall(rf"```{lang}\n(.*?)```", readme_section(heading), re.S)[index]
    return [line for line in block.splitlines() if line.strip()]


def cell_dir(data_dir: Path, name: str) -> Path:
    """Fine-tuning cell `name`'s folder, under its encoder's (`<data_dir>/finetune/<encoder>/<name>`), wherever it
    is; the default encoder's (`tiny`) where there is none."""
    found = sorted(Path(data_dir).glob(f"finetune/*/{name}"))
    return found[0] if found else Path(data_dir) / "finetune" / "tiny" / name


def free_port() -> int:
    """A TCP port free on this machine now (for a process group's rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def gpu_settings(*overrides: str) -> DictConfig:
    """The `gpu` profile's composed config at a tiny width (its recipe: rotary, 40% masking, no dropout)."""
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return compose(config_name="config", overrides=[
            "profile=gpu", "model.num_layers=2", "model.hidden_size=32", "model.num_heads=2",
            "model.intermediate_size=64", *overrides])

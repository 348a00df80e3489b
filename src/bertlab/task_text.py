"""The unlabelled text of a fine-tuning task's training split as pretraining documents (`corpus.task_text`).

Self-pretraining (Krishna et al. 2022: "Downstream datasets make surprisingly good pretraining corpora"): at a
tiny budget the encoder meets the tasks' vocabulary and style during pretraining. Only training-split text is
used, never labels and never a dev or test split. Each row gives one line per text column (or as its kind says,
`bertlab.kinds`: tagging its words joined by spaces, span each distinct context once); `lines` consecutive lines
make a document.
"""

from __future__ import annotations

from pathlib import Path

import datasets
from omegaconf import DictConfig, OmegaConf

from bertlab.data.tasks import Task
from bertlab.errors import UserError
from bertlab.kinds import KINDS


def task_documents(task: Task, task_dir: Path, lines: int) -> list[str]:
    """`task`'s training-split text as documents of `lines` lines each (one line a sentence, a context, ...)."""
    path = Path(task_dir)
    if (path / "NO_DATA").exists() or not path.exists():
        raise UserError(f"corpus.task_text names {task.name!r}, whose data is not in {path} (run the download stage; "
                        "a task without data cannot add its text)")
    split = datasets.load_from_disk(str(path))[task.train_split]
    text = list(KINDS[task.kind].lines(task, split))
    return ["\n".join(text[i:i + lines]) for i in range(0, len(text), lines)]


def added_documents(corpus: DictConfig, tasks: DictConfig, tasks_dir: Path) -> list[str]:
    """The documents `corpus.task_text` adds to the pretraining corpus's training documents (none by default)."""
    docs: list[str] = []
    for name in corpus.get("task_text") or []:
        if name not in tasks:
            raise UserError(f"corpus.task_text: {name!r} is not a task ({', '.join(tasks)})")
        task = Task(**OmegaConf.to_container(tasks[name], resolve=True))
        docs += task_documents(task, Path(tasks_dir) / name, int(corpus.task_text_lines))
    return docs

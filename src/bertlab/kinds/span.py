"""Extractive question answering (SQuAD v1.1): start and end logits per token of windows over a context.

Data: the question and context columns (text) and answers `{text, answer_start}`. Training: the mean of the start
and end cross-entropies on each window's first reference answer. Items: one per question (`exact_match`, `f1`, 0-100,
the max over its references, by the official normalisation). Floor: random start/end logits through the same
postprocessing and scoring, seed 0.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from bertlab.kinds.base import (
    FLOOR_SEED, Batch, Columns, Encoded, Encoding, Evaluation, Evaluator, Floor, Kind, TaskSpec, is_integer, is_list_of,
    is_text,
)

if TYPE_CHECKING:
    import datasets
    import pyarrow as pa
    from torch import Tensor, nn


@dataclass
class SquadEvaluator(Evaluator):
    """Start/end logits per window -> the best span of each question; one item per question."""

    features: dict[str, list] = field(default_factory=dict)
    contexts: list[str] = field(default_factory=list)
    answers: list[list[str]] = field(default_factory=list)
    n_best_size: int = 20
    max_answer_length: int = 30

    def evaluate(self, predictions: list) -> Evaluation:
        from bertlab.data.squad import postprocess
        from bertlab.metrics import squad_scores

        texts = postprocess(
            [p[0] for p in predictions], [p[1] for p in predictions], self.features, self.contexts,
            n_best_size=self.n_best_size, max_answer_length=self.max_answer_length,
        )
        keys = [str(i) for i in range(len(self.contexts))]  # positions: ids need not be unique
        metrics = squad_scores(dict(zip(keys, texts)), dict(zip(keys, self.answers)))
        per_question = [squad_scores({"q": text}, {"q": refs}) for text, refs in zip(texts, self.answers, strict=True)]
        return Evaluation(metrics, {k: [s[k] for s in per_question] for k in ("exact_match", "f1")})

    def floor(self) -> Floor:
        rng = np.random.default_rng(FLOOR_SEED)
        preds = [(rng.standard_normal(len(ids)), rng.standard_normal(len(ids))) for ids in self.features["input_ids"]]
        return Floor(f"random start/end logits (standard normal, seed {FLOOR_SEED})", preds)


class Span(Kind):
    """Extractive question answering: start and end logits per token of windows over a context."""

    name = "span"
    metrics = ("exact_match", "f1")
    holds = ("text", "answers {text, answer_start}")
    sentence = False
    windows = True

    def label_type(self, kind: pa.DataType) -> bool:
        import pyarrow as pa

        fields = {f.name: f.type for f in kind} if pa.types.is_struct(kind) else {}
        return (is_list_of(fields.get("text", pa.null()), is_text)
                and is_list_of(fields.get("answer_start", pa.null()), is_integer))

    def lines(self, task: TaskSpec, split: datasets.Dataset) -> Iterator[str]:
        """Each distinct context once (the text columns are (question, context))."""
        seen: set[str] = set()
        for row in split.select_columns(list(task.text_columns[1:])):
            for text in row.values():
                text = " ".join(str(text).split())
                if text and text not in seen:
                    seen.add(text)
                    yield text

    def encode(self, task: TaskSpec, ds: datasets.Dataset, split: str, train: bool, how: Encoding) -> Encoded:
        from bertlab.data.squad import encode_squad

        cols = task.text_columns
        questions, contexts = list(ds[cols[0]]), list(ds[cols[1]])
        answers = list(ds[task.label_column])
        lengths = how.lengths
        settings = dict(max_length=lengths.max_seq_length, doc_stride=lengths.doc_stride,
                        max_query_length=lengths.max_query_length)
        if train:  # first reference answer, as run_squad.py; unanswerable rows (none in v1.1) are skipped
            keep = [i for i, a in enumerate(answers) if a["text"]]
            feats = encode_squad(
                how.tokenizer, [questions[i] for i in keep], [contexts[i] for i in keep],
                [answers[i]["answer_start"][0] for i in keep], [answers[i]["text"][0] for i in keep], **settings,
            )
            rows = [
                {"input_ids": ids, "token_type_ids": types, "start_positions": s, "end_positions": e, "index": i}
                for i, (ids, types, s, e) in enumerate(zip(
                    feats["input_ids"], feats["token_type_ids"], feats["start_positions"], feats["end_positions"]))
            ]
            return rows, None
        feats = encode_squad(how.tokenizer, questions, contexts, **settings)
        rows = [
            {"input_ids": ids, "token_type_ids": types, "index": i}
            for i, (ids, types) in enumerate(zip(feats["input_ids"], feats["token_type_ids"]))
        ]
        refs = [list(a["text"]) for a in answers]
        return rows, SquadEvaluator(split, len(rows), features=feats, contexts=contexts, answers=refs,
                                    n_best_size=how.n_best_size, max_answer_length=how.max_answer_length)

    def head(self, size: int, num_labels: int, dropout: float) -> nn.Module:
        from bertlab.modeling.heads import SpanHead

        return SpanHead(size)

    def forward(self, represent: Callable[[Batch], Tensor], head: nn.Module, batch: Batch) -> tuple[Tensor, Tensor]:
        return head(represent(batch), batch["attention_mask"])

    def loss(self, logits: tuple[Tensor, Tensor], batch: Batch) -> Tensor:
        import torch.nn.functional as F

        start, end = logits
        return (F.cross_entropy(start, batch["start_positions"]) + F.cross_entropy(end, batch["end_positions"])) / 2

    def predictions(self, logits: tuple[Tensor, Tensor], batch: Batch) -> list:
        start, end = (x.float().cpu().numpy() for x in logits)
        return [(s[:n], e[:n]) for s, e, n in zip(start, end, batch["attention_mask"].sum(1).tolist())]

    def item_count(self, metric: str, cols: Columns) -> int:
        return len(cols[metric])

    def item_stats(self, metric: str, cols: Columns) -> np.ndarray:
        return np.asarray(cols[metric], dtype=np.float64)[:, None]

    def finish(self, metric: str, sums: np.ndarray, m: int) -> np.ndarray:
        return sums[0] / m  # per-question scores, already 0-100


KIND = Span()

"""Stage `finetune`: a task head on a pretrained encoder, trained on the task and scored on its dev set(s).

Reads `data/pretrain/<finetune.encoder>/` (the encoder; its `metrics.json` `objective` says whether it was
pretrained left-to-right), `data/tokenizer/tokenizer.json` and `data/download/tasks/<task>/`; writes
`data/finetune/<name>/metrics.json` (and the training curve `metrics.csv`), all or nothing. A task whose data
could not be downloaded gets a `"status": "no data"` record instead, and the stage still succeeds.

Kinds: classification / regression (GLUE: `[CLS] A [SEP] B [SEP]`, a head on the sentence vector, MSE for
STS-B), span (SQuAD v1.1: windows, start/end logits, best span over the windows), tagging (CoNLL-2003: each
word's tag on its first sub-token, entity F1 over word-level tags).

Modes: `finetune` (everything trains; `head_lr` for the new parameters) and `feature_based` (Table 7: the
encoder frozen, in eval mode and run under no_grad; token features from `finetune.features` feed a randomly
initialised two-layer BiLSTM and the head). Choices:

- Sentence vector. Bidirectional encoders: BERT's pooled `[CLS]` (tanh(dense(h_[CLS]))). Causal (left-to-right,
  objective "ltr") encoders are fine-tuned with the same causal attention, and `[CLS]` sees nothing there, so
  their sentence vector is the same pooler applied to the last real token (the final `[SEP]`, which has seen
  the whole input), as OpenAI GPT classifies from its last token.
- BiLSTM (`bilstm: true`, and always in `feature_based` mode): over the encoder's token outputs (the
  features); token tasks use its per-token states, sentence tasks its final states (forward at the last real
  token ++ backward at the first), replacing the pooler.
- `sum_all`: a scalar mix over the transformer layers only (the paper's "all 12 layers" of BERT-base), not
  the embedding output; `sum_last_four` / `concat_last_four`: the top four hidden states.
"""

from __future__ import annotations

import functools
import logging
import math
import shutil
import time
import warnings
from abc import ABC, abstractmethod
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import datasets
import lightning.pytorch as pl
import numpy as np
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import LearningRateMonitor
from lightning.pytorch.utilities import rank_zero_only
from omegaconf import DictConfig, OmegaConf
from tokenizers import Tokenizer
from torch import Tensor
from torch.utils.data import DataLoader

from bertlab import stage
from bertlab.data.ner import encode_words, word_predictions
from bertlab.data.squad import encode_squad, postprocess
from bertlab.data.tasks import IGNORE_INDEX, Task, encode_pairs, pad_collate
from bertlab.export import load_plain
from bertlab.heads import FEATURES, BiLSTM, LayerFeatures, LinearHead, SpanHead, init_head
from bertlab.metrics import entity_f1, glue_metrics, squad_scores
from bertlab.model import BertEncoder
from bertlab.report import tables_of

log = logging.getLogger(__name__)

MODES = ("finetune", "feature_based")
MODEL_INPUTS = ("input_ids", "token_type_ids", "attention_mask")


# ----------------------------------------------------------------------------------------------------------------
# The model


class FinetuneModule(pl.LightningModule):
    """Encoder (+ features, + BiLSTM) + task head, with AdamW, linear warmup and linear decay.

    Batches hold `input_ids`, `token_type_ids`, `attention_mask`, the targets of the task kind (`label`;
    `start_positions` and `end_positions`; `label_ids`) and `index`, the row's position in its dataset, which
    evaluation uses to put predictions back in order. Set `evaluators` (one per validation dataloader) before
    `trainer.validate`; the scores land in `results` ({split: {metric: value}}) and in the loggers.
    """

    def __init__(
        self, encoder: BertEncoder, task: Task, *, mode: str = "finetune", features: str = "last",
        bilstm: bool = False, bilstm_hidden: int | None = None, bilstm_layers: int = 2, head_dropout: float = 0.1,
        causal: bool = False, lr: float = 2e-5, head_lr: float | None = None, warmup_ratio: float = 0.1,
        weight_decay: float = 0.01, betas: Sequence[float] = (0.9, 0.999), eps: float = 1e-6,
    ) -> None:
        super().__init__()
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; expected one of {', '.join(MODES)}")
        self.task, self.causal, self.frozen = task, causal, mode == "feature_based"
        self.lr, self.head_lr = lr, lr if head_lr is None else head_lr
        self.warmup_ratio, self.weight_decay, self.betas, self.eps = warmup_ratio, weight_decay, tuple(betas), eps
        self.encoder = encoder
        c = encoder.config
        size = c.hidden_size
        self.features = None
        if self.frozen:
            encoder.requires_grad_(False)
            encoder.eval()
            self.features = LayerFeatures(features, c.num_layers, c.hidden_size)
            size = self.features.output_size
        self.bilstm = None
        if bilstm or self.frozen:
            self.bilstm = BiLSTM(size, bilstm_hidden or c.hidden_size, bilstm_layers, dropout=head_dropout)
            size = self.bilstm.output_size
        self.head = SpanHead(size) if task.kind == "span" else LinearHead(size, task.num_labels, head_dropout)
        init_head(self.head, c.initializer_range)
        self.evaluators: list[Evaluator] = []
        self.results: dict[str, dict[str, float | None]] = {}
        self._outputs: dict[int, list] = defaultdict(list)

    # -- forward ----------------------------------------------------------------------------------------------

    def train(self, mode: bool = True) -> FinetuneModule:
        """As nn.Module.train, but a frozen encoder stays in eval mode (no dropout in the features)."""
        super().train(mode)
        if self.frozen:
            self.encoder.eval()
        return self

    def token_features(self, batch: dict[str, Tensor]) -> tuple[Tensor, Any]:
        """Per-token vectors the head (or BiLSTM) reads, and the encoder output."""
        inputs = [batch[k] for k in MODEL_INPUTS]
        if self.frozen:
            if self.encoder.training:  # whatever switched it back: the frozen encoder never uses dropout
                self.encoder.eval()
            with torch.no_grad():
                out = self.encoder(*inputs, causal=self.causal, output_hidden_states=True)
            return self.features(out.hidden_states), out
        out = self.encoder(*inputs, causal=self.causal)
        return out.last_hidden_state, out

    def sentence_vector(self, tokens: Tensor, out: Any, attention_mask: Tensor) -> Tensor:
        """The pooled `[CLS]`, or for causal encoders the same pooler on the last real token."""
        if not self.causal:
            return out.pooled_output
        last = attention_mask.sum(1) - 1
        pooler = self.encoder.pooler
        return torch.tanh(pooler(tokens[torch.arange(tokens.shape[0], device=tokens.device), last]))

    def forward(self, batch: dict[str, Tensor]) -> Tensor | tuple[Tensor, Tensor]:
        """Logits: (B, num_labels) classification, (B,) regression, (B, S) start and end, (B, S, num_labels) tags."""
        mask = batch["attention_mask"]
        tokens, out = self.token_features(batch)
        sentence = None
        if self.bilstm is not None:
            tokens, sentence = self.bilstm(tokens, mask)
        if self.task.kind == "span":
            return self.head(tokens, mask)
        if self.task.kind == "tagging":
            return self.head(tokens)
        logits = self.head(sentence if sentence is not None else self.sentence_vector(tokens, out, mask))
        return logits.squeeze(-1) if self.task.kind == "regression" else logits

    def loss(self, logits: Any, batch: dict[str, Tensor]) -> Tensor:
        kind = self.task.kind
        if kind == "classification":
            return F.cross_entropy(logits, batch["label"])
        if kind == "regression":
            return F.mse_loss(logits, batch["label"].float())
        if kind == "span":
            start, end = logits
            return (F.cross_entropy(start, batch["start_positions"]) + F.cross_entropy(end, batch["end_positions"])) / 2
        labels = batch["label_ids"]
        if not bool((labels != IGNORE_INDEX).any()):  # only empty sentences: nothing to learn from
            return logits.sum() * 0.0
        return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE_INDEX)

    # -- training -----------------------------------------------------------------------------------------------

    def training_step(self, batch: dict[str, Tensor], _: int) -> Tensor:
        loss = self.loss(self(batch), batch)
        self.log("train/loss", loss, prog_bar=True, batch_size=batch["input_ids"].shape[0])
        return loss

    def param_groups(self) -> list[dict[str, Any]]:
        """AdamW groups: encoder at `lr`, new parameters at `head_lr`; no weight decay on 1-d tensors (biases,
        LayerNorm, scalar-mix weights). A frozen encoder contributes nothing."""
        encoder = [p for p in self.encoder.parameters() if p.requires_grad]
        new = [p for n, p in self.named_parameters() if not n.startswith("encoder.") and p.requires_grad]
        groups = []
        for name, params, lr in (("encoder", encoder, self.lr), ("head", new, self.head_lr)):
            for suffix, chosen, decay in (("", [p for p in params if p.ndim >= 2], self.weight_decay),
                                          ("_no_decay", [p for p in params if p.ndim < 2], 0.0)):
                if chosen:
                    groups.append({"name": name + suffix, "params": chosen, "lr": lr, "weight_decay": decay})
        return groups

    def build_optimizer(self, total_steps: int) -> dict[str, Any]:
        """AdamW and the per-step schedule: linear warmup over `warmup_ratio` of the steps, then linear decay to 0."""
        opt = torch.optim.AdamW(self.param_groups(), lr=self.lr, betas=self.betas, eps=self.eps,
                                fused=stage.fused_adamw(self))
        total = max(1, int(total_steps))
        warmup = min(int(round(self.warmup_ratio * total)), total - 1)
        return {"optimizer": opt, "lr_scheduler": stage.warmup_then_decay(opt, warmup, total)}

    def configure_optimizers(self) -> dict[str, Any]:
        return self.build_optimizer(self.trainer.estimated_stepping_batches)

    # -- evaluation ---------------------------------------------------------------------------------------------

    def on_validation_epoch_start(self) -> None:
        self._outputs = defaultdict(list)

    def validation_step(self, batch: dict[str, Tensor], _: int, dataloader_idx: int = 0) -> None:
        logits = self(batch)
        lengths = batch["attention_mask"].sum(1).tolist()
        kind = self.task.kind
        if kind == "classification":
            rows: list = logits.argmax(-1).tolist()
        elif kind == "regression":
            rows = logits.float().tolist()
        elif kind == "span":
            start, end = (x.float().cpu().numpy() for x in logits)
            rows = [(s[:n], e[:n]) for s, e, n in zip(start, end, lengths)]
        else:
            rows = [p[:n] for p, n in zip(logits.argmax(-1).tolist(), lengths)]
        self._outputs[dataloader_idx].extend(zip(batch["index"].tolist(), rows))

    def on_validation_epoch_end(self) -> None:
        results: dict[str, dict[str, float | None]] = {}
        for i, evaluator in enumerate(self.evaluators):
            by_index = dict(self._gather(self._outputs[i]))  # DDP pads with repeats: same index, same row
            missing = evaluator.rows - len(by_index)
            if missing:
                raise RuntimeError(f"{evaluator.split}: {missing} of {evaluator.rows} rows were not evaluated")
            scores = evaluator.score([by_index[j] for j in range(evaluator.rows)])
            results[evaluator.split] = {k: (float(v) if math.isfinite(v) else None) for k, v in scores.items()}
        self.results = results
        logged = {f"{split}/{k}": v for split, scores in results.items() for k, v in scores.items() if v is not None}
        if logged:
            self.log_dict(logged, sync_dist=False, rank_zero_only=True)
        self._outputs = defaultdict(list)

    def _gather(self, items: list) -> list:
        if torch.distributed.is_available() and torch.distributed.is_initialized() and self.trainer.world_size > 1:
            parts: list = [None] * self.trainer.world_size
            torch.distributed.all_gather_object(parts, items)
            return [x for part in parts for x in part]
        return items


# ----------------------------------------------------------------------------------------------------------------
# Evaluation: predictions (one per row, in dataset order) -> the task's official metrics


@dataclass
class Evaluator(ABC):
    split: str
    rows: int  # rows of the eval dataset (SQuAD: windows)

    @abstractmethod
    def score(self, predictions: list) -> dict[str, float]:
        """The split's metrics from one prediction per row, in dataset order."""


@dataclass
class GlueEvaluator(Evaluator):
    task: str = ""
    labels: list = field(default_factory=list)

    def score(self, predictions: list) -> dict[str, float]:
        return glue_metrics(self.task, predictions, self.labels)


@dataclass
class SquadEvaluator(Evaluator):
    features: dict[str, list] = field(default_factory=dict)
    contexts: list[str] = field(default_factory=list)
    answers: list[list[str]] = field(default_factory=list)
    n_best_size: int = 20
    max_answer_length: int = 30

    def score(self, predictions: list) -> dict[str, float]:
        texts = postprocess(
            [p[0] for p in predictions], [p[1] for p in predictions], self.features, self.contexts,
            n_best_size=self.n_best_size, max_answer_length=self.max_answer_length,
        )
        keys = [str(i) for i in range(len(self.contexts))]  # positions: ids need not be unique
        return squad_scores(dict(zip(keys, texts)), dict(zip(keys, self.answers)))


@dataclass
class TaggingEvaluator(Evaluator):
    word_ids: list[list[int | None]] = field(default_factory=list)
    gold: list[list[str]] = field(default_factory=list)
    label_names: tuple[str, ...] = ()

    def score(self, predictions: list) -> dict[str, float]:
        outside = self.label_names.index("O") if "O" in self.label_names else 0
        pred = [
            [self.label_names[t] for t in word_predictions(p, w, len(g), outside_id=outside)]
            for p, w, g in zip(predictions, self.word_ids, self.gold, strict=True)
        ]
        return entity_f1(self.gold, pred)


# ----------------------------------------------------------------------------------------------------------------
# Data: a split of a task -> rows of model inputs and targets (+ the evaluator that scores predictions on them)


@dataclass
class Lengths:
    """Sequence settings in effect (capped by the encoder's position embeddings)."""

    max_seq_length: int
    doc_stride: int = 128
    max_query_length: int = 64


def subsample(ds: datasets.Dataset, n: int | None, seed: int) -> datasets.Dataset:
    """`n` rows drawn without replacement by `seed` (kept in memory: nothing is written next to the data)."""
    if n is None or n >= len(ds):
        return ds
    picked = np.sort(np.random.default_rng(seed).permutation(len(ds))[:n])
    return ds.select(picked.tolist(), keep_in_memory=True)


def prepare_split(
    task: Task, ds: datasets.Dataset, tokenizer: Tokenizer, lengths: Lengths, split: str, train: bool,
    n_best_size: int = 20, max_answer_length: int = 30,
) -> tuple[list[dict[str, Any]], Evaluator | None]:
    """Model rows of one split (with targets when `train`) and the evaluator of predictions on them (SQuAD's
    training windows have none: their targets are token positions, not answers)."""
    cols = task.text_columns
    if task.kind in ("classification", "regression"):
        enc = encode_pairs(tokenizer, ds[cols[0]], ds[cols[1]] if len(cols) > 1 else None, lengths.max_seq_length)
        labels = [float(y) if task.kind == "regression" else int(y) for y in ds[task.label_column]]
        rows = [
            {"input_ids": ids, "token_type_ids": types, "label": y, "index": i}
            for i, (ids, types, y) in enumerate(zip(enc["input_ids"], enc["token_type_ids"], labels))
        ]
        return rows, GlueEvaluator(split, len(rows), task=task.name, labels=labels)

    if task.kind == "span":
        questions, contexts = list(ds[cols[0]]), list(ds[cols[1]])
        answers = list(ds[task.label_column])
        settings = dict(max_length=lengths.max_seq_length, doc_stride=lengths.doc_stride,
                        max_query_length=lengths.max_query_length)
        if train:  # first reference answer, as run_squad.py; unanswerable rows (none in v1.1) are skipped
            keep = [i for i, a in enumerate(answers) if a["text"]]
            feats = encode_squad(
                tokenizer, [questions[i] for i in keep], [contexts[i] for i in keep],
                [answers[i]["answer_start"][0] for i in keep], [answers[i]["text"][0] for i in keep], **settings,
            )
            rows = [
                {"input_ids": ids, "token_type_ids": types, "start_positions": s, "end_positions": e, "index": i}
                for i, (ids, types, s, e) in enumerate(zip(
                    feats["input_ids"], feats["token_type_ids"], feats["start_positions"], feats["end_positions"]))
            ]
            return rows, None
        feats = encode_squad(tokenizer, questions, contexts, **settings)
        rows = [
            {"input_ids": ids, "token_type_ids": types, "index": i}
            for i, (ids, types) in enumerate(zip(feats["input_ids"], feats["token_type_ids"]))
        ]
        refs = [list(a["text"]) for a in answers]
        return rows, SquadEvaluator(split, len(rows), features=feats, contexts=contexts, answers=refs,
                                    n_best_size=n_best_size, max_answer_length=max_answer_length)

    # tagging
    words, tags = [list(w) for w in ds[cols[0]]], [list(t) for t in ds[task.label_column]]
    enc = encode_words(tokenizer, words, tags, lengths.max_seq_length)
    rows = [
        {"input_ids": ids, "token_type_ids": types, "label_ids": labels, "index": i}
        for i, (ids, types, labels) in enumerate(zip(enc["input_ids"], enc["token_type_ids"], enc["label_ids"]))
    ]
    names = task.label_names or tuple(str(i) for i in range(task.num_labels))
    gold = [[names[t] for t in sentence] for sentence in tags]
    return rows, TaggingEvaluator(split, len(rows), word_ids=enc["word_ids"], gold=gold, label_names=names)


def make_loader(rows: list[dict[str, Any]], batch_size: int, shuffle: bool, pad_id: int, num_workers: int) -> DataLoader:
    """Batches padded to their own longest row (dynamic padding)."""
    return DataLoader(
        rows, batch_size=batch_size, shuffle=shuffle, num_workers=num_workers,
        collate_fn=functools.partial(pad_collate, pad_id=pad_id), persistent_workers=num_workers > 0,
    )


# ----------------------------------------------------------------------------------------------------------------
# The stage


@dataclass
class Result:
    record: dict[str, Any]  # what metrics.json holds
    module: FinetuneModule | None = None  # the trained module (None when there was no data)


def load_encoder(data_dir: Path, name: str, dropout: float) -> tuple[BertEncoder, bool, str | None]:
    """The encoder of pretraining run `name` with the given dropout, whether it is causal (objective "ltr"),
    and its objective."""
    d = data_dir / "pretrain" / name
    if not (d / "model.pt").exists() or not (d / "config.json").exists():
        raise stage.UserError(f"encoder {name!r}: no pretrained model in {d} (run the pretrain stage with name={name})")
    model, _ = load_plain(d, dropout=dropout, attention_dropout=dropout)
    objective = stage.read_json(d / "metrics.json").get("objective") if (d / "metrics.json").exists() else None
    if objective is None:
        log.warning("%s has no metrics.json objective: treating the encoder as bidirectional", d)
    return model.encoder, objective == "ltr", objective


def missing_data_reason(data_dir: Path, task: str) -> str | None:
    """Why the task has no data (the download stage left a `NO_DATA` note), or None if its data is there."""
    task_dir = stage.require(data_dir / "download" / "tasks" / task, "download")
    note = task_dir / "NO_DATA"
    return note.read_text().strip() if note.exists() else None


def check_config(cfg: DictConfig) -> Task:
    ft = cfg.finetune
    if ft.mode not in MODES:
        raise stage.UserError(f"finetune.mode={ft.mode!r}: expected one of {', '.join(MODES)}")
    if ft.features not in FEATURES:
        raise stage.UserError(f"finetune.features={ft.features!r}: expected one of {', '.join(FEATURES)}")
    try:
        return Task(**OmegaConf.to_container(cfg.task, resolve=True))
    except (TypeError, ValueError) as err:
        raise stage.UserError(f"task: {err}") from err


def finetune(cfg: DictConfig) -> Result:
    """Run the stage on `cfg` (the composed Hydra config); writes `data/finetune/<name>/` and returns its record."""
    task = check_config(cfg)
    ft = cfg.finetune
    data_dir = Path(cfg.data_dir)
    out_dir = data_dir / "finetune" / cfg.name
    feature_based = ft.mode == "feature_based"
    record: dict[str, Any] = {
        "name": cfg.name, "encoder": ft.encoder, "task": task.name, "seed": cfg.seed, "mode": ft.mode,
        "features": ft.features if feature_based else None, "bilstm": bool(ft.bilstm or feature_based),
        "headline_metric": task.metric,
    }
    reason = missing_data_reason(data_dir, task.name)
    if reason is not None:
        print(f"{task.name}: no data ({reason})")
        record |= {"status": "no data", "reason": reason, "metrics": {}, "headline": None,
                   "train_examples": None, "eval_examples": None, "train_seconds": None, "eval_seconds": None}
        with stage.atomic_dir(out_dir) as tmp:
            stage.write_json(tmp / "metrics.json", record)
        return Result(record)

    tokenizer_file = data_dir / "tokenizer" / "tokenizer.json"
    if not tokenizer_file.exists():
        raise stage.UserError(f"no tokenizer at {tokenizer_file} (run the tokenizer stage)")
    stage.apply_impl(cfg.impl)
    pl.seed_everything(cfg.seed, workers=True)
    encoder, causal, objective = load_encoder(data_dir, ft.encoder, ft.dropout)
    tokenizer = Tokenizer.from_file(str(tokenizer_file))
    pad_id = tokenizer.token_to_id("[PAD]")

    positions = encoder.config.max_position_embeddings
    span = task.kind == "span"
    wanted = ft.squad_max_seq_length if span else ft.max_seq_length
    max_len = min(int(wanted), positions)
    if max_len < wanted:
        log.warning("max_seq_length %d > the encoder's %d positions: using %d", wanted, positions, max_len)
    lengths = Lengths(max_len, min(int(ft.doc_stride), max_len // 2), min(int(ft.max_query_length), (max_len - 3) // 2))

    dd = datasets.load_from_disk(str(data_dir / "download" / "tasks" / task.name))
    absent = [s for s in (task.train_split, *task.eval_splits) if s not in dd]
    if absent:
        raise stage.UserError(f"task {task.name!r}: the downloaded data lacks the split(s) {', '.join(absent)}")
    train_ds = subsample(dd[task.train_split], ft.squad_max_train_examples if span else ft.max_train_examples,
                         ft.subsample_seed)
    train_rows, _ = prepare_split(task, train_ds, tokenizer, lengths, task.train_split, train=True)
    evals = []
    for split in task.eval_splits:
        ds = subsample(dd[split], ft.squad_max_eval_examples if span else ft.max_eval_examples, ft.subsample_seed)
        rows, evaluator = prepare_split(task, ds, tokenizer, lengths, split, train=False,
                                        n_best_size=ft.n_best_size, max_answer_length=ft.max_answer_length)
        evals.append((len(ds), rows, evaluator))
    log.info("%s on %s (%s, causal=%s): %d training examples (%d rows), eval %s", cfg.name, task.name, objective,
             causal, len(train_ds), len(train_rows), {e.split: n for n, _, e in evals})

    module = FinetuneModule(
        encoder, task, mode=ft.mode, features=ft.features, bilstm=ft.bilstm, bilstm_hidden=ft.bilstm_hidden,
        bilstm_layers=ft.bilstm_layers, head_dropout=ft.head_dropout, causal=causal, lr=ft.lr, head_lr=ft.head_lr,
        warmup_ratio=ft.warmup_ratio, weight_decay=ft.weight_decay, betas=tuple(ft.betas), eps=ft.eps,
    )
    module.evaluators = [e for _, _, e in evals]
    if cfg.impl.compile:
        module.encoder = torch.compile(module.encoder, dynamic=True)
    workers = int(cfg.impl.num_workers)
    train_loader = make_loader(train_rows, ft.batch_size, True, pad_id, workers)
    eval_loaders = [make_loader(rows, ft.batch_size, False, pad_id, workers) for _, rows, _ in evals]

    work_dir = data_dir / "checkpoints" / "finetune" / cfg.name  # the loggers' files until the run completes
    if rank_zero_only.rank == 0:  # DDP re-runs this script in every rank: only the first one cleans up
        shutil.rmtree(work_dir, ignore_errors=True)
    steps_per_epoch = max(1, math.ceil(len(train_rows) / ft.batch_size))
    loggers = stage.make_loggers(cfg, "finetune", work_dir, tables_of(OmegaConf.to_container(cfg.ablations), record))
    trainer = pl.Trainer(
        max_epochs=ft.epochs, accelerator=cfg.impl.accelerator, devices=cfg.impl.devices,
        strategy=cfg.impl.strategy, precision=cfg.impl.precision, gradient_clip_val=ft.grad_clip,
        logger=loggers, log_every_n_steps=min(10, steps_per_epoch),
        callbacks=[LearningRateMonitor("step"), stage.progress_bar()], enable_checkpointing=False,
        default_root_dir=work_dir,
        num_sanity_val_steps=0,
    )
    start = time.perf_counter()
    with warnings.catch_warnings():  # evaluation runs once, after training, by `validate`
        warnings.filterwarnings("ignore", message=".*no `val_dataloader`.*")
        warnings.filterwarnings("ignore", message=".*module\\(s\\) in eval mode.*")  # a frozen encoder, on purpose
        trainer.fit(module, train_loader)
    train_seconds = time.perf_counter() - start
    start = time.perf_counter()
    trainer.validate(module, eval_loaders, verbose=False)
    eval_seconds = time.perf_counter() - start
    first = task.eval_splits[0]
    record |= {
        "status": "ok", "objective": objective, "causal": causal, "metrics": module.results,
        "headline": module.results[first].get(task.metric),
        "train_examples": len(train_ds), "eval_examples": sum(n for n, _, _ in evals),
        "eval_examples_per_split": {e.split: n for n, _, e in evals},
        "train_seconds": round(train_seconds, 1), "eval_seconds": round(eval_seconds, 1),
        "steps": trainer.global_step,
        "lengths": {"max_seq_length": lengths.max_seq_length, **(
            {"doc_stride": lengths.doc_stride, "max_query_length": lengths.max_query_length}
            if task.kind == "span" else {})},
    }
    if trainer.is_global_zero:
        with stage.atomic_dir(out_dir) as tmp:
            if (work_dir / "metrics.csv").exists():
                shutil.copy(work_dir / "metrics.csv", tmp / "metrics.csv")
            stage.write_json(tmp / "metrics.json", record)
        shutil.rmtree(work_dir, ignore_errors=True)
    log.info("%s: %s = %s (%s) in %.1f s + %.1f s eval", cfg.name, task.metric, record["headline"], first,
             train_seconds, eval_seconds)
    return Result(record, module)


@stage.main
def run(cfg: DictConfig) -> None:
    finetune(cfg)


if __name__ == "__main__":
    run()

"""The fine-tuning LightningModule: a task head on a pretrained encoder (optionally frozen, with layer features
and a BiLSTM between them), trained with AdamW and BERT's schedule, and scored by the evaluators it is given.

Modes: `finetune` (everything trains; `head_lr` for the new parameters) and `feature_based` (Table 7: the
encoder frozen, in eval mode and run under no_grad; token features from `features` feed a randomly
initialised two-layer BiLSTM and the head). The third, `probe`, trains no module: `bertlab.training.probe`.
Choices:

- Sentence vector. Bidirectional encoders: BERT's pooled `[CLS]` (tanh(dense(h_[CLS]))). Causal (left-to-right,
  objective "ltr") encoders are fine-tuned with the same causal attention, and `[CLS]` sees nothing there, so
  their sentence vector is the same pooler applied to the last real token (the final `[SEP]`, which has seen
  the whole input), as OpenAI GPT classifies from its last token. `pooling="mean"` (a setting, not the paper's):
  the pooler on the mean of the real tokens' outputs instead.
- BiLSTM (`bilstm=True`, and always in `feature_based` mode): over the encoder's token outputs (the
  features); token tasks use its per-token states, sentence tasks its final states (forward at the last real
  token ++ backward at the first), replacing the pooler.
- `sum_all`: a scalar mix over the transformer layers only (the paper's "all 12 layers" of BERT-base), not
  the embedding output; `sum_last_four` / `concat_last_four`: the top four hidden states.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import lightning.pytorch as pl
import torch
from torch import Tensor

from bertlab.data.masking import derive_seed
from bertlab.data.tasks import Task
from bertlab.files import finite
from bertlab.modeling.heads import BiLSTM, LayerFeatures, init_head
from bertlab.modeling.model import BertEncoder
from bertlab.settings import CHOICES
from bertlab.training.recipe import ModuleSettings
from bertlab.kinds import KINDS
from bertlab.kinds.base import MODEL_INPUTS, Evaluation, Evaluator
from bertlab.training.trainer import adamw, clip_gradients, decay_groups


class FinetuneModule(pl.LightningModule):
    """Encoder (+ features, + BiLSTM) + task head, with AdamW, linear warmup and linear decay.

    Batches hold `input_ids`, `token_type_ids`, `attention_mask`, the targets of the task kind (`label`;
    `start_positions` and `end_positions`; `label_ids`) and `index`, the row's position in its dataset, which
    evaluation uses to put predictions back in order. Set `evaluators` (one per validation dataloader) before
    `trainer.validate`; each split's evaluation lands in `evaluations` ({split: metrics and per-item columns}),
    its metrics in `results` ({split: {metric: value}}, None where undefined) and in the loggers.
    """

    def __init__(self, encoder: BertEncoder, task: Task, settings: ModuleSettings = ModuleSettings(), *,
                 causal: bool = False) -> None:
        super().__init__()
        s = settings
        for setting, value in (("mode", s.mode), ("pooling", s.pooling)):
            if value not in (choices := CHOICES[f"finetune.{setting}"]):
                raise ValueError(f"unknown {setting} {value!r}; expected one of {', '.join(choices)}")
        if s.mode == "probe":
            raise ValueError("a probe is fitted by bertlab.training.probe, not trained as a module")
        self.task, self.causal, self.frozen, self.pooling = task, causal, s.mode != "finetune", s.pooling
        self.lr, self.head_lr = s.lr, s.lr if s.head_lr is None else s.head_lr
        self.warmup_ratio, self.weight_decay, self.betas, self.eps = s.warmup_ratio, s.weight_decay, s.betas, s.eps
        self.encoder = encoder
        c = encoder.config
        size = c.hidden_size
        self.features = None
        if self.frozen:
            encoder.requires_grad_(False)
            encoder.eval()
            self.features = LayerFeatures(s.features, c.num_layers, c.hidden_size)
            size = self.features.output_size
        self.bilstm = None
        if s.bilstm or self.frozen:
            self.bilstm = BiLSTM(size, s.bilstm_hidden or c.hidden_size, s.bilstm_layers, dropout=s.head_dropout)
            size = self.bilstm.output_size
        self.kind = KINDS[task.kind]
        self.head = self.kind.head(size, task.num_labels, s.head_dropout)
        if self.bilstm is not None or not self.kind.sentence:  # nothing reads the pooler: frozen, so
            encoder.pooler.requires_grad_(False)  # every trained parameter is in the loss (plain DDP works)
        init_head(self.head, c.initializer_range)
        self.evaluators: list[Evaluator] = []
        self.results: dict[str, dict[str, float | None]] = {}
        self.evaluations: dict[str, Evaluation] = {}
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
        """The pooled `[CLS]` (causal encoders: the last real token; `pooling="mean"`: the mean over real tokens)."""
        if self.pooling == "mean":
            m = attention_mask.unsqueeze(-1).to(tokens.dtype)
            return torch.tanh(self.encoder.pooler((tokens * m).sum(1) / m.sum(1)))
        if not self.causal:
            return out.pooled_output
        last = attention_mask.sum(1) - 1
        pooler = self.encoder.pooler
        return torch.tanh(pooler(tokens[torch.arange(tokens.shape[0], device=tokens.device), last]))

    def represent(self, batch: dict[str, Tensor]) -> Tensor:
        """What the head reads: a vector per input (the kind's `sentence`), else the per-token states."""
        mask = batch["attention_mask"]
        tokens, out = self.token_features(batch)
        sentence = None
        if self.bilstm is not None:
            tokens, sentence = self.bilstm(tokens, mask)
        if not self.kind.sentence:
            return tokens
        return sentence if sentence is not None else self.sentence_vector(tokens, out, mask)

    def forward(self, batch: dict[str, Tensor]) -> Any:
        """The head's output, as the kind shapes it: (B, num_labels) classification, (B,) regression, (B, S) start
        and end, (B, S, num_labels) tags, ..."""
        return self.kind.forward(self.represent, self.head, batch)

    # -- training -----------------------------------------------------------------------------------------------

    def on_train_start(self) -> None:
        """Under DDP, each rank reseeds the global RNG (dropout) by (its seed, its rank), so the ranks' dropout
        differs; a 1-process run keeps the stage's seeding."""
        if self.trainer.world_size > 1:
            torch.manual_seed(derive_seed(torch.initial_seed(), self.trainer.global_rank))

    def training_step(self, batch: dict[str, Tensor], _: int) -> Tensor:
        loss = self.kind.loss(self(batch), batch)
        self.log("train/loss", loss, prog_bar=True, batch_size=batch["input_ids"].shape[0])
        return loss

    def param_groups(self) -> list[dict[str, Any]]:
        """AdamW groups (`decay_groups`): encoder at `lr`, new parameters at `head_lr`. A frozen encoder contributes
        nothing."""
        encoder = [p for p in self.encoder.parameters() if p.requires_grad]
        new = [p for n, p in self.named_parameters() if not n.startswith("encoder.") and p.requires_grad]
        return [*decay_groups(encoder, self.weight_decay, "encoder", lr=self.lr),
                *decay_groups(new, self.weight_decay, "head", lr=self.head_lr)]

    def build_optimizer(self, total_steps: int) -> dict[str, Any]:
        """AdamW and the per-step schedule: linear warmup over `warmup_ratio` of the steps, then linear decay to 0."""
        total = max(1, int(total_steps))
        warmup = min(int(round(self.warmup_ratio * total)), total - 1)
        return adamw(self, self.param_groups(), self.lr, self.betas, self.eps, warmup, total)

    def configure_optimizers(self) -> dict[str, Any]:
        return self.build_optimizer(self.trainer.estimated_stepping_batches)

    def configure_gradient_clipping(self, optimizer: torch.optim.Optimizer, gradient_clip_val: float | None = None,
                                    gradient_clip_algorithm: str | None = None) -> None:
        clip_gradients(optimizer, gradient_clip_val)  # by norm, also for a fused AdamW under bf16

    # -- evaluation ---------------------------------------------------------------------------------------------

    def on_validation_epoch_start(self) -> None:
        self._outputs = defaultdict(list)

    def validation_step(self, batch: dict[str, Tensor], _: int, dataloader_idx: int = 0) -> None:
        rows = self.kind.predictions(self(batch), batch)
        self._outputs[dataloader_idx].extend(zip(batch["index"].tolist(), rows))

    def on_validation_epoch_end(self) -> None:
        self.evaluations = {}
        for i, evaluator in enumerate(self.evaluators):
            by_index = dict(self._gather(self._outputs[i]))  # DDP pads with repeats: same index, same row
            missing = evaluator.rows - len(by_index)
            if missing:
                raise RuntimeError(f"{evaluator.split}: {missing} of {evaluator.rows} rows were not evaluated")
            self.evaluations[evaluator.split] = evaluator.evaluate([by_index[j] for j in range(evaluator.rows)])
        self.results = {split: finite(e.metrics) for split, e in self.evaluations.items()}
        logged = {f"{split}/{k}": v for split, scores in self.results.items() for k, v in scores.items()
                  if v is not None}
        if logged:
            self.log_dict(logged, sync_dist=False, rank_zero_only=True)
        self._outputs = defaultdict(list)

    def _gather(self, items: list) -> list:
        if torch.distributed.is_available() and torch.distributed.is_initialized() and self.trainer.world_size > 1:
            parts: list = [None] * self.trainer.world_size
            torch.distributed.all_gather_object(parts, items)
            return [x for part in parts for x in part]
        return items

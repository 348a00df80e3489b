"""A pretraining run's work, once the stage (`bertlab.pretrain`) has decided it must be done: build the model, train
it (resuming from its checkpoint), score the held-out instances beside the unigram floor and write the run's folder.

Apart from the stage so that a run that trains nothing (finished already, a finished twin's copy, or left out by its
profile) starts in a second and a half, without Lightning and the model.
"""

from __future__ import annotations

import logging
import math
import pickle
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_only
from omegaconf import DictConfig, OmegaConf

from bertlab import runs
from bertlab.data import unigram
from bertlab.data.instances import load_instances
from bertlab.data.masking import continuation_table
from bertlab.errors import UserError
from bertlab.files import MIN_FREE_BYTES, atomic_dir, check_free_space, read_tokenizer, remove_tree, write_json
from bertlab.modeling.export import card_header, save_hf, save_plain
from bertlab.modeling.model import BertConfig, flops_per_token
from bertlab.training.callbacks import EpochEndCheckpoint, RunRecord, Throughput
from bertlab.training.pretrain_datamodule import PretrainData
from bertlab.training.pretrain_module import PretrainModule, plain_state_dict
from bertlab.training.run_settings import Devices, LogSettings
from bertlab.training.trainer import make_loggers, make_trainer, on_cuda, peak_tflops

log = logging.getLogger(__name__)


def resume_from(ckpt_dir: Path, key: str, max_steps: int,
                shapes: dict[str, tuple[int, ...]] | None = None) -> Path | None:
    """`ckpt_dir/last.ckpt` when it is part-way through this very run (same key, fewer than `max_steps` steps);
    otherwise None, with `ckpt_dir` cleared for a fresh start (an unreadable last.ckpt moved aside first: the run
    is fully determined, so starting afresh gives the same result, only later). The checkpoint is read as tensors and
    plain data only (`weights_only`): one that holds anything else (a pickle that would run code) stops the run with
    a UserError and is left where it is, as is one whose weights differ from this run's model's `shapes`."""
    last = ckpt_dir / "last.ckpt"
    if rank_zero_only.rank > 0:  # DDP re-runs the script in every rank after rank 0 has decided and cleared
        return last if last.exists() else None
    if last.exists():
        try:
            checkpoint = torch.load(last, map_location="cpu", weights_only=True, mmap=True)
        except pickle.UnpicklingError as err:
            if "Weights only load failed" not in str(err):
                raise
            what = next((line for line in str(err).splitlines()[1:] if line.strip()), "objects other than tensors")
            raise UserError(f"{last} holds more than tensors and plain data ({what.strip()}): no bertlab "
                                  "checkpoint does, and loading it could run code; refusing to resume (delete it to "
                                  "train from scratch)") from err
        except Exception as err:  # truncated, not a checkpoint, unreadable: any of torch.load's failures
            aside = ckpt_dir.with_name(f"{ckpt_dir.name}.unreadable.ckpt")
            last.replace(aside)
            log.warning("%s is unreadable (%s): moved to %s, training from scratch", last, type(err).__name__, aside)
        else:
            step = checkpoint.get("global_step", 0)
            if RunRecord.key_of(checkpoint) == key and step < max_steps:
                check_shapes(last, checkpoint, shapes or {})
                log.info("resuming %s from step %d (its checkpoint: %s)", ckpt_dir.name.rsplit("-", 1)[0], step, last)
                return last
            why = "other settings, code or inputs" if RunRecord.key_of(checkpoint) != key else "a finished run"
            log.info("not resuming from %s (%s): training from scratch", last, why)
    remove_tree(ckpt_dir, ckpt_dir.parent)
    return None


def check_shapes(path: Path, checkpoint: dict[str, Any], shapes: dict[str, tuple[int, ...]]) -> None:
    """A UserError naming `path` and both shapes where the checkpoint's weights are not those of the model (`shapes`:
    its state dict's), e.g. a last.ckpt of another model size put under this run's key."""
    state = plain_state_dict(checkpoint.get("state_dict", {}))
    for name, shape in shapes.items():
        if name not in state:
            raise UserError(f"{path} lacks the weight {name} of this run's model: it is not this run's "
                                  "checkpoint (delete it to train from scratch)")
        if tuple(state[name].shape) != tuple(shape):
            raise UserError(f"{path}: {name} has shape {tuple(state[name].shape)} there but {tuple(shape)} in "
                                  "this run's model: it is not this run's checkpoint (delete it to train from scratch)")


def model_card(cfg: DictConfig, steps: int, tokens_per_step: int, ppl: float, floor_ppl: float, causal: bool) -> str:
    """The HF export's README.md: the Hub's metadata header, what the model is, what it was trained on, and how well
    it predicts held-out text beside the unigram floor of the same positions (only what the run key fixes: a twin's
    card is as true)."""
    m, scored = cfg.model, "next tokens" if causal else "[MASK] positions"
    load = "`AutoModelForCausalLM`" if causal else '`AutoModelForMaskedLM` or `pipeline("fill-mask")`'
    tags = ["bertlab", "bert" if cfg.pretrain.positions == "absolute" else "roformer", cfg.objective.name]
    sources = [s.hub_id for s in cfg.corpus.sources]
    return (card_header(sources, tags, causal)
            + f"# A bertlab encoder: `{cfg.objective.name}`, {m.num_layers} layers of {m.hidden_size}\n\n"
            f"Pretrained by bertlab (a reproduction of BERT's ablation studies, far below BERT's budget) with the "
            f"`{cfg.objective.name}` objective, {cfg.pretrain.positions} positions, {m.num_layers} layers, hidden size "
            f"{m.hidden_size}, {m.num_heads} heads: {steps:,} steps of {tokens_per_step:,} tokens "
            f"({steps * tokens_per_step:,} in all) of text from {', '.join(sources)}."
            f"\n\nHeld-out perplexity at {scored}: {ppl:.1f}, against {floor_ppl:.1f} for a unigram model "
            f"of the same positions ({ppl / floor_ppl:.3f} x). Load it with `AutoTokenizer` and {load}.\n")


def check_static_masks(cfg: DictConfig) -> None:
    """Reference instances carry their masks: the objective must ask for the masking they were made with."""
    o, d = cfg.objective, cfg.pretrain_data
    if (o.mlm_probability, o.whole_word_masking) != (d.masked_lm_prob, d.whole_word_mask):
        raise UserError(
            f"objective.mlm_probability={o.mlm_probability}, whole_word_masking={o.whole_word_masking}: the "
            f"instances carry static masks (pretrain_data.reference=true) made with masked_lm_prob="
            f"{d.masked_lm_prob}, whole_word_mask={d.whole_word_mask}; set them equal")
    if (o.mask_replace_prob, o.random_replace_prob) != (0.8, 0.1):
        raise UserError(
            f"objective.mask_replace_prob={o.mask_replace_prob}, random_replace_prob={o.random_replace_prob}: the "
            "instances carry static masks (pretrain_data.reference=true) made with google's 80/10/10 rule; set 0.8, 0.1")
    if o.heldout_mlm_probability != o.mlm_probability:
        raise UserError(
            f"objective.heldout_mlm_probability={o.heldout_mlm_probability}: the instances carry static masks "
            f"(pretrain_data.reference=true) made at masked_lm_prob={d.masked_lm_prob}; set it to mlm_probability")


def heldout_items(fmt: str, kind: str, model: tuple[np.ndarray, np.ndarray],
                  floor: tuple[np.ndarray, np.ndarray]) -> dict[str, Any]:
    """`heldout_items.json`: per held-out instance, the model's and the floor's NLL sums and
    scored-position counts (`write_json` writes a non-finite sum as null)."""
    def columns(loss_sum: np.ndarray, count: np.ndarray) -> dict[str, list]:
        return {"loss_sum": loss_sum.tolist(), "count": count.tolist()}

    return {"format": fmt, "kind": kind, "n": len(model[0]), "model": columns(*model),
            "floor": {"name": unigram.FLOOR_NAME, **columns(*floor)}}


def make_module(cfg: DictConfig, vocab_size: int, seq: int) -> PretrainModule:
    """The run's PretrainModule: the encoder of `cfg.model` with `seq` positions, its objective and recipe."""
    p = cfg.pretrain
    config = BertConfig(
        vocab_size=vocab_size, num_layers=cfg.model.num_layers, hidden_size=cfg.model.hidden_size,
        num_heads=cfg.model.num_heads, intermediate_size=cfg.model.intermediate_size, max_position_embeddings=seq,
        dropout=p.dropout, attention_dropout=p.dropout, positions=p.positions,
    )
    return PretrainModule(model=vars(config), objective=OmegaConf.to_container(cfg.objective, resolve=True),
                          optim=OmegaConf.to_container(p, resolve=True), seed=cfg.seed)


def train(cfg: DictConfig, key: str, tokenizer_file: Path, instances_dir: Path, short_steps: int) -> None:
    """Pretrain run `cfg.name` (run key `key`) on the instances in `instances_dir`, the first `short_steps` steps on
    the short ones, and write `<out_dir>/pretrain/<name>/<name>-<seed>/` (global rank zero)."""
    pl.seed_everything(cfg.seed, workers=True, verbose=False)
    tokenizer = read_tokenizer(tokenizer_file)
    fmt, p = cfg.objective.data, cfg.pretrain
    train = load_instances(instances_dir / f"train_{fmt}")
    heldout = load_instances(instances_dir / f"heldout_{fmt}")
    short = load_instances(instances_dir / f"train_{fmt}_short") if short_steps else None
    if train.mlm_mask is not None and not cfg.objective.causal:
        check_static_masks(cfg)
    if len(train) < p.batch_size:
        raise UserError(f"pretrain.batch_size={p.batch_size} exceeds the {len(train)} training instances "
                        f"in {instances_dir / f'train_{fmt}'}")
    seq = train.input_ids.shape[1]
    module = make_module(cfg, tokenizer.get_vocab_size(), seq)
    config = module.model.config
    n_params = module.model.num_parameters()
    log.debug("%s: %s, %s parameters", cfg.name, config, n_params)  # also in its config.json and model card
    total = n_params["total"]  # fp32 bytes: a checkpoint (with Adam's moments) and its successor, the exports
    out_root = Path(cfg.out_dir)
    check_free_space(out_root, 8 * 4 * total + MIN_FREE_BYTES,
                     f"pretraining {cfg.name} ({total:,} parameters: checkpoints and exports)")
    if cfg.impl.compile:
        module.model.compile()  # in place: the state dict keeps its keys, so checkpoints resume either way
    run_dir = runs.pretrain_dir(out_root, cfg.name, cfg.seed)
    ckpt_dir = out_root / "checkpoints" / "pretrain" / f"{run_dir.name}-{key[:12]}"
    shapes = {name: tuple(t.shape) for name, t in module.state_dict().items()}
    resume = resume_from(ckpt_dir, key, p.max_steps, shapes) if p.max_steps > 0 else None
    loggers = make_loggers(LogSettings.of(cfg), "pretrain", ckpt_dir)
    record = RunRecord(key, loggers[0])
    # matmul FLOPs per non-padding token of a batch of that length: the labelled fraction scored (LTR: every token)
    scored = 1.0 if cfg.objective.causal else cfg.objective.mlm_probability
    throughput = Throughput(lambda length: flops_per_token(config, length, scored))
    trainer, micro = make_trainer(
        Devices.of(cfg.impl), loggers, ckpt_dir, ("pretrain.batch_size", p.batch_size),
        [record, EpochEndCheckpoint(ckpt_dir / "last.ckpt"), throughput], max_steps=p.max_steps, max_epochs=-1,
        gradient_clip_val=p.grad_clip, check_val_every_n_epoch=None, log_every_n_steps=10,
        use_distributed_sampler=False,
    )
    trainer.val_check_interval = p.val_every_steps * trainer.accumulate_grad_batches  # in batches: optimizer steps
    module.fixed_shapes = cfg.impl.compile or on_cuda(trainer)  # a step without host syncs: one compiled graph
    collate = dict(
        causal=cfg.objective.causal, nsp=cfg.objective.nsp, vocab_size=config.vocab_size,
        mlm_probability=cfg.objective.mlm_probability,
        mask_replace_prob=cfg.objective.mask_replace_prob, random_replace_prob=cfg.objective.random_replace_prob,
        continuation=continuation_table(tokenizer) if cfg.objective.whole_word_masking else None,
    )
    data = PretrainData(train, heldout, collate, batch_size=micro, seed=cfg.seed,
                        checkpoint_every=max(1, p.checkpoint_every_steps), heldout_mask_seed=cfg.pretrain_data.seed,
                        eval_batch_size=cfg.impl.eval_batch_size, num_workers=cfg.impl.num_workers,
                        pin_memory=on_cuda(trainer),
                        heldout_mlm_probability=cfg.objective.heldout_mlm_probability, short=short,
                        short_steps=short_steps)
    if p.max_steps > 0:
        trainer.fit(module, datamodule=data, ckpt_path=str(resume) if resume else None, weights_only=True)
    seconds = record.train_seconds()
    trainer.validate(module, datamodule=data, verbose=False)
    if not trainer.is_global_zero:
        return

    global_batch = micro * trainer.accumulate_grad_batches * trainer.world_size
    rate = throughput.summary(trainer.world_size, peak_tflops(cfg.impl, trainer))
    scored = module.heldout
    floor = unigram.item_losses(data.val_dataloader(), unigram.log_probs(np.load(instances_dir / "unigram_counts.npy")))
    ppl, floor_ppl = unigram.perplexity(*scored), unigram.perplexity(*floor)
    kind = "next-token" if cfg.objective.causal else "masked-token"
    with atomic_dir(run_dir) as out:
        save_plain(module.model, config, out)
        save_hf(module.model, config, out / "hf", causal=cfg.objective.causal, tokenizer_file=tokenizer_file,
                card=model_card(cfg, trainer.global_step, global_batch * seq, ppl, floor_ppl, cfg.objective.causal))
        record.write_curve(out / "metrics.csv")
        write_json(out / "heldout_items.json", heldout_items(fmt, kind, scored, floor))
        write_json(out / "metrics.json", {
      "name": run_dir.name, "encoder": cfg.name, "seed": cfg.seed,
      "objective": cfg.objective.name, "nsp": cfg.objective.nsp, "causal": cfg.objective.causal,
      "shape": {"num_layers": config.num_layers, "hidden_size": config.hidden_size,
                "num_heads": config.num_heads, "intermediate_size": config.intermediate_size},
      "preset": cfg.model.name, "parameters": n_params,
      "steps": trainer.global_step, "train_seconds": round(seconds, 1),
      "global_batch": global_batch, "max_seq_length": seq,
      "train_tokens": trainer.global_step * global_batch * seq,  # positions, padding included
      "heldout_mlm_loss": math.log(ppl), "heldout_ppl": ppl, "heldout_unigram_ppl": floor_ppl,
      "heldout_kind": kind, "run_key": key, "throughput": rate, "files": runs.run_files(out),
        })
    remove_tree(ckpt_dir, ckpt_dir.parent)
    speed = "" if rate["tokens_per_second"] is None else f"; {rate['tokens_per_second']:,} non-padding tokens/s" + (
        "" if rate["mfu"] is None else f", MFU {rate['mfu']:.1%}")
    log.info("%s: held-out perplexity %.2f (unigram floor %.2f) after %d steps%s", run_dir.name, ppl, floor_ppl,
             trainer.global_step, speed)

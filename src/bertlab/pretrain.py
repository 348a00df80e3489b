"""Stage `pretrain`: train a BERT encoder with masked LM + NSP (BERT), masked LM only, or left-to-right LM.

Reads `data/pretrain_data` and `data/tokenizer`; writes `<out_dir>/pretrain/<name>/<name>-<seed>/` (`data/pretrain/` in
the pipeline, `data/hand/pretrain/` by hand; `seed` decides the initialisation, data order, masks and dropout, so two
encoders at one seed draw them from the same streams): the model as a plain state
dict + JSON config, its encoder and LM head in Hugging Face's masked-LM layout (`hf/`), the training curve
(`metrics.csv`), `metrics.json` with the held-out perplexity ("LM (ppl)" of Table 6) and its unigram floor, and
`heldout_items.json` (per held-out instance: the model's and the floor's NLL sums and scored positions).
Checkpoints live in `<out_dir>/checkpoints/pretrain/<name>-<seed>-<key>/`, the key hashing everything that changes the result
(the bertlab code, the results-affecting settings, the input files). A rerun after a kill resumes from `last.ckpt`
and ends exactly as the uninterrupted run; a finished, foreign or unreadable `last.ckpt` is never resumed (an
unreadable one is moved aside, named in the log), and the directory is removed once the outputs are written. A
checkpoint is only ever read as tensors and plain data (`weights_only`): one holding anything else, which unpickling
could run as code, or weights of another shape, stops the run in one line and stays where it is.
`pretrain.batch_size` is the global batch: the devices x nodes present and `impl.max_device_batch` decide the
per-device micro-batch and gradient accumulation, which the key never sees (a run resumes on other devices).
A run whose key equals a finished run's under another name (Table 6's 12/768/12 row where a profile gives the size
study `bert`'s budget) copies that run's outputs instead of training, and one whose own outputs are finished with
that key does nothing (`impl.reuse_twins`); `metrics.json` records every output file's sha256 (`files`), and a run
whose files are no longer those bytes (damaged, replaced, deleted) is not reused: it trains again, in one warning
line. A run the profile leaves out (`not_run`, set by the configs stage) writes only a `"status": "not run"`
metrics.json, with why. The objective is what its config says (`objective.data`, `nsp`, `causal`, the masking
shares), its `name` only a name: a new variant is a new conf/objective file.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from bertlab import owner, runs, stage, untrained
from bertlab.errors import UserError
from bertlab.files import require
from bertlab.study import pretrain_name
from bertlab.tracking import one_run_per_job


@stage.main(named_runs=True, run_name=lambda cfg: pretrain_name(cfg.name, cfg.seed),
            reads=("pretrain_data.seed", "name", "impl", "logger"))
def run(cfg: DictConfig) -> bool:
    """Train (or copy a twin's outputs) under the run's claim (`bertlab.owner`: one writer a run); True when this very
    run was finished already, or the profile leaves it out (a "not run" record, with why), and nothing was done. The
    training is `bertlab.training.pretraining`'s, imported only by a run that trains: one that does not starts
    without Lightning."""
    name = pretrain_name(cfg.name, cfg.seed)
    with owner.claim(cfg.out_dir, "pretrain", name, stage.global_rank()):
        if cfg.not_run:
            print(f"{name}: {untrained.run_not_run(cfg)}")
            return True
        return pretrain(cfg)


def pretrain(cfg: DictConfig) -> bool:
    """Train run `cfg` unless it (or a twin) is finished; True when this very run was finished already."""
    inputs = runs.pretrain_inputs(cfg)
    key = runs.pretrain_key(cfg, inputs)
    tokenizer_file, instances_dir = inputs[0], inputs[1].parent
    short_steps = round(cfg.pretrain.short_seq_fraction * cfg.pretrain.max_steps)
    out = runs.pretrain_dir(cfg.out_dir, cfg.name, cfg.seed)
    fields = {"name": out.name, "encoder": cfg.name, "seed": cfg.seed}  # what a copied twin's record takes from this
    if cfg.impl.reuse_twins and (twin := runs.reuse(out, key, fields, stage.global_rank() == 0, depth=2)):
        return twin == out
    from bertlab.training import pretraining  # Lightning and the model: imported by a run that trains, and only then

    with one_run_per_job():
        pretraining.train(cfg, key, tokenizer_file, instances_dir, short_steps)
    return False


if __name__ == "__main__":
    run()

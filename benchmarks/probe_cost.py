"""What a probe cell's cross-validation costs, and which C it picks, at several grids, fold counts and tolerances.

One encoder's frozen last-layer features of a task (as `finetune.mode=probe` extracts them), standardised, then per
setting: `LogisticRegressionCV` over the grid (the folds of `bertlab.training.probe.splits`), the chosen C refitted
to 1e-6, its dev accuracy (CoNLL-2003: per word). Times are the machine's: compare settings within one run.

    python benchmarks/probe_cost.py --data data --encoder bert --task conll2003 [--profile cpu]
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from hydra import compose, initialize_config_dir
from sklearn.linear_model import LogisticRegression, LogisticRegressionCV
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits

from bertlab.files import read_tokenizer
from bertlab.finetune import task_of
from bertlab.modeling.export import load_encoder
from bertlab.stage import CONF_DIR
from bertlab.training import probe
from bertlab.training.cell import task_data
from bertlab.untrained import encoder_dir

DECADES = [1e-4, 1e-3, 1e-2, 0.1, 1.0, 10.0]
SETTINGS = {  # name: (grid, folds, the folds' tolerance)
    "15 values x 5 folds, 1e-6": ([1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 0.01, 0.03, 0.1, 0.3, 1, 3, 10, 30, 100], 5, 1e-6),
    "6 decades x 3 folds, 1e-4": (DECADES, 3, 1e-4),
    "6 decades x 5 folds, 1e-4": (DECADES, 5, 1e-4),
    "6 decades x 3 folds, 1e-6": (DECADES, 3, 1e-6),
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, required=True, help="a data_dir with tokenizer/, download/ and pretrain/")
    p.add_argument("--encoder", required=True)
    p.add_argument("--task", default="conll2003")
    p.add_argument("--profile", default="cpu")
    p.add_argument("--settings", nargs="*", default=list(SETTINGS), choices=list(SETTINGS))
    args = p.parse_args()
    torch.set_num_threads(1)
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose("config", [f"profile={args.profile}", f"data_dir={args.data}", f"task={args.task}",
                                 f"finetune.encoder={args.encoder}", "finetune.mode=probe"])
    tokenizer_file = args.data / "tokenizer" / "tokenizer.json"
    tokenizer = read_tokenizer(tokenizer_file)
    encoder, _, causal = load_encoder(encoder_dir(cfg), 0.0, tokenizer.get_vocab_size(), tokenizer_file)
    task = task_of(cfg)
    data = task_data(cfg, task, tokenizer, encoder.config.max_position_embeddings)
    start = time.perf_counter()
    extract = dict(kind=task.kind, strategy="last", causal=causal, pad_id=data.pad_id, batch_size=64,
                   device=torch.device("cpu"))
    train, dev = (probe.features(encoder, rows, **extract) for rows in (data.train_rows, data.eval_rows[0]))
    print(f"features: train {train.x.shape}, dev {dev.x.shape} in {time.perf_counter() - start:.1f} s", flush=True)
    scaler = StandardScaler().fit(train.x)
    x, x_dev = scaler.transform(train.x), scaler.transform(dev.x)
    for name in args.settings:
        grid, folds, cv_tol = SETTINGS[name]
        start = time.perf_counter()
        with threadpool_limits(limits=1, user_api="blas"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            path = LogisticRegressionCV(Cs=grid, cv=probe.splits(train, folds, 1, task.kind == "tagging"),
                                        scoring=probe.SCORING, l1_ratios=(0.0,), solver="lbfgs", tol=cv_tol,
                                        max_iter=10_000, refit=False, use_legacy_attributes=False).fit(x, train.y)
            losses = -path.scores_[:, 0, :].mean(axis=0)
            best = grid[int(np.argmin(losses))]
            cv_seconds, start = time.perf_counter() - start, time.perf_counter()
            model = LogisticRegression(C=best, l1_ratio=0.0, solver="lbfgs", tol=1e-6, max_iter=10_000).fit(x, train.y)
        print(f"{name}: C {best:g}; cross-validation {cv_seconds:.1f} s ({int(path.n_iter_.sum())} iterations), "
              f"final fit {time.perf_counter() - start:.1f} s ({int(np.max(model.n_iter_))}); dev accuracy "
              f"{(model.predict(x_dev) == dev.y).mean():.4f}; CV log-loss {np.round(losses, 4).tolist()}", flush=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env bash
# The cpu recipe's `bert` and `nonsp` pretrained again at seeds 2 and 3 (the pipeline's runs are seed 1) and fine-tuned
# on Table 5's cpu cells (QNLI and SQuAD seed 1, SST-2 seeds 1 and 2), as hand runs: each the pipeline's own generated
# config (data/configs/) with `seed`, `name` and the encoder changed, written under data/hand/ (the pipeline's outputs
# untouched). Run from the root of a checkout whose `dvc repro` at the cpu profile has finished, the venv active.
# 2026-11-28 on a fresh clone of 8a7f4a1 after its timed run: ~23 minutes a seed on 2 cores.
set -uo pipefail
export HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 WANDB_MODE=offline
for s in 2 3; do
  for enc in bert nonsp; do
    python -m bertlab.pretrain -cd data/configs/pretrain -cn $enc seed=$s name=${enc}_s$s out_dir=data/hand \
      || { echo "error: pretraining ${enc}_s$s failed"; exit 1; }
    for cell in qnli-$enc-finetune-1 squad-$enc-finetune-1 sst2-$enc-finetune-1 sst2-$enc-finetune-2; do
      python -m bertlab.finetune -cd data/configs/finetune -cn $cell finetune.encoder=${enc}_s$s \
        name=${cell/-$enc-/-${enc}_s$s-} out_dir=data/hand || { echo "error: $cell on ${enc}_s$s failed"; exit 1; }
    done
  done
done

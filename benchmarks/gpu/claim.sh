#!/usr/bin/env bash
# One claim of the paper at BERT-base in one call on one GPU (repo root; carry `.whl` and `.gpu`, from pack.sh): the
# stages themselves (`python -m bertlab.pretrain`, `bertlab.finetune`) at a short-run setting of the gpu profile's
# recipe. Pretrain the claim's encoders on the pack (STEPS steps of 256 x 128 each, WARMUP warm-up steps, lr decaying
# to zero at the budget; several at once on the GPU), then fine-tune each on the claim's tasks, one epoch of BERT's
# recipe (the gpu profile: batch 32, lr 2e-5) on SST-2 16,000 examples, CoNLL-2003 all 14,041 sentences, SQuAD
# v1.1 12,000 questions, QNLI 16,000 pairs, seeds 1 and 2, every run at once on the GPU, full dev sets. Back in
# $OUT/claim_<claim>.tar.gz: every encoder's metrics.json and heldout_items.json, every cell's metrics.json and
# items.json (per-item dev predictions), the logs and run.json (claim, device, commit, command, seconds); unpack it
# into reports/gpu/ and commit it: `python benchmarks/gpu/verdicts.py` renders reports/gpu.md from every such run.
#   bash benchmarks/gpu/claim.sh a    pretrained (bert) vs scratch on SST-2, CoNLL-2003, SQuAD, QNLI (~8 min)
#   bash benchmarks/gpu/claim.sh b    NSP (bert) vs no NSP (nonsp) on QNLI, SQuAD, SST-2 (~8.5 min)
#   bash benchmarks/gpu/claim.sh c    MLM (nonsp) vs left-to-right (ltr) on SQuAD, SST-2 (~7.5 min)
# Minutes from the rates measured on an H200 (benchmarks/README.md "On a GPU"): the pretrain stage's eager loop at
# 8.4 steps/s, fine-tuning 1,850 examples/s over 8 runs at once; an H100 may take ~10% longer. Env: STEPS (a: 1400,
# b and c: 1000, each encoder), WARMUP (250), SEEDS ("1 2"), TASKS (the claim's), LIMIT (seconds each phase may take
# before its runs are stopped: 270), EXTRA (overrides for every run; the last value of a key wins), DATA
# (/tmp/bertlab-claim/data), PACKS (pack.sh's folder: .gpu), COMMIT (the commit run.json names: the device's copy
# has no git history). A run that fails or is stopped leaves its cells missing, which the verdicts name.
set -uo pipefail
CLAIM=${1:-}
case "$CLAIM" in
  a) ENCODERS=(bert scratch); DEFAULT_TASKS="sst2 conll2003 squad qnli"; DEFAULT_STEPS=1400 ;;
  b) ENCODERS=(bert nonsp); DEFAULT_TASKS="qnli squad sst2"; DEFAULT_STEPS=1000 ;;
  c) ENCODERS=(nonsp ltr); DEFAULT_TASKS="squad sst2"; DEFAULT_STEPS=1000 ;;
  *) echo "error: claim '$CLAIM': expected a (pretrained vs scratch), b (NSP vs no NSP) or c (MLM vs LTR)"; exit 2 ;;
esac
OUT=${OUT:-/tmp/bertlab-gpu}
STEPS=${STEPS:-$DEFAULT_STEPS}
WARMUP=${WARMUP:-250}   # steps: 203 learned, 80 stayed on the unigram plateau (pilots/gpu_pilot_2026-11-27.md)
SEEDS=${SEEDS:-1 2}
TASKS=${TASKS:-$DEFAULT_TASKS}
LIMIT=${LIMIT:-270}
EXTRA=${EXTRA:-}
DATA=${DATA:-/tmp/bertlab-claim/data}
PACKS=${PACKS:-.gpu}
LOGS=$DATA/logs
mkdir -p "$OUT" "$LOGS"
. benchmarks/gpu/env.sh
python3 -c "import tarfile,sys; [tarfile.open(p).extractall(sys.argv[1]) for p in sys.argv[2:]]" "$DATA" \
  "$PACKS/pack.tar.xz" "$PACKS/tasks.tar.xz" || { echo "error: $PACKS/pack.tar.xz or tasks.tar.xz is missing"; exit 1; }

declare -A OBJECTIVE=([bert]="objective=mlm_nsp" [scratch]="objective=mlm_nsp pretrain.max_steps=0"
                      [nonsp]="objective=mlm" [ltr]="objective=ltr")
declare -A BUDGET=([sst2]=finetune.max_train_examples=16000 [conll2003]=finetune.max_train_examples=null
                   [squad]=finetune.squad_max_train_examples=12000 [qnli]=finetune.max_train_examples=16000)
COMMON=("${PACKED[@]}" "data_dir=$DATA" "out_dir=$DATA" logger=csv impl.devices=1 impl.compile=false
        impl.reuse_twins=false)
stamp "claim $CLAIM: pretrain ${ENCODERS[*]} ($STEPS steps, $WARMUP warm-up) on $(python3 -c \
  "import torch; print(torch.cuda.get_device_name() if torch.cuda.is_available() else 'CPU')")"
pids=()
for encoder in "${ENCODERS[@]}"; do
  timeout "$LIMIT" python3 -m bertlab.pretrain "${COMMON[@]}" name=$encoder \
    pretrain.max_steps=$STEPS pretrain.warmup_steps=$WARMUP pretrain.val_every_steps=$(( (STEPS + 3) / 4 )) \
    pretrain.checkpoint_every_steps=$(( STEPS * 2 )) impl.num_workers=4 ${OBJECTIVE[$encoder]} $EXTRA \
    > "$LOGS/pretrain_$encoder.log" 2>&1 &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done
grep -h "held-out" "$LOGS"/pretrain_*.log

stamp "fine-tune: {${ENCODERS[*]}} x {$TASKS} x seeds {$SEEDS}"
pids=()
for encoder in "${ENCODERS[@]}"; do
  [ -f "$DATA/pretrain/$encoder/metrics.json" ] || { echo "error: $encoder was not pretrained"; continue; }
  for task in $TASKS; do
    for seed in $SEEDS; do
      name=$task-$encoder-$seed
      timeout "$LIMIT" python3 -m bertlab.finetune "${COMMON[@]}" name=$name task=$task finetune.encoder=$encoder \
        seed=$seed impl.num_workers=1 finetune.epochs=1 ${BUDGET[$task]} $EXTRA > "$LOGS/ft_$name.log" 2>&1 &
      pids+=($!)
    done
  done
done
failed=0
for pid in "${pids[@]}"; do wait "$pid" || failed=$((failed + 1)); done
stamp "fine-tuning done, $failed run(s) failed"
for f in "$LOGS"/ft_*.log; do grep -H -E "error|Error" "$f" | tail -n 2; done
python3 - "$DATA/run.json" "$CLAIM" "$STEPS" "$WARMUP" "$TASKS" "$SEEDS" "$EXTRA" "$(( $(date +%s) - started ))" <<'EOF'
import json, os, subprocess, sys, torch
path, claim, steps, warmup, tasks, seeds, extra, seconds = sys.argv[1:]
commit = os.environ.get("COMMIT") or subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                                    text=True).stdout.strip()
json.dump({"claim": claim, "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU",
           "commit": commit or None, "steps": int(steps), "warmup": int(warmup), "tasks": tasks.split(),
           "seeds": [int(s) for s in seeds.split()], "extra": extra, "seconds": int(seconds),
           "command": f"bash benchmarks/gpu/claim.sh {claim}"}, open(path, "w"), indent=1)
EOF
(cd "$DATA" && find run.json pretrain finetune logs -maxdepth 2 \( -name run.json -o -name metrics.json \
  -o -name '*items.json' -o -name '*.log' \) | tar -czf "$OUT/claim_$CLAIM.tar.gz" -T -)
python3 benchmarks/gpu/verdicts.py --runs "$DATA" --claim "$CLAIM"
stamp "end"

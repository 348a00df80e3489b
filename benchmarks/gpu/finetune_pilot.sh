#!/usr/bin/env bash
# Pretrained vs scratch at BERT-base on one GPU, in one call (repo root; carry `.whl` and `.gpu`): pretrain `bert`
# with the gpu profile's recipe for STEPS steps of 256 x 128 on the pack, build `scratch` (never trained, the same
# architecture), then fine-tune both on SST-2 (16,000 examples), CoNLL-2003 (all 14,041 sentences) and SQuAD v1.1
# (16,000 questions), one epoch of BERT's recipe (the gpu profile: batch 32, lr 2e-5), seeds 1 and 2, every run in
# parallel on the GPU, full dev sets. Each run's metrics.json and items.json come back in $OUT/finetune.tar.gz for the
# paired verdicts (benchmarks/gpu/verdicts.py). .gpu/tasks.tar.xz holds the tasks as the download stage saves them.
#   bash benchmarks/gpu/finetune_pilot.sh    STEPS (1600), WARMUP (250), LIMIT (250 s a phase), TASKS (all three);
#                                            EXTRA="..." adds overrides to every run (the last value of a key wins)
set -uo pipefail
OUT=${OUT:-/tmp/bertlab-gpu}
STEPS=${STEPS:-1600}
LIMIT=${LIMIT:-250}     # seconds each phase (pretraining, fine-tuning) may take before its runs are stopped
TASKS=${TASKS:-sst2 conll2003 squad}
WARMUP=${WARMUP:-250}   # steps: 203 learned, 80 stayed on the unigram plateau (pilots/gpu_pilot_2026-11-27.md)
EXTRA=${EXTRA:-}
DATA=${DATA:-/tmp/bertlab-ft/data}
LOGS=$DATA/logs_pilot   # every run's log, in the tarball ($OUT brings back at most 8 files)
mkdir -p "$OUT" "$LOGS"
. benchmarks/gpu/env.sh
python3 -c "import tarfile,sys; [tarfile.open(p).extractall(sys.argv[1]) for p in sys.argv[2:]]" "$DATA" \
  .gpu/pack.tar.xz .gpu/tasks.tar.xz || { echo "error: .gpu/pack.tar.xz or .gpu/tasks.tar.xz is missing"; exit 1; }

COMMON=("${PACKED[@]}" "data_dir=$DATA" "out_dir=$DATA" logger=csv impl.devices=1 impl.compile=false
        impl.reuse_twins=false)
stamp "pretrain bert ($STEPS steps) and scratch"
timeout $LIMIT python3 -m bertlab.pretrain "${COMMON[@]}" name=bert impl.num_workers=4 pretrain.max_steps=$STEPS \
  pretrain.warmup_steps=$WARMUP pretrain.val_every_steps=$(( STEPS / 4 )) \
  pretrain.checkpoint_every_steps=$(( STEPS * 2 )) $EXTRA > "$LOGS/pretrain_bert.log" 2>&1 &
bert=$!
python3 -m bertlab.pretrain "${COMMON[@]}" name=scratch impl.num_workers=0 pretrain.max_steps=0 $EXTRA \
  > "$LOGS/pretrain_scratch.log" 2>&1
wait $bert || { echo "error: pretraining bert failed"; tail -n 20 "$LOGS/pretrain_bert.log"; exit 1; }
grep "held-out" "$LOGS/pretrain_bert.log"

stamp "fine-tune: {bert, scratch} x {$TASKS} x seeds {1, 2}"
declare -A BUDGET=([sst2]=finetune.max_train_examples=16000 [conll2003]=finetune.max_train_examples=null
                   [squad]=finetune.squad_max_train_examples=16000)
pids=()
for encoder in bert scratch; do
  for task in $TASKS; do
    for seed in 1 2; do
      name=$task-$encoder-$seed
      timeout $LIMIT python3 -m bertlab.finetune "${COMMON[@]}" name=$name task=$task finetune.encoder=$encoder \
        seed=$seed \
        impl.num_workers=1 finetune.epochs=1 ${BUDGET[$task]} $EXTRA > "$LOGS/ft_$name.log" 2>&1 &
      pids+=($!)
    done
  done
done
failed=0
for pid in "${pids[@]}"; do wait "$pid" || failed=$((failed + 1)); done
stamp "fine-tuning done, $failed run(s) failed"
(cd "$DATA" && find finetune pretrain logs_pilot -maxdepth 2 \( -name metrics.json -o -name '*items.json' \
  -o -name metrics.csv -o -name '*.log' \) | tar -czf "$OUT/finetune.tar.gz" -T -)
for f in "$LOGS"/ft_*.log; do grep -H -E "error|Error" "$f" | tail -n 2; done
python3 benchmarks/gpu/verdicts.py "$DATA" "$OUT/verdicts.csv"
stamp "end"

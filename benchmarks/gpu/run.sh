#!/usr/bin/env bash
# One call on a GPU machine (repo root; see benchmarks/README.md "On a GPU"): the GPU tests, the pretraining
# throughput at BERT-base against transformers, and a time-boxed BERT-base pretraining pilot on the pack that
# benchmarks/gpu/pack.sh builds. Carry `.whl` (wheels the image lacks) and `.gpu` (the pack). Logs and results go
# to $OUT (default /tmp/bertlab-gpu); the last lines printed are the summary.
#   bash benchmarks/gpu/run.sh [pilot_seconds]
set -uo pipefail
OUT=${OUT:-/tmp/bertlab-gpu}
PILOT_SECONDS=${1:-280}
mkdir -p "$OUT"
. benchmarks/gpu/env.sh
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$OUT/env.txt"
python3 - <<'EOF' 2>&1 | tee -a "$OUT/env.txt"
import importlib, torch
print("cuda", torch.cuda.is_available(), torch.cuda.get_device_name() if torch.cuda.is_available() else "-")
for name in ("torch", "lightning", "transformers", "tokenizers", "datasets", "hydra", "omegaconf", "seqeval"):
    try:
        print(name, getattr(importlib.import_module(name), "__version__", "?"))
    except Exception as e:  # noqa: BLE001 - a report line, not a failure
        print(name, "IMPORT FAILED:", repr(e)[:200])
EOF
PILOT=/tmp/bertlab-pilot
if [ -f .gpu/pack.tar.xz ]; then
  (mkdir -p $PILOT/data && python3 -c "import tarfile,sys; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" \
    .gpu/pack.tar.xz $PILOT/data && echo unpacked > $PILOT/unpacked) &
fi

stamp "throughput: BERT-base, 256 x 128, vocabulary 30522, bf16"
timeout 170 python3 benchmarks/pretrain_throughput.py --device cuda --compile --layers 12 --hidden 768 --heads 12 \
  --intermediate 3072 --vocab 30522 --batch 256 --seq 128 --warmup 4 --rounds 8 --threads 8 2>&1 \
  | grep -v -E "^W[0-9]{4}|^\s*$" | tee "$OUT/throughput.txt"

# eager bertlab tokens/s from the benchmark sets the pilot's steps (its schedule must end at its budget)
tps=$(awk '/^bertlab \(fused AdamW\)/ {print $5}' "$OUT/throughput.txt")
tps=${tps:-200000}
steps=$(python3 -c "print(max(40, int($tps * 0.7 * ($PILOT_SECONDS - 75) / 32768) // 8 * 8))")
stamp "pilot: $steps steps of 256 x 128 (eager benchmark $tps tokens/s) beside the GPU tests"
wait  # the pack
pilot_pid=
if [ -f $PILOT/unpacked ]; then
  timeout "$PILOT_SECONDS" python3 -m bertlab.pretrain "${PACKED[@]}" data_dir=$PILOT/data out_dir=$PILOT/data \
    name=bert logger=csv impl.devices=1 impl.compile=false impl.num_workers=4 impl.reuse_twins=false \
    pretrain.max_steps=$steps pretrain.warmup_steps=$(( steps / 10 )) pretrain.val_every_steps=$(( steps / 8 )) \
    pretrain.checkpoint_every_steps=$(( steps * 2 )) > "$OUT/pilot.log" 2>&1 &
  pilot_pid=$!
else
  echo "no pack (.gpu/pack.tar.xz): pilot skipped" | tee "$OUT/pilot.log"
fi

timeout 300 python3 -m pytest tests/gpu -m gpu -p no:cacheprovider -n 6 -q -rA 2>&1 \
  | grep -v -E "^W[0-9]{4}" > "$OUT/gpu_tests.txt"
stamp "GPU tests done"
[ -n "$pilot_pid" ] && wait $pilot_pid
echo "pilot exit $?" >> "$OUT/pilot.log"
stamp "pilot done"
# the run's records wherever they are (a run stopped by its timeout leaves its curve in the checkpoint dir)
(cd $PILOT/data 2>/dev/null && find . \( -name 'metrics.*' -o -name '*.json' -o -name '*.csv' \) \
  -not -path './hydra/*' -not -path './pretrain_data/*' -not -path './tokenizer/*' -size -20M \
  | tar -czf "$OUT/pilot.tar.gz" -T -)

echo "==================== summary"
cat "$OUT/env.txt"
grep -E "runner|bertlab|transformers|device|torch.mm" "$OUT/throughput.txt"
tail -n 25 "$OUT/gpu_tests.txt"
grep -E "held-out|batch_size|error|Error|pilot exit" "$OUT/pilot.log" | tail -n 15
stamp "end"

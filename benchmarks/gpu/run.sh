#!/usr/bin/env bash
# One call on a GPU machine (repo root; see benchmarks/README.md "On a GPU"): the pretraining step's throughput at the
# gpu profile's recipe on the pack's own batches (bertlab eager and compiled against transformers eager and compiled:
# benchmarks/pretrain_throughput.py --profile gpu), where its time goes (benchmarks/step_profile.py: kernels by kind,
# the GPU's busy share), then the pretrain stage's own loop at that recipe, compiled and
# alone on the GPU (STEPS steps on the pack: its metrics.json `throughput`, the ledger's non-padding tokens/s and MFU,
# set beside the benchmark's runners), then the GPU tests (TESTS=0 skips them). Carry `.whl` (wheels the image lacks)
# and `.gpu` (pack.sh's pack). Logs and results go to $OUT (default /tmp/bertlab-gpu); the last lines printed are the
# summary. About 10 minutes on an H200 (the compiles ~1 min each; TESTS=0: 234 s without the profile, 2026-11-28).
#   bash benchmarks/gpu/run.sh [steps]      (default 600)
set -uo pipefail
OUT=${OUT:-/tmp/bertlab-gpu}
STEPS=${1:-600}
TESTS=${TESTS:-1}
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
mkdir -p $PILOT/data
unpack $PILOT/data .gpu/pack.tar.xz

stamp "throughput at the gpu profile's recipe on the pack's batches: bertlab and transformers, eager and compiled"
timeout 240 python3 benchmarks/pretrain_throughput.py --profile gpu --data $PILOT/data --device cuda --compile \
  --warmup 4 --rounds 8 --threads 8 --json "$OUT/throughput.json" 2>&1 | grep -v -E "^W[0-9]{4}|^\s*$" \
  | tee "$OUT/throughput.txt"

DATA=$PILOT/data TIMEOUT=200 bash benchmarks/gpu/profile.sh

stamp "the pretrain stage's loop: $STEPS steps of 256 x 128, compiled, alone on the GPU"
timeout 240 python3 -m bertlab.pretrain "${PACKED[@]}" data_dir=$PILOT/data out_dir=$PILOT/data name=bert \
  logger=csv impl.devices=1 impl.reuse_twins=false pretrain.max_steps=$STEPS \
  pretrain.warmup_steps=$(( STEPS / 10 )) pretrain.val_every_steps=$STEPS \
  pretrain.checkpoint_every_steps=$(( STEPS * 2 )) > "$OUT/pilot.log" 2>&1
echo "pilot exit $?" >> "$OUT/pilot.log"
python3 - "$PILOT/data/pretrain/bert/metrics.json" "$OUT/throughput.json" <<'EOF' 2>&1 | tee "$OUT/stage.txt"
import json, sys
rate = json.load(open(sys.argv[1]))["throughput"]
print("the stage's loop:", json.dumps(rate))
for name, runner in json.load(open(sys.argv[2]))["runners"].items():
    print(f"stage / {name}: {rate['tokens_per_second'] / runner['tokens_per_second']:.2f}x (non-padding tokens/s)")
EOF
# the run's records (a run stopped by its timeout leaves its curve in the checkpoint dir)
(cd $PILOT/data && find . \( -name 'metrics.*' -o -name '*.json' -o -name '*.csv' \) -not -path './hydra/*' \
  -not -path './pretrain_data/*' -not -path './tokenizer/*' -size -20M | tar -czf "$OUT/pilot.tar.gz" -T -)

if [ "$TESTS" = 1 ]; then
  stamp "GPU tests"
  timeout 240 python3 -m pytest tests/gpu -m gpu -p no:cacheprovider -n 6 -q -rA 2>&1 \
    | grep -v -E "^W[0-9]{4}" > "$OUT/gpu_tests.txt"
fi

echo "==================== summary"
cat "$OUT/env.txt"
grep -E "recipe|runner|bertlab|transformers|device|torch.mm" "$OUT/throughput.txt"
cat "$OUT/stage.txt"
grep -E "held-out|error|Error|pilot exit" "$OUT/pilot.log" | tail -n 10
[ -f "$OUT/gpu_tests.txt" ] && tail -n 25 "$OUT/gpu_tests.txt"
stamp "end"

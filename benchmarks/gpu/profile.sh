#!/usr/bin/env bash
# Where the pretraining step's time goes at the gpu profile's recipe, in one short call on a GPU machine (repo root;
# carry `.whl` and `.gpu`): benchmarks/step_profile.py over bertlab's step, eager and compiled, and transformers'
# compiled, on the pack's own batches; the profile in $OUT/profile.txt. It reads the data of a claim.sh call made
# before it on the same warm machine (DATA, default /tmp/bertlab-claim/data) and unpacks .gpu/pack.tar.xz there only
# where that is missing. run.sh runs it as its second step. Arguments go to step_profile.py (a CPU dry run:
# DEVICE=cpu and a tiny shape through --set).
#   bash benchmarks/gpu/profile.sh [step_profile.py's options]
# 110 s on an H200 (lease 3, 2026-11-28).
set -uo pipefail
OUT=${OUT:-/tmp/bertlab-gpu}
DATA=${DATA:-/tmp/bertlab-claim/data}
mkdir -p "$OUT" "$DATA"
. benchmarks/gpu/env.sh
if [ ! -d "$DATA/pretrain_data/train_nsp" ]; then
  stamp "unpacking .gpu/pack.tar.xz into $DATA"
  unpack "$DATA" .gpu/pack.tar.xz
fi
stamp "where the step's time goes: torch.profiler over bertlab's step, eager and compiled, and transformers compiled"
timeout "${TIMEOUT:-240}" python3 benchmarks/step_profile.py --profile gpu --data "$DATA" --device "${DEVICE:-cuda}" \
  --transformers --out "$OUT/profile.txt" "$@" 2>&1 \
  | grep -v -E "^W[0-9]{4}|^\s*$|USDT|warnings.warn|Online softmax|split the reduction|important use case|^softmax\.$"
status=${PIPESTATUS[0]}
stamp "end (step_profile.py exit $status)"
exit "$status"

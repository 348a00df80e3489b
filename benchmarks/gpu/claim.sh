#!/usr/bin/env bash
# One claim of the paper at BERT-base in one call on one GPU (repo root; carry `.whl` and `.gpu`, from wheels.sh and
# pack.sh; claims b and c need pack.sh's default FORMATS, a, d and e only `nsp`): the
# machine set up (env.sh), pack.sh's pack unpacked, then benchmarks/gpu/claim.py (what it runs: its docstring). Back in
# $OUT/claim_<claim>.tar.gz: unpack it into reports/gpu/<date>-<claim>/ and commit it; `python
# benchmarks/gpu/verdicts.py` renders reports/gpu.md from every such run.
#   bash benchmarks/gpu/claim.sh a    pretrained (bert) vs scratch on SST-2, CoNLL-2003, SQuAD, QNLI (408 s, H200)
#   bash benchmarks/gpu/claim.sh b    NSP (bert) vs no NSP (nonsp) on QNLI, SQuAD, SST-2 (451 s, H200)
#   bash benchmarks/gpu/claim.sh c    MLM (nonsp) vs left-to-right (ltr) on SQuAD, SST-2 (~7.5 min)
#   bash benchmarks/gpu/claim.sh d    Table 7 on `bert`: fine-tuning, six frozen-feature strategies, CoNLL-2003 (~6 min)
#   bash benchmarks/gpu/claim.sh e    Table 6's depths 3, 6, 12 x 768, equal tokens: held-out ppl, SST-2, MRPC (~8 min)
#   ENCODERS=scratch BASE=2026-11-28-a EXTRA=finetune.lr=1e-4 bash benchmarks/gpu/claim.sh a
#                                     claim a's scratch side again at 5x BERT's lr, against a's `bert` (144 s)
#   PRETRAIN_SEEDS="1 2 3" bash benchmarks/gpu/claim.sh b
#                                     claim b over 3 pretraining runs an encoder (bert-1..3, nonsp-1..3, 36 cells):
#                                     the next lease's first call. Estimated, not measured: by the rates below 6 x
#                                     1,000 steps (714 s) and 528,000 fine-tuning examples (285 s), ~1,000 s; the same
#                                     rates give 333 s of b's measured 451 s at one run an encoder, so ~17-23 min:
#                                     past the DEADLINE at STEPS=1000 (STEPS=300 SEEDS=1: ~360-480 s, estimated)
# Minutes from the rates measured on an H200 (benchmarks/README.md "On a GPU"): the pretrain stage's eager loop at
# 8.4 steps/s for 12 layers, fine-tuning 1,850 examples/s over 8 runs at once; an H100 may take ~10% longer. Env: STEPS
# (a and d: 1400, b, c and e: 1000, each pretraining run), WARMUP (250), PRETRAIN_SEEDS ("1": each encoder's
# pretraining runs `<encoder>-<seed>`, all at once), SEEDS ("1 2": fine-tuning, on every pretraining run), TASKS (the
# claim's), ENCODERS (some of the claim's, with BASE: the committed run of reports/gpu/ whose cells of the others
# decide it with them), DEADLINE (seconds after the call began at which every run still going is stopped: 540, inside
# a 600 s call), EXTRA (overrides for every run; the last value of a key wins), DATA (/tmp/bertlab-claim/data), PACKS
# (pack.sh's folder: .gpu), COMMIT (the commit run.json names: the device's copy has no git history), OUT
# (/tmp/bertlab-gpu).
set -uo pipefail
# Each call from the pack alone: the default DATA is emptied first (an earlier call's runs on this warm machine are
# in its tarball); claim.py refuses a DATA that holds runs.
[ -n "${DATA:-}" ] || { DATA=/tmp/bertlab-claim/data; rm -rf "$DATA"; }
PACKS=${PACKS:-.gpu}
. benchmarks/gpu/env.sh
unpack "$DATA" "$PACKS/pack.tar.xz" "$PACKS/tasks.tar.xz"
STARTED=$started exec python3 benchmarks/gpu/claim.py "$@" --data "$DATA" --out "${OUT:-/tmp/bertlab-gpu}" \
  --steps "${STEPS:-0}" --warmup "${WARMUP:-250}" --pretrain-seeds ${PRETRAIN_SEEDS:-1} --seeds ${SEEDS:-1 2} \
  ${TASKS:+--tasks $TASKS} ${ENCODERS:+--encoders $ENCODERS} ${BASE:+--base "$BASE"} \
  --deadline "${DEADLINE:-540}" --packed "${PACKED[@]}" --extra ${EXTRA:-} --commit "${COMMIT:-}"

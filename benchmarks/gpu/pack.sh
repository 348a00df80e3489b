#!/usr/bin/env bash
# The data of the BERT-base runs (benchmarks/gpu/run.sh, claim.sh) for a GPU machine that reaches neither the hub
# nor ../shared/data: the stages download (the corpus, SST-2, CoNLL-2003, SQuAD, QNLI, MRPC), tokenizer and
# pretrain_data at the `gpu` profile on about 100M characters of the mirror's corpus, one pass (dupe_factor 1); then
# .gpu/pack.tar.xz with what `bertlab.pretrain` reads for every objective (tokenizer/ and, of pretrain_data/,
# train_nsp/, heldout_nsp/, train_packed/, heldout_packed/, unigram_counts.npy, stats.json) and .gpu/tasks.tar.xz with
# the five tasks and the download manifest, paths relative to the data dir. xz, not zstd: the scripts unpack with
# Python's tarfile, which reads zstd only from Python 3.14, and the GPU image need not have a zstd binary. `.gpu/` is
# kept out of git through .git/info/exclude.
#   bash benchmarks/gpu/pack.sh [data_dir]     (repo root, the project's venv active; default /tmp/bertlab-gpupack/data)
# Env: BERTLAB_DATA_MIRROR (default ../shared/data), MAX_CHARS (corpus.max_chars, default 100_000_000),
#      PACK (the tarball's path, default .gpu/pack.tar.xz; tasks.tar.xz goes beside it), FORMATS ("nsp packed"; claim
#      a, d and e need nsp alone). About 5 minutes on 2 cores; at the default 100M characters: pack 29.7 MiB with
#      both formats (23.2 MiB nsp alone), tasks 10.9 MiB; at 3M: pack 0.9 MiB.
set -euo pipefail

DATA=${1:-/tmp/bertlab-gpupack/data}
MAX_CHARS=${MAX_CHARS:-100_000_000}
[ -f pyproject.toml ] && [ -d src/bertlab ] || { echo "error: run from the repo root" >&2; exit 2; }
export BERTLAB_DATA_MIRROR=${BERTLAB_DATA_MIRROR:-$(cd .. && pwd)/shared/data}
[ -d "$BERTLAB_DATA_MIRROR" ] || { echo "error: no mirror at $BERTLAB_DATA_MIRROR (BERTLAB_DATA_MIRROR)" >&2; exit 2; }
export HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 WANDB_MODE=offline PYTHONUNBUFFERED=1
PACK=${PACK:-.gpu/pack.tar.xz}
FORMATS=${FORMATS:-nsp packed}   # the instance formats packed: nsp (bert, scratch), packed (nonsp, ltr)

# The pretraining corpus and the claims' five tasks: every other task of conf/download/default.yaml removed.
NO_TASKS=()
for task in cola qqp stsb mnli rte wnli; do NO_TASKS+=("~download.tasks.$task"); done
OVERRIDES=(profile=gpu "corpus.max_chars=$MAX_CHARS" pretrain_data.dupe_factor=1 tokenizer.vocab_size=30522
           impl.data_processes=2 impl.num_workers=0 logger=none "${NO_TASKS[@]}")

mkdir -p "$DATA"
echo "data dir $DATA; mirror $BERTLAB_DATA_MIRROR; overrides: ${OVERRIDES[*]}"
for stage in download tokenizer pretrain_data; do
  began=$EPOCHREALTIME
  python -m "bertlab.$stage" "data_dir=$DATA" "${OVERRIDES[@]}"
  awk -v s="$stage" -v a="$began" -v b="$EPOCHREALTIME" 'BEGIN {printf "== %s: %.1f s wall\n", s, b - a}'
done

FILES=(tokenizer pretrain_data/unigram_counts.npy pretrain_data/stats.json)
for format in $FORMATS; do FILES+=(pretrain_data/train_$format pretrain_data/heldout_$format); done
for f in "${FILES[@]}"; do [ -e "$DATA/$f" ] || { echo "error: $DATA/$f is missing" >&2; exit 1; }; done
mkdir -p "$(dirname "$PACK")"
if [ "$(dirname "$PACK")" = .gpu ]; then  # kept out of git
  exclude=$(git rev-parse --git-path info/exclude)
  mkdir -p "$(dirname "$exclude")"
  grep -qxF '/.gpu/' "$exclude" 2>/dev/null || echo '/.gpu/' >> "$exclude"
fi
began=$EPOCHREALTIME
# The formats' token ids first and side by side, so that xz (64 MiB window) finds one format's sentences in the
# other's: nsp and packed together 30 MB, not 46 (the 64 MiB a call carries holds them with the tasks and the repo).
IDS=()
for format in $FORMATS; do IDS+=("pretrain_data/train_$format/input_ids.npy"); done
(cd "$DATA" && printf '%s\n' "${IDS[@]}" && find "${FILES[@]}" -type f | LC_ALL=C sort | grep -vxF "${IDS[@]/#/-e}") \
  | tar -C "$DATA" --owner=0 --group=0 --numeric-owner --no-recursion -T - -cf - | xz -T2 -9e > "$PACK.tmp"
mv "$PACK.tmp" "$PACK"
awk -v a="$began" -v b="$EPOCHREALTIME" 'BEGIN {printf "== pack: %.1f s wall\n", b - a}'
# SST-2, CoNLL-2003, SQuAD, QNLI and MRPC as the download stage saves them, and its manifest, for claim.sh
tar -C "$DATA" --sort=name --owner=0 --group=0 --numeric-owner -cf - download/manifest.json download/tasks/sst2 \
  download/tasks/conll2003 download/tasks/squad download/tasks/qnli download/tasks/mrpc \
  | xz -T2 -9e > "$(dirname "$PACK")/tasks.tar.xz"
python - "$DATA/pretrain_data/stats.json" <<'EOF'
import json, sys
stats = json.load(open(sys.argv[1]))
print("train_tokens", stats["train_tokens"], "instances", stats["instances"], "documents", stats["documents"])
EOF
du -sh "${FILES[@]/#/$DATA/}"
for f in "$PACK" "$(dirname "$PACK")/tasks.tar.xz"; do
  awk -v p="$f" -v n="$(stat -c %s "$f")" 'BEGIN {printf "%s: %.1f MiB (%d bytes)\n", p, n / 1048576, n}'
done

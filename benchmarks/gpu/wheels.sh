#!/usr/bin/env bash
# The Python packages bertlab needs that the GPU machine's image lacks (.library/device/KINDS.md lists what it has),
# as wheels for its Python 3.12 in .whl/ (kept out of git through .git/info/exclude); env.sh installs them there.
# Carry `.whl` with `.gpu` (pack.sh). The versions that ran on an H200 on 2026-11-28 (claim a, run.sh). ~1.3 MiB.
#   bash benchmarks/gpu/wheels.sh      (repo root, the project's venv active: pip reaches the registry)
set -euo pipefail
[ -f pyproject.toml ] && [ -d src/bertlab ] || { echo "error: run from the repo root" >&2; exit 2; }
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p .whl "$(dirname "$exclude")"
grep -qxF '/.whl/' "$exclude" 2>/dev/null || echo '/.whl/' >> "$exclude"
python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
  hydra-core==1.3.8 omegaconf==2.3.1 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19
python -m pip wheel -q --no-deps -w .whl antlr4-python3-runtime==4.9.3 seqeval==1.2.2  # sdists only: pure Python
ls .whl

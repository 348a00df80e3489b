# Sourced by run.sh and claim.sh on the GPU machine: offline settings, a timer (`stamp`), the carried wheels
# (.whl: what the image lacks) installed, bertlab on PYTHONPATH, and the settings pack.sh built .gpu's data with.
export HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 WANDB_MODE=offline PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
started=$(date +%s)
stamp() { echo "== $(( $(date +%s) - started )) s: $*"; }
# unpack DIR TARBALL...: pack.sh's tarballs into DIR with Python's tarfile (pack.sh says why), or stop
unpack() {
  python3 -c "import tarfile,sys; [tarfile.open(p).extractall(sys.argv[1]) for p in sys.argv[2:]]" "$@" \
    || { echo "error: ${*:2} missing or unreadable (bash benchmarks/gpu/pack.sh)"; exit 1; }
}
# Only where the Python lacks them: a CPU dry run in the project's venv (Python 3.11) has them, and the 3.12 wheels
# would not install there.
if compgen -G ".whl/*.whl" >/dev/null && ! python3 -c "import hydra, omegaconf, datasets, seqeval" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "error: the carried wheels did not install"; exit 1; }
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=$PWD/src:$PWD${PYTHONPATH:+:$PYTHONPATH}
PACKED=(profile=gpu corpus.max_chars=100000000 pretrain_data.dupe_factor=1)  # the gpu profile's recipe on the pack

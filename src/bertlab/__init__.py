"""bertlab: BERT pretraining, fine-tuning and the paper's ablations, end to end."""

import os

# Speed only, and it must precede `import torch`: idle OpenMP threads sleep instead of spinning, which keeps
# a step from slowing 2x+ when anything else shares the cores (measured: benchmarks/README.md).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

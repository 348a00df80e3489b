"""bertlab: BERT pretraining, fine-tuning and the paper's ablations, end to end."""

import os

# Speed only, and it must precede `import torch`: idle OpenMP threads sleep instead of spinning, which keeps
# a step from slowing 2x+ when anything else shares the cores (measured: benchmarks/README.md).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from omegaconf import OmegaConf  # noqa: E402  (after the environment above)


def _data_mirror() -> str | None:
    from bertlab.local import mirror_setting  # here, not at import: `python -m bertlab.local` runs it as __main__

    return mirror_setting()[0]


# conf/config.yaml's `mirror`: the data source set once (`python -m bertlab.local`) or for one command
OmegaConf.register_new_resolver("data_mirror", _data_mirror, replace=True)

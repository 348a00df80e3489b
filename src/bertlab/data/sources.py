"""Load a dataset split by hub id, from the Hugging Face hub or from a local mirror of it.

A mirror is a directory laid out as the hub's parquet conversion: `<root>/<hub_id>/<config>/<split>-*.parquet`.
"""

from __future__ import annotations

from pathlib import Path

import datasets
import pyarrow.parquet as pq

from bertlab.errors import SourceError, UnreadableFile
from bertlab.local import MIRROR_ENV


def split_key(hub_id: str, config: str, split: str) -> str:
    """The name of a split as it appears in messages and manifests: `hub_id/config/split`."""
    return f"{hub_id}/{config}/{split}"


def mirror_files(root: str | Path, hub_id: str, config: str, split: str) -> list[Path]:
    """The parquet shards of one split in a mirror (empty when the mirror lacks it)."""
    return sorted((Path(root) / hub_id / config).glob(f"{split}-*.parquet"))


def mirror_contents(root: str | Path) -> list[str]:
    """Every `hub_id/config/split` a mirror holds."""
    found = {
        split_key(str(p.parent.parent.relative_to(root)), p.parent.name, p.name.split("-")[0])
        for p in Path(root).glob("**/*.parquet")
    }
    return sorted(found)


def load_split(hub_id: str, config: str, split: str, mirror: str | Path | None = None,
               cache_dir: str | Path | None = None) -> datasets.Dataset:
    """One split of a dataset: read from `mirror` when given, else fetched from the hub by id (into the Hugging Face
    cache, one copy of each hub file). `cache_dir`: where `datasets` writes its arrow copy of a mirror's files (by
    default its own cache, a copy per mirror path that nothing removes).

    Raises SourceError (one line) when the mirror lacks the split or the hub cannot be reached.
    """
    key = split_key(hub_id, config, split)
    if mirror is not None:
        if not Path(mirror).is_dir():
            raise SourceError(f"data mirror {mirror} is not a directory (set a local copy: python -m bertlab.local "
                              f"mirror=<folder>, or {MIRROR_ENV} or mirror=... for one command)")
        files = mirror_files(mirror, hub_id, config, split)
        if not files:
            raise SourceError(f"{key} is not in the mirror {mirror}; {_nearest(mirror_contents(mirror), hub_id, config)}")
        rows = 0
        for f in files:  # the footer names the file that is broken, which `datasets` would not
            try:
                rows += pq.read_metadata(f).num_rows
            except Exception as err:  # pyarrow raises ArrowInvalid, OSError, ...
                raise UnreadableFile(f"{f} is not a readable parquet file ({_first_line(err)}): copy it again") from err
        if rows == 0:  # `datasets` would call that unreadable
            raise UnreadableFile(f"{', '.join(map(str, files))}: {key} has no rows in the mirror {mirror}")
        try:
            return datasets.load_dataset("parquet", data_files=[str(f) for f in files], split="train",
                                         cache_dir=None if cache_dir is None else str(cache_dir))
        except Exception as err:
            raise UnreadableFile(f"{key}: cannot read {', '.join(map(str, files))} ({_first_line(err)})") from err
    try:
        return datasets.load_dataset(hub_id, config, split=split)
    except Exception as err:  # datasets raises many types for "offline", "not found", "no such split"
        raise hub_error(key, err) from err


def hub_error(key: str, err: BaseException) -> SourceError:
    """The one-line error for split `key` that the hub could not give (loaded or streamed)."""
    return SourceError(f"cannot load {key} from the Hugging Face hub ({_first_line(err)}); "
                       "without network, set a local copy: python -m bertlab.local mirror=<folder> "
                       f"(or {MIRROR_ENV})")


def _first_line(err: BaseException) -> str:
    return str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__


def _nearest(held: list[str], hub_id: str, config: str) -> str:
    """What a mirror holds closest to `hub_id/config`: its splits, else the dataset's configs, else the datasets."""
    parts = [k.rsplit("/", 2) for k in held]  # [hub_id, config, split]
    splits = [s for h, c, s in parts if (h, c) == (hub_id, config)]
    configs = sorted({c for h, c, _ in parts if h == hub_id})
    if splits:
        return f"of {hub_id}/{config} it holds the splits {', '.join(splits)}"
    if configs:
        return f"of {hub_id} it holds the configs {', '.join(configs)}"
    return "it holds " + (", ".join(sorted({h for h, _, _ in parts})) or "nothing")


from pathlib import Path

import pytest

from bertlab.data.sources import MIRROR_ENV, load_split, mirror_contents
from bertlab.errors import SourceError


def test_mirror_split_loads_by_hub_id(mirror: Path) -> None:
    ds = load_split("nyu-mll/glue", "mrpc", "validation", mirror)
    assert len(ds) == 32
    assert set(ds.column_names) == {"sentence1", "sentence2", "label", "idx"}


def test_mirror_contents_lists_every_split(mirror: Path) -> None:
    held = mirror_contents(mirror)
    assert "nyu-mll/glue/sst2/train" in held and "bertlab/wiki-text/default/train" in held
    assert len(held) == 6


def test_missing_split_names_it_and_what_the_mirror_holds(mirror: Path) -> None:
    with pytest.raises(SourceError) as err:
        load_split("nyu-mll/glue", "mnli", "validation_matched", mirror)
    msg = str(err.value)
    assert "nyu-mll/glue/mnli/validation_matched is not in the mirror" in msg
    assert msg.endswith("of nyu-mll/glue it holds the configs mrpc, sst2")
    assert "\n" not in msg


def test_missing_split_lists_the_splits_of_its_config(mirror: Path) -> None:
    with pytest.raises(SourceError, match="of nyu-mll/glue/sst2 it holds the splits train, validation$"):
        load_split("nyu-mll/glue", "sst2", "test", mirror)


def test_missing_dataset_lists_the_hub_ids_the_mirror_holds(mirror: Path) -> None:
    with pytest.raises(SourceError, match="it holds bertlab/gutenberg-books, bertlab/wiki-text, nyu-mll/glue$"):
        load_split("rajpurkar/squad", "plain_text", "train", mirror)


def test_mirror_that_is_not_a_directory(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match=MIRROR_ENV):
        load_split("nyu-mll/glue", "sst2", "train", tmp_path / "absent")


def test_hub_unreachable_fails_with_the_env_var_named() -> None:
    # conftest sets HF_DATASETS_OFFLINE=1: the hub is unreachable, as on our machines.
    with pytest.raises(SourceError) as err:
        load_split("nyu-mll/glue", "sst2", "train", None)
    assert MIRROR_ENV in str(err.value) and "\n" not in str(err.value)


def test_a_hub_corpus_is_streamed_to_disk_a_batch_at_a_time(mirror: Path, tmp_path: Path, monkeypatch) -> None:
    """The hub path of `download`: every source asked for as a stream (here served from the mirror's files)."""
    import datasets
    from omegaconf import OmegaConf

    import bertlab.download as download
    from bertlab.data.sources import mirror_files

    load, asked = datasets.load_dataset, []

    def hub(hub_id: str, config: str | None = None, split: str = "train", streaming: bool = False, **kwargs):
        if hub_id == "parquet":  # the streamed file read back
            return load(hub_id, split=split, **kwargs)
        asked.append((hub_id, streaming))
        files = [str(f) for f in mirror_files(mirror, hub_id, config, split)]
        return load("parquet", data_files=files, split="train", streaming=streaming)

    sources = OmegaConf.create([{"hub_id": "bertlab/wiki-text", "config": "default", "split": "train", "text_column": "text"},
                                {"hub_id": "bertlab/gutenberg-books", "config": "default", "split": "train",
                                 "text_column": "text"}])
    monkeypatch.setattr(download.datasets, "load_dataset", hub)
    corpus = download.stream_corpus(sources, tmp_path / "corpus.parquet", tmp_path / "cache", batch_size=7)
    assert asked == [("bertlab/wiki-text", True), ("bertlab/gutenberg-books", True)]
    expected = [t for name in ("wiki-text", "gutenberg-books")
                for t in load_split(f"bertlab/{name}", "default", "train", mirror)["text"]]
    assert list(corpus["text"]) == [t for t in expected if t.strip()] and len(corpus) == 44
    assert list(corpus["source"]) == ["bertlab/wiki-text"] * 40 + ["bertlab/gutenberg-books"] * 4

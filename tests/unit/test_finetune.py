"""Stage `finetune` end to end on synthetic tasks and tiny encoders (the `finetune_data` fixture: a temp data dir)."""

import csv
import json
from pathlib import Path

import datasets
import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from seqeval.metrics.sequence_labeling import get_entities
from tokenizers import Tokenizer

from bertlab.data.encoding import pad_collate
from bertlab.data.tasks import Task
from bertlab.errors import UserError
from bertlab.files import write_json
from bertlab.finetune import finetune
from bertlab.metrics import glue_metrics
from bertlab.modeling.export import CONFIG, load_plain
from bertlab.modeling.features import FEATURES
from bertlab.modeling.model import BertConfig, BertForPretraining
from bertlab.runs import pretrain_dir, run_files
from bertlab.stage import CONF_DIR
from bertlab.training import probe
from bertlab.training.finetune_module import FinetuneModule
from bertlab.training.recipe import ModuleSettings
from bertlab.training.task_datamodule import subsample
from tests.helpers import cell_dir, finetune_config, save_encoder


def read_record(finetune_data: Path, name: str) -> dict:
    return json.loads((cell_dir(finetune_data, name) / "metrics.json").read_text())


def read_items(finetune_data: Path, name: str) -> dict:
    return json.loads((cell_dir(finetune_data, name) / "items.json").read_text())


def recompute(record: dict, cols: dict) -> float:
    """The headline metric from per-item columns, as a paired bootstrap recomputes it."""
    kind, metric = record["kind"], record["headline_metric"]
    if kind in ("classification", "regression"):
        return glue_metrics(record["task"], cols["pred"], cols["label"])[metric]
    if kind == "span":
        return float(np.mean(cols[metric]))
    tp, fp, fn = (sum(cols[k]) for k in ("tp", "fp", "fn"))
    return {"f1": 200 * tp / max(1, 2 * tp + fp + fn), "precision": 100 * tp / max(1, tp + fp),
            "recall": 100 * tp / max(1, tp + fn)}[metric]


def check_items(finetune_data: Path, record: dict, kind: str) -> dict:
    """items.json of an "ok" cell: its layout, and columns that recompute the headline and the floor."""
    items = read_items(finetune_data, record["name"])
    metric = record["headline_metric"]
    assert (items["split"], items["kind"], items["metric"]) == ("validation", kind, metric)
    assert items["n"] == record["eval_examples_per_split"]["validation"]
    assert set(items["floor"]) == {"name", *items["model"]}
    assert all(len(column) == items["n"] for part in ("model", "floor") for k, column in items[part].items()
               if k != "name")
    assert set(record["floor"]) == {metric}
    record = record | {"kind": kind}
    assert recompute(record, items["model"]) == pytest.approx(record["headline"], rel=1e-6)
    assert recompute(record, items["floor"]) == pytest.approx(record["floor"][metric], rel=1e-6, abs=1e-9)
    return items


def train_split(finetune_data: Path, task: str) -> datasets.Dataset:
    return datasets.load_from_disk(str(finetune_data / "download" / "tasks" / task))["train"]


def dev(finetune_data: Path, task: str) -> datasets.Dataset:
    return datasets.load_from_disk(str(finetune_data / "download" / "tasks" / task))["validation"]


def test_classification_learns_a_trivial_task(finetune_data: Path) -> None:
    result = finetune(finetune_config(finetune_data, "name=presence", "task=sst2", "finetune.epochs=3",
                                      "finetune.lr=1e-3", "finetune.head_lr=1e-2"))
    record = read_record(finetune_data, "presence")
    assert record == result.record
    assert record["status"] == "ok" and record["headline_metric"] == "accuracy"
    assert record["headline"] == record["metrics"]["validation"]["accuracy"] >= 95.0
    assert record["train_examples"] == 480 and record["eval_examples"] == 100
    assert record["mode"] == "finetune" and record["features"] is None and record["bilstm"] is False
    assert record["causal"] is False and record["train_seconds"] >= 0 and record["eval_seconds"] >= 0
    assert (cell_dir(finetune_data, "presence") / "metrics.csv").exists()  # the training curve
    encoder = result.module.encoder  # fine-tuned with finetune.dropout (0.1), not the pretraining's 0
    assert {m.p for m in encoder.modules() if isinstance(m, torch.nn.Dropout)} == {0.1}
    assert {layer.attention_dropout for layer in encoder.layers} == {0.1}
    assert not (cell_dir(finetune_data, "presence").parent / ".partial").exists()
    assert not (finetune_data / "checkpoints" / "finetune" / "presence").exists()  # the loggers' work dir, cleaned up

    items = check_items(finetune_data, record, "classification")
    assert items == result.items
    assert items["model"]["label"] == dev(finetune_data, "sst2")["label"]  # dev-set order
    train = datasets.load_from_disk(str(finetune_data / "download" / "tasks" / "sst2"))["train"]["label"]
    majority = int(np.bincount(train).argmax())
    assert items["floor"]["name"] == f"majority class of the training labels ({majority})"
    assert items["floor"]["pred"] == [majority] * 100
    assert record["floor"]["accuracy"] == pytest.approx(items["model"]["label"].count(majority))  # its dev share, %


def test_regression_reports_pearson_and_spearman(finetune_data: Path) -> None:
    record = finetune(finetune_config(finetune_data, "name=sim", "task=stsb", "finetune.bilstm=true")).record
    assert set(record["metrics"]["validation"]) == {"pearson", "spearman"}
    assert record["headline"] == record["metrics"]["validation"]["spearman"] and record["bilstm"] is True
    items = check_items(finetune_data, record, "regression")
    train = datasets.load_from_disk(str(finetune_data / "download" / "tasks" / "stsb"))["train"]["label"]
    assert items["floor"]["pred"] == np.random.default_rng(0).normal(np.mean(train), np.std(train), 40).tolist()
    assert items["floor"]["label"] == items["model"]["label"] == dev(finetune_data, "stsb")["label"]


def test_an_unknown_encoder_is_a_one_line_user_error(finetune_data: Path) -> None:
    """It names every folder looked in (a run by hand's, the pipeline's) and a stage to run only where one exists,
    the study's encoders'. (Unknown choices, such as `finetune.mode=frozen`, stop at the door: test_settings.py.)"""
    hand = ["out_dir=${data_dir}/hand"]
    for encoder, stage in (("nonexistent", None), ("bert", "`dvc repro pretrain@bert`")):
        with pytest.raises(UserError) as err:
            finetune(finetune_config(finetune_data, "name=bad", "task=sst2", f"finetune.encoder={encoder}", *hand))
        said = str(err.value)
        assert said.startswith(f"encoder {encoder!r} at pretraining seed 1: no pretrained model in "
                               f"{finetune_data}/hand/pretrain/{encoder}/{encoder}-1 nor in "
                               f"{finetune_data}/pretrain/{encoder}/{encoder}-1; pretrain it first: ")
        assert "\n" not in said and (stage in said if stage else "dvc repro" not in said)


def test_tagging_scores_entities_on_word_level_tags(finetune_data: Path) -> None:
    record = finetune(finetune_config(finetune_data, "name=ner", "task=conll2003", "finetune.epochs=3",
                                      "finetune.lr=1e-3", "finetune.head_lr=1e-2")).record
    assert set(record["metrics"]) == {"validation"}  # dev only: the fixture's test split is never scored
    assert set(record["metrics"]["validation"]) == {"f1", "precision", "recall"}
    assert record["headline"] == record["metrics"]["validation"]["f1"] > 50.0
    items = check_items(finetune_data, record, "tagging")
    names = OmegaConf.load(Path(CONF_DIR) / "task" / "conll2003.yaml").label_names
    entities = [len(get_entities([names[t] for t in tags])) for tags in dev(finetune_data, "conll2003")["ner_tags"]]
    assert items["floor"] == {"name": 'all "O" (no entity predicted)', "tp": [0] * 40, "fp": [0] * 40, "fn": entities}
    assert record["floor"] == {"f1": 0.0} and sum(items["model"]["tp"]) > 0


def test_squad_end_to_end_gives_exact_match_and_f1(finetune_data: Path) -> None:
    record = finetune(finetune_config(finetune_data, "name=qa", "task=squad", "finetune.epochs=2")).record
    assert set(record["metrics"]["validation"]) == {"exact_match", "f1"}
    assert record["headline"] == record["metrics"]["validation"]["f1"]
    assert record["lengths"]["max_seq_length"] == 64  # capped by the encoder's 64 positions
    assert record["train_examples"] == 24 and record["eval_examples"] == 12
    items = check_items(finetune_data, record, "span")  # one item per question, not per window
    assert items["floor"]["name"] == "random start/end logits (standard normal, seed 0)"
    assert all(v in (0.0, 100.0) for v in items["model"]["exact_match"] + items["floor"]["exact_match"])


def test_squad_with_bilstm_and_causal_encoder(finetune_data: Path) -> None:
    record = finetune(finetune_config(finetune_data, "name=qa_ltr", "task=squad", "finetune.encoder=tiny_ltr",
                                      "finetune.bilstm=true", "finetune.max_train_examples=8")).record
    assert record["causal"] is True and record["objective"] == "ltr" and record["bilstm"] is True
    assert set(record["metrics"]["validation"]) == {"exact_match", "f1"}
    check_items(finetune_data, record, "span")


def test_an_encoder_is_causal_by_its_record_not_its_objectives_name(finetune_data: Path) -> None:
    """A variant objective under its own name: its metrics.json's `causal` decides how it is fine-tuned."""
    import shutil

    from bertlab.modeling.export import load_encoder

    variant = pretrain_dir(finetune_data, "tiny_next_token", 1)
    shutil.copytree(pretrain_dir(finetune_data, "tiny_ltr", 1), variant, dirs_exist_ok=True)
    write_json(variant / "metrics.json", {"name": variant.name, "objective": "next_token", "nsp": False,
                                          "causal": True})
    tokenizer = finetune_data / "tokenizer" / "tokenizer.json"
    vocab = Tokenizer.from_file(str(tokenizer)).get_vocab_size()
    assert load_encoder(variant, 0.0, vocab, tokenizer)[1:] == ("next_token", True)
    assert load_encoder(pretrain_dir(finetune_data, "tiny", 1), 0.0, vocab, tokenizer)[1:] == ("mlm_nsp", False)


def test_a_cell_the_profile_leaves_out_writes_why_and_trains_nothing(finetune_data: Path) -> None:
    cfg = finetune_config(finetune_data, "name=left_out", "task=sst2", "not_run='sst2: too slow here'")
    result = finetune(cfg)
    out = finetune_data / "finetune" / "tiny" / "left_out"  # in its encoder's folder
    assert result.finished_before and sorted(p.name for p in out.iterdir()) == ["metrics.json"]
    record = json.loads((out / "metrics.json").read_text())
    assert (record["status"], record["reason"], record["headline"]) == ("not run", "not run at smoke: sst2: too slow "
                                                                         "here", None)
    assert (record["encoder"], record["task"], record["mode"]) == ("tiny", "sst2", "finetune")


@pytest.mark.parametrize("strategy", FEATURES)
def test_feature_based_keeps_the_encoder_frozen(finetune_data: Path, strategy: str) -> None:
    before, _ = load_plain(pretrain_dir(finetune_data, "tiny", 1))
    result = finetune(finetune_config(finetune_data, f"name=fb_{strategy}", "task=conll2003",
                                      "finetune.mode=feature_based", f"finetune.features={strategy}",
                                      "finetune.max_train_examples=48", "finetune.lr=1e-3", "finetune.epochs=1"))
    record, module = result.record, result.module
    assert record["mode"] == "feature_based" and record["features"] == strategy and record["bilstm"] is True
    after = module.encoder.state_dict()
    for name, tensor in before.encoder.state_dict().items():
        assert torch.equal(tensor, after[name]), name  # bit-identical
    assert not module.encoder.training and not any(p.requires_grad for p in module.encoder.parameters())
    hidden = module.encoder.config.hidden_size
    width = 4 * hidden if strategy == "concat_last_four" else hidden
    assert module.features.output_size == width and module.bilstm.lstm.input_size == width
    if strategy in ("sum_last_four", "sum_all"):
        mix = module.features.mix
        assert mix.scalars.numel() == 4  # a 4-layer encoder: its last four layers are all its layers
        assert torch.isclose(mix.weights().sum(), torch.tensor(1.0))
        assert not torch.equal(mix.scalars.detach(), torch.zeros(4))  # it trained

        # gradients reach the mix weights and never the encoder; dropout is off in the features
        module.train()
        batch = next(iter(torch.utils.data.DataLoader(
            [{"input_ids": [2, 10, 11, 12, 3], "token_type_ids": [0] * 5, "label_ids": [-100, 1, 0, 5, -100]}],
            collate_fn=lambda rows: pad_collate(rows, 0),
        )))
        assert not module.encoder.training
        first, _ = module.token_features(batch)
        second, _ = module.token_features(batch)
        assert torch.equal(first, second)
        module.zero_grad()
        module.kind.loss(module(batch), batch).backward()
        assert mix.scalars.grad is not None and mix.scalars.grad.abs().sum() > 0
        assert all(p.grad is None for p in module.encoder.parameters())


def make_module(finetune_data: Path, **kwargs) -> FinetuneModule:
    model, _ = load_plain(pretrain_dir(finetune_data, "tiny", 1))
    task = Task(name="sst2", kind="classification", hub_id="x", config="x", text_columns=("sentence",),
                label_column="label", num_labels=2, train_split="train", eval_splits=("validation",),
                metric="accuracy")
    causal = kwargs.pop("causal", False)
    return FinetuneModule(model.encoder, task, ModuleSettings(**kwargs), causal=causal)


def test_head_lr_gives_the_head_its_own_learning_rate(finetune_data: Path) -> None:
    module = make_module(finetune_data, lr=1e-5, head_lr=1e-3, warmup_ratio=0.1, weight_decay=0.01)
    opt = module.build_optimizer(100)
    optimizer, scheduler = opt["optimizer"], opt["lr_scheduler"]["scheduler"]
    groups = {g["name"]: g for g in optimizer.param_groups}
    assert set(groups) == {"encoder", "encoder_no_decay", "head", "head_no_decay"}
    assert groups["encoder"]["initial_lr"] == groups["encoder_no_decay"]["initial_lr"] == 1e-5
    assert groups["head"]["initial_lr"] == groups["head_no_decay"]["initial_lr"] == 1e-3
    assert groups["encoder"]["weight_decay"] == groups["head"]["weight_decay"] == 0.01
    assert groups["encoder_no_decay"]["weight_decay"] == groups["head_no_decay"]["weight_decay"] == 0.0
    head_ids = {id(p) for p in module.head.parameters()}
    encoder_ids = {id(p) for p in module.encoder.parameters()}
    assert {id(p) for g in ("head", "head_no_decay") for p in groups[g]["params"]} == head_ids
    assert {id(p) for g in ("encoder", "encoder_no_decay") for p in groups[g]["params"]} == encoder_ids
    assert all(p.ndim == 1 for p in groups["encoder_no_decay"]["params"])  # biases and LayerNorm
    # the schedule scales both groups alike: warmup to the peak at step 10, then linear decay to 0
    lrs = []
    for _ in range(100):
        lrs.append((groups["encoder"]["lr"], groups["head"]["lr"]))
        optimizer.step()
        scheduler.step()
    assert lrs[10] == pytest.approx((1e-5, 1e-3)) and lrs[0] == pytest.approx((1e-6, 1e-4))
    assert lrs[55] == pytest.approx((0.5e-5, 0.5e-3))
    assert all(h == pytest.approx(100 * e) for e, h in lrs)


def test_head_lr_defaults_to_lr_and_frozen_encoders_get_no_group(finetune_data: Path) -> None:
    groups = make_module(finetune_data, lr=3e-5).build_optimizer(10)["optimizer"].param_groups
    assert {g["initial_lr"] for g in groups} == {3e-5}
    frozen = make_module(finetune_data, mode="feature_based", features="sum_all", lr=3e-5, head_lr=1e-3)
    names = {g["name"] for g in frozen.build_optimizer(10)["optimizer"].param_groups}
    assert names == {"head", "head_no_decay"}


def padded_batch() -> dict[str, torch.Tensor]:
    """Two rows: four real tokens then padding, and six real tokens."""
    return {"input_ids": torch.tensor([[2, 10, 11, 3, 0, 0], [2, 12, 13, 14, 15, 3]]),
            "token_type_ids": torch.zeros(2, 6, dtype=torch.long),
            "attention_mask": torch.tensor([[1, 1, 1, 1, 0, 0], [1] * 6])}


def test_causal_encoders_classify_from_the_last_real_token(finetune_data: Path) -> None:
    module = make_module(finetune_data, causal=True).eval()
    batch = padded_batch()
    tokens, out = module.token_features(batch)
    vector = module.sentence_vector(tokens, out, batch["attention_mask"])
    pooler = module.encoder.pooler
    assert torch.allclose(vector[0], torch.tanh(pooler(tokens[0, 3])))
    assert torch.allclose(vector[1], torch.tanh(pooler(tokens[1, 5])))
    # causal: the representation of a prefix does not depend on what follows it
    longer = {k: v.clone() for k, v in batch.items()}
    longer["input_ids"][0, 4], longer["attention_mask"][0, 4] = 16, 1
    assert torch.allclose(module.token_features(longer)[0][0, :4], tokens[0, :4], atol=1e-5)


def test_mean_pooling_averages_the_real_tokens_only(finetune_data: Path) -> None:
    module = make_module(finetune_data, pooling="mean").eval()
    batch = padded_batch()
    tokens, out = module.token_features(batch)
    vector = module.sentence_vector(tokens, out, batch["attention_mask"])
    pooler = module.encoder.pooler
    assert torch.allclose(vector[0], torch.tanh(pooler(tokens[0, :4].mean(0))), atol=1e-6)
    assert torch.allclose(vector[1], torch.tanh(pooler(tokens[1].mean(0))), atol=1e-6)
    assert not torch.allclose(vector[0], out.pooled_output[0])   # not the [CLS] vector
    with pytest.raises(ValueError, match="unknown pooling 'max'"):
        make_module(finetune_data, pooling="max")


PROBE = ("finetune.mode=probe", "finetune.features=last", "finetune.max_train_examples=120")


@pytest.mark.parametrize(("task", "kind"), [("sst2", "classification"), ("conll2003", "tagging")])
def test_a_probe_cell_fits_a_converged_probe_and_writes_what_the_report_reads(finetune_data: Path, task: str,
                                                                              kind: str) -> None:
    result = finetune(finetune_config(finetune_data, f"name=probe_{task}", f"task={task}", *PROBE))
    record = read_record(finetune_data, f"probe_{task}")
    assert record == result.record and result.module is None  # no module trains: a solver fits the probe
    assert record["mode"] == "probe" and record["features"] == "last" and record["bilstm"] is False
    assert record["status"] == "ok" and record["steps"] is None and record["train_examples"] == 120
    fitted = record["probe"]
    assert fitted["converged"] is True and fitted["iterations"] < fitted["max_iter"]
    ft = finetune_config(finetune_data).finetune
    assert fitted["Cs"] == ft.probe_cs and fitted["cv_folds"] == ft.probe_folds and fitted["cv_tol"] == ft.probe_cv_tol
    assert fitted["features"] == 32 and fitted["C"] == fitted["Cs"][int(np.argmin(fitted["cv_log_loss"]))]
    words = [len(t) for t in subsample(train_split(finetune_data, task), 120, 0)["tokens"]] if kind == "tagging" else []
    assert fitted["train_vectors"] == (sum(words) if words else 120)  # a vector per example, or per word
    with (cell_dir(finetune_data, f"probe_{task}") / "metrics.csv").open() as f:
        curve = list(csv.DictReader(f))
    assert [float(r["C"]) for r in curve] == fitted["Cs"]
    assert [float(r["cv_log_loss"]) for r in curve] == pytest.approx(fitted["cv_log_loss"], abs=1e-6)
    items = check_items(finetune_data, record, kind)
    floor = record["floor"][record["headline_metric"]]
    assert record["headline"] > floor + 20  # the tiny encoder's features carry the synthetic tasks' signal
    again = finetune(finetune_config(finetune_data, f"name=probe_{task}_again", f"task={task}", *PROBE))
    assert again.items["model"] == items["model"] and again.record["probe"] == fitted  # a function of its inputs


@pytest.mark.parametrize("causal", [False, True])
def test_probe_features_are_the_real_tokens_mean_or_each_words_first_sub_token(finetune_data: Path,
                                                                               causal: bool) -> None:
    encoder = load_plain(pretrain_dir(finetune_data, "tiny", 1))[0].encoder.eval()
    batch = padded_batch()
    rows = [{"input_ids": ids[:n].tolist(), "token_type_ids": [0] * int(n), "label": i,
             "label_ids": [-100, 4, -100, 1, 0, -100][:n]}
            for i, (ids, n) in enumerate(zip(batch["input_ids"], batch["attention_mask"].sum(1)))]
    rows.reverse()  # any order in, row order out
    with torch.no_grad():
        states = encoder(*(batch[k] for k in ("input_ids", "token_type_ids", "attention_mask")),
                         causal=causal).last_hidden_state
    extract = dict(strategy="last", causal=causal, pad_id=0, batch_size=1, device=torch.device("cpu"))
    sentences = probe.features(encoder, rows, "classification", **extract)
    assert np.allclose(sentences.x, [states[1].mean(0), states[0, :4].mean(0)], atol=1e-5)
    assert sentences.y.tolist() == [1, 0] and sentences.row.tolist() == [0, 1]
    words = probe.features(encoder, rows, "tagging", **extract)
    assert np.allclose(words.x, [states[1, 1], states[1, 3], states[1, 4], states[0, 1], states[0, 3]], atol=1e-5)
    assert words.y.tolist() == [4, 1, 0, 4, 1] and words.row.tolist() == [0, 0, 0, 1, 1]


def test_every_encoder_and_seed_scores_the_same_dev_items(finetune_data: Path) -> None:
    """A subsampled dev set is drawn by subsample_seed alone: items pair up across cells."""
    cells = {"same_a": ("tiny", 1), "same_b": ("tiny_ltr", 2)}
    for name, (encoder, seed) in cells.items():
        finetune(finetune_config(finetune_data, f"name={name}", "task=sst2", f"finetune.encoder={encoder}",
                                 f"seed={seed}", "finetune.max_eval_examples=30", "finetune.max_train_examples=32",
                                 "finetune.epochs=1"))
    a, b = (read_items(finetune_data, name) for name in cells)
    picked = sorted(np.random.default_rng(0).permutation(100)[:30].tolist())
    assert a["n"] == b["n"] == 30 and a["model"]["label"] == b["model"]["label"]
    assert a["model"]["label"] == [dev(finetune_data, "sst2")["label"][i] for i in picked]
    assert a["floor"] == b["floor"]


@pytest.mark.parametrize("delta", [-3, 5])
def test_a_tokenizer_that_is_not_the_encoders_stops_before_training(finetune_data: Path, delta: int) -> None:
    tokenizer_file = finetune_data / "tokenizer" / "tokenizer.json"
    tokens = Tokenizer.from_file(str(tokenizer_file)).get_vocab_size()
    name = f"vocab{delta}"
    save_encoder(finetune_data, name, tokens + delta, "mlm_nsp", nsp=True, causal=False)
    with pytest.raises(UserError) as err:
        finetune(finetune_config(finetune_data, f"name={name}", "task=sst2", f"finetune.encoder={name}"))
    message = str(err.value)
    assert "\n" not in message
    assert f"{tokenizer_file} has {tokens} tokens" in message
    assert f"{pretrain_dir(finetune_data, name, 1) / CONFIG} has vocab_size {tokens + delta}" in message
    assert not cell_dir(finetune_data, name).exists()
    assert not (finetune_data / "checkpoints" / "finetune" / name).exists()


@pytest.mark.parametrize("task", ["sst2", "conll2003", "squad"])
def test_evaluation_batches_change_no_prediction(finetune_data: Path, task: str) -> None:
    """Evaluation runs in order of length in batches of `impl.eval_batch_size` (speed only): the same items and
    metrics as row by row in dev-set order."""
    results = [finetune(finetune_config(finetune_data, f"name=evalbatch-{task}-{b}", f"task={task}",
                                        f"impl.eval_batch_size={b}", "finetune.epochs=1", "finetune.lr=1e-3"))
               for b in (1, 64)]
    one, many = (r.items for r in results)
    assert one["model"].keys() == many["model"].keys()
    for key in one["model"]:
        assert np.allclose(one["model"][key], many["model"][key], rtol=1e-5, atol=1e-6), key
    assert results[0].record["headline"] == pytest.approx(results[1].record["headline"], rel=1e-5)


def test_feature_head_lr_drives_the_trained_parts_of_feature_based_runs_only(finetune_data: Path) -> None:
    frozen = finetune(finetune_config(finetune_data, "name=fhl-frozen", "task=conll2003",
                                      "finetune.mode=feature_based", "finetune.features=last",
                                      "finetune.feature_head_lr=5e-3", "finetune.head_lr=1e-4",
                                      "finetune.epochs=1")).module
    whole = finetune(finetune_config(finetune_data, "name=fhl-whole", "task=conll2003",
                                     "finetune.feature_head_lr=5e-3", "finetune.head_lr=1e-4",
                                     "finetune.epochs=1")).module
    assert frozen.head_lr == 5e-3 and whole.head_lr == 1e-4


def save_keyed_encoder(d: Path, name: str, key: str) -> None:
    """A 4-layer MLM+NSP encoder of the tokenizer's vocabulary, as the pretrain stage records it (with run key `key`
    and its files' digests)."""
    save_encoder(d, name, Tokenizer.from_file(str(d / "tokenizer" / "tokenizer.json")).get_vocab_size(), "mlm_nsp",
                 nsp=True, causal=False)
    out = pretrain_dir(d, name, 1)
    write_json(out / "metrics.json", {"name": out.name, "encoder": name, "seed": 1, "objective": "mlm_nsp",
                                      "causal": False, "run_key": key, "files": run_files(out)})


def other_weights(path: Path, num_layers: int, hidden_size: int) -> None:
    """Weights of another MLM+NSP encoder (`num_layers` x `hidden_size`, the tokenizer's vocabulary) saved as `path`."""
    torch.manual_seed(1)
    vocab = Tokenizer.from_file(str(path.parents[3] / "tokenizer" / "tokenizer.json")).get_vocab_size()
    config = BertConfig(vocab_size=vocab, num_layers=num_layers, hidden_size=hidden_size, num_heads=4,
                        intermediate_size=64, max_position_embeddings=64)
    torch.save(BertForPretraining(config).state_dict(), path)


def test_feature_cells_that_read_the_same_layers_the_same_way_are_one_cell(finetune_data: Path) -> None:
    """Of a 4-layer encoder, `sum_all` and `sum_last_four` mix the same four layers: the second copies the first
    (under its own name and strategy); `concat_last_four` reads them too but is another model, so it trains."""
    save_keyed_encoder(finetune_data, "four", "f")
    args = ("task=conll2003", "finetune.encoder=four", "finetune.mode=feature_based", "finetune.epochs=1")
    first = finetune(finetune_config(finetune_data, "name=c-sum_last_four", *args, "finetune.features=sum_last_four"))
    same = finetune(finetune_config(finetune_data, "name=c-sum_all", *args, "finetune.features=sum_all"))
    concat = finetune(finetune_config(finetune_data, "name=c-concat", *args, "finetune.features=concat_last_four"))
    assert same.module is None and same.record["trained_as"] == "c-sum_last_four"
    assert same.record["features"] == "sum_all" and same.items == first.items
    assert concat.module is not None and "trained_as" not in concat.record


def test_a_cell_on_a_twin_encoder_copies_the_finished_cell(finetune_data: Path) -> None:
    """An encoder copied from another run (same run key) with the same cell settings: the finished cell's outputs,
    not a second training; another setting, or `impl.reuse_twins=false`, trains."""
    for name in ("keyed", "keyed_twin"):
        save_keyed_encoder(finetune_data, name, "k")
    args = ("task=sst2", "finetune.epochs=1", "finetune.lr=1e-3")
    first = finetune(finetune_config(finetune_data, "name=sst2-keyed", "finetune.encoder=keyed", *args))
    twin = finetune(finetune_config(finetune_data, "name=sst2-keyed_twin", "finetune.encoder=keyed_twin", *args))
    assert twin.module is None and twin.record["trained_as"] == "sst2-keyed"
    assert (twin.record["name"], twin.record["encoder"]) == ("sst2-keyed_twin", "keyed_twin")
    assert twin.items == first.items and twin.record["headline"] == first.record["headline"]
    assert read_record(finetune_data, "sst2-keyed_twin") == twin.record
    other = finetune(finetune_config(finetune_data, "name=sst2-keyed_twin", "finetune.encoder=keyed_twin", *args,
                                     "finetune.warmup_ratio=0.2"))
    forced = finetune(finetune_config(finetune_data, "name=sst2-forced", "finetune.encoder=keyed_twin", *args,
                                      "impl.reuse_twins=false"))
    assert other.module is not None and "trained_as" not in other.record
    assert forced.module is not None and "trained_as" not in forced.record


def test_a_rerun_of_a_finished_cell_does_nothing(finetune_data: Path) -> None:
    """The same name, settings, code and inputs as a finished cell: its outputs stay as they are, nothing trains
    (how a stopped scaling sweep goes on); with `impl.reuse_twins=false` it trains again."""
    save_keyed_encoder(finetune_data, "again", "a")
    args = ("name=sst2-again", "finetune.encoder=again", "task=sst2", "finetune.epochs=1", "finetune.lr=1e-3")
    first = finetune(finetune_config(finetune_data, *args))
    metrics = cell_dir(finetune_data, "sst2-again") / "metrics.json"
    written = metrics.stat().st_mtime_ns
    again = finetune(finetune_config(finetune_data, *args))
    assert again.finished_before and again.module is None and again.record == first.record
    assert again.items == first.items and metrics.stat().st_mtime_ns == written
    forced = finetune(finetune_config(finetune_data, *args, "impl.reuse_twins=false"))
    assert not forced.finished_before and forced.module is not None


def test_a_finished_cell_is_reused_only_on_the_encoder_bytes_it_was_trained_on(finetune_data: Path) -> None:
    """A truncated, random, another size's or deleted model.pt (or config.json) said "nothing to do": the cell's key
    held its encoder's run key, never its bytes. Now each stops the cell in one error naming the file, reuse or not;
    the bytes put back, the cell is finished again; other bytes that their pretraining recorded (a rerun that wrote
    other weights) are another cell, which trains."""
    save_keyed_encoder(finetune_data, "kept", "k")
    args = ("name=sst2-kept", "finetune.encoder=kept", "task=sst2", "finetune.epochs=1", "finetune.lr=1e-3")
    first = finetune(finetune_config(finetune_data, *args))
    encoder = pretrain_dir(finetune_data, "kept", 1)
    model, config = encoder / "model.pt", encoder / "config.json"
    original = {path: path.read_bytes() for path in (model, config)}
    damages = {
        "truncated": lambda: model.write_bytes(original[model][:len(original[model]) // 2]),
        "random": lambda: model.write_bytes(np.random.default_rng(0).bytes(len(original[model]))),
        "another size": lambda: other_weights(model, 2, 64),
        "deleted": model.unlink,
        "another config": lambda: config.write_text(json.dumps({**json.loads(original[config]), "dropout": 0.5})),
    }
    for how, damage in damages.items():
        damage()
        path = config if how == "another config" else model
        said = f"{path} is missing" if how == "deleted" else f"{path} is not the file its run wrote"
        for reuse in ("true", "false"):
            with pytest.raises(UserError, match=said):
                finetune(finetune_config(finetune_data, *args, f"impl.reuse_twins={reuse}"))
        for p, data in original.items():
            p.write_bytes(data)
        again = finetune(finetune_config(finetune_data, *args))
        assert again.finished_before and again.record == first.record, how
    other_weights(model, 4, 32)  # the same shapes, other values, as their pretraining recorded them
    write_json(encoder / "metrics.json", {**json.loads((encoder / "metrics.json").read_text()),
                                          "files": run_files(encoder)})
    retrained = finetune(finetune_config(finetune_data, *args))
    assert not retrained.finished_before and retrained.module is not None
    assert retrained.record["run_key"] != first.record["run_key"]


def test_a_twin_cell_whose_files_were_damaged_is_not_copied(finetune_data: Path,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    """A finished cell whose items.json is not what its record says: a twin trains rather than copy it (one warning
    naming the file), and the cell itself, rerun, is not finished but takes the sound twin's outputs."""
    for name in ("dmg", "dmg_twin"):
        save_keyed_encoder(finetune_data, name, "d")
    args = ("task=sst2", "finetune.epochs=1", "finetune.lr=1e-3")
    finetune(finetune_config(finetune_data, "name=sst2-dmg", "finetune.encoder=dmg", *args))
    items = cell_dir(finetune_data, "sst2-dmg") / "items.json"
    items.write_text(items.read_text().replace("1", "0"))
    twin = finetune(finetune_config(finetune_data, "name=sst2-dmg_twin", "finetune.encoder=dmg_twin", *args))
    assert twin.module is not None and "trained_as" not in twin.record
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING" and "not reused" in r.getMessage()]
    assert warnings == [f"{items} is not the file its run wrote (its sha256 differs from the one in "
                        f"{items.parent / 'metrics.json'}: damaged or replaced): not reused"]
    again = finetune(finetune_config(finetune_data, "name=sst2-dmg", "finetune.encoder=dmg", *args))
    assert not again.finished_before and again.record["trained_as"] == "sst2-dmg_twin"  # now the sound twin's
    assert json.loads(items.read_text()) == twin.items

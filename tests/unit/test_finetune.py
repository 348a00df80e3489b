"""Stage `finetune` end to end on synthetic tasks and tiny encoders (written to a temp `data_dir`)."""

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import datasets
import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf
from seqeval.metrics.sequence_labeling import get_entities
from tokenizers import Tokenizer

from bertlab.data.tasks import Task, pad_collate
from bertlab.errors import UserError
from bertlab.files import write_json
from bertlab.finetune import finetune
from bertlab.metrics import glue_metrics
from bertlab.modeling.export import CONFIG, load_plain, save_plain
from bertlab.modeling.heads import FEATURES
from bertlab.modeling.model import BertConfig, BertForPretraining
from bertlab.stage import CONF_DIR
from bertlab.tokenizer import train_tokenizer
from bertlab.training.finetune_module import FinetuneModule

WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa "
         "quebec romeo sierra tango uniform victor whiskey xray yankee").split()
NAMES, PLACES = ["john", "mary"], ["paris", "rome"]
HIDDEN = 32
ENV = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"}


def sentence(rng: random.Random, n: int) -> list[str]:
    return [rng.choice(WORDS) for _ in range(n)]


def save_encoder(d: Path, name: str, vocab_size: int, objective: str) -> None:
    torch.manual_seed(0)
    config = BertConfig(vocab_size=vocab_size, num_layers=4, hidden_size=HIDDEN, num_heads=4, intermediate_size=64,
                        max_position_embeddings=64, dropout=0.0, attention_dropout=0.0)  # as the cpu profile pretrains
    save_plain(BertForPretraining(config, nsp=objective == "mlm_nsp"), config, d / "pretrain" / name)
    write_json(d / "pretrain" / name / "metrics.json", {"name": name, "objective": objective})


def presence_task(rng: random.Random, n: int) -> dict[str, list]:
    """label = whether `zebra` is in the sentence: trivially learnable."""
    rows = {"sentence": [], "label": []}
    for _ in range(n):
        words, label = sentence(rng, rng.randint(4, 8)), rng.random() < 0.5
        if label:
            words.insert(rng.randrange(len(words) + 1), "zebra")
        rows["sentence"].append(" ".join(words))
        rows["label"].append(int(label))
    return rows


def similarity_task(rng: random.Random, n: int) -> dict[str, list]:
    rows = {"sentence1": [], "sentence2": [], "label": []}
    for _ in range(n):
        a = sentence(rng, 5)
        shared = rng.randint(0, 5)
        b = a[:shared] + sentence(rng, 5 - shared)
        rows["sentence1"].append(" ".join(a))
        rows["sentence2"].append(" ".join(b))
        rows["label"].append(float(shared))
    return rows


def ner_task(rng: random.Random, n: int) -> dict[str, list]:
    """Names are B-PER (1), a name after a name I-PER (2), places B-LOC (5), everything else O."""
    rows = {"tokens": [], "ner_tags": []}
    for _ in range(n):
        tokens, tags = [], []
        for _ in range(rng.randint(3, 9)):
            r = rng.random()
            if r < 0.15:
                tokens += [rng.choice(NAMES)] + ([rng.choice(NAMES)] if rng.random() < 0.3 else [])
                tags += [1] + [2] * (len(tokens) - len(tags) - 1)
            elif r < 0.25:
                tokens.append(rng.choice(PLACES))
                tags.append(5)
            else:
                tokens.append(rng.choice(WORDS))
                tags.append(0)
        rows["tokens"].append(tokens)
        rows["ner_tags"].append(tags)
    return rows


def squad_task(rng: random.Random, n: int) -> dict[str, list]:
    rows = {"id": [], "title": [], "context": [], "question": [], "answers": []}
    for i in range(n):
        answer = rng.choice(PLACES + NAMES)
        before, after = " ".join(sentence(rng, rng.randint(5, 60))), " ".join(sentence(rng, rng.randint(5, 30)))
        context = f"{before} the answer is {answer} . {after}"
        rows["id"].append(f"q{i}")
        rows["title"].append("t")
        rows["context"].append(context)
        rows["question"].append(f"what is the answer {rng.choice(WORDS)} ?")
        rows["answers"].append({"text": [answer], "answer_start": [context.index(f"is {answer}") + 3]})
    return rows


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("data")
    rng = random.Random(0)
    texts = [" ".join(sentence(rng, 10) + NAMES + PLACES + ["zebra", "the", "answer", "is", "what", "?", "."])
             for _ in range(50)]
    tokenizer = train_tokenizer(texts, vocab_size=200, min_frequency=1)
    (d / "tokenizer").mkdir()
    tokenizer.save(str(d / "tokenizer" / "tokenizer.json"))
    save_encoder(d, "tiny", tokenizer.get_vocab_size(), "mlm_nsp")
    save_encoder(d, "tiny_ltr", tokenizer.get_vocab_size(), "ltr")
    tasks = {
        "sst2": {"train": presence_task(rng, 480), "validation": presence_task(rng, 100)},
        "stsb": {"train": similarity_task(rng, 64), "validation": similarity_task(rng, 40)},
        "conll2003": {"train": ner_task(rng, 200), "validation": ner_task(rng, 40), "test": ner_task(rng, 30)},
        "squad": {"train": squad_task(rng, 24), "validation": squad_task(rng, 12)},
    }
    for name, splits in tasks.items():
        dd = datasets.DatasetDict({s: datasets.Dataset.from_dict(rows) for s, rows in splits.items()})
        dd.save_to_disk(str(d / "download" / "tasks" / name))
    (d / "download" / "tasks" / "mnli").mkdir(parents=True)  # as the download stage leaves a task it could not get
    (d / "download" / "tasks" / "mnli" / "NO_DATA").write_text("nyu-mll/glue/mnli/train is not in the mirror\n")
    return d


def config(data_dir: Path, *overrides: str) -> DictConfig:
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return compose(config_name="config", overrides=[
            "profile=smoke", "logger=none", f"data_dir={data_dir}", "finetune.encoder=tiny",
            "finetune.max_train_examples=null", "finetune.max_eval_examples=null", "finetune.batch_size=16",
            "impl.threads=1", *overrides,
        ])


def read_record(data_dir: Path, name: str) -> dict:
    return json.loads((data_dir / "finetune" / name / "metrics.json").read_text())


def read_items(data_dir: Path, name: str) -> dict:
    return json.loads((data_dir / "finetune" / name / "items.json").read_text())


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


def check_items(data_dir: Path, record: dict, kind: str) -> dict:
    """items.json of an "ok" cell: the contract's layout, and columns that recompute the headline and the floor."""
    items = read_items(data_dir, record["name"])
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


def dev(data_dir: Path, task: str) -> datasets.Dataset:
    return datasets.load_from_disk(str(data_dir / "download" / "tasks" / task))["validation"]


def test_classification_learns_a_trivial_task(data_dir: Path) -> None:
    result = finetune(config(data_dir, "name=presence", "task=sst2", "finetune.epochs=3", "finetune.lr=1e-3",
                               "finetune.head_lr=1e-2"))
    record = read_record(data_dir, "presence")
    assert record == result.record
    assert record["status"] == "ok" and record["headline_metric"] == "accuracy"
    assert record["headline"] == record["metrics"]["validation"]["accuracy"] >= 95.0
    assert record["train_examples"] == 480 and record["eval_examples"] == 100
    assert record["mode"] == "finetune" and record["features"] is None and record["bilstm"] is False
    assert record["causal"] is False and record["train_seconds"] >= 0 and record["eval_seconds"] >= 0
    assert (data_dir / "finetune" / "presence" / "metrics.csv").exists()  # the training curve
    encoder = result.module.encoder  # fine-tuned with finetune.dropout (0.1), not the pretraining's 0
    assert {m.p for m in encoder.modules() if isinstance(m, torch.nn.Dropout)} == {0.1}
    assert {layer.attention_dropout for layer in encoder.layers} == {0.1}
    assert not (data_dir / "finetune" / "presence.partial").exists()
    assert not (data_dir / "checkpoints" / "finetune" / "presence").exists()  # the loggers' work dir, cleaned up

    items = check_items(data_dir, record, "classification")
    assert items == result.items
    assert items["model"]["label"] == dev(data_dir, "sst2")["label"]  # dev-set order
    train = datasets.load_from_disk(str(data_dir / "download" / "tasks" / "sst2"))["train"]["label"]
    majority = int(np.bincount(train).argmax())
    assert items["floor"]["name"] == f"majority class of the training labels ({majority})"
    assert items["floor"]["pred"] == [majority] * 100
    assert record["floor"]["accuracy"] == pytest.approx(items["model"]["label"].count(majority))  # its dev share, %


def test_regression_reports_pearson_and_spearman(data_dir: Path) -> None:
    record = finetune(config(data_dir, "name=sim", "task=stsb", "finetune.bilstm=true")).record
    assert set(record["metrics"]["validation"]) == {"pearson", "spearman"}
    assert record["headline"] == record["metrics"]["validation"]["spearman"] and record["bilstm"] is True
    items = check_items(data_dir, record, "regression")
    train = datasets.load_from_disk(str(data_dir / "download" / "tasks" / "stsb"))["train"]["label"]
    assert items["floor"]["pred"] == np.random.default_rng(0).normal(np.mean(train), np.std(train), 40).tolist()
    assert items["floor"]["label"] == items["model"]["label"] == dev(data_dir, "stsb")["label"]


def test_missing_task_data_is_a_no_data_record_and_exit_0(data_dir: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "bertlab.finetune", "profile=smoke", "logger=none", f"data_dir={data_dir}",
         "task=mnli", "name=nodata", "finetune.encoder=missing"],
        capture_output=True, text=True, env=ENV, cwd=data_dir,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "mnli: no data (nyu-mll/glue/mnli/train is not in the mirror)"
    record = read_record(data_dir, "nodata")
    assert record["status"] == "no data" and record["headline"] is None and record["task"] == "mnli"
    assert record["reason"] == "nyu-mll/glue/mnli/train is not in the mirror"
    assert record["floor"] is None and not (data_dir / "finetune" / "nodata" / "items.json").exists()


def test_an_unknown_encoder_is_a_one_line_user_error(data_dir: Path) -> None:
    """(Unknown choices, such as `finetune.mode=frozen`, stop at the door: tests/unit/test_settings.py.)"""
    with pytest.raises(UserError, match="encoder 'nonexistent'") as err:
        finetune(config(data_dir, "name=bad", "task=sst2", "finetune.encoder=nonexistent"))
    assert "\n" not in str(err.value)


def test_tagging_scores_entities_on_word_level_tags(data_dir: Path) -> None:
    record = finetune(config(data_dir, "name=ner", "task=conll2003", "finetune.epochs=3", "finetune.lr=1e-3",
                             "finetune.head_lr=1e-2")).record
    assert set(record["metrics"]) == {"validation"}  # dev only: the fixture's test split is never scored
    assert set(record["metrics"]["validation"]) == {"f1", "precision", "recall"}
    assert record["headline"] == record["metrics"]["validation"]["f1"] > 50.0
    items = check_items(data_dir, record, "tagging")
    names = OmegaConf.load(Path(CONF_DIR) / "task" / "conll2003.yaml").label_names
    entities = [len(get_entities([names[t] for t in tags])) for tags in dev(data_dir, "conll2003")["ner_tags"]]
    assert items["floor"] == {"name": 'all "O" (no entity predicted)', "tp": [0] * 40, "fp": [0] * 40, "fn": entities}
    assert record["floor"] == {"f1": 0.0} and sum(items["model"]["tp"]) > 0


def test_squad_end_to_end_gives_exact_match_and_f1(data_dir: Path) -> None:
    record = finetune(config(data_dir, "name=qa", "task=squad", "finetune.epochs=2")).record
    assert set(record["metrics"]["validation"]) == {"exact_match", "f1"}
    assert record["headline"] == record["metrics"]["validation"]["f1"]
    assert record["lengths"]["max_seq_length"] == 64  # capped by the encoder's 64 positions
    assert record["train_examples"] == 24 and record["eval_examples"] == 12
    items = check_items(data_dir, record, "span")  # one item per question, not per window
    assert items["floor"]["name"] == "random start/end logits (standard normal, seed 0)"
    assert all(v in (0.0, 100.0) for v in items["model"]["exact_match"] + items["floor"]["exact_match"])


def test_squad_with_bilstm_and_causal_encoder(data_dir: Path) -> None:
    record = finetune(config(data_dir, "name=qa_ltr", "task=squad", "finetune.encoder=tiny_ltr",
                             "finetune.bilstm=true", "finetune.max_train_examples=8")).record
    assert record["causal"] is True and record["objective"] == "ltr" and record["bilstm"] is True
    assert set(record["metrics"]["validation"]) == {"exact_match", "f1"}
    check_items(data_dir, record, "span")


@pytest.mark.parametrize("strategy", FEATURES)
def test_feature_based_keeps_the_encoder_frozen(data_dir: Path, strategy: str) -> None:
    before, _ = load_plain(data_dir / "pretrain" / "tiny")
    result = finetune(config(data_dir, f"name=fb_{strategy}", "task=conll2003", "finetune.mode=feature_based",
                             f"finetune.features={strategy}", "finetune.max_train_examples=48",
                             "finetune.lr=1e-3", "finetune.epochs=1"))
    record, module = result.record, result.module
    assert record["mode"] == "feature_based" and record["features"] == strategy and record["bilstm"] is True
    after = module.encoder.state_dict()
    for name, tensor in before.encoder.state_dict().items():
        assert torch.equal(tensor, after[name]), name  # bit-identical
    assert not module.encoder.training and not any(p.requires_grad for p in module.encoder.parameters())
    width = 4 * HIDDEN if strategy == "concat_last_four" else HIDDEN
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


def make_module(data_dir: Path, **kwargs) -> FinetuneModule:
    model, _ = load_plain(data_dir / "pretrain" / "tiny")
    task = Task(name="sst2", kind="classification", hub_id="x", config="x", text_columns=("sentence",),
                label_column="label", num_labels=2, train_split="train", eval_splits=("validation",),
                metric="accuracy")
    return FinetuneModule(model.encoder, task, **kwargs)


def test_head_lr_gives_the_head_its_own_learning_rate(data_dir: Path) -> None:
    module = make_module(data_dir, lr=1e-5, head_lr=1e-3, warmup_ratio=0.1, weight_decay=0.01)
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


def test_head_lr_defaults_to_lr_and_frozen_encoders_get_no_group(data_dir: Path) -> None:
    groups = make_module(data_dir, lr=3e-5).build_optimizer(10)["optimizer"].param_groups
    assert {g["initial_lr"] for g in groups} == {3e-5}
    frozen = make_module(data_dir, mode="feature_based", features="sum_all", lr=3e-5, head_lr=1e-3)
    names = {g["name"] for g in frozen.build_optimizer(10)["optimizer"].param_groups}
    assert names == {"head", "head_no_decay"}


def padded_batch() -> dict[str, torch.Tensor]:
    """Two rows: four real tokens then padding, and six real tokens."""
    return {"input_ids": torch.tensor([[2, 10, 11, 3, 0, 0], [2, 12, 13, 14, 15, 3]]),
            "token_type_ids": torch.zeros(2, 6, dtype=torch.long),
            "attention_mask": torch.tensor([[1, 1, 1, 1, 0, 0], [1] * 6])}


def test_causal_encoders_classify_from_the_last_real_token(data_dir: Path) -> None:
    module = make_module(data_dir, causal=True).eval()
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


def test_mean_pooling_averages_the_real_tokens_only(data_dir: Path) -> None:
    module = make_module(data_dir, pooling="mean").eval()
    batch = padded_batch()
    tokens, out = module.token_features(batch)
    vector = module.sentence_vector(tokens, out, batch["attention_mask"])
    pooler = module.encoder.pooler
    assert torch.allclose(vector[0], torch.tanh(pooler(tokens[0, :4].mean(0))), atol=1e-6)
    assert torch.allclose(vector[1], torch.tanh(pooler(tokens[1].mean(0))), atol=1e-6)
    assert not torch.allclose(vector[0], out.pooled_output[0])   # not the [CLS] vector
    with pytest.raises(ValueError, match="unknown pooling 'max'"):
        make_module(data_dir, pooling="max")


def test_every_encoder_and_seed_scores_the_same_dev_items(data_dir: Path) -> None:
    """A subsampled dev set is drawn by subsample_seed alone: items pair up across cells."""
    cells = {"same_a": ("tiny", 1), "same_b": ("tiny_ltr", 2)}
    for name, (encoder, seed) in cells.items():
        finetune(config(data_dir, f"name={name}", "task=sst2", f"finetune.encoder={encoder}", f"seed={seed}",
                        "finetune.max_eval_examples=30", "finetune.max_train_examples=32", "finetune.epochs=1"))
    a, b = (read_items(data_dir, name) for name in cells)
    picked = sorted(np.random.default_rng(0).permutation(100)[:30].tolist())
    assert a["n"] == b["n"] == 30 and a["model"]["label"] == b["model"]["label"]
    assert a["model"]["label"] == [dev(data_dir, "sst2")["label"][i] for i in picked]
    assert a["floor"] == b["floor"]


@pytest.mark.parametrize("delta", [-3, 5])
def test_a_tokenizer_that_is_not_the_encoders_stops_before_training(data_dir: Path, delta: int) -> None:
    tokenizer_file = data_dir / "tokenizer" / "tokenizer.json"
    tokens = Tokenizer.from_file(str(tokenizer_file)).get_vocab_size()
    name = f"vocab{delta}"
    save_encoder(data_dir, name, tokens + delta, "mlm_nsp")
    with pytest.raises(UserError) as err:
        finetune(config(data_dir, f"name={name}", "task=sst2", f"finetune.encoder={name}"))
    message = str(err.value)
    assert "\n" not in message
    assert f"{tokenizer_file} has {tokens} tokens" in message
    assert f"{data_dir / 'pretrain' / name / CONFIG} has vocab_size {tokens + delta}" in message
    assert not (data_dir / "finetune" / name).exists() and not (data_dir / "checkpoints" / "finetune" / name).exists()


@pytest.mark.parametrize("task", ["sst2", "conll2003", "squad"])
def test_evaluation_batches_change_no_prediction(data_dir: Path, task: str) -> None:
    """Evaluation runs in order of length in batches of `impl.eval_batch_size` (speed only): the same items and
    metrics as row by row in dev-set order."""
    results = [finetune(config(data_dir, f"name=evalbatch-{task}-{b}", f"task={task}", f"impl.eval_batch_size={b}",
                               "finetune.epochs=1", "finetune.lr=1e-3"))
               for b in (1, 64)]
    one, many = (r.items for r in results)
    assert one["model"].keys() == many["model"].keys()
    for key in one["model"]:
        assert np.allclose(one["model"][key], many["model"][key], rtol=1e-5, atol=1e-6), key
    assert results[0].record["headline"] == pytest.approx(results[1].record["headline"], rel=1e-5)


def test_feature_head_lr_drives_the_trained_parts_of_feature_based_runs_only(data_dir: Path) -> None:
    frozen = finetune(config(data_dir, "name=fhl-frozen", "task=conll2003", "finetune.mode=feature_based",
                             "finetune.features=last", "finetune.feature_head_lr=5e-3", "finetune.head_lr=1e-4",
                             "finetune.epochs=1")).module
    whole = finetune(config(data_dir, "name=fhl-whole", "task=conll2003", "finetune.feature_head_lr=5e-3",
                            "finetune.head_lr=1e-4", "finetune.epochs=1")).module
    assert frozen.head_lr == 5e-3 and whole.head_lr == 1e-4


def save_keyed_encoder(d: Path, name: str, key: str) -> None:
    """A 4-layer MLM+NSP encoder of the tokenizer's vocabulary, as the pretrain stage records it (with run key `key`)."""
    save_encoder(d, name, Tokenizer.from_file(str(d / "tokenizer" / "tokenizer.json")).get_vocab_size(), "mlm_nsp")
    write_json(d / "pretrain" / name / "metrics.json", {"name": name, "objective": "mlm_nsp", "run_key": key})


def test_feature_cells_that_read_the_same_layers_the_same_way_are_one_cell(data_dir: Path) -> None:
    """Of a 4-layer encoder, `sum_all` and `sum_last_four` mix the same four layers: the second copies the first
    (under its own name and strategy); `concat_last_four` reads them too but is another model, so it trains."""
    save_keyed_encoder(data_dir, "four", "f")
    args = ("task=conll2003", "finetune.encoder=four", "finetune.mode=feature_based", "finetune.epochs=1")
    first = finetune(config(data_dir, "name=c-sum_last_four", *args, "finetune.features=sum_last_four"))
    same = finetune(config(data_dir, "name=c-sum_all", *args, "finetune.features=sum_all"))
    concat = finetune(config(data_dir, "name=c-concat", *args, "finetune.features=concat_last_four"))
    assert same.module is None and same.record["trained_as"] == "c-sum_last_four"
    assert same.record["features"] == "sum_all" and same.items == first.items
    assert concat.module is not None and "trained_as" not in concat.record


def test_a_cell_on_a_twin_encoder_copies_the_finished_cell(data_dir: Path) -> None:
    """An encoder copied from another run (same run key) with the same cell settings: the finished cell's outputs,
    not a second training; another setting, or `impl.reuse_twins=false`, trains."""
    for name in ("keyed", "keyed_twin"):
        save_keyed_encoder(data_dir, name, "k")
    args = ("task=sst2", "finetune.epochs=1", "finetune.lr=1e-3")
    first = finetune(config(data_dir, "name=sst2-keyed", "finetune.encoder=keyed", *args))
    twin = finetune(config(data_dir, "name=sst2-keyed_twin", "finetune.encoder=keyed_twin", *args))
    assert twin.module is None and twin.record["trained_as"] == "sst2-keyed"
    assert (twin.record["name"], twin.record["encoder"]) == ("sst2-keyed_twin", "keyed_twin")
    assert twin.items == first.items and twin.record["headline"] == first.record["headline"]
    assert read_record(data_dir, "sst2-keyed_twin") == twin.record
    other = finetune(config(data_dir, "name=sst2-keyed_twin", "finetune.encoder=keyed_twin", *args,
                            "finetune.warmup_ratio=0.2"))
    forced = finetune(config(data_dir, "name=sst2-forced", "finetune.encoder=keyed_twin", *args,
                             "impl.reuse_twins=false"))
    assert other.module is not None and "trained_as" not in other.record
    assert forced.module is not None and "trained_as" not in forced.record

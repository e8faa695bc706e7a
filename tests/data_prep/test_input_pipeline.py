"""The one input pipeline (data_prep/input_pipeline.py): per-epoch order, length
grouping, batches cut to their length, and training on cut batches (in-process, tiny
model)."""

import inspect
import json
import logging
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf

from data_prep.classifier import classifier_features
from data_prep.ner import conll, ner_features, ner_records
from data_prep.squad import squad_records
from data_prep import input_pipeline, records
from data_prep.input_pipeline import RecordMetadata
from data_prep.text import tokenization
from data_prep.pretraining import pretraining_data
from modeling import models, training
from modeling.config import BertConfig
from modeling.encoder import BertEncoder
from modeling.objectives import TokenClassificationObjective
from tests.conftest import REPO_ROOT, SAMPLE_DATA, tiny_config

SEQ = 64


# ----------------------------------------------------------------- cutting


def test_lengths_are_cut_to_a_few_sizes():
    assert input_pipeline.length_sizes(128) == [16, 32, 48, 64, 80, 96, 112, 128]
    assert input_pipeline.length_sizes(384) == [
        *(16 * i for i in range(1, 9)),
        *(160, 192, 224, 256, 320, 384),
    ]
    assert input_pipeline.length_sizes(512)[-3:] == [384, 448, 512]
    assert input_pipeline.length_sizes(100) == [16, 32, 48, 64, 80, 96, 100]
    assert input_pipeline.length_sizes(12) == [12]
    for longest, want in ((1, 16), (16, 16), (17, 32), (97, 112), (128, 128), (129, 160)):
        assert input_pipeline.cut_length(longest, 384) == want
        assert int(input_pipeline.cut_length(tf.constant(longest), 384)) == want
    assert input_pipeline.cut_length(300, 128) == 128


def test_cut_batch_keeps_every_real_token():
    mask = np.zeros([3, 2, SEQ], np.int32)  # Multiple choice: [B, C, S].
    mask[0, 1, :33] = 1  # The longest choice of the batch: 33 positions -> 48.
    mask[1, 0, :5] = 1
    mask[2, 0, [0, 1, 20]] = 1  # A hole: the last 1 counts.
    ids = np.arange(3 * 2 * SEQ).reshape(3, 2, SEQ) * mask
    batch = {"input_word_ids": ids, "input_mask": mask, "label_ids": np.array([1, 0, 1])}
    assert input_pipeline.sequence_lengths(mask).numpy().tolist() == [[0, 33], [5, 0], [21, 0]]
    cut = input_pipeline.cut_batch(batch, 64)
    assert cut["input_word_ids"].shape == (3, 2, 48) and cut["input_mask"].shape == (3, 2, 48)
    np.testing.assert_array_equal(cut["input_word_ids"], ids[..., :48])
    assert np.sum(cut["input_mask"]) == mask.sum()
    np.testing.assert_array_equal(cut["label_ids"], [1, 0, 1])
    # NER: labels are a sequence feature, cut with the batch.
    ner = {"input_mask": mask[:, 0], "label_ids": mask[:, 0] - 1}
    cut = input_pipeline.cut_batch(ner, SEQ, ner_records.SEQUENCE_FEATURES)
    assert cut["label_ids"].shape == (3, 32)
    padded = input_pipeline.pad_to_length(np.asarray(cut["label_ids"]), SEQ, value=-1)
    np.testing.assert_array_equal(padded, ner["label_ids"])


def _pretraining_shard(path: str, num_records: int = 24) -> RecordMetadata:
    """A pre-training shard of short sequences (5 to 29 tokens; record i starts with
    token id 1000 + i); returns its metadata."""
    rng = np.random.default_rng(0)
    serialized = []
    for i, length in enumerate(rng.integers(5, 30, size=num_records)):
        ids = np.zeros(SEQ, np.int64)
        ids[:length] = rng.integers(100, 200, size=length)
        ids[0] = 1000 + i
        positions = np.zeros(5, np.int64)
        positions[:3] = np.sort(rng.choice(np.arange(1, length), 3, replace=False))
        feature = {
            "input_ids": records.int64_feature(ids),
            "input_mask": records.int64_feature((ids > 0).astype(np.int64)),
            "segment_ids": records.int64_feature(np.zeros(SEQ, np.int64)),
            "masked_lm_positions": records.int64_feature(positions),
            "masked_lm_ids": records.int64_feature(ids[positions]),
            "masked_lm_weights": tf.train.Feature(
                float_list=tf.train.FloatList(value=[1.0] * 3 + [0.0] * 2)
            ),
            "next_sentence_labels": records.int64_feature([0]),
        }
        example = tf.train.Example(features=tf.train.Features(feature=feature))
        serialized.append(example.SerializeToString())
    records.write_tfrecord(path, serialized)
    return pretraining_data.shards_metadata([path], SEQ, 5)


def test_pretraining_masked_positions_stay_inside_the_cut(tmp_path):
    """Shards of short sequences: each batch is cut to its longest, every masked
    position lies inside it, and the values equal the padded batch's."""
    path = str(tmp_path / "shard.tfrecord")
    metadata = _pretraining_shard(path)
    cut = list(pretraining_data.pretraining_dataset([path], metadata, 8, False))
    full = list(
        pretraining_data.pretraining_dataset([path], metadata, 8, False, pad_to_max_seq_length=True)
    )
    assert [b["input_word_ids"].shape[1] for b in cut] == [32, 32, 32]
    for a, b in zip(cut, full):
        width = a["input_word_ids"].shape[1]
        assert np.max(a["masked_lm_positions"].numpy()) < width
        for key in b:
            want = b[key].numpy()
            if key in input_pipeline.SEQUENCE_FEATURES:
                assert not want[:, width:].any()
                want = want[:, :width]
            np.testing.assert_array_equal(a[key], want)


# ----------------------------------------------------------------- the contract

BUILDERS = {
    "classifier": classifier_features.build_dataset,
    "ner": ner_records.build_dataset,
    "squad": squad_records.build_dataset,
    "pretraining": pretraining_data.pretraining_dataset,
}


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_every_builder_takes_the_contract_or_says_where_it_differs(name):
    """The arguments in the contract's order (the first under the builder's own name),
    then its keyword options, with the contract's defaults; pre-training differs only
    where input_pipeline's docstring says."""
    parameters = list(inspect.signature(BUILDERS[name]).parameters.values())
    contract = input_pipeline.BUILDER_ARGUMENTS
    arguments = parameters[: len(contract)]
    assert [p.name for p in arguments[1:]] == list(contract[1:])
    assert all(p.kind == p.POSITIONAL_OR_KEYWORD for p in arguments)
    options = {p.name: p for p in parameters[len(contract) :]}
    assert all(p.kind == p.KEYWORD_ONLY for p in options.values())
    defaults = {p.name: p.default for p in arguments[4:]}
    if name == "pretraining":
        assert set(input_pipeline.BUILDER_OPTIONS) - set(options) == {"group_by_length"}
        assert defaults == {"seed": input_pipeline.DEFAULT_SEED, "input_context": None}
        buffer = pretraining_data.PRETRAINING_SHUFFLE_BUFFER_SIZE
        assert options["shuffle_buffer_size"].default == buffer
    else:
        assert set(input_pipeline.BUILDER_OPTIONS) <= set(options)
        assert defaults == {"seed": None, "input_context": None}
        buffer = input_pipeline.DEFAULT_SHUFFLE_BUFFER_SIZE
        assert options["shuffle_buffer_size"].default == buffer
        assert options["group_by_length"].default is False
    assert options["pad_to_max_seq_length"].default is False


def test_pretraining_order_is_seeded_every_epoch_and_never_mixes_epochs(tmp_path):
    """The pre-training builder's own order keeps the contract's: each epoch holds
    every record once, in a new order every epoch, the same for the same seed."""
    path = str(tmp_path / "shard.tfrecord")
    metadata = _pretraining_shard(path, num_records=24)

    def first_tokens(**seed):  # 2 epochs of 24 records in batches of 8
        dataset = pretraining_data.pretraining_dataset([path], metadata, 8, True, **seed)
        ids = [batch["input_word_ids"][:, 0].numpy() for batch in dataset.take(6)]
        return np.concatenate(ids).tolist()

    order = first_tokens(seed=input_pipeline.DEFAULT_SEED)
    first, second = order[:24], order[24:]
    assert sorted(first) == sorted(second) == list(range(1000, 1024))
    assert first != second
    assert first_tokens(seed=input_pipeline.DEFAULT_SEED) == order
    assert first_tokens() == order  # the default seed
    assert first_tokens(seed=7) != order


# ----------------------------------------------------------------- order


def test_tfrecord_dataset_shards_by_input_pipeline(tmp_path):
    path = str(tmp_path / "r.tf_record")
    records.write_tfrecord(path, [bytes([i]) for i in range(5)])
    context = tf.distribute.InputContext(
        num_input_pipelines=2, input_pipeline_id=1, num_replicas_in_sync=2
    )
    assert [r.numpy() for r in input_pipeline.tfrecord_dataset(path, context)] == [b"\x01", b"\x03"]
    assert len(list(input_pipeline.tfrecord_dataset([path]))) == 5
    assert input_pipeline.per_replica_batch_size(8, context) == 4
    assert input_pipeline.per_replica_batch_size(8, None) == 8
    assert input_pipeline.pipeline_batch_size(8, context) == 4


def _ner_records(tmp_path, num_sentences=60, max_seq_length=SEQ):
    """The first sentences of fewer than 30 words of the bundled sciner training file
    as NER records (a few need two windows)."""
    sentences = conll.read_conll(str(SAMPLE_DATA / "sciner" / "train.txt"))
    sentences = [s for s in sentences if len(s.words) < 30][:num_sentences]
    labels = conll.label_list(sentences)
    tokenizer = tokenization.FullTokenizer(str(SAMPLE_DATA / "vocab" / "uncased_vocab.txt"))
    features = ner_features.convert_sentences_to_features(
        sentences, labels, tokenizer, max_seq_length, 16
    )
    path = str(tmp_path / "train.tf_record")
    ner_records.write_tfrecord(features, path)
    metadata = ner_records.describe(
        sentences, features, labels, "iob2", "iob2", max_seq_length, 16, True, 30522
    )
    return path, metadata, labels, features


def _ids(batches):
    """The token ids of every example of `batches` (its real tokens), as tuples."""
    return [
        tuple(ids[:length].tolist())
        for batch in batches
        for ids, length in zip(
            np.asarray(batch["input_word_ids"]),
            input_pipeline.sequence_lengths(batch["input_mask"]).numpy(),
        )
    ]


def test_training_order_is_a_new_permutation_every_epoch(tmp_path):
    path, metadata, _, _ = _ner_records(tmp_path)
    n = metadata.num_records
    file_order = _ids(ner_records.build_dataset(path, metadata, 8, False))
    assert len(file_order) == n

    def stream(seed):
        batches = ner_records.build_dataset(path, metadata, 8, True, seed).take(3 * n // 8)
        return _ids(batches)

    order = stream(seed=1)
    assert order == stream(seed=1) != stream(seed=2)
    epochs = [order[i * n : (i + 1) * n] for i in range(3 * n // 8 * 8 // n)]
    assert len(epochs) == 2 and epochs[0] != epochs[1] != file_order
    # Every epoch holds every window once: one epoch ends before the next begins.
    for epoch in epochs:
        assert sorted(epoch) == sorted(file_order)


def test_length_grouped_order(tmp_path):
    lengths = np.random.default_rng(0).integers(3, 64, size=101)
    batch, n = 8, len(lengths)
    orders = [input_pipeline.length_grouped_order(lengths, batch, 5, e, 4) for e in range(4)]
    assert [sorted(o) for o in orders] == [list(range(n))] * 4
    np.testing.assert_array_equal(
        orders[1], input_pipeline.length_grouped_order(lengths, 8, 5, 1, 4)
    )
    assert not np.array_equal(orders[0], orders[1])
    # The stream of epochs cut into batches: batches of similar lengths, but the one
    # at each epoch's end (it holds records of two epochs).
    stream = np.concatenate(orders)
    batches = stream[: len(stream) // batch * batch].reshape(-1, batch)
    spans = [np.ptp(lengths[b]) for b in batches]
    straddling = {(e * n) // batch for e in range(1, 4) if (e * n) % batch}
    grouped = [s for i, s in enumerate(spans) if i not in straddling]
    random_order = np.random.default_rng(1).permutation(n)[: n // batch * batch]
    assert np.mean(grouped) < np.mean(np.ptp(lengths[random_order.reshape(-1, batch)], axis=1)) / 3
    # Grouped in random order, not sorted: the longest batch is not always first.
    maxima = [lengths[b].max() for b in batches[: n // batch]]
    assert maxima != sorted(maxima) and maxima != sorted(maxima, reverse=True)


def test_group_by_length_is_deterministic_resumable_and_splits_over_replicas(tmp_path, caplog):
    path, metadata, _, _ = _ner_records(tmp_path)
    n = metadata.num_records

    def batches(batch_size=8, context=None, **kwargs):
        dataset = ner_records.build_dataset(
            path, metadata, batch_size, True, 3, context, group_by_length=True, **kwargs
        )
        return list(dataset.take(3 * n // 8).as_numpy_iterator())

    with caplog.at_level(logging.WARNING):
        grouped = batches()
    # 60 windows are less than one group of 50 batches: the run is told.
    assert f"--group_by_length on {n} training examples" in caplog.text
    assert _ids(grouped) == _ids(batches())  # Deterministic for a seed.
    plain = _ids(ner_records.build_dataset(path, metadata, 8, True, 3).take(3 * n // 8))
    # Less padding than the plain order: the widths computed are smaller.
    widths = [b["input_word_ids"].shape[1] for b in grouped]
    plain_widths = [
        b["input_word_ids"].shape[1]
        for b in ner_records.build_dataset(path, metadata, 8, True, 3).take(3 * n // 8)
    ]
    assert sum(widths) < sum(plain_widths)
    # Every epoch holds every window once (up to the batches at its ends).
    stream = _ids(grouped)
    assert sorted(stream[:n]) == sorted(plain[:n])
    # A resumed run (the Trainer skips the batches consumed) gets the same batches.
    resumed = ner_records.build_dataset(path, metadata, 8, True, 3, group_by_length=True)
    assert _ids(resumed.skip(5).take(4)) == _ids(grouped[5:9])
    # Two replicas (one input pipeline): each global batch split in two halves.
    context = tf.distribute.InputContext(
        num_input_pipelines=1, input_pipeline_id=0, num_replicas_in_sync=2
    )
    halves = batches(context=context)
    assert _ids(halves[: 2 * 10]) == _ids(grouped[:10])


# ----------------------------------------------------------------- training


def _train_ner(tmp_path, name, path, metadata, labels, pad, steps=6, xla=False, strategy=None):
    """Trains a tiny token classifier (no dropout) `steps` steps of 8 windows; returns
    (per-step losses, model, trainer)."""
    keras.utils.set_random_seed(11)
    config = BertConfig(**tiny_config(0.0, max_position_embeddings=SEQ))
    strategy = strategy or tf.distribute.OneDeviceStrategy("/cpu:0")
    with strategy.scope():
        model = models.BertTokenClassifier(BertEncoder(config), config, len(labels))
    trainer = training.Trainer(
        strategy,
        model,
        TokenClassificationObjective(),
        str(tmp_path / name),
        learning_rate=2e-3,
        num_train_steps=steps,
        enable_xla=xla,
    )
    dataset = strategy.distribute_datasets_from_function(
        lambda context: ner_records.build_dataset(
            path, metadata, 8, True, 4, context, pad_to_max_seq_length=pad
        )
    )
    iterator, loop = iter(dataset), trainer.train_loop()
    losses = [float(loop(iterator, tf.constant(1))[0]) for _ in range(steps)]
    return losses, model, trainer


@pytest.mark.slow
def test_cut_batches_train_the_same_steps_as_full_padding(tmp_path):
    """The same examples in the same order, cut to their length or padded to S: the
    same losses and weights (no dropout), and one trace of the training loop."""
    # The training order (op seed 4) depends on TensorFlow's global seed too, which an
    # earlier test in the same process may have set: under global seed 0 the first six
    # batches all have one shape. Set here, the order is this test's own.
    tf.random.set_seed(1)
    path, metadata, labels, _ = _ner_records(tmp_path)
    widths = [
        b["input_word_ids"].shape[1]
        for b in ner_records.build_dataset(path, metadata, 8, True, 4).take(6)
    ]
    assert len(set(widths)) >= 2 and max(widths) < SEQ  # The steps see several shapes.
    padded_losses, padded, _ = _train_ner(tmp_path, "padded", path, metadata, labels, True)
    losses, cut, trainer = _train_ner(tmp_path, "cut", path, metadata, labels, False)
    assert trainer.train_loop().experimental_get_tracing_count() == 1
    np.testing.assert_allclose(losses, padded_losses, rtol=1e-5)
    assert losses[-1] < losses[0]  # It trained.
    for a, b in zip(padded.weights, cut.weights):
        np.testing.assert_allclose(b.numpy(), a.numpy(), atol=2e-5, err_msg=a.path)


@pytest.mark.slow
def test_xla_trains_cut_batches_as_the_plain_step(tmp_path):
    """--enable_xla on cut batches: one program per length seen (the sizes bound them),
    the same losses and weights as the op-by-op step."""
    path, metadata, labels, _ = _ner_records(tmp_path)
    plain_losses, plain, _ = _train_ner(tmp_path, "plain", path, metadata, labels, False, steps=4)
    losses, compiled, trainer = _train_ner(
        tmp_path, "xla", path, metadata, labels, False, steps=4, xla=True
    )
    assert trainer.train_loop().experimental_get_tracing_count() == 1
    np.testing.assert_allclose(losses, plain_losses, rtol=1e-5)
    for a, b in zip(plain.weights, compiled.weights):
        np.testing.assert_allclose(b.numpy(), a.numpy(), atol=2e-6, err_msg=a.path)


# Two replicas (the CPU split in two before TensorFlow starts, so in a process of its
# own) on cut batches against one device on padded ones: prints the losses and the
# largest weight difference.
_MIRRORED_DRIVER = textwrap.dedent("""
    import json, pathlib, sys
    from modeling import distribution
    distribution.split_cpu(2)
    import numpy as np
    from tests.data_prep.test_input_pipeline import _ner_records, _train_ner
    tmp_path = pathlib.Path(sys.argv[1])
    path, metadata, labels, _ = _ner_records(tmp_path)
    one, one_model, _ = _train_ner(tmp_path, "one", path, metadata, labels, True, steps=4)
    mirrored, model, trainer = _train_ner(
        tmp_path, "two", path, metadata, labels, False, steps=4,
        strategy=distribution.create_strategy("mirrored"),
    )
    diff = max(
        float(np.max(np.abs(a.numpy() - b.numpy())))
        for a, b in zip(one_model.weights, model.weights)
    )
    print("RESULTS" + json.dumps(dict(
        one=one, mirrored=mirrored, max_diff=diff, **trainer.replica_report()
    )))
""")


@pytest.mark.slow
def test_two_replicas_on_cut_batches_compute_the_step_of_one_device(tmp_path):
    """Each replica cuts its half of a global batch to its own longest window; the two
    compute the step of one device on the padded batch."""
    path, metadata, _, _ = _ner_records(tmp_path)
    context = tf.distribute.InputContext(1, 0, 2)
    halves = [
        b["input_word_ids"].shape[1]
        for b in ner_records.build_dataset(path, metadata, 8, True, 4, context).take(8)
    ]
    assert any(a != b for a, b in zip(halves[::2], halves[1::2]))  # Halves of one step differ.
    process = subprocess.run(
        [sys.executable, "-c", _MIRRORED_DRIVER, str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=900,
    )
    lines = [line for line in process.stdout.splitlines() if line.startswith("RESULTS")]
    assert lines, process.stderr[-3000:]
    got = json.loads(lines[0][len("RESULTS") :])
    assert got["num_replicas"] == 2 and got["replica_max_diff"] == 0.0
    np.testing.assert_allclose(got["mirrored"], got["one"], rtol=1e-5)
    assert got["max_diff"] < 2e-5

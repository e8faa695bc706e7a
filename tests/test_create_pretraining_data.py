"""Tests of data_prep/create_pretraining_data.py (the command line) and the modules it
runs: pretraining_instances.py (instances and masking) and pretraining_records.py
(records, metadata, shards).

The oracle is the original release (`bert-tensorflow` 1.0.4) run as a
subprocess. The original serializes the feature map in an order its protobuf
runtime seeds afresh in every process (two runs of it differ byte for byte), so
its records are compared after re-serializing them with sorted keys, which is
how ours are written; record order and file assignment are compared as they are.
"""

import json
import os
import pathlib
import random
import subprocess
import sys

import pytest
import tensorflow as tf
from absl import flags

from data_prep import create_pretraining_data as cpd
from data_prep import pretraining_instances as pti
from data_prep import pretraining_records as ptr
from data_prep import pretraining_data, tokenization

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
CORPUS_GLOB = str(REPO_ROOT / "sample_data" / "corpus" / "*.txt")
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")

# The original's masking with whole words. bert-tensorflow 1.0.4 predates the
# --do_whole_word_mask flag of the GitHub release; this oracle grafts that
# masking step (written here from its description: a "##" piece joins the word
# before it, a word that would exceed the budget is skipped, then the 80/10/10
# draws per piece) onto the released pipeline, which does everything else.
WHOLE_WORD_ORACLE = """
from absl import app, flags
from bert import create_pretraining_data as original


def whole_word_predictions(tokens, masked_lm_prob, max_predictions_per_seq,
                           vocab_words, rng):
    words = []
    for index, token in enumerate(tokens):
        if token == "[CLS]" or token == "[SEP]":
            continue
        if words and token.startswith("##"):
            words[-1].append(index)
        else:
            words.append([index])
    rng.shuffle(words)
    budget = min(max_predictions_per_seq,
                 max(1, int(round(len(tokens) * masked_lm_prob))))
    output = list(tokens)
    chosen = []
    for word in words:
        if len(chosen) >= budget:
            break
        if len(chosen) + len(word) > budget:
            continue
        for index in word:
            if rng.random() < 0.8:
                output[index] = "[MASK]"
            elif rng.random() < 0.5:
                output[index] = tokens[index]
            else:
                output[index] = vocab_words[rng.randint(0, len(vocab_words) - 1)]
            chosen.append(index)
    chosen.sort()
    return output, chosen, [tokens[index] for index in chosen]


original.create_masked_lm_predictions = whole_word_predictions
for name in ("input_file", "output_file", "vocab_file"):
    flags.mark_flag_as_required(name)
app.run(original.main)
"""


# ----------------------------------------------------------------------------
# Helpers.
# ----------------------------------------------------------------------------


def read_records(path):
    return [bytes(r) for r in tf.data.TFRecordDataset(str(path)).as_numpy_iterator()]


def canonical(records):
    return [tf.train.Example.FromString(r).SerializeToString(deterministic=True) for r in records]


def parse(record, max_seq_length=128, max_predictions=20):
    features = tf.io.parse_single_example(
        record, pretraining_data.feature_spec(max_seq_length, max_predictions)
    )
    return {name: value.numpy().tolist() for name, value in features.items()}


def flag_args(input_file, output_file, vocab_file, **extra):
    args = [
        "--input_file=%s" % input_file,
        "--output_file=%s" % output_file,
        "--vocab_file=%s" % vocab_file,
    ]
    return args + ["--%s=%s" % item for item in extra.items()]


def start_original(args, tmp_path, whole_word=False):
    """Starts the original release as a subprocess."""
    if whole_word:
        script = tmp_path / "original_whole_word.py"
        script.write_text(WHOLE_WORD_ORACLE)
        command = [sys.executable, str(script)]
    else:
        command = [sys.executable, "-m", "bert.create_pretraining_data"]
    return subprocess.Popen(
        command + args,
        cwd=tmp_path,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def start_ours(args, as_script=False):
    if as_script:
        script = REPO_ROOT / "data_prep" / "create_pretraining_data.py"
        command = [sys.executable, str(script)]
    else:
        command = [sys.executable, "-m", "data_prep.create_pretraining_data"]
    return subprocess.Popen(
        command + args,
        cwd=REPO_ROOT,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finish(process):
    output, _ = process.communicate(timeout=600)
    assert process.returncode == 0, output[-3000:]
    return output


def options(input_files, output_files, vocab_file, **kwargs):
    instance = pti.InstanceOptions(
        max_seq_length=kwargs.pop("max_seq_length", 128),
        short_seq_prob=kwargs.pop("short_seq_prob", 0.1),
        next_sentence_prediction=kwargs.pop("next_sentence_prediction", True),
    )
    masking = pti.MaskingOptions(
        masked_lm_prob=kwargs.pop("masked_lm_prob", 0.15),
        max_predictions_per_seq=kwargs.pop("max_predictions_per_seq", 20),
        mask_token_prob=kwargs.pop("mask_token_prob", 0.8),
        random_token_prob=kwargs.pop("random_token_prob", 0.1),
        do_whole_word_mask=kwargs.pop("do_whole_word_mask", False),
    )
    return ptr.RunOptions(
        input_files=tuple(map(str, input_files)),
        output_files=tuple(map(str, output_files)),
        vocab_file=vocab_file,
        instance=instance,
        masking=masking,
        **kwargs,
    )


def corpus_files():
    return cpd.expand_input_patterns(CORPUS_GLOB)


class ScriptedRng:
    """A stand-in for random.Random that replays given draws.

    random() and randint() pop the next scripted value (an unexpected draw
    fails the test); shuffle() reverses.
    """

    def __init__(self, randoms=(), randints=()):
        self.randoms = list(randoms)
        self.randints = list(randints)

    def random(self):
        return self.randoms.pop(0)

    def randint(self, a, b):
        value = self.randints.pop(0)
        assert a <= value <= b, (a, value, b)
        return value

    def shuffle(self, items):
        items.reverse()

    def exhausted(self):
        return not self.randoms and not self.randints


@pytest.fixture(scope="module")
def tokenizer(vocab_file):
    return tokenization.FullTokenizer(vocab_file, do_lower_case=True)


@pytest.fixture(scope="module")
def vocab(tokenizer, vocab_file):
    return pti.VocabIds.from_vocab(tokenizer.vocab, vocab_file)


def ids(tokenizer, tokens):
    return tokenizer.convert_tokens_to_ids(tokens)


def tokens(tokenizer, token_ids):
    return tokenizer.convert_ids_to_tokens(token_ids)


# ----------------------------------------------------------------------------
# Equality with the original release.
# ----------------------------------------------------------------------------


def test_module_cli_equals_original(tmp_path, vocab_file):
    """Default flags, dupe_factor 2: the same records in the same order."""
    ours = tmp_path / "ours.tfrecord"
    theirs = tmp_path / "theirs.tfrecord"
    original = start_original(flag_args(CORPUS_GLOB, theirs, vocab_file, dupe_factor=2), tmp_path)
    finish(start_ours(flag_args(CORPUS_GLOB, ours, vocab_file, dupe_factor=2)))
    finish(original)
    records = read_records(ours)
    assert len(records) == 430
    assert records == canonical(read_records(theirs))
    assert json.loads((tmp_path / "ours.tfrecord.meta.json").read_text())["num_instances"] == 430


@pytest.mark.slow
@pytest.mark.parametrize(
    "seed,whole_word,num_outputs", [(12345, True, 1), (987, False, 3), (987, True, 3)]
)
def test_equals_original(tmp_path, vocab_file, seed, whole_word, num_outputs):
    """Two seeds, with and without whole-word masking, one or three files."""
    ours = [tmp_path / ("ours_%d.tfrecord" % i) for i in range(num_outputs)]
    theirs = [tmp_path / ("theirs_%d.tfrecord" % i) for i in range(num_outputs)]
    original = start_original(
        flag_args(
            CORPUS_GLOB, ",".join(map(str, theirs)), vocab_file, dupe_factor=2, random_seed=seed
        ),
        tmp_path,
        whole_word,
    )
    ptr.run(
        options(
            corpus_files(),
            ours,
            vocab_file,
            dupe_factor=2,
            random_seed=seed,
            do_whole_word_mask=whole_word,
        )
    )
    finish(original)
    for our_file, their_file in zip(ours, theirs):
        records = read_records(our_file)
        assert len(records) > 100
        assert records == canonical(read_records(their_file))


@pytest.mark.slow
def test_workers_shard_equals_original_on_each_file(tmp_path, vocab_file):
    """--num_workers 2: each shard is the original's run on its file alone."""
    inputs = corpus_files()
    assert len(inputs) == 2
    out_dir = tmp_path / "shards"
    originals = [
        start_original(
            flag_args(path, tmp_path / ("theirs_%d" % i), vocab_file, dupe_factor=2), tmp_path
        )
        for i, path in enumerate(inputs)
    ]
    finish(
        start_ours(
            flag_args(CORPUS_GLOB, str(out_dir) + "/", vocab_file, dupe_factor=2, num_workers=2)
        )
    )
    for process in originals:
        finish(process)
    for i, path in enumerate(inputs):
        shard = out_dir / (pathlib.Path(path).stem + ".tfrecord")
        records = read_records(shard)
        assert len(records) > 100
        assert records == canonical(read_records(tmp_path / ("theirs_%d" % i)))
        metadata = ptr.load_metadata(str(shard))
        assert metadata["input_files"] == [path]
        assert metadata["num_instances"] == len(records)


@pytest.mark.slow
def test_script_cli_runs(tmp_path, vocab_file):
    """`python data_prep/create_pretraining_data.py` runs as a script (the package is
    importable: installed with `pip install -e .`)."""
    out = tmp_path / "script.tfrecord"
    finish(
        start_ours(
            flag_args(
                CORPUS_GLOB, out, vocab_file, dupe_factor=1, next_sentence_prediction="false"
            ),
            as_script=True,
        )
    )
    expected = tmp_path / "library.tfrecord"
    ptr.run(
        options(
            corpus_files(), [expected], vocab_file, dupe_factor=1, next_sentence_prediction=False
        )
    )
    assert read_records(out) == read_records(expected)


# ----------------------------------------------------------------------------
# Our own runs: round robin, per-file mode, metadata, parsing.
# ----------------------------------------------------------------------------


def test_round_robin_and_metadata(tmp_path, vocab_file):
    single = tmp_path / "single.tfrecord"
    shards = [tmp_path / ("shard_%d.tfrecord" % i) for i in range(3)]
    stats = ptr.run(options(corpus_files(), [single], vocab_file, dupe_factor=1))
    ptr.run(options(corpus_files(), shards, vocab_file, dupe_factor=1))
    records = read_records(single)
    for i, shard in enumerate(shards):
        assert read_records(shard) == records[i::3]

    metadata = [ptr.load_metadata(str(shard)) for shard in shards]
    expected_counts = [len(records[i::3]) for i in range(3)]
    assert [m["num_instances"] for m in metadata] == expected_counts
    assert sum(m["num_tokens"] for m in metadata) == stats.tokens
    assert sum(m["num_masked"] for m in metadata) == stats.masked
    first = metadata[0]
    assert first["max_seq_length"] == 128
    assert first["max_predictions_per_seq"] == 20
    assert first["vocab_file"] == "uncased_vocab.txt"
    assert first["vocab_size"] == 30522
    assert first["do_lower_case"] is True
    assert first["do_whole_word_mask"] is False
    assert first["random_seed"] == 12345 and first["dupe_factor"] == 1
    assert first["masked_lm_prob"] == 0.15
    assert first["shards"] == [s.name for s in shards]
    assert first["input_files"] == corpus_files()
    assert first["run"]["instances"] == len(records) == stats.instances
    assert 0.14 < first["run"]["masked_fraction"] < 0.16
    assert first["features"]["masked_lm_weights"] == {"dtype": "float32", "shape": [20]}
    tokens_in_records = sum(sum(parse(r)["input_mask"]) for r in records)
    assert tokens_in_records == stats.tokens
    assert not list(tmp_path.glob("*.tmp-*"))


def test_per_input_file_equals_separate_runs(tmp_path, vocab_file):
    inputs = corpus_files()
    outputs = [tmp_path / ("per_file_%d.tfrecord" % i) for i in range(2)]
    ptr.run(options(inputs, outputs, vocab_file, dupe_factor=1, per_input_file=True))
    for i, path in enumerate(inputs):
        alone = tmp_path / ("alone_%d.tfrecord" % i)
        ptr.run(options([path], [alone], vocab_file, dupe_factor=1))
        assert read_records(outputs[i]) == read_records(alone)


def test_records_parse_and_are_consistent(tmp_path, tokenizer, vocab, vocab_file):
    out = tmp_path / "new" / "dir" / "out.tfrecord"  # Directories are created.
    ptr.run(options(corpus_files(), [out], vocab_file, dupe_factor=1))
    labels = set()
    for record in read_records(out):
        f = parse(record)
        length = sum(f["input_mask"])
        assert f["input_mask"] == [1] * length + [0] * (128 - length)
        assert f["input_ids"][0] == vocab.cls_id
        assert f["input_ids"][length - 1] == vocab.sep_id
        assert f["input_ids"][length:] == [0] * (128 - length)
        first_sep = f["input_ids"].index(vocab.sep_id)
        assert f["segment_ids"] == (
            [0] * (first_sep + 1) + [1] * (length - first_sep - 1) + [0] * (128 - length)
        )
        count = int(sum(f["masked_lm_weights"]))
        assert count == max(1, min(20, round(length * 0.15)))
        positions = f["masked_lm_positions"][:count]
        assert positions == sorted(set(positions))
        assert 0 < positions[0] and positions[-1] < length - 1
        assert first_sep not in positions
        assert f["masked_lm_positions"][count:] == [0] * (20 - count)
        assert f["masked_lm_ids"][count:] == [0] * (20 - count)
        assert f["masked_lm_weights"] == [1.0] * count + [0.0] * (20 - count)
        assert vocab.mask_id not in f["masked_lm_ids"][:count]
        labels.add(f["next_sentence_labels"][0])
    assert labels == {0, 1}


def test_whole_word_masking_masks_whole_words(tmp_path, vocab, vocab_file):
    out = tmp_path / "wwm.tfrecord"
    ptr.run(options(corpus_files(), [out], vocab_file, dupe_factor=1, do_whole_word_mask=True))
    split_words = 0
    for record in read_records(out):
        f = parse(record)
        count = int(sum(f["masked_lm_weights"]))
        original = list(f["input_ids"])
        for position, label in zip(f["masked_lm_positions"][:count], f["masked_lm_ids"][:count]):
            original[position] = label
        masked = set(f["masked_lm_positions"][:count])
        # A word: a head piece and the "##" pieces after it ([SEP] skipped).
        word = []
        for position, token_id in enumerate(original[: sum(f["input_mask"])]):
            if token_id in (vocab.cls_id, vocab.sep_id):
                continue
            if word and vocab.is_continuation[token_id]:
                word.append(position)
                continue
            if len(word) > 1:
                split_words += 1
                assert len(masked.intersection(word)) in (0, len(word)), word
            word = [position]
    assert split_words > 100


def test_no_next_sentence_prediction(tmp_path, vocab, vocab_file):
    out = tmp_path / "single.tfrecord"
    ptr.run(
        options(
            corpus_files(),
            [out],
            vocab_file,
            dupe_factor=1,
            next_sentence_prediction=False,
            short_seq_prob=0.0,
        )
    )
    records = read_records(out)
    full = 0
    for record in records:
        f = parse(record)
        length = sum(f["input_mask"])
        assert f["next_sentence_labels"] == [0]
        assert f["segment_ids"] == [0] * 128
        assert f["input_ids"][0] == vocab.cls_id
        assert f["input_ids"][:length].count(vocab.sep_id) == 1
        assert f["input_ids"][length - 1] == vocab.sep_id
        full += length == 128
    assert full > len(records) // 2


def test_mask_split_ablation(tmp_path, vocab, vocab_file):
    out = tmp_path / "ablation.tfrecord"
    ptr.run(
        options(
            corpus_files(),
            [out],
            vocab_file,
            dupe_factor=2,
            mask_token_prob=0.5,
            random_token_prob=0.3,
        )
    )
    counts = {"mask": 0, "kept": 0, "other": 0}
    for record in read_records(out):
        f = parse(record)
        for position, label in zip(f["masked_lm_positions"], f["masked_lm_ids"]):
            if not position:
                break
            token_id = f["input_ids"][position]
            kind = "mask" if token_id == vocab.mask_id else "kept" if token_id == label else "other"
            counts[kind] += 1
    total = sum(counts.values())
    assert total > 5000
    assert abs(counts["mask"] / total - 0.5) < 0.03
    assert abs(counts["kept"] / total - 0.2) < 0.03
    assert abs(counts["other"] / total - 0.3) < 0.03


# ----------------------------------------------------------------------------
# Units with exact token lists.
# ----------------------------------------------------------------------------


def packed(tokenizer, text_a, text_b):
    return ids(
        tokenizer,
        ["[CLS]"] + tokenizer.tokenize(text_a) + ["[SEP]"] + tokenizer.tokenize(text_b) + ["[SEP]"],
    )


def test_masking_all_tokens_become_mask(tokenizer, vocab):
    input_ids = packed(tokenizer, "the cat sat", "unaffable dogs")
    masking = pti.MaskingOptions(
        masked_lm_prob=1.0, max_predictions_per_seq=20, mask_token_prob=1.0, random_token_prob=0.0
    )
    output, positions, labels = pti.create_masked_lm_predictions(
        input_ids, masking, vocab, random.Random(1)
    )
    assert tokens(tokenizer, input_ids) == [
        "[CLS]",
        "the",
        "cat",
        "sat",
        "[SEP]",
        "una",
        "##ffa",
        "##ble",
        "dogs",
        "[SEP]",
    ]
    assert tokens(tokenizer, output) == [
        "[CLS]",
        "[MASK]",
        "[MASK]",
        "[MASK]",
        "[SEP]",
        "[MASK]",
        "[MASK]",
        "[MASK]",
        "[MASK]",
        "[SEP]",
    ]
    assert positions == [1, 2, 3, 5, 6, 7, 8]
    assert tokens(tokenizer, labels) == ["the", "cat", "sat", "una", "##ffa", "##ble", "dogs"]


def test_masking_keep_and_random_shares(tokenizer, vocab):
    input_ids = packed(tokenizer, "the cat sat", "on the mat")
    keep_all = pti.MaskingOptions(masked_lm_prob=1.0, mask_token_prob=0.0, random_token_prob=0.0)
    output, positions, labels = pti.create_masked_lm_predictions(
        input_ids, keep_all, vocab, random.Random(3)
    )
    assert output == input_ids
    assert positions == [1, 2, 3, 5, 6, 7]
    assert tokens(tokenizer, labels) == ["the", "cat", "sat", "on", "the", "mat"]

    # Random words drawn from a one-word vocabulary: always "zebra".
    zebra = tokenizer.vocab["zebra"]
    one_word = pti.VocabIds(
        vocab.cls_id, vocab.sep_id, vocab.mask_id, (zebra,), vocab.is_continuation
    )
    all_random = pti.MaskingOptions(masked_lm_prob=0.4, mask_token_prob=0.0, random_token_prob=1.0)
    output, positions, labels = pti.create_masked_lm_predictions(
        input_ids, all_random, one_word, random.Random(3)
    )
    assert len(positions) == 4  # round(10 * 0.4)
    assert [t for t in tokens(tokenizer, output)].count("zebra") == 4
    assert all(output[p] == zebra for p in positions)


def test_masking_draws_like_the_original(tokenizer, vocab):
    """Scripted draws: shuffle reverses, then [MASK] / keep / random per token."""
    input_ids = packed(tokenizer, "the cat sat", "on the mat")
    masking = pti.MaskingOptions(masked_lm_prob=0.3)  # round(10 * 0.3) = 3
    rng = ScriptedRng(randoms=[0.1, 0.9, 0.3, 0.95, 0.7], randints=[2003])
    output, positions, labels = pti.create_masked_lm_predictions(input_ids, masking, vocab, rng)
    # Reversed candidates: mat(7), the(6), on(5). mat -> [MASK] (0.1 < 0.8);
    # the -> kept (0.9, then 0.3 < 0.5); on -> random word 2003 (0.95, 0.7).
    assert tokens(tokenizer, output) == [
        "[CLS]",
        "the",
        "cat",
        "sat",
        "[SEP]",
        "is",
        "the",
        "[MASK]",
        "[SEP]",
    ]
    assert positions == [5, 6, 7]
    assert tokens(tokenizer, labels) == ["on", "the", "mat"]
    assert rng.exhausted()


def test_whole_word_groups_and_budget(tokenizer, vocab):
    input_ids = packed(tokenizer, "unaffable", "cat")  # una ##ffa ##ble | cat
    groups = pti.masking_candidates(input_ids, vocab, do_whole_word_mask=True)
    assert groups == [[1, 2, 3], [5]]
    assert pti.masking_candidates(input_ids, vocab, False) == [[1], [2], [3], [5]]
    # Budget 1 (round(7 * 0.15)): reversed order tries "cat" first and takes it.
    masking = pti.MaskingOptions(
        do_whole_word_mask=True, mask_token_prob=1.0, random_token_prob=0.0
    )
    rng = ScriptedRng(randoms=[0.0])
    output, positions, _ = pti.create_masked_lm_predictions(input_ids, masking, vocab, rng)
    assert tokens(tokenizer, output) == [
        "[CLS]",
        "una",
        "##ffa",
        "##ble",
        "[SEP]",
        "[MASK]",
        "[SEP]",
    ]
    assert positions == [5]
    # Budget 3, "cat" first, then the 3-piece word would exceed it: skipped.
    masking = pti.MaskingOptions(masked_lm_prob=0.4, do_whole_word_mask=True)
    rng = ScriptedRng(randoms=[0.0])
    _, positions, _ = pti.create_masked_lm_predictions(input_ids, masking, vocab, rng)
    assert positions == [5] and rng.exhausted()
    # The word comes first in reversed order: all its pieces, within budget.
    input_ids = packed(tokenizer, "cat", "unaffable")  # cat | una ##ffa ##ble
    rng = ScriptedRng(randoms=[0.0, 0.0, 0.0])
    output, positions, labels = pti.create_masked_lm_predictions(input_ids, masking, vocab, rng)
    assert positions == [3, 4, 5]
    assert tokens(tokenizer, output) == [
        "[CLS]",
        "cat",
        "[SEP]",
        "[MASK]",
        "[MASK]",
        "[MASK]",
        "[SEP]",
    ]
    assert tokens(tokenizer, labels) == ["una", "##ffa", "##ble"]


def test_truncate_seq_pair_front_and_back():
    tokens_a = [1, 2, 3, 4, 5]
    tokens_b = [6, 7]
    # a is longer: front (0.2), back (0.7), front (0.1) -> [3, 4] + [6, 7]...
    rng = ScriptedRng(randoms=[0.2, 0.7, 0.1])
    pti.truncate_seq_pair(tokens_a, tokens_b, 4, rng)
    assert (tokens_a, tokens_b) == ([3, 4], [6, 7])
    # ...then a tie: b is cut (back).
    rng = ScriptedRng(randoms=[0.9])
    pti.truncate_seq_pair(tokens_a, tokens_b, 3, rng)
    assert (tokens_a, tokens_b) == ([3, 4], [6])
    assert rng.exhausted()


def test_sentence_pairs_split_random_next_and_put_back():
    documents = [[[1, 1], [2, 2], [3, 3], [4, 4]], [[9], [8], [7]]]
    # Target 5: sentences 1-3 (6 tokens) form a chunk; A = the first 2
    # (randint 2); random next (0.3 < 0.5): document 1 (randint 1), from its
    # sentence 1 (randint 1) until 5 - 4 = 1 token; sentence 3 goes back.
    # Next chunk: sentences 3-4 (end of document): A = sentence 3 (randint 1),
    # actual next (0.6): B = sentence 4.
    rng = ScriptedRng(randoms=[0.3, 0.6], randints=[2, 1, 1, 1])
    pairs = list(pti.sentence_pairs(documents, 0, 5, rng))
    assert pairs == [([1, 1, 2, 2], [8], True), ([3, 3], [4, 4], False)]
    assert rng.exhausted()


def test_sentence_pairs_single_sentence_is_always_random_next():
    documents = [[[1, 2, 3]], [[5], [6]]]
    # One sentence: no A/B draw, no coin; the random document draw hits itself
    # (randint 0) then 1; start at its sentence 0; B fills to 10 - 3 tokens.
    rng = ScriptedRng(randints=[0, 1, 0])
    pairs = list(pti.sentence_pairs(documents, 0, 10, rng))
    assert pairs == [([1, 2, 3], [5, 6], True)]
    assert rng.exhausted()


def test_instances_from_document_exact(tokenizer, vocab):
    documents = [
        [ids(tokenizer, ["the", "cat"]), ids(tokenizer, ["sat", "down"])],
        [ids(tokenizer, ["dogs"])],
    ]
    instance_options = pti.InstanceOptions(max_seq_length=8)
    masking = pti.MaskingOptions(masked_lm_prob=0.1, mask_token_prob=1.0, random_token_prob=0.0)
    # Target: short (0.05 < 0.1) -> randint 3. Chunk [the cat][sat down]:
    # A = 1 sentence (randint 1), actual next (0.9). No truncation (4 <= 5).
    # Masking: budget 1 of reversed candidates -> "down" -> [MASK] (0.0).
    rng = ScriptedRng(randoms=[0.05, 0.9, 0.0], randints=[3, 1])
    [instance] = pti.create_instances_from_document(
        documents, 0, instance_options, masking, vocab, rng
    )
    assert tokens(tokenizer, instance.input_ids) == [
        "[CLS]",
        "the",
        "cat",
        "[SEP]",
        "sat",
        "[MASK]",
        "[SEP]",
    ]
    assert instance.segment_ids == [0, 0, 0, 0, 1, 1, 1]
    assert instance.masked_lm_positions == [5]
    assert tokens(tokenizer, instance.masked_lm_ids) == ["down"]
    assert instance.is_random_next is False
    assert rng.exhausted()


def test_single_segment_instances_exact(tokenizer, vocab):
    documents = [
        [
            ids(tokenizer, ["the", "cat"]),
            ids(tokenizer, ["sat", "down"]),
            ids(tokenizer, ["on", "the", "mat"]),
        ]
    ]
    instance_options = pti.InstanceOptions(max_seq_length=6, next_sentence_prediction=False)
    masking = pti.MaskingOptions(masked_lm_prob=0.1, mask_token_prob=1.0, random_token_prob=0.0)
    # Target 4 (0.5 >= 0.1): [the cat sat down] fits; [on the mat] is the rest.
    rng = ScriptedRng(randoms=[0.5, 0.0, 0.0])
    instances = pti.create_instances_from_document(
        documents, 0, instance_options, masking, vocab, rng
    )
    assert [tokens(tokenizer, i.input_ids) for i in instances] == [
        ["[CLS]", "the", "cat", "sat", "[MASK]", "[SEP]"],
        ["[CLS]", "on", "the", "[MASK]", "[SEP]"],
    ]
    assert [i.segment_ids for i in instances] == [[0] * 6, [0] * 5]
    assert [i.is_random_next for i in instances] == [False, False]
    assert rng.exhausted()


def test_serialization_round_trip(tokenizer, vocab):
    instance = pti.TrainingInstance(
        input_ids=ids(tokenizer, ["[CLS]", "the", "[MASK]", "[SEP]", "sat", "[SEP]"]),
        segment_ids=[0, 0, 0, 0, 1, 1],
        masked_lm_positions=[2],
        masked_lm_ids=ids(tokenizer, ["cat"]),
        is_random_next=True,
    )
    record = ptr.serialize_instance(instance, max_seq_length=8, max_predictions_per_seq=3)
    f = parse(record, 8, 3)
    assert tokens(tokenizer, f["input_ids"][:6]) == [
        "[CLS]",
        "the",
        "[MASK]",
        "[SEP]",
        "sat",
        "[SEP]",
    ]
    assert f["input_ids"][6:] == [0, 0]
    assert f["input_mask"] == [1] * 6 + [0, 0]
    assert f["segment_ids"] == [0, 0, 0, 0, 1, 1, 0, 0]
    assert f["masked_lm_positions"] == [2, 0, 0]
    assert f["masked_lm_ids"] == [tokenizer.vocab["cat"], 0, 0]
    assert f["masked_lm_weights"] == [1.0, 0.0, 0.0]
    assert f["next_sentence_labels"] == [1]
    assert ptr.canonical_record(record) == record


def test_shuffle_matches_random_shuffle():
    assert pti._INLINED_SHUFFLE_IS_EXACT
    for seed in (0, 12345):
        for size in (0, 1, 2, 5, 128, 4097):
            expected, rng_a = list(range(size)), random.Random(seed)
            actual, rng_b = list(range(size)), random.Random(seed)
            rng_a.shuffle(expected)
            pti.shuffle(actual, rng_b)
            assert actual == expected
            assert rng_a.random() == rng_b.random()


def test_keep_share_is_exact():
    assert pti.MaskingOptions().keep_share == 0.5
    assert pti.MaskingOptions(mask_token_prob=0.5, random_token_prob=0.2).keep_share == 0.6
    assert pti.MaskingOptions(mask_token_prob=1.0, random_token_prob=0.0).keep_share == 0.0


# ----------------------------------------------------------------------------
# Bad input and interrupted writes.
# ----------------------------------------------------------------------------


def test_empty_corpus_names_the_files(tmp_path, vocab_file):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n   \n\n\x00\n")
    with pytest.raises(ValueError, match="empty.*empty.txt"):
        ptr.run(options([empty], [tmp_path / "out.tfrecord"], vocab_file))
    assert not list(tmp_path.glob("out.tfrecord*"))


def test_missing_input_pattern(tmp_path):
    with pytest.raises(ValueError, match="nothing_here.*matches no file"):
        cpd.expand_input_patterns(CORPUS_GLOB + "," + str(tmp_path / "nothing_here*"))


def test_vocab_without_special_tokens_names_the_file(tmp_path):
    bad_vocab = tmp_path / "bad_vocab.txt"
    bad_vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nthe\ncat\n")
    with pytest.raises(ValueError, match=r"bad_vocab.txt.*\[MASK\]"):
        ptr.run(options([CORPUS_GLOB], [tmp_path / "out.tfrecord"], str(bad_vocab)))


def test_bad_settings():
    with pytest.raises(ValueError, match="max_seq_length=4"):
        pti.InstanceOptions(max_seq_length=4)
    pti.InstanceOptions(max_seq_length=4, next_sentence_prediction=False)
    with pytest.raises(ValueError, match="exceeds 1"):
        pti.MaskingOptions(mask_token_prob=0.8, random_token_prob=0.3)
    with pytest.raises(ValueError, match="masked_lm_prob"):
        pti.MaskingOptions(masked_lm_prob=1.5)
    with pytest.raises(ValueError, match="dupe_factor"):
        ptr.RunOptions(("a",), ("b",), "v", dupe_factor=0)


def test_short_documents_and_long_lines_are_counted(tmp_path, vocab_file, caplog):
    corpus = tmp_path / "odd.txt"
    long_line = " ".join(["word"] * 40)
    corpus.write_text(
        "One sentence only.\n\nFirst of two.\nSecond of two.\n\n" + long_line + "\nshort.\n"
    )
    out = tmp_path / "odd.tfrecord"
    caplog.set_level("WARNING", logger="absl")
    stats = ptr.run(options([corpus], [out], vocab_file, dupe_factor=3, max_seq_length=32))
    assert stats.documents == 3
    assert stats.one_sentence_documents == 1
    assert stats.long_lines == 1
    assert "odd.txt:6 has 40 tokens" in caplog.text
    assert len(read_records(out)) == stats.instances
    for record in read_records(out):
        assert sum(parse(record, 32)["input_mask"]) <= 32


def test_invalid_utf8_names_file_and_line(tmp_path, vocab_file):
    corpus = tmp_path / "latin1.txt"
    corpus.write_bytes(b"fine line\ncaf\xe9\n")
    with pytest.raises(
        ValueError,
        match=r"latin1.txt:2: not UTF-8 text \(invalid "
        r"continuation byte: byte b.\\xe9. at column 4\)",
    ):
        ptr.run(options([corpus], [tmp_path / "o.tfrecord"], vocab_file))


def test_interrupted_write_leaves_no_shard(tmp_path, vocab_file, monkeypatch):
    outputs = [tmp_path / "a.tfrecord", tmp_path / "b.tfrecord"]
    real_getitem = ptr.RecordSpill.__getitem__
    calls = []

    def failing_getitem(self, index):
        calls.append(index)
        if len(calls) == 50:
            raise KeyboardInterrupt("simulated interruption")
        return real_getitem(self, index)

    monkeypatch.setattr(ptr.RecordSpill, "__getitem__", failing_getitem)
    with pytest.raises(KeyboardInterrupt):
        ptr.run(options(corpus_files(), outputs, vocab_file, dupe_factor=1))
    assert len(calls) == 50
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_output_files_per_input(tmp_path):
    inputs = ["x/one.txt", "y/two.txt"]
    assert cpd.resolve_output_files("a,b", inputs, per_input_file=False) == ["a", "b"]
    assert cpd.resolve_output_files("a,b", inputs, per_input_file=True) == ["a", "b"]
    out_dir = str(tmp_path / "shards") + "/"
    assert cpd.resolve_output_files(out_dir, inputs, True) == [
        out_dir + "one.tfrecord",
        out_dir + "two.tfrecord",
    ]
    with pytest.raises(ValueError, match="one file per input file"):
        cpd.resolve_output_files("a", inputs, True)
    with pytest.raises(ValueError, match="share a name"):
        cpd.resolve_output_files(out_dir, ["x/one.txt", "y/one.txt"], True)


def test_flags_build_options(tmp_path, vocab_file):
    flag_values = flags.FlagValues()
    cpd.define_flags(flag_values)
    flag_values(
        ["prog"]
        + flag_args(
            CORPUS_GLOB,
            str(tmp_path) + "/",
            vocab_file,
            num_workers=2,
            mask_token_prob=0.6,
            next_sentence_prediction="false",
        )
    )
    run_options = cpd.options_from_flags(flag_values)
    assert run_options.per_input_file and run_options.num_workers == 2
    assert len(run_options.output_files) == 2
    assert run_options.masking.mask_token_prob == 0.6
    assert run_options.masking.random_token_prob == 0.1
    assert run_options.instance.next_sentence_prediction is False
    assert run_options.instance.max_seq_length == 128
    assert run_options.dupe_factor == 10 and run_options.random_seed == 12345
    assert run_options.do_lower_case is True
    assert run_options.masking.do_whole_word_mask is False


def test_progress_logger(caplog):
    now = [0.0]
    progress = ptr.ProgressLogger("corpus", total=100, interval_s=10, clock=lambda: now[0])
    caplog.set_level("INFO", logger="absl")
    now[0] = 5.0
    progress.update(10, 50)
    assert "documents" not in caplog.text
    now[0] = 20.0
    progress.update(25, 200)
    assert (
        "corpus: 25/100 documents (25.0%), 200 instances, 10 instances/s, "
        "ETA 0:01:00" in caplog.text
    )


def test_contradictory_masking_options_are_refused():
    """No masked position allowed while asking for masking: the shards would train
    nothing, so it is an error, not a run."""
    with pytest.raises(
        ValueError,
        match=r"max_predictions_per_seq=0 with "
        r"masked_lm_prob=0.15: no position could be masked",
    ):
        pti.MaskingOptions(masked_lm_prob=0.15, max_predictions_per_seq=0)
    with pytest.raises(ValueError, match="must not be negative"):
        pti.MaskingOptions(max_predictions_per_seq=-1)
    assert pti.MaskingOptions(masked_lm_prob=0.0, max_predictions_per_seq=0)

"""Tests of data_prep/create_pretraining_data.py (the command line) and the modules it
runs, on the bundled corpus: equality with the original release, our own runs
(round robin, per-file mode, metadata, parsing), bad input and interrupted writes.
The units of pretraining_instances.py are in test_pretraining_instances.py.

The oracle is the original release (`bert-tensorflow` 1.0.4) run in a subprocess
(all its runs in one, the module fixture `originals`). The original serializes the
feature map in an order its protobuf runtime seeds afresh in every process (two runs
of it differ byte for byte), so its records are compared after re-serializing them
with sorted keys, which is how ours are written; record order and file assignment
are compared as they are.
"""

import json
import pathlib

import pytest
from absl import flags

from data_prep import create_pretraining_data as cpd
from data_prep.pretraining import pretraining_instances as pti
from data_prep.pretraining import pretraining_data
from data_prep import records
from data_prep.pretraining import pretraining_records as ptr
from tests.helpers.pretraining_data_helpers import (
    CORPUS_GLOB,
    canonical,
    corpus_files,
    finish,
    flag_args,
    options,
    parse,
    read_records,
    run_originals,
    start_ours,
)


# ----------------------------------------------------------------------------
# Equality with the original release.
# ----------------------------------------------------------------------------


EQUALS_ORIGINAL = [(12345, True, 1), (987, False, 3), (987, True, 3)]


@pytest.fixture(scope="module")
def originals(tmp_path_factory, vocab_file):
    """The original release's shards that the tests below compare ours with, all made
    in one process (TensorFlow starts once), dupe_factor 2: {"cli": the default flags;
    (seed, whole_word, num_outputs): its files; "files": one shard per corpus file}."""
    d = tmp_path_factory.mktemp("originals")
    made = {"cli": d / "cli.tfrecord"}
    runs = [(flag_args(CORPUS_GLOB, made["cli"], vocab_file, dupe_factor=2), False)]
    for seed, whole_word, num_outputs in EQUALS_ORIGINAL:
        key = (seed, whole_word, num_outputs)
        made[key] = [d / f"theirs_{seed}_{whole_word}_{i}.tfrecord" for i in range(num_outputs)]
        outputs = ",".join(map(str, made[key]))
        args = flag_args(CORPUS_GLOB, outputs, vocab_file, dupe_factor=2, random_seed=seed)
        runs.append((args, whole_word))
    made["files"] = [d / f"file_{i}.tfrecord" for i in range(len(corpus_files()))]
    for path, output in zip(corpus_files(), made["files"]):
        runs.append((flag_args(path, output, vocab_file, dupe_factor=2), False))
    run_originals(runs, d)
    return made


def test_module_cli_equals_original(tmp_path, vocab_file, originals):
    """Default flags, dupe_factor 2: the same records in the same order."""
    ours = tmp_path / "ours.tfrecord"
    finish(start_ours(flag_args(CORPUS_GLOB, ours, vocab_file, dupe_factor=2)))
    records = read_records(ours)
    assert len(records) == 430
    assert records == canonical(read_records(originals["cli"]))
    assert json.loads((tmp_path / "ours.tfrecord.meta.json").read_text())["num_instances"] == 430


@pytest.mark.slow
@pytest.mark.parametrize("seed,whole_word,num_outputs", EQUALS_ORIGINAL)
def test_equals_original(tmp_path, vocab_file, originals, seed, whole_word, num_outputs):
    """Two seeds, with and without whole-word masking, one or three files."""
    ours = [tmp_path / ("ours_%d.tfrecord" % i) for i in range(num_outputs)]
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
    theirs = originals[(seed, whole_word, num_outputs)]
    for our_file, their_file in zip(ours, theirs):
        records = read_records(our_file)
        assert len(records) > 100
        assert records == canonical(read_records(their_file))


@pytest.mark.slow
def test_workers_shard_equals_original_on_each_file(tmp_path, vocab_file, originals):
    """--num_workers 2: each shard is the original's run on its file alone."""
    inputs = corpus_files()
    assert len(inputs) == 2
    out_dir = tmp_path / "shards"
    finish(
        start_ours(
            flag_args(CORPUS_GLOB, str(out_dir) + "/", vocab_file, dupe_factor=2, num_workers=2)
        )
    )
    for path, theirs in zip(inputs, originals["files"]):
        shard = out_dir / (pathlib.Path(path).stem + ".tfrecord")
        records = read_records(shard)
        assert len(records) > 100
        assert records == canonical(read_records(theirs))
        metadata = pretraining_data.read_metadata(str(shard))
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

    metadata = [pretraining_data.read_metadata(str(shard)) for shard in shards]
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
        records.expand_globs(
            CORPUS_GLOB + "," + str(tmp_path / "nothing_here*"), original_order=True
        )


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
    # No warning per line (a corpus may hold thousands): one line at the end.
    assert "odd.txt" not in caplog.text
    assert stats.long_lines_note(29) == (
        f"1 line longer than the 29 tokens an instance holds was truncated (the first: "
        f"{corpus}:6, 40 tokens)"
    )
    assert "first_long_line" not in stats.summary()  # The metadata keeps its keys.
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

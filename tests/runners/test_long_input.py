"""run_classifier.py --long_input=windows: the windows of a text (pair), the joining of
their logits, and the runner end to end on the bundled long texts (SQuAD excerpts,
sample_data/long_text): one prediction per text, the same from the fine-tuned
output_dir and from the export, and usage errors for windows that cannot work.
"""

import json

import numpy as np
import pytest

from benchmarks.study import make_long_text_set
from data_prep.classifier import classifier_windows
from tests.conftest import read_results, write_tiny_config
from tests.helpers.run_classifier_helpers import _read_tsv, _write_lines, run_in_one_process


def test_windows_of_a_single_text():
    ids = list(range(100, 113))  # 13 pieces; windows of 8 - 2 = 6 pieces every 4
    got = classifier_windows.window_pieces(ids, None, max_seq_length=8, doc_stride=4)
    assert got == [
        (list(range(100, 106)), None),
        (list(range(104, 110)), None),
        (list(range(108, 113)), None),
    ]
    # A text that fits is one window: the truncating packing of the same text.
    assert classifier_windows.window_pieces(ids[:6], None, 8, 4) == [(ids[:6], None)]


def test_windows_of_a_pair_cut_the_longer_text_and_keep_the_shorter():
    long, short = list(range(100, 110)), [1, 2]
    # Room for 10 - 3 - 2 = 5 pieces of the longer text, every 3 pieces.
    got = classifier_windows.window_pieces(long, short, max_seq_length=10, doc_stride=3)
    assert got == [(long[0:5], short), (long[3:8], short), (long[6:10], short)]
    # The longer text in B: the shorter stays segment A.
    got = classifier_windows.window_pieces(short, long, max_seq_length=10, doc_stride=3)
    assert got == [(short, long[0:5]), (short, long[3:8]), (short, long[6:10])]
    # A shorter text beyond (10 - 3) // 2 = 3 pieces is cut to 3: windows of 4.
    got = classifier_windows.window_pieces(long, [1, 2, 3, 4, 5], 10, 4)
    assert got == [(long[0:4], [1, 2, 3]), (long[4:8], [1, 2, 3]), (long[8:10], [1, 2, 3])]


def test_pooling_joins_each_texts_windows():
    logits = np.array([[1.0, 0.0], [3.0, -2.0], [0.5, 0.5], [-1.0, 4.0]])
    index = np.array([0, 0, 1, 2])
    np.testing.assert_allclose(
        classifier_windows.pool_windows(logits, index, 3, "mean"),
        [[2.0, -1.0], [0.5, 0.5], [-1.0, 4.0]],
    )
    np.testing.assert_allclose(
        classifier_windows.pool_windows(logits, index, 3, "max"),
        [[3.0, 0.0], [0.5, 0.5], [-1.0, 4.0]],
    )
    labels = classifier_windows.first_of_each_text(np.array([4, 4, 2, 0]), index, 3)
    assert labels.tolist() == [4, 2, 0]
    with pytest.raises(ValueError, match="windows of 2 texts, expected 4"):
        classifier_windows.pool_windows(logits, np.array([0, 0, 1, 1]), 4, "mean")


class _SumModel:
    """A stand-in for `ModelCall`: logits that tell every window apart (the sums of its
    ids, of its B segment's ids, and its length)."""

    def cut(self, inputs):
        return inputs

    def __call__(self, inputs):
        import tensorflow as tf

        ids = tf.cast(inputs["input_word_ids"], tf.float32)
        type_ids = tf.cast(inputs["input_type_ids"], tf.float32)
        mask = tf.cast(inputs["input_mask"], tf.float32)
        return {
            "logits": tf.stack(
                [
                    tf.reduce_sum(ids, 1),
                    tf.reduce_sum(ids * type_ids, 1),
                    tf.reduce_sum(mask, 1),
                ],
                axis=1,
            )
        }


def _python_logits(tokenizer, text_a, text_b, seq_length, stride, max_windows, pooling):
    """What the runner computes with _SumModel's logits."""
    from data_prep.classifier.classifier_reader import InputExample

    rows = []
    for i, (a, b) in enumerate(zip(text_a, text_b or [None] * len(text_a))):
        example = InputExample(f"t-{i}", a, b or None, "x")
        windows, _ = classifier_windows.convert_example_windows(
            example, ["x"], seq_length, tokenizer, stride, max_windows
        )
        logits = [
            [
                sum(w.input_ids),
                sum(i * t for i, t in zip(w.input_ids, w.segment_ids)),
                sum(w.input_mask),
            ]
            for w in windows
        ]
        index = np.zeros(len(logits), int)
        rows.append(classifier_windows.pool_windows(np.array(logits), index, 1, pooling)[0])
    return np.array(rows)


@pytest.mark.parametrize("pooling", ["mean", "max"])
def test_in_graph_windows_are_the_runners(vocab_file, pooling):
    import tensorflow as tf

    from data_prep.text import tf_tokenization, tokenization
    from serving import classifier

    text = (_texts_of(vocab_file)[0] + " ") * 3
    text_a = [text, "a short one.", "", text[:200], "the question?"]
    text_b = ["", "and its long pair " + text, "", text[:150], text]
    python = tokenization.FullTokenizer(vocab_file, True)
    graph = tf_tokenization.TFBertTokenizer(vocab_file, True)
    for b in (None, text_b):
        got = classifier.window_logits(
            _SumModel(),
            graph,
            32,
            tf.constant(text_a),
            None if b is None else tf.constant(b),
            doc_stride=12,
            pooling=pooling,
            max_windows=5,
        )
        want = _python_logits(python, text_a, b, 32, 12, 5, pooling)
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)


def _texts_of(vocab_file):
    import pathlib

    sample = pathlib.Path(vocab_file).parent.parent / "long_text" / "test.tsv"
    (texts,) = _texts(sample, ["text"])
    return texts


@pytest.mark.parametrize(
    "stride,windows,message",
    [
        (30, 4, "--doc_stride=30: windows of --max_seq_length=32 hold 30 pieces"),
        (0, 4, "--doc_stride=0"),
        (8, 0, "--max_windows_per_text=0: give at least 1"),
    ],
)
def test_windows_that_cannot_work_name_the_flag(stride, windows, message):
    with pytest.raises(ValueError, match=message):
        classifier_windows.check_window_settings(32, stride, windows)


def _pairs(source, target):
    """The long texts as pairs: the first 6 words and the rest, A and B in turn."""
    lines = source.read_text(encoding="utf-8").splitlines()
    rows = ["label\ta\tb"]
    for i, line in enumerate(lines[1:]):
        label, text = line.split("\t")
        words = text.split()
        short, long = " ".join(words[:6]), " ".join(words[6:])
        rows.append(f"{label}\t{short}\t{long}" if i % 2 else f"{label}\t{long}\t{short}")
    _write_lines(target, rows)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, sample_data, vocab_file):
    root = tmp_path_factory.mktemp("long_input")
    config = write_tiny_config(root / "bert_config.json", dropout=0.1)
    data = sample_data / "long_text"
    pairs = root / "pairs"
    for split in ("train", "dev", "test"):
        _pairs(data / f"{split}.tsv", pairs / f"{split}.tsv")
    common = [
        "--task_name=generic",
        "--label_column=label",
        f"--vocab_file={vocab_file}",
        "--max_seq_length=32",
        "--train_batch_size=8",
        "--num_train_epochs=1",
        "--deterministic",
        "--dtype=float32",  # The exports answer as predicted to 1e-5 (bfloat16: not).
    ]
    single = [*common, "--text_a_column=text", f"--data_dir={data}"]
    cases = {
        "windows": [
            *single,
            f"--bert_config_file={config}",
            "--do_train",
            "--do_eval",
            "--do_predict",
            "--long_input=windows",
            "--doc_stride=16",
            "--max_windows_per_text=12",
            f"--output_dir={root / 'windows'}",
            f"--export_dir={root / 'windows_export'}",
        ],
        # Pairs, from the fine-tuned output_dir: its windows, here joined by their maximum.
        "pairs": [
            *common,
            "--text_a_column=a",
            "--text_b_column=b",
            f"--data_dir={pairs}",
            "--do_predict",
            f"--init_checkpoint={root / 'windows'}",
            "--window_pooling=max",
            f"--output_dir={root / 'pairs_out'}",
            f"--export_dir={root / 'pairs_export'}",
        ],
        "stride_too_long": [
            *single,
            f"--bert_config_file={config}",
            "--do_train",
            "--long_input=windows",
            "--doc_stride=30",
            f"--output_dir={root / 'bad'}",
        ],
        "stride_without_windows": [
            *single,
            f"--bert_config_file={config}",
            "--do_train",
            "--doc_stride=8",
            f"--output_dir={root / 'bad'}",
        ],
    }
    results = run_in_one_process(cases)
    return {"root": root, "data": data, **results}


def _texts(path, columns):
    lines = path.read_text(encoding="utf-8").splitlines()
    header = lines[0].split("\t")
    return [[row.split("\t")[header.index(c)] for row in lines[1:]] for c in columns]


def _export(path):
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the tokenizer ops)

    return tf.saved_model.load(str(path))


@pytest.mark.slow
def test_windows_train_evaluate_and_predict_one_row_per_text(runs):
    assert runs["windows"] == ["no error", ""]
    out = runs["root"] / "windows"
    metadata = json.loads((out / "train.windows.tf_record.meta.json").read_text())
    # 10 texts of 159 to 224 words, windows of 30 pieces every 16: many per text.
    assert metadata["num_texts"] == 10 and metadata["num_examples"] > 60
    assert metadata["num_texts_cut"] >= 1  # Some have more than 12 windows.
    assert _read_tsv(out / "test_results.tsv").shape == (10, 5)  # one row per text
    assert set(read_results(out / "eval_results.txt")) >= {"eval_accuracy", "eval_loss"}
    info = json.loads((out / "model_info.json").read_text())
    assert info["long_input"] == {
        "mode": "windows",
        "doc_stride": 16,
        "window_pooling": "mean",
        "max_windows_per_text": 12,
    }


@pytest.mark.slow
def test_the_export_joins_windows_as_the_runner_does(runs):
    import tensorflow as tf

    assert runs["windows"] == ["no error", ""]
    (texts,) = _texts(runs["data"] / "test.tsv", ["text"])
    want = _read_tsv(runs["root"] / "windows" / "test_results.tsv")
    model = _export(runs["root"] / "windows_export")
    got = model.signatures["serving_text_a"](text_a=tf.constant(texts))["probabilities"]
    np.testing.assert_allclose(got.numpy(), want, atol=1e-5)
    assert model.window_pooling.numpy() == b"mean"


@pytest.mark.slow
def test_pairs_from_the_output_dir_window_and_pool_in_the_export_too(runs):
    """Pairs predicted from the fine-tuned output_dir with --window_pooling=max: the
    fine-tuned model's windows, the longer text windowed, the windows joined by their
    maximum, in the runner and in the export alike."""
    import tensorflow as tf

    assert runs["pairs"] == ["no error", ""]
    a, b = _texts(runs["root"] / "pairs" / "test.tsv", ["a", "b"])
    want = _read_tsv(runs["root"] / "pairs_out" / "test_results.tsv")
    model = _export(runs["root"] / "pairs_export")
    got = model.signatures["serving_default"](text_a=tf.constant(a), text_b=tf.constant(b))
    np.testing.assert_allclose(got["probabilities"].numpy(), want, atol=1e-5)
    assert model.window_pooling.numpy() == b"max"
    config = json.loads((runs["root"] / "pairs_out" / "model_info.json").read_text())
    assert config["long_input"]["window_pooling"] == "max"
    assert config["long_input"]["doc_stride"] == 16  # the fine-tuned model's


@pytest.mark.slow
@pytest.mark.parametrize(
    "case,message",
    [
        ("stride_too_long", "--doc_stride=30: windows of --max_seq_length=32 hold 30 pieces"),
        ("stride_without_windows", "--doc_stride is for --long_input=windows"),
    ],
)
def test_bad_window_flags_are_usage_errors(runs, case, message):
    assert runs[case][0] == "UsageError" and message in runs[case][1]


def test_the_sample_is_what_make_long_text_set_builds(sample_data, tmp_path):
    make_long_text_set.main(
        [
            f"--squad_file={sample_data / 'squad' / 'dev-v2.0-first5articles.json'}",
            f"--output_dir={tmp_path}",
            "--paragraphs_per_text=2",
            "--max_texts_per_article=2",
        ]
    )
    for split in ("train", "dev", "test"):
        assert (tmp_path / f"{split}.tsv").read_bytes() == (
            sample_data / "long_text" / f"{split}.tsv"
        ).read_bytes()
    (texts,) = _texts(tmp_path / "dev.tsv", ["text"])
    assert len(texts) == 10 and min(len(t.split()) for t in texts) > 100

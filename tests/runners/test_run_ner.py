"""Tests of run_ner.py, end to end, in subprocesses.

run_ner.py runs on slices of the
bundled sciner data with a tiny random BERT (2 layers, hidden 32) and the bundled
vocabulary. The training slice is written in IOB1 (CoNLL-2003's scheme), the dev slice
in IOB2 and the test slice in IOBES, so the runs learn IOB1 labels and write each
file's predictions in its own scheme. The two processes of the fast tests start together
when the first of them is needed (`runs` fixture): the feature-based run on two replicas,
as a user runs it, and one process for all the other runs, one after the other (one
TensorFlow start-up). The feature-based model is tested in test_feature_based.py.
"""

import collections
import json
import pathlib
import re
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from data_prep.ner import conll, ner_records, tag_schemes
from evaluation import conlleval
from modeling import checkpoint_writers, checkpoints
from modeling.config import BertConfig
from modeling.encoder import BertEncoder
from modeling.feature_based import BertFeatureBasedTagger
from modeling.models import BertTokenClassifier
from serving import encoder as serving_encoder
from tests.conftest import read_results
from tests.helpers.ner_helpers import (
    ENV,
    REPO_ROOT,
    RUN_NER,
    TINY_CONFIG,
    driver_results,
    start_driver,
)

LONG_SENTENCE_WORDS = 600
VOCAB_FILE = str(REPO_ROOT / "sample_data" / "vocab" / "uncased_vocab.txt")


# ----------------------------------------------------------------------------
# Inputs.
# ----------------------------------------------------------------------------


def _conll_text(sentences, tags_of=lambda s: s.tags) -> str:
    return "".join(
        "".join(f"{w} {t}\n" for w, t in zip(s.words, tags_of(s))) + "\n" for s in sentences
    )


def _long_sentence(sentences, num_words: int) -> conll.Sentence:
    """num_words words (with their IOB2 tags) of `sentences`, cycled, as one sentence."""
    pairs = [(w, t) for s in sentences for w, t in zip(s.words, s.tags)]
    pairs = [pairs[i % len(pairs)] for i in range(num_words)]
    return conll.Sentence(
        words=tuple(w for w, _ in pairs),
        tags=tuple(tag_schemes.to_iob2([t for _, t in pairs])),
        line_numbers=tuple(range(1, num_words + 1)),
    )


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, sample_data):
    """Files of the runs: tiny config and TF1 checkpoint, sciner slices."""
    root = tmp_path_factory.mktemp("ner_inputs")
    config_file = root / "bert_config.json"
    config_file.write_text(json.dumps(TINY_CONFIG))
    config = BertConfig.from_json_file(str(config_file))
    keras.utils.set_random_seed(7)
    encoder = BertEncoder(config)
    init_checkpoint = checkpoint_writers.write_original_checkpoint(
        str(root / "bert_model.ckpt"), encoder
    )
    hub_module = serving_encoder.export_encoder(
        encoder, str(root / "hub"), VOCAB_FILE, do_lower_case=True
    )
    train = conll.read_conll(str(sample_data / "sciner" / "train.txt"))[:48]
    # Dev sentences with entities of the types in the training slice, and two without.
    labels = set(conll.label_list(train))
    dev = conll.read_conll(str(sample_data / "sciner" / "dev.txt"))
    dev = dev[:2] + [s for s in dev if set(s.tags) - {"O"} and set(s.tags) <= labels][:10]
    long = _long_sentence(dev, LONG_SENTENCE_WORDS)
    (root / "train.txt").write_text(
        _conll_text(train, lambda s: tag_schemes.from_iob2(s.tags, "iob1")), encoding="utf-8"
    )
    (root / "dev.txt").write_text(_conll_text(dev[:6] + [long] + dev[6:]), encoding="utf-8")
    (root / "test_iobes.txt").write_text(
        _conll_text(dev, lambda s: tag_schemes.from_iob2(s.tags, "iobes")), encoding="utf-8"
    )
    return dict(
        root=root,
        config_file=str(config_file),
        config=config,
        init_checkpoint=init_checkpoint,
        hub_module=hub_module,
        train=train,
        dev=dev,
        long=long,
        train_file=str(root / "train.txt"),
        dev_file=str(root / "dev.txt"),
        test_file=str(root / "test_iobes.txt"),
    )


_GOOD = "BERT B-MethodName\nworks O\n\n"


# name -> (train.txt, dev.txt, (file, line) the error must name, its words, flags).
BAD_INPUTS = {
    "missing_tag": (_GOOD + "Pre B-MethodName\ntraining\n", _GOOD, ("train", 5), "missing tag", []),
    "tag_outside_scheme": (
        _GOOD + "GLUE S-DatasetName\n",
        _GOOD,
        ("train", 4),
        "not an iob2 tag",
        ["--tag_scheme=iob2"],
    ),
    "unknown_eval_tag": (
        _GOOD,
        "SQuAD B-DatasetName\n",
        ("dev", 1),
        "not in the training label list",
        [],
    ),
    "empty_file": ("", _GOOD, ("train", 1), "no sentence in the file", []),
}


# name -> flags of a run that must fail before any work (see test_bad_flags).
BAD_FLAGS = {
    "eval_without_training": ["--do_eval"],
    "export_dir": ["--do_train", "--export_dir=gs://bucket/unused"],
    "feature_layers": ["--do_train", "--feature_based", "--feature_layers=-1,-3"],
}


def _flags(output_dir, inputs, *flags, model=None):
    if model is None:
        model = (
            f"--bert_config_file={inputs['config_file']}",
            f"--vocab_file={VOCAB_FILE}",
            f"--init_checkpoint={inputs['init_checkpoint']}",
        )
    return [
        *model,
        "--max_seq_length=32",
        "--doc_stride=8",
        "--train_batch_size=8",
        "--eval_batch_size=16",
        "--predict_batch_size=16",
        f"--output_dir={output_dir}",
        *flags,
    ]


@pytest.fixture(scope="module")
def runs(inputs):
    """Starts the two processes of the fast runs at once: `python run_ner.py` for the
    feature-based run on two replicas (the CPU is split before TensorFlow starts), and
    one process (`DRIVER`) for the others, one after the other: fine-tuning, the runs
    on its model ("later/..."), the TF Hub run, the bad inputs and flags.
    -> {"feature_based": (output_dir, Popen), "driver": Popen}."""
    root = inputs["root"]
    feature_based = _flags(
        root / "feature_based",
        inputs,
        f"--train_file={inputs['train_file']}",
        f"--eval_file={inputs['train_file']}",
        "--do_train",
        "--do_eval",
        "--num_train_epochs=0.5",
        "--learning_rate=1e-2",
        "--feature_based",
        "--feature_layers=-1,-2",
        "--lstm_units=8",
        "--save_checkpoints_steps=1",
        "--keep_checkpoint_max=100",
        "--distribution_strategy=mirrored",
        "--num_cpu_devices=2",
        "--eval_batch_size=7",
    )
    fine_tune = root / "fine_tune"
    later = root / "later"
    driven = {
        "fine_tune": _flags(
            fine_tune,
            inputs,
            f"--train_file={inputs['train_file']}",
            f"--eval_file={inputs['dev_file']}",
            f"--predict_file={inputs['test_file']}",
            "--do_train",
            "--do_eval",
            "--do_predict",
            "--num_train_epochs=1",
            "--learning_rate=1e-3",
            f"--export_dir={root / 'fine_tune_export'}",
            "--export_xla_single_requests",
            "--progress_interval_s=0",  # A line per batch: test_the_dev_file_is_read_once.
        ),
        # On the fine_tune run's model.
        "predict": _flags(
            later / "predict",
            inputs,
            "--do_predict",
            f"--predict_file={inputs['dev_file']}",
            model=(f"--init_checkpoint={fine_tune}",),
        ),
        "other_scheme": _flags(
            later / "other_scheme",
            inputs,
            "--do_train",
            f"--train_file={inputs['train_file']}",
            "--train_tag_scheme=iob2",
            model=(f"--init_checkpoint={fine_tune}",),
        ),
        "hub_module": _flags(
            root / "hub_module",
            inputs,
            f"--train_file={inputs['train_file']}",
            f"--eval_file={inputs['train_file']}",
            "--do_train",
            "--do_eval",
            "--num_train_epochs=0.5",
            "--learning_rate=1e-2",
            "--feature_based",
            "--feature_layers=all",
            "--lstm_units=8",
            model=(f"--hub_module_url={inputs['hub_module']}",),
        ),
    }
    for name, (train_text, dev_text, _, _, flags) in BAD_INPUTS.items():
        directory = root / name
        directory.mkdir()
        (directory / "train.txt").write_text(train_text, encoding="utf-8")
        (directory / "dev.txt").write_text(dev_text, encoding="utf-8")
        driven[name] = _flags(
            directory / "out", inputs, f"--data_dir={directory}", "--do_train", "--do_eval", *flags
        )
    for name, flags in BAD_FLAGS.items():
        driven[name] = _flags(
            root / name,
            inputs,
            f"--train_file={inputs['train_file']}",
            f"--eval_file={inputs['dev_file']}",
            *flags,
        )
    started = {
        "feature_based": (
            root / "feature_based",
            subprocess.Popen(
                [sys.executable, RUN_NER, *feature_based],
                env=ENV,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            ),
        ),
        "driver": start_driver(driven),
    }
    yield started
    for process in (started["feature_based"][1], started["driver"]):
        if process.poll() is None:
            process.kill()
            process.wait()


# Popen -> its output: a process's output is read once, for every test that looks at it.
_OUTPUTS = {}


def _output(process, timeout=600) -> str:
    if process not in _OUTPUTS:
        _OUTPUTS[process] = process.communicate(timeout=timeout)[0]
    return _OUTPUTS[process]


def _feature_based(runs) -> tuple[pathlib.Path, int, str]:
    """The feature-based run's output_dir, exit code and output."""
    output_dir, process = runs["feature_based"]
    output = _output(process)
    return output_dir, process.returncode, output


@pytest.fixture(scope="module")
def driven(runs):
    """The runs of the driver process: (name -> the error run_ner.main raised or None,
    name -> what that run printed)."""
    process = runs["driver"]
    output = _output(process)
    assert process.returncode == 0, output[-5000:]
    return driver_results(output)


def _driven_run(driven, inputs, name) -> tuple[pathlib.Path, str]:
    """The output_dir and printed lines of the driven run `name`, which must have
    succeeded."""
    errors, printed = driven
    assert errors[name] is None, printed[name][-5000:]
    return inputs["root"] / name, printed[name]


def _read_prediction_file(path) -> list[list[list[str]]]:
    """Sentences of `token gold guess` lines, each a list of field lists."""
    sentences, current = [], []
    for line in pathlib.Path(path).read_text(encoding="utf-8").split("\n"):
        if line:
            current.append(line.split(" "))
        elif current:
            sentences.append(current)
            current = []
    assert not current, "the file must end with a blank line"
    return sentences


def _restore_model(model, output_dir, step=None):
    path = (
        tf.train.latest_checkpoint(str(output_dir))
        if step is None
        else str(output_dir / f"ckpt-{step}")
    )
    tf.train.Checkpoint(model=model).read(path).expect_partial()
    return model


def _encoder_weights(encoder) -> list[np.ndarray]:
    return [w.numpy() for w in encoder.weights]


# ----------------------------------------------------------------------------
# End to end.
# ----------------------------------------------------------------------------


def test_fine_tune_end_to_end(driven, inputs):
    output_dir, _ = _driven_run(driven, inputs, "fine_tune")

    # TensorBoard holds each evaluation scalar once per step (the epoch's evaluation;
    # the final one, of the same best model, adds none), eval_loss among them.
    written = collections.Counter()
    for path in (output_dir / "eval").glob("events*"):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            written.update((value.tag, event.step) for value in event.summary.value)
    assert ("eval_loss", read_results(output_dir / "eval_results.txt")["global_step"]) in written
    assert set(written.values()) == {1}, written

    # eval_results.txt holds exactly what conlleval counts in the written file.
    predictions_file = output_dir / "eval_predictions.txt"
    counts = conlleval.evaluate_file(str(predictions_file))
    results = read_results(output_dir / "eval_results.txt")
    expected = conlleval.eval_results(counts)
    assert {k: results[k] for k in expected} == expected
    gold_types = {tag_schemes.split_tag(t)[1] for s in inputs["dev"] for t in s.tags} - {""}
    assert len(gold_types) >= 2
    for chunk_type in gold_types:
        for metric in ("precision", "recall", "f1"):
            assert f"eval_{metric}_{chunk_type}" in results
    assert results["eval_found_correct"] == sum(
        len(tag_schemes.get_chunks(s.tags)) for s in inputs["dev"] + [inputs["long"]]
    )
    assert np.isfinite(results["eval_loss"]) and results["eval_loss"] > 0
    assert (output_dir / "eval_report.txt").read_text(encoding="utf-8") == counts.report()

    # Every word of the eval file once, in order, with its gold tag; the 600-word
    # sentence (about 100 windows at max_seq_length 32, stride 8) in full.
    dev = inputs["dev"]
    expected_sentences = dev[:6] + [inputs["long"]] + dev[6:]
    written = _read_prediction_file(predictions_file)
    assert [len(s) for s in written] == [len(s.words) for s in expected_sentences]
    assert len(written[6]) == LONG_SENTENCE_WORDS
    for lines, sentence in zip(written, expected_sentences):
        assert [fields[:2] for fields in lines] == [
            list(p) for p in zip(sentence.words, sentence.tags)
        ]

    # The label list of the training file and its scheme (IOB1, the file's own), in the
    # metadata JSON, model_info.json and run_config.json; the records hold IOB1 labels.
    labels = conll.label_list(inputs["train"], "iob1")
    metadata = ner_records.read_metadata(str(output_dir / "train.tf_record"))
    assert list(metadata["labels"]) == labels
    assert metadata["num_sentences"] == 48 and metadata["tag_scheme"] == "iob1"
    assert metadata["label_scheme"] == "iob1"
    model_info = json.loads((output_dir / "model_info.json").read_text())
    assert model_info["labels"] == labels and model_info["label_scheme"] == "iob1"
    record_file = str(output_dir / "train.tf_record")
    serialized = list(tf.data.TFRecordDataset(record_file).as_numpy_iterator())
    label_ids = ner_records.decode_records(serialized, 32)["label_ids"].numpy()
    learnt = collections.Counter(labels[i] for row in label_ids for i in row if i >= 0)
    iob1 = collections.Counter(
        t for s in inputs["train"] for t in tag_schemes.from_iob2(s.tags, "iob1")
    )
    assert set(learnt) == set(iob1) and learnt["O"] >= iob1["O"]
    assert not any(t.startswith("B-") for t in learnt)  # No touching chunks in the slice.
    assert metadata.num_records > 48  # Some sentences need two windows of 30 pieces.
    assert results["global_step"] == int(metadata.num_records / 8)
    run_config = json.loads((output_dir / "run_config.json").read_text())
    assert run_config["labels"] == labels and run_config["label_scheme"] == "iob1"
    for lines in written:  # The IOB1 predictions written in IOB2, the dev file's scheme.
        assert all(tag_schemes.tag_error(fields[2], "iob2") is None for fields in lines)

    # test_predictions.txt is in the IOBES scheme of its input file.
    test = _read_prediction_file(output_dir / "test_predictions.txt")
    assert [[f[1] for f in lines] for lines in test] == [
        tag_schemes.from_iob2(s.tags, "iobes") for s in dev
    ]
    assert all(tag_schemes.tag_error(f[2], "iobes") is None for lines in test for f in lines)

    # Fine-tuning changes the encoder (the contrast of the feature-based test).
    config = inputs["config"]
    initial = BertEncoder(config)
    checkpoints.restore_model(inputs["init_checkpoint"], initial)
    trained = _restore_model(
        BertTokenClassifier(BertEncoder(config), config, len(labels)), output_dir
    )
    assert any(
        not np.array_equal(a, b)
        for a, b in zip(_encoder_weights(initial), _encoder_weights(trained.encoder))
    )


def test_the_dev_file_is_read_once(driven, inputs):
    """One pass over the dev file gives the tags and the loss, and the final
    evaluation of the model the epoch's evaluation scored is that evaluation's files:
    one dev pass in all, one evaluation shown and one pointer to its results."""
    output_dir, output = _driven_run(driven, inputs, "fine_tune")
    lines = output.splitlines()
    passes = [line.split(":")[0] for line in lines if re.match(r"\w+: batch 1\b", line)]
    assert passes == ["evaluate", "predict"], output  # The dev file, then the test file.
    shown = [line for line in lines if line.startswith("Evaluation at step")]
    assert len(shown) == 2 and "eval_f1" in shown[0], shown
    assert shown[1].endswith(f": as above ({output_dir / 'eval_results.txt'})"), shown
    epoch = (
        output_dir
        / ".epoch_evaluation"
        / str(int(read_results(output_dir / "eval_results.txt")["global_step"]))
    )
    for name in ("eval_results.txt", "eval_predictions.txt", "eval_report.txt"):
        assert (epoch / name).read_bytes() == (output_dir / name).read_bytes(), name


def test_export_tags_raw_text_as_predicted(driven, inputs):
    """--export_dir: the SavedModel tags the raw words of the eval and predict files
    as eval_predictions.txt and test_predictions.txt do (in IOB1, the scheme the model
    learnt; the files are in their input's scheme), the 600-word sentence (about 100
    windows) included."""
    import tensorflow_text  # noqa: F401  (registers the tokenizer ops)

    output_dir, _ = _driven_run(driven, inputs, "fine_tune")
    model = tf.saved_model.load(str(inputs["root"] / "fine_tune_export"))
    labels = conll.label_list(inputs["train"], "iob1")
    assert [label.decode() for label in model.labels.numpy()] == labels
    assert model.doc_stride.numpy() == 8 and model.seq_length.numpy() == 32
    assert model.tag_scheme.numpy().decode() == "iob1"
    assert model.xla_single_requests.numpy()  # --export_xla_single_requests
    for path, sentences in (
        (inputs["dev_file"], inputs["dev"][:6] + [inputs["long"]] + inputs["dev"][6:]),
        (inputs["test_file"], inputs["dev"]),
    ):
        scheme = conll.detect_file_tag_scheme(path)
        split = "eval" if path == inputs["dev_file"] else "test"
        written = _read_prediction_file(output_dir / f"{split}_predictions.txt")
        got = model.signatures["serving_default"](
            text=tf.constant([" ".join(s.words) for s in sentences])
        )
        words = [[w.decode() for w in row if w] for row in got["words"].numpy()]
        tags = [[t.decode() for t in row if t] for row in got["tags"].numpy()]
        assert words == [list(s.words) for s in sentences]
        assert all(tag in labels for row in tags for tag in row)
        assert [tag_schemes.from_iob2(row, scheme) for row in tags] == [
            [fields[2] for fields in lines] for lines in written
        ], split


def test_predict_with_the_labels_and_scheme_of_the_trained_model(driven, inputs):
    """--do_predict --init_checkpoint=<output_dir> tags with the saved labels, read in
    the saved scheme (IOB1), as the training run did; training on from that model in
    another scheme is refused."""
    errors, printed = driven
    assert errors["predict"] is None, printed["predict"][-5000:]
    root, fine_tune = inputs["root"] / "later", inputs["root"] / "fine_tune"
    assert (root / "predict" / "test_predictions.txt").read_text(encoding="utf-8") == (
        fine_tune / "eval_predictions.txt"
    ).read_text(encoding="utf-8")
    info = json.loads((root / "predict" / "model_info.json").read_text())
    assert info["label_scheme"] == "iob1"
    assert errors["other_scheme"].startswith("UserError: ")
    assert (
        "learnt its labels in iob1, this run would train them in iob2: give "
        "--train_tag_scheme=iob1, or --reinit_head"
    ) in errors["other_scheme"]
    assert not (root / "other_scheme" / "checkpoint").exists()


def test_feature_based_trains_only_the_lstm_head(runs, inputs):
    """--feature_based (here under a two-replica MirroredStrategy) updates the BiLSTM
    head at every step and never the encoder."""
    output_dir, returncode, output = _feature_based(runs)
    assert returncode == 0, output
    config = inputs["config"]
    labels = conll.label_list(inputs["train"], "iob1")
    initial = BertEncoder(config)
    checkpoints.restore_model(inputs["init_checkpoint"], initial)

    def restored(step):
        model = BertFeatureBasedTagger(
            BertEncoder(config), config, len(labels), [1, 0], "concat", lstm_units=8
        )
        return _restore_model(model, output_dir, step)

    metadata = ner_records.read_metadata(str(output_dir / "train.tf_record"))
    num_steps = int(metadata.num_records / 8 * 0.5)
    assert num_steps >= 2
    first, last = restored(1), restored(num_steps)
    for model in (first, last):
        for a, b in zip(_encoder_weights(initial), _encoder_weights(model.encoder)):
            np.testing.assert_array_equal(a, b)

    def head(model):
        return [w.numpy() for w in model.trainable_weights]

    assert len(head(last)) == 2 * 6 + 2  # 2 BiLSTMs x 2 directions x 3, dense x 2.
    assert all(not np.array_equal(a, b) for a, b in zip(head(first), head(last)))
    results = read_results(output_dir / "eval_results.txt")
    assert results["global_step"] == num_steps
    # Two replicas and batches of 7 windows: every word still once, in order.
    written = _read_prediction_file(output_dir / "eval_predictions.txt")
    assert [[f[:2] for f in lines] for lines in written] == [
        [list(p) for p in zip(s.words, tag_schemes.from_iob2(s.tags, "iob1"))]
        for s in inputs["train"]
    ]
    summary = json.loads((output_dir / "train_summary.json").read_text())
    assert summary["num_replicas"] == 2 and summary["replica_max_diff"] == 0.0
    counts = conlleval.evaluate_file(str(output_dir / "eval_predictions.txt"))
    assert results["eval_f1"] == counts.precision_recall_f1()[2]
    run_config = json.loads((output_dir / "run_config.json").read_text())
    assert run_config["feature_based"] and run_config["feature_layers"] == "-1,-2"


def test_hub_module_feature_based(driven, inputs):
    """A TF Hub encoder brings its config and vocabulary; --feature_layers=all mixes
    every layer with learned weights."""
    output_dir, _ = _driven_run(driven, inputs, "hub_module")
    run_config = json.loads((output_dir / "run_config.json").read_text())
    assert run_config["resolved_vocab_file"].startswith(inputs["hub_module"])
    assert run_config["labels"] == conll.label_list(inputs["train"], "iob1")
    saved = json.loads((output_dir / "bert_config.json").read_text())
    assert saved == TINY_CONFIG
    variables = [name for name, _ in tf.train.list_variables(str(output_dir))]
    assert any("layer_weights" in name for name in variables)
    results = read_results(output_dir / "eval_results.txt")
    counts = conlleval.evaluate_file(str(output_dir / "eval_predictions.txt"))
    assert results["eval_f1"] == counts.precision_recall_f1()[2]


@pytest.fixture(scope="module")
def bad_input_errors(driven):
    """name -> the error run_ner.main raised on that bad input (None: no error)."""
    return driven[0]


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_names_file_and_line(bad_input_errors, inputs, case):
    error = bad_input_errors[case]
    _, _, (split, line), words, _ = BAD_INPUTS[case]
    directory = inputs["root"] / case
    assert error is not None and error.startswith("UserError: ")
    assert f"{directory / split}.txt:{line}: " in error
    assert words in error
    assert not (directory / "out" / "checkpoint").exists()


def test_bad_flags(bad_input_errors, inputs):
    assert bad_input_errors["eval_without_training"].startswith("MissingFileError: ")
    assert (
        "The label list comes from the training file" in bad_input_errors["eval_without_training"]
    )
    assert bad_input_errors["export_dir"].startswith("UserError: --export_dir=gs://bucket/unused: ")
    assert "only local paths" in bad_input_errors["export_dir"]
    assert bad_input_errors["feature_layers"] == (
        "UserError: --feature_layers='-1,-3': layer -3 does not exist in an encoder of 2 "
        "layers (use -2 to 1)"
    )
    for name in BAD_FLAGS:
        assert not (inputs["root"] / name / "checkpoint").exists()

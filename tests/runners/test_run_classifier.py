"""End-to-end tests of run_classifier.py on more tasks and bad input: every case
(MNLI, PAWS, XNLI, a generic csv task, CoLA, bad flags and files) runs in one
process (one TensorFlow start-up, the `driver` fixture); and the feature cache
across data directories. MRPC, STS-B and SWAG runs that learn, and fine-tuning from
a hub module, are in test_run_classifier_tasks.py.

The runner runs in subprocesses: its absl flags would clash with other runners'
in one test process, and a mirrored run must split the CPU into logical devices
before TensorFlow initialises. The model is a tiny random BERT (2 layers, hidden
32) with the bundled uncased vocabulary.
"""

import csv
import json
import os
import pathlib
import shutil
import textwrap

import numpy as np
import pytest

from tests.conftest import read_results, run_results_driver, write_tiny_config
from tests.helpers.run_classifier_helpers import (
    _read_tsv,
    _write_lines,
    _write_swag,
    per_class_keys,
)


# ----------------------------------------------------------------------------
# More tasks and bad input: every case in one process (one TensorFlow start-up).
# ----------------------------------------------------------------------------

_DRIVER = textwrap.dedent("""
    import json, sys
    import run_classifier
    from modeling import finetuning
    results = {}
    for name, argv in json.loads(sys.argv[1]).items():
        run_classifier.FLAGS.unparse_flags()
        run_classifier.FLAGS(["run_classifier.py", *argv])
        try:
            run_classifier.main([])
            results[name] = ["no error", ""]
        except Exception as e:
            results[name] = [type(e).__name__, str(e)]
    rc = run_classifier
    from data_prep.classifier import classifier_tasks
    from evaluation import glue_metrics

    def score(name, metrics):  # What a run's task scores its evaluation by.
        return glue_metrics.glue_score(classifier_tasks.get_processor(name), metrics)

    results["functions"] = {
        "train_schedule": finetuning.train_schedule(3668, 32, 3.0, 0.1),
        "epoch_ends_mrpc": finetuning.epoch_end_steps(3668, 32, 343),
        "epoch_ends_fractional": finetuning.epoch_end_steps(10, 4, 6),
        "score_cola": score("CoLA", {"eval_accuracy": 0.9, "eval_mcc": 0.5}),
        "score_stsb": score("sts-b", {"eval_pearson": 0.8, "eval_spearman": 0.6}),
        "score_mnli": score("mnli", {"eval_accuracy": 0.7, "eval_mismatched_accuracy": 0.1}),
        "score_mrpc": score("MRPC", {"eval_accuracy": 0.8, "eval_f1": 0.9}),
        "prefixes": [rc.split_prefix(s, ("dev_matched", "dev_mismatched"))
                     for s in ("dev_matched", "dev_mismatched")],
    }
    print("RESULTS" + json.dumps(results))
""")


_NLI = (
    ("a man plays a guitar.", "a person makes music.", "entailment"),
    ("a man plays a guitar.", "nobody plays.", "contradiction"),
    ("a dog runs in a park.", "the dog is old.", "neutral"),
)


def _write_mnli(directory: pathlib.Path) -> None:
    """dev_{matched,mismatched}.tsv (3 and 6 pairs) and test_{...}.tsv (2 and 4)."""
    header = (
        "index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\t"
        "sentence2_binary_parse\tsentence1_parse\tsentence2_parse\tsentence1\t"
        "sentence2"
    )
    for part, count in (("matched", 3), ("mismatched", 6)):
        rows = [_NLI[i % 3] for i in range(count)]
        _write_lines(
            directory / f"dev_{part}.tsv",
            [header + "\tlabel1\tgold_label"]
            + [
                f"{i}\t1\t1e\tfiction\t( x )\t( y )\t(S x)\t(S y)\t{a}\t{b}\t{label}\t{label}"
                for i, (a, b, label) in enumerate(rows)
            ],
        )
        _write_lines(
            directory / f"test_{part}.tsv",
            [header]
            + [
                f"{100 + i}\t1\t1e\tfiction\t( x )\t( y )\t(S x)\t(S y)\t{a}\t{b}"
                for i, (a, b, _) in enumerate(rows[: count * 2 // 3])
            ],
        )


def _write_paws(directory: pathlib.Path, mrpc_dir: pathlib.Path) -> None:
    """PAWS-Wiki's layout (`id  sentence1  sentence2  label`, every split labelled),
    filled with real pairs: MRPC's training file, rows 1-24 / 25-36 / 37-48."""
    lines = (mrpc_dir / "train.tsv").read_text(encoding="utf-8-sig").splitlines()
    rows = [line.split("\t") for line in lines]
    for split, (start, stop) in (("train", (1, 25)), ("dev", (25, 37)), ("test", (37, 49))):
        _write_lines(
            directory / f"{split}.tsv",
            ["id\tsentence1\tsentence2\tlabel"]
            + [f"{i}\t{r[3]}\t{r[4]}\t{r[0]}" for i, r in enumerate(rows[start:stop], start)],
        )


def _write_xnli(directory: pathlib.Path) -> None:
    """XNLI-MT German training data and xnli.dev.tsv with German and other rows."""
    _write_lines(
        directory / "multinli" / "multinli.train.de.tsv",
        ["premise\thypo\tlabel"]
        + [
            f"{a}\t{b}\t{'contradictory' if label == 'contradiction' else label}"
            for a, b, label in _NLI * 4
        ],
    )
    header = (
        "language\tgold_label\tsentence1_binary_parse\tsentence2_binary_parse\t"
        "sentence1_parse\tsentence2_parse\tsentence1\tsentence2\tpromptID\tpairID\t"
        "genre\tlabel1"
    )
    rows = [
        f"{language}\t{label}\tx\ty\tx\ty\t{a}\t{b}\t1\t1\tfiction\t{label}"
        for language in ("de", "en", "de")
        for a, b, label in _NLI
    ]
    _write_lines(directory / "xnli.dev.tsv", [header] + rows)


def _write_generic(directory: pathlib.Path) -> None:
    """A user's CSV files with a header, quoted commas and string labels."""
    rows = [
        ('"great, really good"', "pos"),
        ('"bad, really bad"', "neg"),
        ("fine film", "pos"),
        ("dull film", "neg"),
    ] * 4
    for split in ("train", "dev", "test"):
        _write_lines(
            directory / f"{split}.csv",
            ["id,review,sentiment"]
            + [f"{i},{text},{label}" for i, (text, label) in enumerate(rows[:12])],
        )


def _write_cola(directory: pathlib.Path) -> None:
    """CoLA's dev.tsv: no header; source, label, author's label, sentence."""
    _write_lines(
        directory / "dev.tsv",
        [
            f"gj04\t{label}\t\t{sentence}"
            for label, sentence in (
                ("1", "the dog barked."),
                ("0", "dog the barked."),
                ("1", "she left."),
                ("0", "left she the."),
            )
        ],
    )


@pytest.fixture(scope="module")
def driver(tmp_path_factory, mrpc_dir, vocab_file):
    """Runs every case in one process: {case: (exception name or "no error",
    message)}, and "root": the directory of the data and output_dirs (out_<case>)."""
    root = tmp_path_factory.mktemp("driver")
    config_file = write_tiny_config(root / "bert_config.json", dropout=0.1)
    cases = {}

    def add(
        case,
        directory,
        *extra,
        task="MRPC",
        do=("--do_train", "--do_eval"),
        model=(f"--bert_config_file={config_file}", f"--vocab_file={vocab_file}"),
    ):
        cases[case] = [
            f"--task_name={task}",
            f"--data_dir={directory}",
            *model,
            "--max_seq_length=32",
            *do,
            f"--output_dir={root / f'out_{case}'}",
            *extra,
        ]

    def mrpc_copy(name, train_edit=None, with_dev=True):
        directory = root / name
        lines = (mrpc_dir / "train.tsv").read_text(encoding="utf-8").splitlines()
        if train_edit:
            lines[2] = train_edit(lines[2])  # line 3 of the file
        _write_lines(directory / "train.tsv", lines)
        if with_dev:
            shutil.copy(mrpc_dir / "dev.tsv", directory / "dev.tsv")
        return directory

    good = mrpc_copy("good")
    add("unknown_task", good, task="MRPCX")
    add("missing_dev", mrpc_copy("no_dev", with_dev=False))
    add("short_row", mrpc_copy("short_row", lambda line: line.rsplit("\t", 1)[0]))
    add("bad_label", mrpc_copy("bad_label", lambda line: "2" + line[1:]))
    add("long_sequence", good, "--max_seq_length=128")
    add("nothing_to_do", good, do=())
    add("xla_without_export", good, "--export_xla_single_requests")
    add("missing_hub_module", good, "--hub_module_url=/nonexistent/hub", model=())
    (root / "user_files").mkdir()
    (root / "user_files" / "notes.txt").write_text("mine")
    add("export_over_user_files", good, f"--export_dir={root / 'user_files'}")
    add("missing_test", good, do=("--do_predict",))
    for name, write in (
        ("mnli", _write_mnli),
        ("xnli", _write_xnli),
        ("generic", _write_generic),
        ("cola", _write_cola),
        ("swag", _write_swag),
    ):
        (root / name).mkdir(exist_ok=True)
        write(root / name)
    add("mnli", root / "mnli", task="MNLI", do=("--do_eval", "--do_predict"))
    add(
        "xnli",
        root / "xnli",
        "--xnli_language=de",
        f"--export_dir={root / 'xnli_export'}",
        "--train_batch_size=4",
        "--num_train_epochs=1",
        task="XNLI",
    )
    add(
        "generic",
        root / "generic",
        "--text_a_column=review",
        "--label_column=sentiment",
        "--train_batch_size=4",
        "--num_train_epochs=1",
        task="generic",
        do=("--do_train", "--do_eval", "--do_predict"),
    )
    add("cola", root / "cola", task="CoLA", do=("--do_eval",))
    _write_paws(root / "paws", mrpc_dir)
    add(
        "paws",
        root / "paws",
        "--train_batch_size=8",
        "--num_train_epochs=1",
        "--pad_to_max_seq_length",
        # float32, so that the export answers as predicted to 1e-5 (the export of a run
        # in bfloat16, the --dtype default's choice on a CPU with bfloat16 units: xnli).
        "--dtype=float32",
        f"--export_dir={root / 'paws_export'}",
        "--export_xla_single_requests",
        task="PAWS",
        do=("--do_train", "--do_eval", "--do_predict"),
    )
    results = run_results_driver(_DRIVER, cases, timeout=600)
    return {"root": root, **results}


@pytest.mark.parametrize(
    "case,error,parts",
    [
        ("unknown_task", "UserError", ["Unknown task 'MRPCX'", "known tasks: cola, sst-2, mrpc"]),
        ("missing_dev", "MissingFileError", ["mrpc dev file not found", "no_dev/dev.tsv"]),
        ("missing_test", "MissingFileError", ["mrpc test file not found", "good/test.tsv"]),
        (
            "short_row",
            "UserError",
            ["short_row/train.tsv:3", "expected at least 5 columns", "got 4"],
        ),
        (
            "bad_label",
            "UserError",
            ["bad_label/train.tsv:3", "label '2' is not one of ['0', '1']"],
        ),
        ("long_sequence", "UserError", ["--max_seq_length=128", "max_position_embeddings=64"]),
        ("nothing_to_do", "UsageError", ["--do_train, --do_eval or --do_predict"]),
        ("xla_without_export", "UsageError", ["--export_xla_single_requests needs --export_dir"]),
        ("missing_hub_module", "MissingFileError", ["/nonexistent/hub is not a folder"]),
        (
            "export_over_user_files",
            "OutputExistsError",
            ["--export_dir=", "user_files", "not an export of this project"],
        ),
    ],
)
def test_bad_input_is_a_clear_error(driver, case, error, parts):
    got_error, message = driver[case]
    assert got_error == error, message
    for part in parts:
        assert part in message


def test_export_dir_of_user_files_is_refused_before_training(driver):
    assert os.listdir(driver["root"] / "user_files") == ["notes.txt"]
    assert (driver["root"] / "user_files" / "notes.txt").read_text() == "mine"
    assert not list((driver["root"] / "out_export_over_user_files").glob("*.tf_record"))


def test_schedule_epochs_and_scores(driver):
    got = driver["functions"]
    # As the original: int(3668 / 32 * 3) steps, 10% of them warmup.
    assert got["train_schedule"] == [343, 34]
    assert got["epoch_ends_mrpc"] == [114, 229, 343]
    assert got["epoch_ends_fractional"] == [2, 5, 6]  # 2.5 epochs of 10 at batch 4
    assert got["score_cola"] == 0.5 and got["score_mnli"] == 0.7
    assert got["score_stsb"] == pytest.approx(0.7)
    assert got["score_mrpc"] == pytest.approx(0.85)
    assert got["prefixes"] == ["eval_", "eval_mismatched_"]


def test_mnli_matched_and_mismatched(driver):
    assert driver["mnli"] == ["no error", ""]
    output_dir = driver["root"] / "out_mnli"
    results = read_results(output_dir / "eval_results.txt")
    assert set(results) == {
        "eval_accuracy",
        "eval_loss",
        "eval_mismatched_accuracy",
        "eval_mismatched_loss",
        "loss",
        "global_step",
        *per_class_keys(("contradiction", "entailment", "neutral"), ("eval_", "eval_mismatched_")),
    }
    # An untrained model: accuracies are multiples of 1/3 and 1/6.
    assert results["eval_accuracy"] * 3 == pytest.approx(round(results["eval_accuracy"] * 3))
    assert results["eval_mismatched_accuracy"] * 6 == pytest.approx(
        round(results["eval_mismatched_accuracy"] * 6)
    )
    assert _read_tsv(output_dir / "test_results.tsv").shape == (2, 3)
    assert _read_tsv(output_dir / "test_mismatched_results.tsv").shape == (4, 3)
    for name, indices in (
        ("MNLI-m.tsv", ["100", "101"]),
        ("MNLI-mm.tsv", ["100", "101", "102", "103"]),
    ):
        with open(output_dir / name, encoding="utf-8") as f:
            rows = list(csv.reader(f, delimiter="\t"))
        assert rows[0] == ["index", "prediction"]
        assert [r[0] for r in rows[1:]] == indices
        assert {r[1] for r in rows[1:]} <= {"contradiction", "entailment", "neutral"}


def test_paws_a_task_added_as_one_class(driver):
    """PAWS (classifier_tasks.PawsProcessor): trained, scored on dev and on its labelled
    test split, and predicted, through the same runner as every GLUE task."""
    assert driver["paws"] == ["no error", ""]
    output_dir = driver["root"] / "out_paws"
    results = read_results(output_dir / "eval_results.txt")
    assert set(results) == {
        "eval_accuracy",
        "eval_loss",
        "eval_test_accuracy",
        "eval_test_loss",
        "loss",
        "global_step",
        *per_class_keys("01", ("eval_", "eval_test_")),
    }
    assert results["global_step"] == 3  # 24 pairs, batch 8, one epoch
    assert results["eval_accuracy"] * 12 == pytest.approx(round(results["eval_accuracy"] * 12))
    predictions = _read_tsv(output_dir / "test_results.tsv")
    assert predictions.shape == (12, 2)
    config = json.loads((output_dir / "run_config.json").read_text())
    assert config["labels"] == ["0", "1"]
    assert config["pad_to_max_seq_length"] and config["padded_training_batches"]
    assert config["dtype"] == "float32"  # As asked.


def test_paws_export_answers_raw_text_as_predicted(driver):
    """--pad_to_max_seq_length: every batch padded, and the export pads every request;
    --export_xla_single_requests: one pair at a time runs through XLA, as predicted."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the tokenizer ops)

    model = tf.saved_model.load(str(driver["root"] / "paws_export"))
    assert model.pad_to_max_seq_length.numpy() and model.xla_single_requests.numpy()
    lines = (driver["root"] / "paws" / "test.tsv").read_text(encoding="utf-8").splitlines()
    rows = [line.split("\t") for line in lines[1:]]
    outputs = model.signatures["serving_default"](
        text_a=tf.constant([r[1] for r in rows]), text_b=tf.constant([r[2] for r in rows])
    )
    want = _read_tsv(driver["root"] / "out_paws" / "test_results.tsv")
    np.testing.assert_allclose(outputs["probabilities"].numpy(), want, atol=1e-5)
    for row, probabilities in list(zip(rows, want))[:2]:
        one = model.signatures["serving_default"](
            text_a=tf.constant([row[1]]), text_b=tf.constant([row[2]])
        )
        np.testing.assert_allclose(one["probabilities"].numpy()[0], probabilities, atol=1e-5)
    assert [label.decode() for label in outputs["labels"].numpy()] == [
        ["0", "1"][i] for i in want.argmax(axis=1)
    ]


def test_xnli_reads_only_its_language(driver):
    assert driver["xnli"] == ["no error", ""]
    output_dir = driver["root"] / "out_xnli"
    dev = json.loads((output_dir / "dev.tf_record.meta.json").read_text())
    train = json.loads((output_dir / "train.tf_record.meta.json").read_text())
    assert dev["num_examples"] == 6 and train["num_examples"] == 12
    assert dev["processor_options"] == {"xnli_language": "de"}
    results = read_results(output_dir / "eval_results.txt")
    assert results["global_step"] == 3 and "eval_accuracy" in results
    # The default, --dtype=auto, is recorded as what ran: bfloat16 on a CPU with
    # bfloat16 units. The export computes in float32 all the same.
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the tokenizer ops)
    from tensorflow.core.framework import types_pb2
    from tensorflow.core.protobuf import saved_model_pb2

    from modeling import kernels

    config = json.loads((output_dir / "run_config.json").read_text())
    bfloat16_units = kernels.for_cpu().name in kernels.BFLOAT16_UNITS
    assert config["dtype"] == ("bfloat16" if bfloat16_units else "float32")
    export_dir = driver["root"] / "xnli_export"
    saved = saved_model_pb2.SavedModel()
    saved.ParseFromString((export_dir / "saved_model.pb").read_bytes())
    types = set()
    for graph in saved.meta_graphs:
        functions = graph.graph_def.library.function
        for node in [*graph.graph_def.node, *(n for f in functions for n in f.node_def)]:
            for value in node.attr.values():
                types.update([value.type, *value.list.type])
    assert types_pb2.DT_FLOAT in types and types_pb2.DT_BFLOAT16 not in types
    outputs = tf.saved_model.load(str(export_dir)).signatures["serving_default"](
        text_a=tf.constant(["Ein Hund läuft."]), text_b=tf.constant(["Ein Tier bewegt sich."])
    )
    assert outputs["probabilities"].dtype == tf.float32
    np.testing.assert_allclose(np.sum(outputs["probabilities"].numpy()), 1.0, rtol=1e-5)


def test_generic_csv_task(driver):
    assert driver["generic"] == ["no error", ""]
    output_dir = driver["root"] / "out_generic"
    config = json.loads((output_dir / "run_config.json").read_text())
    assert config["labels"] == ["neg", "pos"]  # sorted labels of train.csv
    assert set(read_results(output_dir / "eval_results.txt")) == {
        "eval_accuracy",
        "eval_loss",
        "loss",
        "global_step",
        *per_class_keys(("neg", "pos")),
    }
    assert _read_tsv(output_dir / "test_results.tsv").shape == (12, 2)
    assert not list(output_dir.glob("[A-Z]*.tsv"))  # no GLUE submission file


def test_cola_reports_matthews_correlation(driver):
    assert driver["cola"] == ["no error", ""]
    results = read_results(driver["root"] / "out_cola" / "eval_results.txt")
    assert set(results) == {
        *("eval_accuracy", "eval_mcc", "eval_loss", "loss", "global_step"),
        *per_class_keys("01"),
    }
    assert results["global_step"] == 0


def test_feature_cache_is_not_fooled_by_another_data_dir(tmp_path, mrpc_dir, tokenizer):
    """Two data dirs whose train.tsv have the same size and mtime (files unpacked from
    archives, or written within one clock tick) but different labels: switching
    --data_dir rebuilds the features."""
    from data_prep.classifier import classifier_features, classifier_tasks

    lines = (mrpc_dir / "train.tsv").read_text(encoding="utf-8").splitlines()
    flipped = [lines[0]] + [("1" if line[0] == "0" else "0") + line[1:] for line in lines[1:]]
    first = _write_lines(tmp_path / "a" / "train.tsv", lines)
    second = _write_lines(tmp_path / "b" / "train.tsv", flipped)
    os.utime(first, ns=(10**18, 10**18))
    os.utime(second, ns=(10**18, 10**18))
    processor = classifier_tasks.get_processor("mrpc")
    output_file = str(tmp_path / "train.tf_record")

    def labels(data_dir):
        metadata = classifier_features.get_or_create_features(
            processor, str(data_dir), "train", output_file, tokenizer, 16
        )
        dataset = classifier_features.build_dataset(output_file, metadata, 64, False)
        return np.concatenate([batch["label_ids"].numpy() for batch in dataset])

    a, b = labels(tmp_path / "a"), labels(tmp_path / "b")
    np.testing.assert_array_equal(a, 1 - b)

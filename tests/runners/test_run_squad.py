"""End-to-end tests of run_squad.py on questions of the bundled SQuAD 2.0 sample.

The model is a tiny random BERT (2 layers, hidden 32) with the bundled uncased
vocabulary. The runs execute in one subprocess per fixture, one after the other
(`_DRIVER`): the runner's absl flags would clash with other runners' in the test
process, and one TensorFlow start-up for several runs keeps the tests fast. The
slow tests, each with runs of its own, are in test_run_squad_slow.py.
"""

import json

import numpy as np
import pytest

from tests.conftest import read_results
from tests.helpers.run_squad_helpers import (
    QUERY,
    REPO,
    SEQ,
    STRIDE,
    TRAIN_BATCH,
    question_ids,
    read_json,
    run_driver,
    squad_flags,
    write_json,
)


def bad_squad(root, name, edit) -> str:
    """A copy of v2.json changed by edit(dataset)."""
    dataset = read_json(root / "v2.json")
    edit(dataset)
    return write_json(root / f"{name}.json", dataset)


def _edit_first_answer(dataset, **changes):
    qa = next(qa for qa in dataset["data"][0]["paragraphs"][0]["qas"] if not qa["is_impossible"])
    qa["answers"][0].update(changes)
    return qa["id"]


@pytest.fixture(scope="module")
def runs(root):
    """The good runs (v2, v1), the runs with bad input and, last, "resume": v2's
    output_dir as a run stopped after step 4 left it, run again; in one process."""

    def flags(name, *extra, train_file=None, predict_file=None, version_2=True):
        # float32: the files and the export equal what the checkpoint computes here.
        argv = squad_flags(root, root / name, version_2, "--dtype=float32", *extra)
        if train_file:
            argv = [a for a in argv if not a.startswith("--train_file")]
            argv.append(f"--train_file={train_file}")
        if predict_file:
            argv = [a for a in argv if not a.startswith("--predict_file")]
            argv.append(f"--predict_file={predict_file}")
        return argv

    def train_only(argv):
        return [a for a in argv if a not in ("--do_predict", "--do_eval")]

    no_data = write_json(root / "no_data.json", {"version": "v2.0", "articles": []})
    no_context = bad_squad(
        root, "no_context", lambda d: d["data"][0]["paragraphs"][1].pop("context")
    )
    past_context = bad_squad(
        root, "past_context", lambda d: _edit_first_answer(d, answer_start=10000)
    )
    unrecoverable = bad_squad(
        root, "unrecoverable", lambda d: _edit_first_answer(d, text="Zanzibar")
    )
    eval_alone = root / "eval_alone"
    eval_alone.mkdir()
    predictions, null_odds, _ = _known_predictions(root)
    write_json(eval_alone / "predictions.json", predictions)
    write_json(eval_alone / "null_odds.json", null_odds)
    cases = {
        "v2": flags("v2", f"--export_dir={root / 'v2_export'}", "--export_xla_single_requests"),
        "eval_alone": [a for a in flags("eval_alone") if a not in ("--do_train", "--do_predict")],
        "v1": flags("v1", "--nopad_to_max_seq_length", version_2=False),
        "no_data": train_only(flags("bad", train_file=no_data)),
        "no_context": train_only(flags("bad", train_file=no_context)),
        "past_context": train_only(flags("bad", train_file=past_context)),
        # The predict file is read before training starts.
        "bad_predict_file": flags("bad_predict", predict_file=no_context),
        "unrecoverable": train_only(flags("unrecoverable", train_file=unrecoverable)),
        "query_too_long": flags("bad", "--max_seq_length=20", "--max_query_length=17"),
        "v2_without_flag": train_only(flags("bad", train_file=root / "v2.json", version_2=False)),
        "v2_gold_without_flag": [
            a
            for a in flags("bad", predict_file=root / "v2.json", version_2=False)
            if a != "--do_train"
        ],
        "missing_file": flags("bad", train_file=root / "missing.json"),
        "long_sequence": flags("bad", "--max_seq_length=512"),
        "nothing_to_do": [a for a in flags("bad") if not a.startswith("--do_")],
        "export": flags("bad", "--export_dir=gs://bucket/export"),
        "hub_module": [
            a
            for a in flags("bad", "--hub_module_url=/nonexistent/hub")
            if not a.startswith(("--bert_config_file", "--vocab_file"))
        ],
        "resume": flags("resume"),
    }
    return run_driver(cases, stopped={"resume": (root / "v2", root / "resume", 4)})


def test_v2_end_to_end_writes_the_original_files(runs, root):
    assert runs["v2"] == ["no error", ""]
    out = root / "v2"
    ids = question_ids(root / "v2.json")
    # --do_predict says where the answers are (once: not at each epoch's evaluation).
    log = "".join(path.read_text() for path in out.glob("*.INFO.*"))
    assert (
        log.count(f"Wrote the answers to {len(ids)} questions to {out / 'predictions.json'}") == 1
    )
    # Each of the 2 epochs' evaluations shown once; the final evaluation and the
    # prediction, of the best epoch's model, are that evaluation's files, not new passes.
    assert log.count("] Evaluation: ") == 2, log
    assert log.count(f": as above ({out / 'eval_results.txt'})") == 1, log
    predictions = read_json(out / "predictions.json")
    nbest = read_json(out / "nbest_predictions.json")
    null_odds = read_json(out / "null_odds.json")
    # Every question, in file order, in all three files.
    assert list(predictions) == list(nbest) == list(null_odds) == ids
    for qas_id in ids:
        entries = nbest[qas_id]
        assert 1 <= len(entries) <= 20 + 1
        assert sum(e["probability"] for e in entries) == pytest.approx(1.0)
        scores = [e["start_logit"] + e["end_logit"] for e in entries]
        assert scores == sorted(scores, reverse=True)
        # v2.0 rule at --null_score_diff_threshold=0: "" iff the null odds are > 0.
        assert (predictions[qas_id] == "") == (null_odds[qas_id] > 0.0), qas_id
    # The original's format: json.dumps(..., indent=4) and a newline.
    text = (out / "predictions.json").read_text(encoding="utf-8")
    assert text == json.dumps(predictions, indent=4) + "\n"


def test_v2_eval_results_equal_official_scoring_of_the_written_files(runs, root):
    from evaluation import squad_eval

    out = root / "v2"
    want = squad_eval.evaluate_file(
        str(root / "v2.json"),
        read_json(out / "predictions.json"),
        read_json(out / "null_odds.json"),
    )
    got = read_results(out / "eval_results.txt")
    assert set(got) == {
        "exact",
        "f1",
        "total",
        "HasAns_exact",
        "HasAns_f1",
        "HasAns_total",
        "NoAns_exact",
        "NoAns_f1",
        "NoAns_total",
        "best_exact",
        "best_exact_thresh",
        "best_f1",
        "best_f1_thresh",
    }
    assert got == pytest.approx(dict(want), rel=1e-12)
    assert got["total"] == 17 and got["HasAns_total"] == 8 and got["NoAns_total"] == 9


def test_v2_trains_over_the_features(runs, root):
    """Steps = training features / batch size x epochs (features, not questions)."""
    from data_prep.squad import squad_features, squad_reader
    from data_prep.text import tokenization

    out = root / "v2"
    tokenizer = tokenization.FullTokenizer(
        str(REPO / "sample_data" / "vocab" / "uncased_vocab.txt")
    )
    examples = squad_reader.read_squad_examples(str(root / "v2.json"), True, True)
    features = list(
        squad_features.convert_examples_to_features(
            examples, tokenizer, SEQ, STRIDE, QUERY, is_training=True
        )
    )
    metadata = read_json(out / "train.tf_record.meta.json")
    assert metadata["num_features"] == len(features) > 3 * len(examples)
    assert metadata["num_examples"] == 17 and metadata["num_skipped"] == 0
    steps = int(len(features) / TRAIN_BATCH * 2)
    config = read_json(out / "run_config.json")
    assert config["num_train_steps"] == steps
    assert config["num_warmup_steps"] == int(steps * 0.1)
    # By default the training batches stay padded (the span loss sees the padding);
    # prediction cuts them.
    assert config["padded_training_batches"] and not config["pad_to_max_seq_length"]
    assert read_json(out / "train_summary.json")["global_step"] == steps
    assert (out / f"ckpt-{steps}.index").is_file()
    # Same records as the data module writes (the runner shuffles the questions first).
    import tensorflow as tf

    records = [
        tf.train.Example.FromString(r.numpy())
        for r in tf.data.TFRecordDataset(str(out / "train.tf_record"))
    ]
    positions = sorted(
        (
            list(r.features.feature["input_ids"].int64_list.value),
            r.features.feature["start_positions"].int64_list.value[0],
            r.features.feature["end_positions"].int64_list.value[0],
        )
        for r in records
    )
    assert positions == sorted((f.input_ids, f.start_position, f.end_position) for f in features)


def test_predictions_follow_from_the_final_checkpoint(runs, root):
    """The written files equal post-processing of the checkpoint's logits computed
    here, so no window's logits reach another window or question."""
    import tensorflow as tf
    from data_prep.squad import squad_features, squad_postprocess, squad_reader
    from data_prep.text import tokenization
    from modeling.config import BertConfig
    from modeling.encoder import BertEncoder
    from modeling.models import BertSpanLabeler

    out = root / "v2"
    config = BertConfig.from_json_file(str(out / "bert_config.json"))
    model = BertSpanLabeler(BertEncoder(config), config)
    tf.train.Checkpoint(model=model).read(
        tf.train.latest_checkpoint(str(out))
    ).expect_partial().assert_existing_objects_matched()
    tokenizer = tokenization.FullTokenizer(
        str(REPO / "sample_data" / "vocab" / "uncased_vocab.txt")
    )
    examples = squad_reader.read_squad_examples(str(root / "v2.json"), False, True)
    features = list(
        squad_features.convert_examples_to_features(
            examples, tokenizer, SEQ, STRIDE, QUERY, is_training=False
        )
    )
    outputs = model(
        {
            "input_word_ids": np.array([f.input_ids for f in features]),
            "input_mask": np.array([f.input_mask for f in features]),
            "input_type_ids": np.array([f.segment_ids for f in features]),
        }
    )
    results = [
        squad_postprocess.RawResult(f.unique_id, s, e)
        for f, s, e in zip(features, outputs["start_logits"].numpy(), outputs["end_logits"].numpy())
    ]
    want = squad_postprocess.compute_predictions(
        examples, features, results, version_2_with_negative=True
    )
    assert read_json(out / "predictions.json") == dict(want.predictions)
    null_odds = read_json(out / "null_odds.json")
    np.testing.assert_allclose(
        [null_odds[q] for q in want.null_odds], list(want.null_odds.values()), rtol=1e-4, atol=1e-4
    )
    nbest = read_json(out / "nbest_predictions.json")
    for qas_id, entries in want.nbest.items():
        assert [e["text"] for e in nbest[qas_id]] == [e["text"] for e in entries]
        np.testing.assert_allclose(
            [e["start_logit"] for e in nbest[qas_id]],
            [e["start_logit"] for e in entries],
            atol=1e-4,
        )


def test_export_answers_raw_text_as_predicted(runs, root):
    """--export_dir: the SavedModel answers the raw questions and contexts of the predict
    file as predictions.json, nbest_predictions.json and null_odds.json do, windows
    included (every context of the file needs several)."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the tokenizer ops)

    assert runs["v2"] == ["no error", ""]
    out = root / "v2"
    rows = [
        (qa["id"], qa["question"], paragraph["context"])
        for paragraph in read_json(root / "v2.json")["data"][0]["paragraphs"]
        for qa in paragraph["qas"]
    ]
    model = tf.saved_model.load(str(root / "v2_export"))
    assert model.max_query_length.numpy() == QUERY and model.doc_stride.numpy() == STRIDE
    assert model.xla_single_requests.numpy()  # --export_xla_single_requests
    got = model.signatures["serving_default"](
        question=tf.constant([q for _, q, _ in rows]), context=tf.constant([c for _, _, c in rows])
    )
    got = {k: v.numpy() for k, v in got.items()}
    predictions = read_json(out / "predictions.json")
    nbest = read_json(out / "nbest_predictions.json")
    null_odds = read_json(out / "null_odds.json")
    for i, (qas_id, _, _) in enumerate(rows):
        answer = got["answer"][i].decode()
        # The best non-null answer, and the v2.0 choice at --null_score_diff_threshold=0.
        assert answer == next(e["text"] for e in nbest[qas_id] if e["text"]), qas_id
        odds = float(got["null_score"][i] - got["score"][i])
        assert odds == pytest.approx(null_odds[qas_id], abs=1e-4), qas_id
        assert predictions[qas_id] == ("" if null_odds[qas_id] > 0 else answer), qas_id
    assert len(set(got["answer"])) > 2


def test_v1_mode(runs, root):
    assert runs["v1"] == ["no error", ""]
    from evaluation import squad_eval

    out = root / "v1"
    predictions = read_json(out / "predictions.json")
    assert list(predictions) == question_ids(root / "v1.json")
    assert all(predictions.values())  # v1.1 always answers with a span.
    assert not (out / "null_odds.json").exists()
    got = read_results(out / "eval_results.txt")
    assert set(got) == {"exact_match", "f1"}
    assert got == pytest.approx(
        dict(
            squad_eval.evaluate_file(
                str(root / "v1.json"), predictions, version_2_with_negative=False
            )
        ),
        rel=1e-12,
    )
    metadata = read_json(out / "train.tf_record.meta.json")
    assert metadata["num_examples"] == 8 and not metadata["version_2_with_negative"]
    config = read_json(out / "run_config.json")  # Run with --nopad_to_max_seq_length.
    assert not config["padded_training_batches"] and not config["pad_to_max_seq_length"]


def _known_predictions(root) -> tuple[dict, dict, str]:
    """(predictions, null odds, the id of the one wrong answer): the first gold
    answer of every answerable question but one, "" for the others."""
    predictions, null_odds, wrong = {}, {}, None
    for paragraph in read_json(root / "v2.json")["data"][0]["paragraphs"]:
        for qa in paragraph["qas"]:
            answer = qa["answers"][0]["text"] if qa["answers"] else ""
            if answer and wrong is None:
                wrong, answer = qa["id"], "not the answer"
            predictions[qa["id"]] = answer
            null_odds[qa["id"]] = -1.0 if answer else 1.0
    return predictions, null_odds, wrong


def test_eval_alone_scores_the_prediction_files_in_output_dir(runs, root):
    """--do_eval without --do_predict scores the files already in output_dir."""
    assert runs["eval_alone"] == ["no error", ""]
    from evaluation import squad_eval

    out = root / "eval_alone"
    predictions, null_odds, _ = _known_predictions(root)
    got = read_results(out / "eval_results.txt")
    assert got == pytest.approx(
        dict(squad_eval.evaluate_file(str(root / "v2.json"), predictions, null_odds)), rel=1e-12
    )
    # 16 of 17 right; the wrong answer shares no word with its gold answers.
    assert got["exact"] == pytest.approx(100 * 16 / 17)
    assert got["NoAns_exact"] == 100.0 and got["HasAns_exact"] == pytest.approx(100 * 7 / 8)
    assert got["best_exact"] == pytest.approx(100 * 16 / 17)
    assert not list(out.glob("ckpt-*")) and not (out / "eval.tf_record").exists()


@pytest.mark.parametrize(
    "case,error,parts",
    [
        ("no_data", "UserError", ["no_data.json", 'no top-level "data" list']),
        ("no_context", "UserError", ["no_context.json", "paragraph 1 of article 0", "'context'"]),
        (
            "past_context",
            "UserError",
            ["past_context.json", "character 10000", "runs outside its context"],
        ),
        ("bad_predict_file", "UserError", ["no_context.json", "'context'"]),
        ("query_too_long", "UserError", ["--max_seq_length=20", "--max_query_length=17"]),
        (
            "v2_without_flag",
            "UserError",
            ["is marked is_impossible", "pass --version_2_with_negative"],
        ),
        (
            "v2_gold_without_flag",
            "UserError",
            ["v2.json is SQuAD 2.0", "--version_2_with_negative"],
        ),
        ("missing_file", "MissingFileError", ["--train_file=", "missing.json"]),
        ("long_sequence", "UserError", ["--max_seq_length=512", "max_position_embeddings=128"]),
        ("nothing_to_do", "UsageError", ["At least one of --do_train, --do_eval or --do_predict"]),
        ("export", "UserError", ["--export_dir=gs://bucket/export", "only local paths"]),
        ("hub_module", "MissingFileError", ["/nonexistent/hub"]),
    ],
)
def test_bad_input_is_a_clear_error(runs, case, error, parts):
    got_error, message = runs[case]
    assert got_error == error, message
    for part in parts:
        assert part in message


def test_bad_predict_file_fails_before_training(runs, root):
    assert not list((root / "bad_predict").glob("ckpt-*"))


def test_unrecoverable_answer_is_a_counted_skip(runs, root):
    assert runs["unrecoverable"] == ["no error", ""]
    metadata = read_json(root / "unrecoverable" / "train.tf_record.meta.json")
    assert metadata["num_questions"] == 17
    assert metadata["num_skipped"] == 1 and metadata["num_examples"] == 16


def _model_weights(prefix: str) -> dict:
    import tensorflow as tf

    reader = tf.train.load_checkpoint(prefix)
    return {
        name: reader.get_tensor(name)
        for name, _ in tf.train.list_variables(prefix)
        if name.startswith("model/")
    }


def test_interrupted_run_resumes_to_the_same_model(runs, root):
    """A run stopped after step 4 (its later checkpoints gone) resumes from ckpt-4,
    reuses train.tf_record and ends with the weights and predictions of the
    uninterrupted run (op determinism on, dropout active)."""
    done, out = root / "v2", root / "resume"
    final = read_json(done / "train_summary.json")["global_step"]
    assert final > 4
    assert runs["resume"] == ["no error", ""]
    (log_file,) = {p.name for p in out.glob("*.INFO.*")} - {p.name for p in done.glob("*.INFO.*")}
    log = (out / log_file).read_text(encoding="utf-8")
    assert "ckpt-4 at step 4" in log and "Reusing" in log
    # The copy kept the file's time: not written again.
    record_mtime = (done / "train.tf_record").stat().st_mtime_ns
    assert (out / "train.tf_record").stat().st_mtime_ns == record_mtime
    want, got = (
        _model_weights(str(done / f"ckpt-{final}")),
        _model_weights(str(out / f"ckpt-{final}")),
    )
    assert want.keys() == got.keys()
    for name in want:
        np.testing.assert_allclose(got[name], want[name], atol=1e-6, err_msg=name)
    assert read_json(out / "predictions.json") == read_json(done / "predictions.json")
    assert read_results(out / "eval_results.txt") == pytest.approx(
        read_results(done / "eval_results.txt")
    )

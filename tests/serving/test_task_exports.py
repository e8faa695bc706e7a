"""Tests of the SQuAD, NER and multiple-choice task exports of serving/ against the runners'
Python pipelines.

A tiny random model (wide initializer, so that logits differ clearly between
positions) is exported and fed raw text; its answers must equal what the runner's
post-processing (`squad_postprocess.compute_predictions`, `ner_features.predictions_to_tags`)
makes of the same model's logits on the features the runner's data writer builds,
windows included.
The runners' own --export_dir runs are tested in test_run_squad.py and test_run_ner.py.
"""

import csv
import json
import os
import random

import keras
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the ops the exports need)

from data_prep.ner import conll, ner_features
from data_prep.squad import squad_features, squad_postprocess, squad_reader
from data_prep.classifier import classifier_features, classifier_tasks
from data_prep.text import tf_tokenization, tokenization
from modeling import feature_based, models
from modeling.config import BertConfig
from modeling.encoder import BertEncoder
from serving import exports as serving_exports, savedmodel
from serving import squad as serving_squad
from tests.conftest import SWAG_HEADER, tiny_config
from tests.helpers.export_helpers import SeenLength, seen_length

TINY = tiny_config(initializer_range=0.2)
# Short windows, so that a sample paragraph needs several; non-default options, so that
# they demonstrably reach the export.
SEQ, QUERY, STRIDE, MAX_ANSWER, N_BEST = 48, 12, 16, 5, 7
# Text the tokenizers treat specially: accents, case, ligatures and characters whose
# lower case is longer, punctuation inside words, CJK, a zero-width character (a word
# without word pieces), narrow no-break spaces (context whitespace), a word longer
# than the tokenizer's limit, repeats (get_final_text maps the first occurrence).
ODD_CONTEXT = (
    "İstanbul ½ café ﬁne Straße (1895-1943). 東京 tototo Papa papa a-a "
    "ÅNGSTRÖM x\u00a0y e\u0301te Steve Smith's\u202fcar \u200b " + "x" * 250 + " end."
)


@pytest.fixture(scope="module")
def config():
    return BertConfig(**TINY)


def _model_inputs(features) -> dict:
    return {
        "input_word_ids": np.array([f.input_ids for f in features], np.int32),
        "input_mask": np.array([f.input_mask for f in features], np.int32),
        "input_type_ids": np.array([f.segment_ids for f in features], np.int32),
    }


def _squad_rows(sample_data) -> list[tuple[str, str]]:
    """(question, context): questions of the first paragraphs of the sample (long
    contexts: several windows each), and edge cases."""
    data = json.loads(
        (sample_data / "squad" / "dev-v2.0-first5articles.json").read_text(encoding="utf-8")
    )
    rows = [
        (qa["question"], paragraph["context"])
        for article in data["data"][:2]
        for paragraph in article["paragraphs"][:2]
        for qa in paragraph["qas"][:4]
    ]
    return rows + [
        # A NUL byte first: tf_text.regex_split ended the context there (no answer).
        (rows[0][0], "\x00" + rows[0][1]),
        ("Who?", ""),  # No words: no answer.
        ("What?", "\u200b"),  # A word without word pieces: no answer.
        ("Which city, and when?", ODD_CONTEXT),
        (
            "A question far longer than the max query length of twelve word pieces, "
            "cut as the feature writer cuts it?",
            "Short context.",
        ),
        ("Where is it?", "  leading and trailing whitespace\t\n "),
    ]


@pytest.fixture(scope="module")
def squad_exports(config, vocab_file, tmp_path_factory):
    """The model and its exports: "cut" (each request cut to its longest window, the
    default) and "padded" (pad_to_max_seq_length)."""
    keras.utils.set_random_seed(5)
    model = models.BertSpanLabeler(BertEncoder(config), config)
    exports = {}
    for name in ("cut", "padded"):
        path = serving_exports.export_task_model(
            SeenLength(model),
            str(tmp_path_factory.mktemp("squad") / name),
            vocab_file,
            True,
            SEQ,
            kind="squad",
            max_query_length=QUERY,
            doc_stride=STRIDE,
            max_answer_length=MAX_ANSWER,
            n_best_size=N_BEST,
            pad_to_max_seq_length=name == "padded",
        )
        exports[name] = tf.saved_model.load(path)
    return model, exports


def _squad_predictions(model, rows, vocab_file, mask_padding: bool):
    """run_squad's features of `rows`, and its predictions from the model's logits;
    with `mask_padding`, the logits at padding are -inf (what the cut export ranks)."""
    tokenizer = tokenization.FullTokenizer(vocab_file, True)
    examples = [
        squad_reader.SquadExample(str(i), question, squad_reader.split_context(context)[0])
        for i, (question, context) in enumerate(rows)
    ]
    features = list(
        squad_features.convert_examples_to_features(
            examples, tokenizer, SEQ, STRIDE, QUERY, is_training=False
        )
    )
    inputs = _model_inputs(features)
    outputs = model(inputs)
    padding = inputs["input_mask"] == 0
    results = []
    for f, start, end, pad in zip(
        features, outputs["start_logits"].numpy(), outputs["end_logits"].numpy(), padding
    ):
        if mask_padding:
            start, end = np.where(pad, -np.inf, start), np.where(pad, -np.inf, end)
        results.append(squad_postprocess.RawResult(f.unique_id, start, end))
    predictions = squad_postprocess.compute_predictions(
        examples,
        features,
        results,
        n_best_size=N_BEST,
        max_answer_length=MAX_ANSWER,
        version_2_with_negative=True,
    )
    return examples, features, results, predictions


@pytest.fixture(scope="module")
def squad_predictions(squad_exports, sample_data, vocab_file):
    """mask_padding -> `_squad_predictions` of the model on `_squad_rows`, each computed
    once for the tests that share it (they only read it)."""
    model, rows, computed = squad_exports[0], _squad_rows(sample_data), {}

    def get(mask_padding: bool):
        if mask_padding not in computed:
            computed[mask_padding] = _squad_predictions(model, rows, vocab_file, mask_padding)
        return computed[mask_padding]

    return get


def _ask(loaded, rows) -> dict:
    got = loaded.signatures["serving_default"](
        question=tf.constant([q for q, _ in rows]), context=tf.constant([c for _, c in rows])
    )
    return {k: v.numpy() for k, v in got.items()}


@pytest.mark.slow
@pytest.mark.parametrize("build", ["cut", "padded"])
def test_squad_export_answers_as_run_squad_predicts(
    squad_exports, squad_predictions, sample_data, build
):
    """Both builds answer as run_squad predicts; the cut one ranks the window's tokens
    alone (run_squad's logits with -inf at padding)."""
    loaded = squad_exports[1][build]
    rows = _squad_rows(sample_data)
    examples, features, results, want = squad_predictions(mask_padding=build == "cut")
    got = _ask(loaded, rows)
    assert set(got) == {"answer", "score", "null_score", "start_logits", "end_logits"}
    assert got["start_logits"].shape == got["end_logits"].shape == (len(rows), SEQ)
    answers = [a.decode() for a in got["answer"]]
    windows = {i: [f for f in features if f.example_index == i] for i in range(len(rows))}
    assert max(len(w) for w in windows.values()) > 5
    for i, example in enumerate(examples):
        entries = want.nbest[example.qas_id]
        best = next((e for e in entries if e["text"]), None)
        if best is None:  # No valid span: "" with score -inf.
            assert answers[i] == "" and got["score"][i] == -np.inf, i
            continue
        assert answers[i] == best["text"], i
        assert got["score"][i] == pytest.approx(best["start_logit"] + best["end_logit"], abs=1e-4)
        # The null odds of null_odds.json, and the v2.0 answer at threshold 0.
        odds = float(got["null_score"][i] - got["score"][i])
        assert odds == pytest.approx(want.null_odds[example.qas_id], abs=1e-4), i
        assert want.predictions[example.qas_id] == ("" if odds > 0 else answers[i]), i
        if len(windows[i]) == 1:  # -inf at padding in the cut build
            np.testing.assert_allclose(
                got["start_logits"][i],
                results[features.index(windows[i][0])].start_logits,
                atol=1e-5,
            )
    assert answers[len(rows) - 5 : len(rows) - 3] == ["", ""]  # no words, no pieces
    # The test sees answers that are not whole words, and best spans off window one.
    assert any(a and a not in c.split() for a, (_, c) in zip(answers, rows))
    assert any(
        answers[i]
        and not np.allclose(
            got["start_logits"][i], results[features.index(windows[i][0])].start_logits
        )
        for i in range(len(rows))
    )
    assert loaded.max_query_length.numpy() == QUERY and loaded.doc_stride.numpy() == STRIDE
    assert loaded.max_answer_length.numpy() == MAX_ANSWER
    assert loaded.n_best_size.numpy() == N_BEST and loaded.seq_length.numpy() == SEQ


@pytest.mark.slow
def test_squad_cut_build_answers_as_the_padded_one(squad_exports, squad_predictions, sample_data):
    """On real text the cut build answers as the padded one (to float tolerance),
    except where padding positions crowd a valid span out of a window's n_best_size
    highest logits in the padded build: there the cut one finds a higher-scoring span."""
    exports = squad_exports[1]
    rows = _squad_rows(sample_data)
    examples, _, _, padded_want = squad_predictions(mask_padding=False)
    cut_want = squad_predictions(mask_padding=True)[3]
    cut, padded = _ask(exports["cut"], rows), _ask(exports["padded"], rows)

    def best(predictions, example):
        entry = next((e for e in predictions.nbest[example.qas_id] if e["text"]), {})
        return entry.get("text"), entry.get("start_logit"), entry.get("end_logit")

    same = [best(padded_want, e) == best(cut_want, e) for e in examples]
    assert sum(same) >= len(rows) - 3, same
    for i, equal in enumerate(same):
        if not equal:
            assert cut["score"][i] >= padded["score"][i] - 1e-4, i
            continue
        assert cut["answer"][i] == padded["answer"][i], i
        for key in ("score", "null_score"):
            np.testing.assert_allclose(cut[key][i], padded[key][i], atol=1e-4, err_msg=key)
        real = np.isfinite(cut["start_logits"][i])
        for key in ("start_logits", "end_logits"):
            np.testing.assert_allclose(cut[key][i][real], padded[key][i][real], atol=1e-5)
            assert np.all(cut[key][i][~real] == -np.inf)
    assert seen_length(exports["cut"]) == seen_length(exports["padded"]) == SEQ
    short = [("Who?", "Steve Smith's car."), ("When?", "In 1895.")]
    for build in ("cut", "padded"):
        _ask(exports[build], short)
    # [CLS] who ? [SEP] steve smith ' s car . [SEP]
    assert seen_length(exports["cut"]) == 11 and seen_length(exports["padded"]) == SEQ


def _final_text_cases(sample_data, tokenizer, count, seed=0):
    """(pred_text, orig_text) of random piece spans, as
    `squad_postprocess.candidate_text` builds them."""
    data = json.loads(
        (sample_data / "squad" / "dev-v2.0-first5articles.json").read_text(encoding="utf-8")
    )
    contexts = [p["context"] for a in data["data"][:2] for p in a["paragraphs"][:3]]
    contexts.append(ODD_CONTEXT)
    rng = random.Random(seed)
    cases = []
    for i in range(count):
        words = squad_reader.split_context(contexts[i % len(contexts)])[0]
        pieces, piece_to_word, _ = squad_features.tokenize_document(tokenizer, words)
        start = rng.randrange(len(pieces))
        end = min(len(pieces) - 1, start + rng.randrange(8))
        pred = " ".join(pieces[start : end + 1]).replace(" ##", "").replace("##", "")
        cases.append(
            (" ".join(pred.split()), " ".join(words[piece_to_word[start] : piece_to_word[end] + 1]))
        )
    return cases + [
        ("", "Anything"),
        ("papa", "Papa papa"),
        ("to", "tototo"),
        ("a", "a-a"),
        ("istanbul", "İstanbul"),
        ("smith", "Smith's"),
        ("not there", "Steve Smith's"),
    ]


@pytest.mark.parametrize("do_lower_case", [True, False])
def test_final_text_equals_get_final_text(sample_data, vocab_file, do_lower_case):
    python_tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case)
    cases = _final_text_cases(sample_data, python_tokenizer, 400)
    tokenizer = tf_tokenization.TFBertTokenizer(vocab_file, do_lower_case)
    project = tf.function(lambda p, o: serving_squad.final_text(tokenizer, p, o))
    got = project(tf.constant([p for p, _ in cases]), tf.constant([o for _, o in cases]))
    want = [squad_postprocess.get_final_text(p, o, do_lower_case) for p, o in cases]
    assert [g.decode() for g in got.numpy()] == want
    assert sum(w != o for w, (_, o) in zip(want, cases)) > 50  # Not just orig_text.


def _ner_sentences(sample_data) -> list[conll.Sentence]:
    sentences = [
        s for s in conll.read_conll(str(sample_data / "sciner" / "dev.txt")) if len(s.words) >= 15
    ][:10]
    odd = ("\u200b", "ok", "x" * 250, "é", "Straße", "(1895-1943).")
    return sentences + [
        conll.Sentence(
            words=odd, tags=("O",) * len(odd), line_numbers=tuple(range(1, len(odd) + 1))
        )
    ]


@pytest.mark.slow
@pytest.mark.parametrize("kind,scheme", [("fine_tuned", "iob1"), ("feature_based", "iobes")])
def test_ner_export_tags_as_run_ner_predicts(
    config, vocab_file, sample_data, tmp_path, kind, scheme
):
    """The export's tags are the labels run_ner.py predicts, in the scheme learnt, with
    each request cut to its longest window or (pad_to_max_seq_length) not."""
    seq_length, doc_stride = 16, 5
    sentences = _ner_sentences(sample_data)
    labels = conll.label_list(sentences, scheme)
    keras.utils.set_random_seed(11)
    if kind == "fine_tuned":
        model = models.BertTokenClassifier(BertEncoder(config), config, len(labels))
    else:
        model = feature_based.BertFeatureBasedTagger(
            BertEncoder(config), config, len(labels), [1, 0], "concat", lstm_units=6
        )
    loaded, padded = (
        tf.saved_model.load(
            serving_exports.export_task_model(
                SeenLength(model),
                str(tmp_path / name),
                vocab_file,
                True,
                seq_length,
                kind="ner",
                labels=labels,
                doc_stride=doc_stride,
                tag_scheme=scheme,
                pad_to_max_seq_length=name == "padded",
            )
        )
        for name in ("cut", "padded")
    )
    features = ner_features.convert_sentences_to_features(
        sentences,
        labels,
        tokenization.FullTokenizer(vocab_file, True),
        seq_length,
        doc_stride,
        label_scheme=scheme,
    )
    assert len(features) > 3 * len(sentences)  # Many windows per sentence.
    want = ner_features.predictions_to_tags(
        model(_model_inputs(features))["logits"].numpy(), features, sentences, labels
    )
    texts = [" ".join(s.words) for s in sentences] + ["", "  two\twords\n"]
    got = loaded.signatures["serving_default"](text=tf.constant(texts))
    tags = [[t.decode() for t in row if t] for row in got["tags"].numpy()]
    words = [[w.decode() for w in row if w] for row in got["words"].numpy()]
    assert tags[: len(sentences)] == want
    assert words == [list(s.words) for s in sentences] + [[], ["two", "words"]]
    assert len(tags[-1]) == 2 and all(t in labels for t in tags[-1])
    assert len({t for row in want for t in row}) > 1  # The test tells labels apart.
    assert [s.decode() for s in loaded.labels.numpy()] == labels
    assert loaded.doc_stride.numpy() == doc_stride
    assert loaded.tag_scheme.numpy().decode() == scheme
    assert not loaded.document_context.numpy()  # The default: sentence by sentence.
    assert seen_length(loaded) == seq_length
    np.testing.assert_array_equal(
        padded.signatures["serving_default"](text=tf.constant(texts))["tags"], got["tags"]
    )
    for export in (loaded, padded):
        export.signatures["serving_default"](text=tf.constant(["two words", "one"]))
    assert seen_length(loaded) == 4 and seen_length(padded) == seq_length


# SWAG rows (sent1, sent2, endings): a blank and a padded start (the reader strips it),
# case, accents and punctuation, and contexts long enough to be truncated at SEQ_MC.
SEQ_MC = 20
SWAG_ROWS = [
    (
        "A man is sitting on a roof.",
        "He",
        [
            "starts pulling up roofing.",
            "is ripping level tiles.",
            "is holding a rubik's cube.",
            "starts pulling up roofing on a roof.",
        ],
    ),
    (
        "Café owners in Zürich argue about the ½-price menu for a very long time indeed, "
        "while the rain keeps falling on the old square.",
        "",
        ["They agree.", "NOBODY LISTENS!", "the cat (1895-1943) sleeps", "x"],
    ),
    (
        "Someone runs.",
        "  then she  ",
        [
            "stops.",
            "falls over the hurdle and keeps running until the end of the very long race track",
            "waves",
            "Straße.",
        ],
    ),
]


def _write_swag_test(directory) -> None:
    """test.csv in the official SWAG layout (no label column)."""
    with open(directory / "test.csv", "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(SWAG_HEADER)
        for i, (sent1, sent2, endings) in enumerate(SWAG_ROWS):
            writer.writerow([i, f"v{i}", i, f"{sent1} {sent2}", sent1, sent2, "gold", *endings])


@pytest.mark.slow
def test_multiple_choice_export_scores_as_run_classifier_predicts(config, vocab_file, tmp_path):
    """The SWAG export on the CSV's fields gives the probabilities that run_classifier
    --do_predict writes for the same rows: SwagProcessor's choices, convert_example's
    packing (truncation included), the model's softmax over the choices."""
    _write_swag_test(tmp_path)
    processor = classifier_tasks.get_processor("swag")
    examples = processor.get_examples(str(tmp_path), "test")
    tokenizer = tokenization.FullTokenizer(vocab_file, True)
    features = [
        classifier_features.convert_example(e, processor.labels, SEQ_MC, tokenizer)
        for e in examples
    ]
    assert any(f.truncated for f in features)
    keras.utils.set_random_seed(3)
    model = models.BertMultipleChoice(BertEncoder(config), config)
    # A wide scorer, so that the choices' probabilities differ clearly.
    model.scorer.dense.kernel.assign(
        np.random.default_rng(0).normal(scale=3.0, size=[config.hidden_size, 1]).astype("f4")
    )
    want = tf.nn.softmax(
        model(
            {
                "input_word_ids": np.array([f.input_ids for f in features], np.int32),
                "input_mask": np.array([f.input_mask for f in features], np.int32),
                "input_type_ids": np.array([f.segment_ids for f in features], np.int32),
            },
            training=False,
        )["logits"]
    ).numpy()  # [B, C]
    path, padded_path = (
        serving_exports.export_task_model(
            SeenLength(model),
            str(tmp_path / name),
            vocab_file,
            True,
            SEQ_MC,
            kind="multiple_choice",
            labels=list(processor.labels),
            pad_to_max_seq_length=name == "padded",
        )
        for name in ("swag", "padded")
    )
    loaded, padded = tf.saved_model.load(path), tf.saved_model.load(padded_path)
    assert set(loaded.signatures) == {"serving_default", "serving_choices"}
    parts = {
        "context": tf.constant([r[0] for r in SWAG_ROWS]),
        "start": tf.constant([r[1] for r in SWAG_ROWS]),
        "endings": tf.constant([r[2] for r in SWAG_ROWS]),
    }
    got = loaded.signatures["serving_default"](**parts)
    np.testing.assert_allclose(got["probabilities"], want, atol=1e-5)
    full = padded.signatures["serving_default"](**parts)
    np.testing.assert_allclose(full["probabilities"], got["probabilities"], atol=1e-5)
    assert seen_length(loaded) == seen_length(padded) == SEQ_MC  # truncated choices
    short = {"context": ["Someone runs."], "start": ["she"], "endings": [["a", "b", "c", "d e"]]}
    short = {k: tf.constant(v) for k, v in short.items()}
    np.testing.assert_allclose(
        loaded.signatures["serving_default"](**short)["probabilities"],
        padded.signatures["serving_default"](**short)["probabilities"],
        atol=1e-5,
    )
    # [CLS] someone runs . [SEP] she d e [SEP]
    assert seen_length(loaded) == 9 and seen_length(padded) == SEQ_MC
    np.testing.assert_array_equal(got["best_choice"], want.argmax(1))
    assert len(set(want.argmax(1))) > 1 and want.std() > 0.1  # choices told apart
    whole = loaded.signatures["serving_choices"](
        context=tf.constant([e.context for e in examples]),
        choices=tf.constant([list(e.choices) for e in examples]),
    )
    np.testing.assert_allclose(whole["probabilities"], want, atol=1e-5)
    assert [s.decode() for s in loaded.labels.numpy()] == ["0", "1", "2", "3"]
    assert savedmodel.read_marker(path)["kind"] == "multiple_choice"
    # Four endings per row, as SWAG's labels say.
    assert loaded.signatures["serving_default"].structured_input_signature[1][
        "endings"
    ].shape.as_list() == [None, 4]
    with pytest.raises(ValueError, match="choice indices"):
        serving_exports.export_task_model(
            model,
            str(tmp_path / "x"),
            vocab_file,
            True,
            SEQ_MC,
            kind="multiple_choice",
            labels=["a", "b", "c", "d"],
        )


def _fail_to_save(module, path, signatures=None):
    with open(os.path.join(path, "saved_model.pb"), "wb") as f:
        f.write(b"half")
    raise RuntimeError("killed midway")


def test_task_export_errors_leave_nothing_behind(config, vocab_file, tmp_path, monkeypatch):
    span = models.BertSpanLabeler(BertEncoder(config), config)
    tagger = models.BertTokenClassifier(BertEncoder(config), config, 3)
    target = str(tmp_path / "export")
    with pytest.raises(
        ValueError,
        match=r"unknown option\(s\) \['max_query_length'\] of a "
        r"ner export",
    ):
        serving_exports.export_task_model(
            tagger,
            target,
            vocab_file,
            True,
            16,
            kind="ner",
            labels=["O", "B-X", "I-X"],
            max_query_length=8,
        )
    with pytest.raises(ValueError, match="3 labels"):
        serving_exports.export_task_model(
            models.BertTokenClassifier(BertEncoder(config), config, 5),
            target,
            vocab_file,
            True,
            16,
            kind="ner",
            labels=["O", "B-X", "I-X"],
        )
    with pytest.raises(ValueError, match="needs the label list"):
        serving_exports.export_task_model(tagger, target, vocab_file, True, 16, kind="ner")
    with pytest.raises(ValueError, match=r"labels \['E-X'\] are not iob2 tags"):
        serving_exports.export_task_model(
            tagger, target, vocab_file, True, 16, kind="ner", labels=["O", "B-X", "E-X"]
        )
    with pytest.raises(ValueError, match="max_query_length"):
        serving_exports.export_task_model(span, target, vocab_file, True, 16, kind="squad")
    with pytest.raises(ValueError, match="no labels"):
        serving_exports.export_task_model(
            span, target, vocab_file, True, 32, kind="squad", labels=["a"], max_query_length=8
        )
    monkeypatch.setattr(tf.saved_model, "save", _fail_to_save)
    for kind, model, labels, options in (
        ("squad", span, None, {"max_query_length": 8}),
        ("ner", tagger, ["O", "B-X", "I-X"], {}),
    ):
        with pytest.raises(RuntimeError, match="killed midway"):
            serving_exports.export_task_model(
                model, target, vocab_file, True, 32, kind=kind, labels=labels, **options
            )
    assert os.listdir(tmp_path) == []
    with pytest.raises(ValueError, match="only local paths"):
        savedmodel.check_export_path("gs://bucket/export")
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(FileExistsError, match="is not a folder"):
        savedmodel.check_export_path(str(tmp_path / "file"))
    savedmodel.check_export_path(str(tmp_path / "new" / "export"))

"""Tests of the task exports' option xla_single_requests (serving/model_call.py): a
request of one example runs the model through an XLA-compiled function, every other
batch through the standard graph, and both answer as the standard export does.

Each kind is exported twice from one tiny random model (wide initializer, so that
answers differ clearly between inputs), without and with the option, and asked the
same requests: one example (the XLA call) and several (the graph call). `SeenLength`
records the length the model computed, which tells the two calls apart: the XLA call
computes the longest input rounded up to a cut size (`input_pipeline.length_sizes`),
the graph call the longest input itself.

The exports are written once per module (EXPORTS/<build>/<kind>); the serving fuzz
worker (tests/helpers/serving_fuzz.py, in a subprocess) sends the four "xla" ones the
requests of test_serving_requests.py.
"""

import json
import os
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the ops the exports need)

from modeling import feature_based, models
from modeling.config import BertConfig
from modeling.encoder import BertEncoder
from serving import exports as serving_exports, model_call
from tests.conftest import REPO_ROOT, tiny_config
from tests.helpers import serving_fuzz
from tests.helpers.export_helpers import SeenLength, seen_length

TINY = tiny_config(initializer_range=0.2)
SEQ = 48  # cut sizes 16, 32, 48
ATOL = 1e-5


@pytest.fixture(scope="module")
def config():
    return BertConfig(**TINY)


@pytest.fixture(scope="module")
def exports_root(tmp_path_factory):
    """The folder of every export of this module: <build>/<kind>."""
    return tmp_path_factory.mktemp("exports")


def _export(model, root, kind, vocab_file, seq_length=SEQ, **options) -> tuple[dict, dict]:
    """({build: path}, {build: loaded}): `model` exported as build "standard" and
    "xla" (xla_single_requests), at root/<build>/<kind>."""
    paths = {
        build: serving_exports.export_task_model(
            SeenLength(model),
            str(root / build / kind),
            vocab_file,
            True,
            seq_length,
            kind=kind,
            xla_single_requests=build == "xla",
            **options,
        )
        for build in ("standard", "xla")
    }
    return paths, {build: tf.saved_model.load(p) for build, p in paths.items()}


def xla_functions(loaded, signature: str) -> list[str]:
    """The functions of a loaded export's signature graph that TensorFlow must compile
    with XLA (the `_XlaMustCompile` attribute `tf.function(jit_compile=True)` sets)."""
    library = loaded.signatures[signature].graph.as_graph_def().library
    return [
        f.signature.name
        for f in library.function
        if model_call.XLA_MUST_COMPILE in f.attr and f.attr[model_call.XLA_MUST_COMPILE].b
    ]


def _call(loaded, signature, **inputs) -> dict:
    got = loaded.signatures[signature](**{k: tf.constant(v, tf.string) for k, v in inputs.items()})
    return {k: v.numpy() for k, v in got.items()}


@pytest.fixture(scope="module")
def classifier_exports(config, vocab_file, exports_root):
    """({build: path}, {build: loaded}): "standard", "xla" and "xla_padded" (with
    pad_to_max_seq_length)."""
    keras.utils.set_random_seed(1)
    model = models.BertClassifier(BertEncoder(config), config, num_labels=3)
    paths, exports = _export(model, exports_root, "classifier", vocab_file, labels=["a", "b", "c"])
    paths["xla_padded"] = serving_exports.export_task_model(
        SeenLength(model),
        str(exports_root / "xla_padded" / "classifier"),
        vocab_file,
        True,
        SEQ,
        kind="classifier",
        labels=["a", "b", "c"],
        xla_single_requests=True,
        pad_to_max_seq_length=True,
    )
    exports["xla_padded"] = tf.saved_model.load(paths["xla_padded"])
    return paths, exports


# [CLS] the cat sat on the mat . [SEP]: 9 positions.
ONE = "The cat sat on the mat."
PAIRS = [
    (ONE, "A dog lay on the rug, and then it lay on another rug in the hall."),
    ("Friday, Stanford (47-15) blanked the Gamecocks 8-0.", ""),
    ("Short.", "Also short."),
]


@pytest.mark.slow
def test_classifier_xla_export_answers_as_the_standard_one(classifier_exports):
    _, exports = classifier_exports
    standard, xla, xla_padded = exports["standard"], exports["xla"], exports["xla_padded"]
    pairs = {"text_a": [a for a, _ in PAIRS], "text_b": [b for _, b in PAIRS]}
    # signature, inputs, the length computed by the standard and the xla build.
    requests = [
        ("serving_text_a", {"text_a": [ONE]}, 9, 16),  # one text: XLA, cut to 16
        ("serving_default", {"text_a": [PAIRS[0][0]], "text_b": [PAIRS[0][1]]}, 28, 32),
        # Several: the graph call, at the longest input as without the option.
        ("serving_default", pairs, 28, 28),
        ("serving_text_a", {"text_a": [ONE, "x"]}, 9, 9),
        ("serving_text_a", {"text_a": []}, 1, 1),  # no text: the graph call
    ]
    for signature, inputs, standard_length, xla_length in requests:
        want = _call(standard, signature, **inputs)
        got = _call(xla, signature, **inputs)
        np.testing.assert_allclose(got["probabilities"], want["probabilities"], atol=ATOL)
        np.testing.assert_array_equal(got["labels"], want["labels"])
        assert seen_length(standard) == standard_length, inputs
        assert seen_length(xla) == xla_length, inputs
        # Static padding with XLA: one program, at SEQ, for one text.
        padded = _call(xla_padded, signature, **inputs)
        np.testing.assert_allclose(padded["probabilities"], want["probabilities"], atol=ATOL)
        assert seen_length(xla_padded) == SEQ, inputs
    probabilities = _call(standard, "serving_default", **pairs)["probabilities"]
    assert len({tuple(p) for p in probabilities.round(2)}) == len(PAIRS)  # texts told apart


@pytest.mark.slow
def test_the_option_is_kept_and_only_its_exports_hold_xla_functions(classifier_exports):
    for build, loaded in classifier_exports[1].items():
        on = build != "standard"
        assert loaded.xla_single_requests.numpy() == on
        assert loaded.pad_to_max_seq_length.numpy() == (build == "xla_padded")
        for signature in ("serving_default", "serving_text_a"):
            assert len(xla_functions(loaded, signature)) == (1 if on else 0), (build, signature)


# Compiles what it is asked in a new process, with XLA writing every program it
# compiles to --xla_dump_to; prints the number of programs after each request.
_COUNT_PROGRAMS = textwrap.dedent(
    """
    import os, sys
    import tensorflow as tf
    import tensorflow_text  # noqa: F401

    loaded = {name: tf.saved_model.load(path) for name, path in (("standard", sys.argv[2]),
              ("xla", sys.argv[3]))}
    dump = os.environ["XLA_FLAGS"].split("=", 1)[1]
    def programs():
        if not os.path.isdir(dump):
            return 0
        return len({n.split(".")[0] for n in os.listdir(dump) if n.startswith("module_")})
    for line in sys.argv[1].split("|"):
        name, texts = line.split(":", 1)
        loaded[name].signatures["serving_text_a"](text_a=tf.constant(texts.split(";")))
        print(programs(), flush=True)
    """
)


@pytest.mark.slow
def test_the_loaded_xla_export_compiles_one_program_per_cut_size(classifier_exports, tmp_path):
    """The reloaded export really compiles (XLA writes each program it compiles), once
    per cut size for one text, never for several texts or without the option."""
    requests = [
        "standard:" + ONE,  # no program
        "xla:" + ONE + ";x",  # two texts: the graph call
        "xla:" + ONE,  # 9 positions -> 16: one program
        "xla:Short.",  # 4 -> 16: the same program
        "xla:" + " ".join(["word"] * 20),  # 22 -> 32: a second one
        "xla:" + " ".join(["word"] * 18),  # 20 -> 32
    ]
    paths, _ = classifier_exports
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            _COUNT_PROGRAMS,
            "|".join(requests),
            paths["standard"],
            paths["xla"],
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, XLA_FLAGS=f"--xla_dump_to={tmp_path / 'dump'}"),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["0", "0", "1", "1", "2", "2"]


@pytest.fixture(scope="module")
def squad_exports(config, vocab_file, exports_root):
    keras.utils.set_random_seed(5)
    model = models.BertSpanLabeler(BertEncoder(config), config)
    return _export(
        model,
        exports_root,
        "squad",
        vocab_file,
        max_query_length=12,
        doc_stride=16,
        max_answer_length=5,
        n_best_size=7,
    )[1]


@pytest.mark.slow
def test_squad_xla_export_answers_as_the_standard_one(squad_exports, sample_data):
    exports = squad_exports
    data = json.loads(
        (sample_data / "squad" / "dev-v2.0-first5articles.json").read_text(encoding="utf-8")
    )
    paragraph = data["data"][0]["paragraphs"][0]
    long_context, question = paragraph["context"], paragraph["qas"][0]["question"]
    short = ("Who owned the car?", "Steve Smith's car was red, and Anna drove it in 1895.")
    requests = [
        ([short], 23, 32),  # one window: XLA, cut to 32
        ([(question, long_context)], SEQ, SEQ),  # several windows: the graph call
        ([short, ("When?", "In 1895.")], 23, 23),
    ]
    for rows, standard_length, xla_length in requests:
        inputs = {"question": [q for q, _ in rows], "context": [c for _, c in rows]}
        want = _call(exports["standard"], "serving_default", **inputs)
        got = _call(exports["xla"], "serving_default", **inputs)
        np.testing.assert_array_equal(got["answer"], want["answer"])
        for key in ("score", "null_score", "start_logits", "end_logits"):
            np.testing.assert_allclose(got[key], want[key], atol=1e-4, err_msg=key)
        assert seen_length(exports["standard"]) == standard_length, rows
        assert seen_length(exports["xla"]) == xla_length, rows
        assert all(want["answer"]), want["answer"]  # real spans compared
    assert exports["xla"].xla_single_requests.numpy()
    assert xla_functions(exports["xla"], "serving_default")
    assert not xla_functions(exports["standard"], "serving_default")


@pytest.fixture(scope="module")
def ner_exports(config, vocab_file, exports_root):
    """The feature-based tagger (a BiLSTM over two layers' outputs): what the
    fine-tuned one computes and more, compiled with XLA; the signature is the same."""
    labels = ["O", "B-X", "I-X", "B-Y", "I-Y"]
    keras.utils.set_random_seed(11)
    model = feature_based.BertFeatureBasedTagger(
        BertEncoder(config), config, len(labels), [1, 0], "concat", lstm_units=6
    )
    return _export(
        model,
        exports_root,
        "ner",
        vocab_file,
        seq_length=32,  # cut sizes 16, 32
        labels=labels,
        doc_stride=8,
        tag_scheme="iob2",
    )[1]


@pytest.mark.slow
def test_ner_xla_export_tags_as_the_standard_one(ner_exports):
    exports = ner_exports
    long_text = " ".join(f"Word{i} of the Long text ." for i in range(12))  # several windows
    requests = [
        (["Steve Smith drove to Paris ."], 8, 16),  # one window: XLA, cut to 16
        ([long_text], 32, 32),
        (["Steve Smith drove to Paris .", "Anna"], 8, 8),
    ]
    tags = set()
    for texts, standard_length, xla_length in requests:
        want = _call(exports["standard"], "serving_default", text=texts)
        got = _call(exports["xla"], "serving_default", text=texts)
        np.testing.assert_array_equal(got["tags"], want["tags"])
        np.testing.assert_array_equal(got["words"], want["words"])
        assert seen_length(exports["standard"]) == standard_length, texts
        assert seen_length(exports["xla"]) == xla_length, texts
        tags.update(want["tags"].flatten())
    assert len(tags - {b""}) > 1  # tags told apart
    assert exports["xla"].xla_single_requests.numpy()
    assert xla_functions(exports["xla"], "serving_default")


@pytest.fixture(scope="module")
def multiple_choice_exports(config, vocab_file, exports_root):
    keras.utils.set_random_seed(3)
    model = models.BertMultipleChoice(BertEncoder(config), config)
    model.scorer.dense.kernel.assign(
        np.random.default_rng(0).normal(scale=3.0, size=[config.hidden_size, 1]).astype("f4")
    )
    return _export(model, exports_root, "multiple_choice", vocab_file, labels=["0", "1", "2", "3"])[
        1
    ]


@pytest.mark.slow
def test_multiple_choice_xla_export_scores_as_the_standard_one(multiple_choice_exports):
    """One example (its four choices, four sequences) takes the XLA call."""
    exports = multiple_choice_exports
    one = ("Someone runs.", "she", ["stops.", "falls over the hurdle", "waves", "d e"])
    two = ("A man is on a roof.", "He", ["starts pulling up roofing.", "x", "sleeps", "waves"])
    # [CLS] someone runs . [SEP] she falls over the hurdle [SEP]: 11 positions; the
    # second example: 17.
    for rows, standard_length, xla_length in (([one], 11, 16), ([one, two], 17, 17)):
        inputs = {
            "context": [r[0] for r in rows],
            "start": [r[1] for r in rows],
            "endings": [r[2] for r in rows],
        }
        want = _call(exports["standard"], "serving_default", **inputs)
        got = _call(exports["xla"], "serving_default", **inputs)
        np.testing.assert_allclose(got["probabilities"], want["probabilities"], atol=ATOL)
        np.testing.assert_array_equal(got["best_choice"], want["best_choice"])
        assert want["probabilities"].std() > 0.05  # choices told apart
        assert seen_length(exports["standard"]) == standard_length
        assert seen_length(exports["xla"]) == xla_length
    assert xla_functions(exports["xla"], "serving_choices")


@pytest.mark.slow
def test_xla_exports_keep_the_contract(
    exports_root, classifier_exports, squad_exports, ner_exports, multiple_choice_exports, tmp_path
):
    """The four "xla" exports above (a request of one example runs through XLA) get the
    serving fuzz worker's hand-made cases and generated requests, fewer than
    test_serving_requests.py sends the standard ones, in a subprocess (a crash fails
    this test with its request)."""
    kinds = ("classifier", "multiple_choice", "ner", "squad")
    got = serving_fuzz.run_worker(
        tmp_path,
        "--examples=25",
        "--seed=1",
        "--timeout=300",
        f"--exports={','.join(kinds)}",
        f"--load_exports={exports_root / 'xla'}",
    )
    assert sorted(got["generated"]) == sorted(kinds)
    for case, value in got["named"].items():
        assert value["outcome"] != "other", (case, value)
    for export, counts in got["generated"].items():
        assert counts["tried"] == 25 and counts["other"] == 0, (export, counts)
        assert counts["answered"] >= 10 and counts["rejected"] >= 1, (export, counts)

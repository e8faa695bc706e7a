"""A malformed request never kills a served model: the raw-text task exports and the
TF Hub preprocessing model, fed the requests that crashed them (batches of different
sizes, malformed segments) and a few hundred generated ones (hypothesis: empty strings
and batches, bytes that are not UTF-8, 10,000-word texts, mixed batches), each answer
or refuse clearly (`tests/helpers/serving_fuzz.py` has the requests and the contract).

The requests run in one subprocess that builds every export of a tiny model once: a
crash (abort, segfault) or a hang fails these tests with the request that caused it,
instead of killing pytest. The exports with xla_single_requests get theirs in
test_xla_exports.py (from the exports written there).
`python -m benchmarks.robustness.fuzz_serving` runs many more on demand.
"""

import os
import subprocess
import sys

import pytest

from tests.helpers import serving_fuzz
from tests.conftest import REPO_ROOT

EXAMPLES = 40  # generated requests per export


@pytest.fixture(scope="module")
def export_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("exports")


@pytest.fixture(scope="module")
def results(tmp_path_factory, export_dir):
    return serving_fuzz.run_worker(
        tmp_path_factory.mktemp("fuzz"),
        f"--examples={EXAMPLES}",
        "--seed=0",
        "--timeout=300",
        f"--export_dir={export_dir}",
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "case,names",
    [
        ("classifier text_a 5, text_b 1", ("text_a", "text_b")),  # aborted the process
        ("classifier text_a 2, text_b 1", ("text_a", "text_b")),  # read garbage ids
        ("classifier text_a 1, text_b 2", ("text_a", "text_b")),  # answered twice
        ("multiple_choice context 3, endings 1", ("context", "endings")),
        ("multiple_choice start 1, context 3", ("context", "start")),
        ("squad question 3, context 1", ("question", "context")),  # failed in a gather
        ("bert_pack_inputs segments of 5 and 1 rows", ("segment 2", "segment 1")),  # segfault
        ("bert_pack_inputs malformed row_splits", ("segment 1", "row_splits")),
        ("ner text of rank 2", ("Shape of tensor text [2,1]", "expected shape [?]")),
        ("multiple_choice endings of rank 1", ("tensor endings [4]", "expected shape [?,4]")),
    ],
)
def test_requests_that_crashed_are_refused_clearly(results, case, names):
    got = results["named"][case]
    assert got["outcome"] == "rejected", got
    for name in names:
        assert name in got["details"], got


@pytest.mark.slow
def test_edge_requests_are_answered(results):
    for case in (
        "classifier empty batch",
        "squad 10,000-word context",
        "ner mixed batch",
        "ner NUL bytes",
    ):
        assert results["named"][case] == {"outcome": "answered", "details": ""}, case


@pytest.mark.slow
@pytest.mark.parametrize("export", serving_fuzz.EXPORTS)
def test_generated_requests_get_an_answer_or_a_clear_error(results, export):
    counts = results["generated"][export]
    assert counts["tried"] == EXAMPLES
    assert counts["other"] == 0, counts["other_examples"]
    assert counts["answered"] + counts["rejected"] == EXAMPLES
    # The generator reaches both sides of the contract.
    assert counts["answered"] >= EXAMPLES // 2 and counts["rejected"] >= 1, counts


def test_the_contract_catches_wrong_answers():
    """`outcome` counts as "other" what breaks the contract: an answer to a request that
    must be refused, an answer of the wrong form, an error that is not a request check."""
    import numpy as np
    import tensorflow as tf

    request = dict(serving_fuzz.NAMED_CASES["classifier text_a 1, text_b 2"])

    class Module:
        def __init__(self, answer=None, error=None):
            self.signatures = {"serving_default": self.serve}
            self.answer, self.error = answer, error

        def serve(self, **inputs):
            if self.error:
                raise self.error
            return {k: tf.constant(v) for k, v in self.answer.items()}

    twice = {"probabilities": np.full([2, 3], 1 / 3, "f4"), "labels": [b"no", b"no"]}
    assert serving_fuzz.outcome(Module(twice), request)[0] == "other"
    request["valid"] = True
    request["inputs"] = {"text_a": ["a", "b"], "text_b": ["c", "d"]}
    assert serving_fuzz.outcome(Module(twice), request) == ("answered", "")
    wrong = dict(twice, labels=[b"no", b"yes"])
    assert "labels" in serving_fuzz.outcome(Module(wrong), request)[1]
    deep = tf.errors.InvalidArgumentError(
        None, None, "indices[1,4] = -838158642 is not in [0, 30522)"
    )
    assert serving_fuzz.outcome(Module(error=deep), request)[0] == "other"
    check = tf.errors.InvalidArgumentError(None, None, "assertion failed: [bad request: x]")
    assert serving_fuzz.outcome(Module(error=check), request)[0] == "other"  # valid request
    request["valid"] = False
    assert serving_fuzz.outcome(Module(error=check), request)[0] == "rejected"
    # A restored function's refusal of another shape counts only for a wrong-rank request.
    binding = TypeError(
        "Binding inputs to tf.function failed due to `Can not cast TensorSpec(shape=(), "
        "dtype=tf.string, name='inputs') to TensorSpec(shape=(None,), ...)`"
    )
    assert serving_fuzz.outcome(Module(error=binding), request)[0] == "other"
    request["wrong_rank"] = {"text_a": "scalar"}
    assert serving_fuzz.outcome(Module(error=binding), request)[0] == "rejected"
    assert serving_fuzz.outcome(Module(error=TypeError("other")), request)[0] == "other"


def test_split_words_keeps_the_words_after_a_nul_byte():
    """The NER and SQuAD exports' word split gives the words Python's readers give, NUL
    bytes included (tf_text.regex_split alone ended each text at its first NUL)."""
    import re

    import tensorflow as tf

    from data_prep.squad import squad_reader
    from serving import inputs, ner, squad

    texts = [
        "word \x00)S \u00e9t\u00e9",
        "\x00",
        "",
        "  a\t\tb\x00c\nd \x01 ",
        "x\u202fy z\u00a0w",
    ]
    got = inputs.split_words(tf.constant([t.encode() for t in texts]), ner.NER_WORD_SEPARATORS)
    want = [[w.encode() for w in re.split("[ \t\r\n]+", t) if w] for t in texts]
    assert got.to_list() == want
    got = inputs.split_words(tf.constant([t.encode() for t in texts]), squad.CONTEXT_WHITESPACE)
    assert got.to_list() == [[w.encode() for w in squad_reader.split_context(t)[0]] for t in texts]
    # Bytes that are not UTF-8 are kept as sent.
    got = inputs.split_words(tf.constant([b"\xff\x00 \xc3"]), ner.NER_WORD_SEPARATORS)
    assert got.to_list() == [[b"\xff\x00", b"\xc3"]]


def test_a_crashing_worker_fails_with_its_request(tmp_path):
    """The harness itself: a worker that aborts fails the test, naming its request."""
    with pytest.raises(pytest.fail.Exception, match=r"exit code -6 while running: crash test"):
        serving_fuzz.run_worker(tmp_path, "--crash_for_test", timeout=120)


LOAD_WITHOUT_TENSORFLOW_TEXT = """
import sys
import tensorflow as tf
from modeling import hub
for path in sys.argv[1:]:
    try:
        hub.load_module(path)
    except ValueError as e:
        print("ERROR", e)
print("tensorflow_text" in sys.modules)
"""


@pytest.mark.slow
def test_loading_without_tensorflow_text_says_what_to_do(results, export_dir):
    """TensorFlow says "Op type not registered 'NormalizeUTF8'"; our loader says why."""
    paths = [str(export_dir / name) for name in ("classifier", "preprocessing")]
    process = subprocess.run(
        [sys.executable, "-c", LOAD_WITHOUT_TENSORFLOW_TEXT, *paths],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"),
    )
    lines = process.stdout.splitlines()
    assert process.returncode == 0 and lines[-1] == "False", process.stderr[-3000:]
    errors = [line for line in lines if line.startswith("ERROR")]
    assert len(errors) == 2, lines
    for path, error in zip(paths, errors):
        assert path in error and "Op type not registered" in error, error
        assert "import tensorflow_text" in error and "not a BERT encoder" in error, error


@pytest.mark.slow
def test_a_task_export_given_as_an_encoder_is_named(results, export_dir):
    """With tensorflow_text loaded (as the runners have it), a task export given where
    an encoder belongs (--hub_module_url) is named for what it is."""
    import tensorflow_text  # noqa: F401  (the runners' process has its ops)

    from modeling import hub

    path = str(export_dir / "classifier")
    with pytest.raises(ValueError) as error:
        hub.load_module(path)
    message = str(error.value)
    assert message.startswith(f"{path} is a model that takes raw text"), message
    assert "text_a" in message and "--export_type=encoder" in message, message

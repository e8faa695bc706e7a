"""Requests to the serving exports, generated with hypothesis and hand-made, and the
contract each must meet: an answer of the right form, or tf.errors.InvalidArgumentError
from one of the exports' request checks; never a crash, a hang or anything else.

The exports are those of a tiny random model (test_serving_requests.py builds them
through this module): the raw-text task exports (classifier, multiple choice, NER,
SQuAD, cut to each batch's longest input as they are by default) and the TF Hub
preprocessing model (`__call__`, `tokenize`, `bert_pack_inputs`). With --load_exports,
exports written already (`DIR/<export>`, e.g. test_xla_exports.py's) are loaded instead;
the contract then reads their labels and seq_length from them.

Run as a program, it builds (or loads) the exports once and tries them in this process,
so run it in a subprocess (a crash must not take the caller with it; `run_worker` does):

  python -m tests.helpers.serving_fuzz --examples=100 --seed=0 --out=results.json \
      --progress=progress.txt [--exports=classifier,squad] [--xla_single_requests] \
      [--load_exports=DIR]

Before each request it writes a summary of it to --progress: after a crash that file
names the request. A request running longer than --timeout seconds ends the process
with the Python stack (faulthandler). results.json: per export, the counts of
"answered", "rejected" (a clear error) and "other" (anything else, with up to 5
examples), and the outcome of every hand-made case of `NAMED_CASES`.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import random
import re
import sys
import time

import numpy as np

from tests.conftest import REPO_ROOT, SAMPLE_DATA, tiny_config

EXPORTS = ("classifier", "multiple_choice", "ner", "squad", "preprocessing")
LABELS = {"classifier": ["no", "yes", "maybe"], "ner": ["O", "B-X", "I-X"]}
SEQ = {"classifier": 32, "multiple_choice": 20, "ner": 16, "squad": 48, "preprocessing": 24}
CHOICES = 4
MAX_BATCH = 6
VOCAB_SIZE = 30522
CLS_ID, SEP_ID = 101, 102
# The messages of the exports' request checks (serving.inputs.BAD_REQUEST and
# data_prep.text.tf_tokenization.bert_pack_inputs), after "assertion failed: [".
CLEAR_ERROR = re.compile(
    r"assertion failed: \[(bad request: |bert_pack_inputs: )"
    r"|Shape of tensor \w+ \[[\d,]*\] is not compatible with expected shape \[[?,\d]*\]"
)
# How a restored tf.function (the preprocessing model's __call__ and tokenize, called
# from Python rather than through .signatures) refuses an input of another shape: before
# anything runs, naming both shapes.
BINDING_REFUSAL = re.compile(
    r"Binding inputs to tf\.function failed due to `Can not cast TensorSpec"
)
# Shapes a request may give an input instead of its own: "scalar" (its first text
# alone), "column" (one more dimension), "flat" (a choices matrix as a vector).
WRONG_RANKS = ("scalar", "column", "flat")

# ---------------------------------------------------------------------------------
# Text.


def _real_text() -> list[str]:
    """MRPC dev sentences and SQuAD paragraphs of the bundled samples."""
    with open(SAMPLE_DATA / "glue" / "MRPC" / "dev.tsv", encoding="utf-8-sig") as f:
        rows = [line.rstrip("\n").split("\t") for line in f][1:101]
    sentences = [s for row in rows for s in row[3:5]]
    with open(SAMPLE_DATA / "squad" / "dev-v2.0-first5articles.json", encoding="utf-8") as f:
        data = json.load(f)
    contexts = [p["context"] for a in data["data"][:2] for p in a["paragraphs"][:6]]
    return sentences + contexts


REAL_TEXT = _real_text()
REAL_WORDS = sorted({w for text in REAL_TEXT for w in text.split()})
ODD_WORDS = [
    "İstanbul", "½", "ﬁne", "Straße", "東京", "\u200b", "x" * 250, "e\u0301te", "(1895-1943).",
    "\x00", "\ufeff", "\U0001f600", "\u202e", "a\u00a0b", "\u0378", "\ufffd", "Ω", "ǅ", "\t",
    "\r\n", "\u202f", "[CLS]", "[SEP]", "[MASK]", "##ing", "\x7f", "\u3000",
]  # fmt: skip


def _long_texts() -> list[str]:
    """Texts of 10,000 words (and one word of 50,000 characters)."""
    rng = random.Random(0)
    words = [rng.choice(REAL_WORDS) for _ in range(10_000)]
    return [
        " ".join(words),
        "\n".join(words),
        "x " * 10_000,
        " ".join("東" for _ in range(10_000)),
        "y" * 50_000,
    ]


LONG_TEXTS = _long_texts()


def text_strategy():
    """A text: real sentences and paragraphs, "", any Unicode, bytes that are mostly
    not UTF-8, odd words mixed with real ones, whitespace alone, 10,000 words."""
    from hypothesis import strategies as st

    words = st.sampled_from(REAL_WORDS + ODD_WORDS)
    choices = [
        (6, st.sampled_from(REAL_TEXT)),
        (1, st.just("")),
        (3, st.text(max_size=30)),
        (2, st.binary(max_size=40)),
        (2, st.binary(max_size=4).map(lambda b: b"word " + b + " \u00e9t\u00e9".encode())),
        (4, st.lists(words, max_size=40).map(" ".join)),
        (1, st.text(alphabet=" \t\r\n\u00a0\u202f\u3000\u200b", max_size=8)),
        (1, st.sampled_from(LONG_TEXTS)),
    ]
    index = [i for i, (weight, _) in enumerate(choices) for _ in range(weight)]
    return st.sampled_from(index).flatmap(lambda i: choices[i][1])


def as_bytes(text) -> bytes:
    return text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")


# ---------------------------------------------------------------------------------
# Requests: {"export", "call", "inputs", "valid"}; `valid` False where the request must
# be refused (inputs of different batch sizes, malformed segments, too short a length).


def request_strategy(export: str):
    from hypothesis import strategies as st

    texts = text_strategy()

    @st.composite
    def batch_sizes(draw, names):
        """One batch size per input name: mostly equal, sometimes not."""
        size = draw(st.integers(0, MAX_BATCH))
        return {
            name: draw(st.integers(0, MAX_BATCH)) if i and draw(st.integers(0, 7)) == 0 else size
            for i, name in enumerate(names)
        }

    @st.composite
    def text_request(draw, call, names, choices=()):
        sizes = draw(batch_sizes(names))
        inputs = {}
        for name in names:
            count = sizes[name] * (CHOICES if name in choices else 1)
            inputs[name] = draw(st.lists(texts, min_size=count, max_size=count))
        request = {
            "export": export,
            "call": call,
            "inputs": inputs,
            "valid": len(set(sizes.values())) == 1,
        }
        if draw(st.integers(0, 11)) == 0:  # one input of another rank
            name = draw(st.sampled_from(names))
            wrong = draw(st.sampled_from(WRONG_RANKS if name in choices else WRONG_RANKS[:2]))
            request.update(wrong_rank={name: wrong}, valid=False)
        return request

    if export == "classifier":
        return st.one_of(
            text_request("serving_default", ["text_a", "text_b"]),
            text_request("serving_text_a", ["text_a"]),
        )
    if export == "multiple_choice":
        return st.one_of(
            text_request("serving_default", ["context", "start", "endings"], ["endings"]),
            text_request("serving_choices", ["context", "choices"], ["choices"]),
        )
    if export == "ner":
        return text_request("serving_default", ["text"])
    if export == "squad":
        return text_request("serving_default", ["question", "context"])
    return preprocessing_strategy()


def preprocessing_strategy():
    from hypothesis import strategies as st

    texts = st.lists(text_strategy(), max_size=MAX_BATCH)
    ids = st.lists(st.integers(-(2**31), 2**31 - 1), max_size=8)

    @st.composite
    def segment(draw, rows):
        kind = draw(st.sampled_from(["words", "pieces", "ids", "ids", "malformed"]))
        if kind in ("words", "pieces"):
            texts = draw(st.lists(text_strategy(), min_size=rows, max_size=rows))
            return {"kind": kind, "rows": rows, "texts": texts}
        row_ids = draw(st.lists(ids, min_size=rows, max_size=rows))
        values = sum(row_ids, [])
        splits = [int(x) for x in np.cumsum([0] + [len(r) for r in row_ids])]
        if kind == "malformed":
            position = draw(st.integers(0, len(splits) - 1))
            splits[position] += draw(st.sampled_from([-3, -1, 1, 5, 2**20]))
            steps = np.diff(splits)
            if splits[0] == 0 and np.all(steps >= 0) and splits[-1] == len(values):
                kind = "ids"  # still well-formed
        return {"kind": kind, "rows": rows, "values": values, "splits": splits}

    @st.composite
    def pack(draw):
        rows = draw(st.integers(0, MAX_BATCH))
        count = draw(st.integers(1, 2))
        segments = []
        for i in range(count):
            other = i and draw(st.integers(0, 5)) == 0
            segments.append(draw(segment(draw(st.integers(0, MAX_BATCH)) if other else rows)))
        seq_length = draw(st.one_of(st.integers(-2, 40), st.integers(41, 600), st.none()))
        valid = (
            len({s["rows"] for s in segments}) == 1
            and all(s["kind"] != "malformed" for s in segments)
            and (seq_length is None or seq_length >= 1 + count)
        )
        inputs = {"segments": segments, "seq_length": seq_length}
        return {
            "export": "preprocessing",
            "call": "bert_pack_inputs",
            "inputs": inputs,
            "valid": valid,
        }

    @st.composite
    def text_call(draw, call):
        request = {"export": "preprocessing", "call": call, "inputs": {"texts": draw(texts)}}
        wrong = draw(st.sampled_from([None] * 10 + list(WRONG_RANKS[:2])))
        if wrong:
            request["wrong_rank"] = {"texts": wrong}
        return dict(request, valid=wrong is None)

    return st.one_of(text_call("__call__"), text_call("tokenize"), pack())


# Hand-made cases: the crashes and wrong answers of the issue, and edge cases.
NAMED_CASES = {
    "classifier text_a 5, text_b 1": {
        "export": "classifier",
        "call": "serving_default",
        "inputs": {"text_a": ["The cat sat."] * 5, "text_b": ["A dog."]},
        "valid": False,
    },
    "classifier text_a 2, text_b 1": {
        "export": "classifier",
        "call": "serving_default",
        "inputs": {"text_a": ["The cat sat.", "It rains."], "text_b": ["A dog."]},
        "valid": False,
    },
    "classifier text_a 1, text_b 2": {
        "export": "classifier",
        "call": "serving_default",
        "inputs": {"text_a": ["The cat sat."], "text_b": ["A dog.", "Two dogs."]},
        "valid": False,
    },
    "classifier empty batch": {
        "export": "classifier",
        "call": "serving_default",
        "inputs": {"text_a": [], "text_b": []},
        "valid": True,
    },
    "multiple_choice context 3, endings 1": {
        "export": "multiple_choice",
        "call": "serving_default",
        "inputs": {"context": ["c"] * 3, "start": ["s"] * 3, "endings": ["e"] * CHOICES},
        "valid": False,
    },
    "multiple_choice start 1, context 3": {
        "export": "multiple_choice",
        "call": "serving_default",
        "inputs": {"context": ["c"] * 3, "start": ["s"], "endings": ["e"] * 3 * CHOICES},
        "valid": False,
    },
    "squad question 3, context 1": {
        "export": "squad",
        "call": "serving_default",
        "inputs": {"question": ["Who?"] * 3, "context": ["Nobody knows."]},
        "valid": False,
    },
    "squad 10,000-word context": {
        "export": "squad",
        "call": "serving_default",
        "inputs": {"question": ["Who?"], "context": [LONG_TEXTS[0]]},
        "valid": True,
    },
    "ner mixed batch": {
        "export": "ner",
        "call": "serving_default",
        "inputs": {"text": ["", b"\xff\xfe abc \xc3", LONG_TEXTS[2], "Hello there."]},
        "valid": True,
    },
    "ner NUL bytes": {  # the words after a NUL byte vanished from the answer
        "export": "ner",
        "call": "serving_default",
        "inputs": {"text": [b"word \x00)S \xc3\xa9t\xc3\xa9", b"\x00 a\x00b \x00"]},
        "valid": True,
    },
    "bert_pack_inputs segments of 5 and 1 rows": {
        "export": "preprocessing",
        "call": "bert_pack_inputs",
        "inputs": {
            "segments": [
                {"kind": "words", "rows": 5, "texts": ["hello world"] * 5},
                {"kind": "words", "rows": 1, "texts": ["x"]},
            ],
            "seq_length": None,
        },
        "valid": False,
    },
    "ner text of rank 2": {
        "export": "ner",
        "call": "serving_default",
        "inputs": {"text": ["read on", "in"]},
        "wrong_rank": {"text": "column"},
        "valid": False,
    },
    "multiple_choice endings of rank 1": {
        "export": "multiple_choice",
        "call": "serving_default",
        "inputs": {"context": ["c"], "start": ["s"], "endings": ["e"] * CHOICES},
        "wrong_rank": {"endings": "flat"},
        "valid": False,
    },
    "bert_pack_inputs malformed row_splits": {
        "export": "preprocessing",
        "call": "bert_pack_inputs",
        "inputs": {
            "segments": [
                {"kind": "malformed", "rows": 3, "values": [1, 2, 3], "splits": [0, 5, 2, 100]}
            ],
            "seq_length": 10,
        },
        "valid": False,
    },
}


# ---------------------------------------------------------------------------------
# Exports, calls and the contract.


def build_exports(directory: str, exports=EXPORTS, xla_single_requests: bool = False) -> dict:
    """Exports of a tiny random model (one per kind) under `directory`, loaded; with
    `xla_single_requests`, the task exports run a request of one example through XLA
    (`serving.model_call`)."""
    import keras
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the ops the exports need)

    from modeling import models
    from modeling.config import BertConfig
    from modeling.encoder import BertEncoder
    from serving import exports as serving_exports, preprocessing

    vocab = str(SAMPLE_DATA / "vocab" / "uncased_vocab.txt")
    config = BertConfig(**tiny_config(initializer_range=0.2))
    keras.utils.set_random_seed(0)
    builders = {
        "classifier": lambda: models.BertClassifier(BertEncoder(config), config, 3),
        "multiple_choice": lambda: models.BertMultipleChoice(BertEncoder(config), config),
        "ner": lambda: models.BertTokenClassifier(BertEncoder(config), config, 3),
        "squad": lambda: models.BertSpanLabeler(BertEncoder(config), config),
    }
    options = {
        "multiple_choice": {"labels": [str(i) for i in range(CHOICES)]},
        "ner": {"labels": LABELS["ner"], "doc_stride": 5},
        "squad": {"max_query_length": 12, "doc_stride": 16},
        "classifier": {"labels": LABELS["classifier"]},
    }
    loaded = {}
    for export in exports:
        path = os.path.join(directory, export)
        if export == "preprocessing":
            preprocessing.export_preprocessing(path, vocab, True, SEQ[export])
        else:
            serving_exports.export_task_model(
                builders[export](),
                path,
                vocab,
                True,
                SEQ[export],
                kind=export,
                xla_single_requests=xla_single_requests,
                **options[export],
            )
        loaded[export] = tf.saved_model.load(path)
    return loaded


def load_exports(directory: str, exports=EXPORTS) -> dict:
    """The exports written already under `directory` (`directory/<export>`), loaded."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the ops the exports need)

    return {export: tf.saved_model.load(os.path.join(directory, export)) for export in exports}


def _strings(texts, shape=None, wrong_rank=None):
    """tf.string tensor of `texts` ([len(texts)] or `shape`), or of the `wrong_rank`."""
    import tensorflow as tf

    array = np.array([as_bytes(t) for t in texts], dtype=object)
    if shape is not None:
        array = array.reshape(shape)
    if wrong_rank == "scalar":
        return tf.constant(as_bytes(texts[0]) if texts else b"", tf.string)
    if wrong_rank == "column":
        array = array[..., np.newaxis]
    if wrong_rank == "flat":
        array = array.reshape([-1])
    return tf.constant(array, tf.string, shape=array.shape)


def _segment(module, segment):
    import tensorflow as tf

    if segment["kind"] in ("words", "pieces"):
        words = module.tokenize(_strings(segment["texts"]))
        return words if segment["kind"] == "words" else words.merge_dims(1, 2)
    return tf.RaggedTensor.from_row_splits(
        tf.constant(segment["values"], tf.int32, shape=[len(segment["values"])]),
        tf.constant(segment["splits"], tf.int64),
        validate=False,
    )


def call(module, request) -> dict:
    """The export's answer to `request`: {output name: numpy value}."""
    inputs, wrong = request["inputs"], request.get("wrong_rank", {})
    if request["export"] == "preprocessing":
        if request["call"] == "__call__":
            outputs = module(_strings(inputs["texts"], wrong_rank=wrong.get("texts")))
        elif request["call"] == "tokenize":
            texts = _strings(inputs["texts"], wrong_rank=wrong.get("texts"))
            return {"tokens": module.tokenize(texts)}
        else:
            segments = [_segment(module, s) for s in inputs["segments"]]
            if inputs["seq_length"] is None:
                outputs = module.bert_pack_inputs(segments)
            else:
                outputs = module.bert_pack_inputs(segments, seq_length=inputs["seq_length"])
    else:
        tensors = {
            name: _strings(
                texts, [-1, CHOICES] if name in ("endings", "choices") else None, wrong.get(name)
            )
            for name, texts in inputs.items()
        }
        outputs = module.signatures[request["call"]](**tensors)
    return {name: value.numpy() for name, value in outputs.items()}


def _split_words(text) -> list[bytes]:
    return [w for w in re.split(rb"[ \t\r\n]+", as_bytes(text)) if w]


def export_settings(module, export: str) -> tuple[list[str], int]:
    """(labels, seq_length) of an export: those it holds (a loaded task export), else
    those `build_exports` gives it."""
    labels = LABELS.get(export, [])
    if hasattr(module, "labels"):
        labels = [label.decode() for label in module.labels.numpy()]
    seq = getattr(module, "seq_length", SEQ[export])
    return labels, int(seq.numpy()) if hasattr(seq, "numpy") else int(seq)


def answer_problems(request, answer, module=None) -> list[str]:
    """What is wrong with an answer to a valid request (the form every answer has) of
    `module` (its labels and seq_length; those of `build_exports` without it)."""
    export, inputs = request["export"], request["inputs"]
    labels, seq = export_settings(module, export)
    rows = len(next(iter(inputs.values()))) if export != "preprocessing" else None
    problems = []

    def expect(condition, what):
        if not condition:
            problems.append(what)

    if export == "classifier":
        labels = [label.encode() for label in labels]
        p = answer["probabilities"]
        expect(p.shape == (rows, len(labels)), f"probabilities of shape {p.shape}")
        expect(np.all(np.isfinite(p)) and np.allclose(p.sum(-1), 1, atol=1e-5), "probabilities")
        expect(list(answer["labels"]) == [labels[i] for i in p.argmax(-1)], "labels")
    elif export == "multiple_choice":
        p = answer["probabilities"]
        expect(p.shape == (rows, CHOICES), f"probabilities of shape {p.shape}")
        expect(np.all(np.isfinite(p)) and np.allclose(p.sum(-1), 1, atol=1e-5), "probabilities")
        expect(np.array_equal(answer["best_choice"], p.argmax(-1)), "best_choice")
    elif export == "ner":
        words, tags = answer["words"], answer["tags"]
        expect(words.shape == tags.shape and words.shape[:1] == (rows,), "tags and words shapes")
        for text, row_words, row_tags in zip(inputs["text"], words, tags):
            want = _split_words(text)
            expect([w for w in row_words if w] == want, "words")
            expect(all(t.decode() in labels for t in row_tags[: len(want)]), "tags")
            expect(not any(row_tags[len(want) :]), "tags past the words")
    elif export == "squad":
        expect(answer["answer"].shape == (rows,), "answer shape")
        for name in ("start_logits", "end_logits"):
            expect(answer[name].shape == (rows, seq), f"{name} shape")
            expect(not np.any(np.isnan(answer[name])), f"{name} NaN")
            expect(np.all(np.isfinite(answer[name][:, 0])), f"{name} at [CLS]")
        expect(np.all(np.isfinite(answer["null_score"])), "null_score")
        no_span = answer["score"] == -np.inf
        expect(np.array_equal(no_span, answer["answer"] == b""), "answer without a score")
        for context, text in zip(inputs["context"], answer["answer"]):
            context = as_bytes(context)
            strip = re.compile("[ \t\r\n\u202f]".encode())
            expect(strip.sub(b"", text) in strip.sub(b"", context), f"answer {text!r}")
    elif request["call"] == "tokenize":
        tokens = answer["tokens"]
        expect(tokens.shape.rank == 3 and tokens.nrows() == len(inputs["texts"]), "tokens shape")
        values = tokens.flat_values.numpy()
        expect(np.all((values >= 0) & (values < VOCAB_SIZE)), "token ids out of the vocabulary")
    else:
        if request["call"] == "__call__":
            rows, segments = len(inputs["texts"]), 1
        else:
            rows, segments = inputs["segments"][0]["rows"], len(inputs["segments"])
            seq = inputs["seq_length"] or seq
        ids, mask, types = (answer[k] for k in ("input_word_ids", "input_mask", "input_type_ids"))
        for name, value in (("ids", ids), ("mask", mask), ("types", types)):
            expect(value.shape == (rows, seq), f"{name} of shape {value.shape}")
        if not problems and rows:
            length = mask.sum(-1)
            expect(np.array_equal(mask, np.arange(seq) < length[:, None]), "mask")
            expect(np.all(ids[:, 0] == CLS_ID), "[CLS]")
            expect(np.all((ids == SEP_ID).sum(-1) >= segments), "[SEP]")
            expect(np.all(ids[mask == 0] == 0) and np.all(types[mask == 0] == 0), "padding")
    return problems


def outcome(module, request) -> tuple[str, str]:
    """("answered" | "rejected" | "other", details) of one request."""
    import tensorflow as tf

    try:
        answer = call(module, request)
    except tf.errors.InvalidArgumentError as e:
        message = str(e)
        if not CLEAR_ERROR.search(message):
            return "other", f"InvalidArgumentError not from a request check: {message[:1500]}"
        if request["valid"]:
            return "other", f"a valid request refused: {message[:1500]}"
        return "rejected", message[CLEAR_ERROR.search(message).start() :][:600]
    except TypeError as e:
        if request.get("wrong_rank") and not request["valid"] and BINDING_REFUSAL.search(str(e)):
            return "rejected", str(e)[:600]
        return "other", f"TypeError: {str(e)[:1500]}"
    except Exception as e:  # noqa: BLE001  (anything else breaks the contract)
        return "other", f"{type(e).__name__}: {str(e)[:1500]}"
    if not request["valid"]:
        return "other", "answered a request that must be refused"
    problems = answer_problems(request, answer, module)
    if problems:
        return "other", f"answer with wrong {', '.join(problems)}"
    return "answered", ""


def summary(request) -> str:
    """A short description of a request (texts cut to 40 characters)."""

    def short(value):
        if isinstance(value, (str, bytes)):
            return repr(value[:40]) + (f"...({len(value)})" if len(value) > 40 else "")
        if isinstance(value, list):
            return (
                "["
                + ", ".join(short(v) for v in value[:8])
                + (", ..." if len(value) > 8 else "")
                + "]"
            )
        if isinstance(value, dict):
            return "{" + ", ".join(f"{k}: {short(v)}" for k, v in value.items()) + "}"
        return repr(value)

    return (
        f"{request['export']}.{request['call']} valid={request['valid']} {short(request['inputs'])}"
    )


def run_worker(tmp_path, *args, timeout=900) -> dict:
    """Runs `python -m tests.helpers.serving_fuzz` in a new process (for pytest); its
    results, or a test failure naming how it ended and the request it was running."""
    import subprocess

    import pytest

    out, progress = tmp_path / "results.json", tmp_path / "progress.txt"
    process = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.helpers.serving_fuzz",
            f"--out={out}",
            f"--progress={progress}",
            *args,
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"),
    )
    if process.returncode != 0 or not out.exists():
        running = progress.read_text(encoding="utf-8") if progress.exists() else "(none)"
        pytest.fail(
            f"the serving fuzz worker ended with exit code {process.returncode} while "
            f"running: {running}\n{process.stderr[-4000:]}"
        )
    return json.loads(out.read_text(encoding="utf-8"))


class Tracker:
    """Counts outcomes; writes each request to the progress file before it runs and
    arms a faulthandler timer (a hang ends the process with its stack)."""

    def __init__(self, progress: str | None, timeout: float):
        self.progress, self.timeout = progress, timeout

    def run(self, module, request) -> tuple[str, str]:
        if self.progress:
            with open(self.progress, "w", encoding="utf-8") as f:
                f.write(("crash test" if request.get("crash") else summary(request)) + "\n")
        faulthandler.dump_traceback_later(self.timeout, exit=True)
        try:
            if request.get("crash"):
                os.abort()
            return outcome(module, request)
        finally:
            faulthandler.cancel_dump_traceback_later()


def fuzz(module, export: str, examples: int, seed: int, tracker: Tracker) -> dict:
    """`examples` generated requests to one export: their outcome counts."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hypothesis_seed

    counts = {"tried": 0, "answered": 0, "rejected": 0, "other": 0, "other_examples": []}

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @hypothesis_seed(seed)
    @given(request_strategy(export))
    def run(request):
        kind, details = tracker.run(module, request)
        counts["tried"] += 1
        counts[kind] += 1
        if kind == "other" and len(counts["other_examples"]) < 5:
            counts["other_examples"].append(f"{summary(request)}: {details}")

    run()
    return counts


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=100, help="Generated requests per export.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--exports", default=",".join(EXPORTS))
    parser.add_argument("--out", required=True, help="Where to write the results (JSON).")
    parser.add_argument("--progress", default=None, help="File naming the request running.")
    parser.add_argument("--timeout", type=float, default=120, help="Seconds per request.")
    parser.add_argument("--export_dir", default=None, help="Folder of the exports (temporary).")
    parser.add_argument(
        "--load_exports",
        default=None,
        help="Folder of exports written already (<folder>/<export>): loaded, not built.",
    )
    parser.add_argument(
        "--xla_single_requests",
        action="store_true",
        help="Task exports that run a request of one example through XLA.",
    )
    parser.add_argument("--crash_for_test", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    faulthandler.enable()
    if args.crash_for_test:  # how a crash looks to the caller (test_serving_requests.py)
        Tracker(args.progress, args.timeout).run(None, {"crash": True})
    import tempfile

    exports = args.exports.split(",")
    with tempfile.TemporaryDirectory() as scratch:
        start = time.time()
        if args.load_exports:
            modules = load_exports(args.load_exports, exports)
        else:
            modules = build_exports(args.export_dir or scratch, exports, args.xla_single_requests)
        results = {"build_seconds": time.time() - start, "named": {}, "generated": {}}
        tracker = Tracker(args.progress, args.timeout)
        for name, request in NAMED_CASES.items():
            if request["export"] in modules:
                kind, details = tracker.run(modules[request["export"]], request)
                results["named"][name] = {"outcome": kind, "details": details}
        for export in exports:
            start = time.time()
            counts = fuzz(modules[export], export, args.examples, args.seed, tracker)
            results["generated"][export] = {**counts, "seconds": time.time() - start}
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())

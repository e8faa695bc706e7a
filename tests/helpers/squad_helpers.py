"""Helpers shared by test_squad_features.py and test_squad_postprocess.py: the bundled
SQuAD v2.0 sample and variants of it, the original release's features, hand-made files.
"""

import contextlib
import copy
import json
import pathlib

SAMPLE_FILE = (
    pathlib.Path(__file__).resolve().parent.parent.parent
    / "sample_data"
    / "squad"
    / "dev-v2.0-first5articles.json"
)
# Questions of the sample used by the default (fast) suite.
NUM_FAST_QUESTIONS = 150
MAX_QUERY_LENGTH = 64


@contextlib.contextmanager
def orig_version(orig, version_2_with_negative, null_score_diff_threshold=0.0):
    """Sets the original's --version_2_with_negative (and threshold)."""
    old = (orig.FLAGS.version_2_with_negative, orig.FLAGS.null_score_diff_threshold)
    orig.FLAGS.version_2_with_negative = version_2_with_negative
    orig.FLAGS.null_score_diff_threshold = null_score_diff_threshold
    try:
        yield
    finally:
        (orig.FLAGS.version_2_with_negative, orig.FLAGS.null_score_diff_threshold) = old


def write_variant(
    directory, max_questions=None, first_answer_only=False, drop_impossible=False
) -> str:
    """A copy of the sample: its first questions, optionally reduced to the
    first answer each (the original's training reader wants exactly one) or
    to answerable questions (SQuAD v1.1 style)."""
    data = json.loads(SAMPLE_FILE.read_text(encoding="utf-8"))
    count = 0
    articles = []
    for article in data["data"]:
        paragraphs = []
        for paragraph in article["paragraphs"]:
            qas = []
            for qa in paragraph["qas"]:
                if drop_impossible and qa["is_impossible"]:
                    continue
                if max_questions is not None and count >= max_questions:
                    break
                qa = copy.deepcopy(qa)
                if first_answer_only:
                    qa["answers"] = qa["answers"][:1]
                qas.append(qa)
                count += 1
            if qas:
                paragraphs.append(dict(paragraph, qas=qas))
        if paragraphs:
            articles.append(dict(article, paragraphs=paragraphs))
    name = "sample_%s_%s_%s.json" % (max_questions, first_answer_only, drop_impossible)
    path = pathlib.Path(directory) / name
    path.write_text(json.dumps(dict(data, data=articles)), encoding="utf-8")
    return str(path)


def orig_features(orig, examples, tokenizer, max_seq_length, doc_stride, is_training):
    """The original's features, each with the start of its window.

    The original keeps its windows local; they are read from the arguments of
    its `_check_is_max_context`, which runs for every window before the
    window's feature is output.
    """
    windows = []

    def spy(doc_spans, cur_span_index, position):
        if not windows or windows[-1] is not doc_spans:
            windows.append(doc_spans)
        return check(doc_spans, cur_span_index, position)

    features = []

    def output_fn(feature):
        feature.doc_span_start = windows[-1][feature.doc_span_index].start
        features.append(feature)

    check = orig._check_is_max_context
    orig._check_is_max_context = spy
    try:
        orig.convert_examples_to_features(
            examples,
            tokenizer,
            max_seq_length,
            doc_stride,
            MAX_QUERY_LENGTH,
            is_training,
            output_fn,
        )
    finally:
        orig._check_is_max_context = check
    return features


# ----------------------------------------------------------------------------
# Reading: hand-made files.
# ----------------------------------------------------------------------------


def squad_json(tmp_path, qas, context="The cat sat on the mat.", name="data.json"):
    path = tmp_path / name
    path.write_text(
        json.dumps(
            {
                "version": "v2.0",
                "data": [{"title": "t", "paragraphs": [{"context": context, "qas": qas}]}],
            }
        ),
        encoding="utf-8",
    )
    return str(path)


def question(qas_id, text, start, is_impossible=False):
    answers = [] if is_impossible else [{"text": text, "answer_start": start}]
    return {"id": qas_id, "question": "Where?", "answers": answers, "is_impossible": is_impossible}

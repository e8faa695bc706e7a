"""Tests of evaluation/conlleval.py: conlleval's counts, report and files.

Oracles:
  * hand-computed counts and reports, following the rules of the Perl script
    (version 2004-01-26), for the cases where schemes and scorers disagree;
  * `seqeval` (default mode, i.e. `mode=None`), an independent implementation of
    the same chunk rules with IOBES support, on hand-made tags, on random tag
    sequences, and on realistic prediction files made by corrupting the gold
    tags of sample_data/sciner/dev.txt.

No copy of the Perl script is installable here (neither PyPI nor Debian ships
one: PyPI's `conlleval` and `econll` are Python ports), so it is not an oracle.

Known divergences of seqeval (default mode) from the Perl script, kept out of
the seqeval comparisons and covered by hand-computed cases instead:
  * IOBES: the script has no S- rule and no "B- after E-" rule, so it merges
    "S-PER S-PER" and "B-PER E-PER B-PER E-PER" into one chunk; seqeval, and
    our default `iobes=True`, count two. `iobes=False` is the script verbatim.
  * tags that are not <one letter>-<type>: seqeval takes the first character as
    the prefix ("PER" -> prefix "P", type "ER"; "BX-PER" -> "B", "PER"), the
    script splits at the first "-" ("PER" -> type ""; "BX-PER" -> "BX", "PER").
  * the tags "[", "]" and "." of the open/close bracket representations:
    seqeval has no rule for "[" and "]", and starts a chunk at every B- (after
    "." too, where the script may not end the previous chunk first).
"""

import collections

import numpy as np
import pytest
from seqeval import metrics as seqeval_metrics
from seqeval.metrics import sequence_labeling as seqeval_labeling

from data_prep.ner import conll, tag_schemes
from evaluation import conlleval


def _counts(counts):
    return (
        counts.num_tokens,
        counts.correct_tags,
        counts.found_correct,
        counts.found_guessed,
        counts.correct_chunks,
    )


def _evaluate(gold, guessed, **kwargs):
    """Counts of sentences of tags, written as conlleval lines ("token gold guess", a
    blank line after each sentence)."""
    assert len(gold) == len(guessed)
    lines = []
    for gold_tags, guessed_tags in zip(gold, guessed):
        assert len(gold_tags) == len(guessed_tags)
        lines += [f"w {g} {p}" for g, p in zip(gold_tags, guessed_tags)] + [""]
    return conlleval.evaluate_lines(lines, **kwargs)


# ----------------------------------------------------------------------------
# Hand-computed cases.
# ----------------------------------------------------------------------------

# (gold sentences, guessed sentences,
#  (num_tokens, correct_tags, found_correct, found_guessed, correct_chunks))
HAND_CASES = {
    "chunk starting with I-": (
        [["O", "I-PER", "I-PER", "O"]],
        [["O", "B-PER", "I-PER", "O"]],
        (4, 3, 1, 1, 1),
    ),
    "IOB1 B- splits adjacent chunks": (
        [["I-PER", "I-PER", "B-PER"]],
        [["B-PER", "I-PER", "I-PER"]],
        (3, 1, 2, 1, 0),
    ),
    "IOB1 and IOB2 of the same chunks": (
        [["I-PER", "I-PER", "B-PER", "O", "I-LOC"]],
        [["B-PER", "I-PER", "B-PER", "O", "B-LOC"]],
        (5, 3, 3, 3, 3),
    ),
    "adjacent chunks of the same type": (
        [["B-PER", "B-PER", "O"]],
        [["B-PER", "I-PER", "O"]],
        (3, 2, 2, 1, 0),
    ),
    "type change inside an I- run": (
        [["B-PER", "I-PER", "I-LOC", "I-LOC"]],
        [["B-PER", "I-PER", "B-LOC", "I-LOC"]],
        (4, 3, 2, 2, 2),
    ),
    "I- of another type after B-": ([["B-PER", "I-LOC"]], [["B-PER", "B-LOC"]], (2, 1, 2, 2, 2)),
    "chunk at the end of a sentence": (
        [["O", "B-PER"], ["I-PER", "O"]],
        [["O", "B-PER"], ["B-PER", "O"]],
        (4, 3, 2, 2, 2),
    ),
    "all O": ([["O", "O"], ["O"]], [["O", "O"], ["O"]], (3, 3, 0, 0, 0)),
    "guess ends early": ([["B-PER", "I-PER", "O"]], [["B-PER", "O", "O"]], (3, 2, 1, 1, 0)),
    "guess ends late": ([["B-PER", "I-PER", "O"]], [["B-PER", "I-PER", "I-PER"]], (3, 2, 1, 1, 0)),
    "wrong type": ([["B-PER", "I-PER"]], [["B-LOC", "I-LOC"]], (2, 0, 1, 1, 0)),
    "guess starts late": (
        [["B-ORG", "I-ORG", "I-ORG"]],
        [["O", "B-ORG", "I-ORG"]],
        (3, 1, 1, 1, 0),
    ),
    "hyphen in the type": (
        [["B-Hyper-Param", "I-Hyper-Param", "O"]],
        [["B-Hyper-Param", "I-Hyper-Param", "O"]],
        (3, 3, 1, 1, 1),
    ),
    "IOE1: E- ends a chunk followed by one of the same type": (
        [["I-NP", "E-NP", "I-NP", "I-NP"]],
        [["I-NP", "I-NP", "I-NP", "I-NP"]],
        (4, 3, 2, 1, 0),
    ),
    "IOBES": (
        [["B-PER", "E-PER", "S-LOC", "O", "B-ORG", "I-ORG", "E-ORG"]],
        [["B-PER", "E-PER", "B-LOC", "O", "B-ORG", "E-ORG", "O"]],
        (7, 4, 3, 3, 2),
    ),
}


@pytest.mark.parametrize("name", sorted(HAND_CASES))
def test_hand_made_counts(name):
    gold, guessed, expected = HAND_CASES[name]
    assert _counts(_evaluate(gold, guessed)) == expected


def test_sentence_boundary_ends_chunks():
    # One sentence: one chunk; the same tags split over two sentences: two.
    as_one = _evaluate([["B-PER", "I-PER"]], [["B-PER", "I-PER"]])
    as_two = _evaluate([["B-PER"], ["I-PER"]], [["B-PER"], ["I-PER"]])
    assert (as_one.found_correct, as_one.correct_chunks) == (1, 1)
    assert (as_two.found_correct, as_two.correct_chunks) == (2, 2)


def test_per_type_counts():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
    guessed = [["B-PER", "I-PER", "O", "B-PER"], ["O", "O"]]
    counts = _evaluate(gold, guessed)
    assert counts.types == ["LOC", "ORG", "PER"]
    assert counts.found_correct_by_type == {"PER": 1, "LOC": 1, "ORG": 1}
    assert counts.found_guessed_by_type == {"PER": 2}
    assert counts.correct_chunks_by_type == {"PER": 1}
    assert counts.precision_recall_f1() == pytest.approx((0.5, 1 / 3, 0.4))
    assert counts.precision_recall_f1("PER") == pytest.approx((0.5, 1.0, 2 / 3))
    assert counts.precision_recall_f1("LOC") == (0.0, 0.0, 0.0)
    assert counts.accuracy == pytest.approx(4 / 6)


def test_report_is_conlleval_text():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
    guessed = [["B-PER", "I-PER", "O", "B-PER"], ["O", "O"]]
    assert _evaluate(gold, guessed).report() == (
        "processed 6 tokens with 3 phrases; found: 2 phrases; correct: 1.\n"
        "accuracy:  66.67%; precision:  50.00%; recall:  33.33%; FB1:  40.00\n"
        "              LOC: precision:   0.00%; recall:   0.00%; FB1:   0.00  0\n"
        "              ORG: precision:   0.00%; recall:   0.00%; FB1:   0.00  0\n"
        "              PER: precision:  50.00%; recall: 100.00%; FB1:  66.67  2\n"
    )


def test_report_all_o_and_empty():
    assert _evaluate([["O", "O", "O"]], [["O", "O", "O"]]).report() == (
        "processed 3 tokens with 0 phrases; found: 0 phrases; correct: 0.\n"
        "accuracy: 100.00%; precision:   0.00%; recall:   0.00%; FB1:   0.00\n"
    )
    # No token at all: the script prints only the first line.
    assert _evaluate([], []).report() == (
        "processed 0 tokens with 0 phrases; found: 0 phrases; correct: 0.\n"
    )


def test_report_long_and_non_ascii_type_names():
    counts = _evaluate([["B-HyperparameterValue", "B-Größe"]], [["B-HyperparameterValue", "O"]])
    lines = counts.report().splitlines()
    # Perl's %17s counts bytes: "Größe" is 7 bytes of UTF-8, so 10 spaces.
    assert lines[2] == ("          Größe: precision:   0.00%; recall:   0.00%; FB1:   0.00  0")
    assert lines[3] == ("HyperparameterValue: precision: 100.00%; recall: 100.00%; FB1: 100.00  1")


def test_iobes_rules_and_the_verbatim_script_rules():
    # The script has no rule for S- and none for B- after E-.
    cases = [
        (["S-PER", "S-PER"], 2, 1),
        (["B-PER", "E-PER", "B-PER", "E-PER"], 2, 1),
        (["S-PER", "B-PER", "E-PER"], 2, 1),
        (["B-PER", "E-PER", "S-PER"], 2, 1),
        (["B-PER", "I-PER", "S-PER"], 2, 1),
    ]
    for tags, with_iobes, verbatim in cases:
        assert _evaluate([tags], [tags]).found_correct == with_iobes, tags
        assert _evaluate([tags], [tags], iobes=False).found_correct == verbatim, tags
        assert tag_schemes.get_chunks(tags, iobes=False) == [("PER", 0, len(tags))]
    # Without S- and without E- before B-, both rule sets agree.
    for tags in (["I-NP", "E-NP", "I-NP"], ["B-A", "I-A", "B-A", "O", "I-B"]):
        assert _counts(_evaluate([tags], [tags])) == _counts(_evaluate([tags], [tags], iobes=False))


def test_untyped_bracket_and_zero_type_tags():
    # Tags without "-" have the empty type and still form chunks.
    counts = _evaluate([["B", "I", "O", "B"]], [["B", "I", "O", "I"]])
    assert _counts(counts) == (4, 3, 2, 2, 2)
    assert counts.correct_chunks_by_type == {"": 2}
    assert counts.report().splitlines()[2].startswith(" " * 17 + ": precision: 100.00%")
    # "[" and "]" are one-token chunks; "." never starts one.
    brackets = [["[-NP", ".-NP", "[-NP", "]-NP"]]
    assert _counts(_evaluate(brackets, brackets)) == (4, 4, 3, 3, 3)
    # "." continues a chunk and no change of type ends a chunk after it: the
    # guessed A chunk never ends before B starts, and a type mismatch inside a
    # chunk makes it wrong.
    counts = _evaluate([["B-A", "I-A", "I-A"]], [["B-A", ".-A", "B-B"]], iobes=False)
    assert _counts(counts) == (3, 1, 1, 2, 0)
    # Perl's truth test turns the type "0" into the empty type.
    assert tag_schemes.split_tag("B-0") == ("B", "")
    assert tag_schemes.split_tag("B-Hyper-Param") == ("B", "Hyper-Param")
    assert tag_schemes.split_tag("O") == ("O", "")


# ----------------------------------------------------------------------------
# Files.
# ----------------------------------------------------------------------------


def test_evaluate_file_reads_crlf_tabs_and_boundaries(tmp_path):
    path = tmp_path / "predictions.txt"
    path.write_bytes(
        b"Jim NNP B-PER B-PER\r\n"
        b"Henson\tNNP\tI-PER\tI-PER\r\n"
        b"visited VBD O O\r\n"
        b"Paris NNP B-LOC B-PER\r\n"
        b"\r\n"
        b"-X- -X- O O\n"
        b"EU NNP I-ORG I-ORG\n"
        b"\n\n"
    )
    counts = conlleval.evaluate_file(str(path))
    expected = _evaluate(
        [["B-PER", "I-PER", "O", "B-LOC"], ["I-ORG"]], [["B-PER", "I-PER", "O", "B-PER"], ["I-ORG"]]
    )
    assert _counts(counts) == _counts(expected) == (5, 4, 3, 3, 2)
    assert counts.report() == expected.report()


def test_evaluate_file_errors_name_file_and_line(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_text("a O O\nb O O\n\nc O\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad\.txt:4: expected 3 fields"):
        conlleval.evaluate_file(str(path))
    path.write_text("\na O\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad\.txt:2: .*at least 3 fields"):
        conlleval.evaluate_file(str(path))


def test_eval_results_file(tmp_path):
    counts = _evaluate(
        [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]],
        [["B-PER", "I-PER", "O", "B-PER"], ["O", "O"]],
    )
    results = conlleval.eval_results(counts)
    assert results["eval_f1"] == pytest.approx(0.4)
    assert results["eval_precision_PER"] == 0.5
    assert results["eval_found_guessed"] == 2
    path = tmp_path / "out" / "eval_results.txt"
    conlleval.write_eval_results(str(path), counts, extra={"eval_loss": 0.25})
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines == sorted(lines)
    assert "eval_loss = 0.25" in lines
    assert "eval_correct_chunks = 1" in lines
    assert "eval_recall_PER = 1.0" in lines
    assert [p.name for p in path.parent.iterdir()] == ["eval_results.txt"]


# ----------------------------------------------------------------------------
# seqeval as an independent oracle.
# ----------------------------------------------------------------------------


def _seqeval_counts(gold, guessed):
    """(found_correct, found_guessed, correct_chunks) per type and overall, by seqeval."""
    gold_chunks = set(seqeval_labeling.get_entities([list(s) for s in gold]))
    guessed_chunks = set(seqeval_labeling.get_entities([list(s) for s in guessed]))
    by_type = collections.defaultdict(lambda: [0, 0, 0])
    for chunk in gold_chunks:
        by_type[chunk[0]][0] += 1
    for chunk in guessed_chunks:
        by_type[chunk[0]][1] += 1
    for chunk in gold_chunks & guessed_chunks:
        by_type[chunk[0]][2] += 1
    overall = (len(gold_chunks), len(guessed_chunks), len(gold_chunks & guessed_chunks))
    return overall, {k: tuple(v) for k, v in by_type.items()}


def _assert_matches_seqeval(gold, guessed, counts):
    gold, guessed = [list(s) for s in gold], [list(s) for s in guessed]
    overall, by_type = _seqeval_counts(gold, guessed)
    assert (counts.found_correct, counts.found_guessed, counts.correct_chunks) == overall
    ours_by_type = {
        t: (
            counts.found_correct_by_type[t],
            counts.found_guessed_by_type[t],
            counts.correct_chunks_by_type[t],
        )
        for t in counts.types
    }
    assert ours_by_type == by_type
    # The public metrics, overall (micro) and per type.
    precision, recall, f1 = counts.precision_recall_f1()
    assert precision == pytest.approx(
        seqeval_metrics.precision_score(gold, guessed, zero_division=0)
    )
    assert recall == pytest.approx(seqeval_metrics.recall_score(gold, guessed, zero_division=0))
    assert f1 == pytest.approx(seqeval_metrics.f1_score(gold, guessed, zero_division=0))
    assert counts.accuracy == pytest.approx(seqeval_metrics.accuracy_score(gold, guessed))
    if not counts.types:
        return
    report = seqeval_metrics.classification_report(gold, guessed, output_dict=True, zero_division=0)
    for chunk_type in counts.types:
        row = report[chunk_type]
        assert counts.precision_recall_f1(chunk_type) == pytest.approx(
            (row["precision"], row["recall"], row["f1-score"])
        ), chunk_type
        assert counts.found_correct_by_type[chunk_type] == row["support"]


@pytest.mark.parametrize("name", sorted(HAND_CASES))
def test_hand_made_cases_match_seqeval(name):
    gold, guessed, _ = HAND_CASES[name]
    _assert_matches_seqeval(gold, guessed, _evaluate(gold, guessed))


def _random_sentences(rng, alphabet, num_sentences, max_length):
    return [
        [str(t) for t in rng.choice(alphabet, size=rng.integers(1, max_length + 1))]
        for _ in range(num_sentences)
    ]


@pytest.mark.parametrize("seed", range(6))
def test_random_iobes_sequences_match_seqeval(seed):
    """Any mix of B-, I-, E-, S- and O, valid or not, is counted as seqeval counts it."""
    rng = np.random.default_rng(seed)
    alphabet = ["O", "O", "O", "B-A", "I-A", "E-A", "S-A", "B-B", "I-B", "E-B", "S-B"]
    gold = _random_sentences(rng, alphabet, 40, 12)
    guessed = [[t if rng.random() < 0.7 else str(rng.choice(alphabet)) for t in s] for s in gold]
    counts = _evaluate(gold, guessed)
    assert 0 < counts.correct_chunks < min(counts.found_correct, counts.found_guessed)
    _assert_matches_seqeval(gold, guessed, counts)


@pytest.mark.parametrize("seed", range(3))
def test_random_iob_sequences_match_seqeval_with_verbatim_rules(seed):
    """On B-, I-, O tags the script's own rules (iobes=False) agree with seqeval."""
    rng = np.random.default_rng(100 + seed)
    alphabet = ["O", "O", "B-PER", "I-PER", "B-LOC", "I-LOC", "I-ORG"]
    gold = _random_sentences(rng, alphabet, 40, 15)
    guessed = [[t if rng.random() < 0.75 else str(rng.choice(alphabet)) for t in s] for s in gold]
    counts = _evaluate(gold, guessed, iobes=False)
    assert 0 < counts.correct_chunks < min(counts.found_correct, counts.found_guessed)
    _assert_matches_seqeval(gold, guessed, counts)


def _corrupt(tags, types, rng):
    """Realistic tagging errors on one sentence of IOB2 tags."""
    n = len(tags)
    chunks = []
    for chunk_type, start, end in tag_schemes.get_chunks(tags):
        draw = rng.random()
        if draw < 0.1:  # missed entity
            continue
        if draw < 0.2:  # wrong type
            chunk_type = str(rng.choice([t for t in types if t != chunk_type]))
        elif draw < 0.3:  # start one token off
            start = int(np.clip(start + rng.choice([-1, 1]), 0, end - 1))
        elif draw < 0.4:  # end one token off
            end = int(np.clip(end + rng.choice([-1, 1]), start + 1, n))
        elif draw < 0.45 and end - start > 1:  # split in two
            middle = int(rng.integers(start + 1, end))
            chunks.append((chunk_type, start, middle, False))
            start = middle
        chunks.append((chunk_type, start, end, rng.random() < 0.1))
    for index in range(n):  # spurious entities
        if tags[index] == "O" and rng.random() < 0.015:
            end = min(n, index + int(rng.integers(1, 3)))
            chunks.append((str(rng.choice(types)), index, end, False))
    guessed = ["O"] * n
    for chunk_type, start, end, starts_with_i in chunks:
        guessed[start:end] = [f"I-{chunk_type}"] * (end - start)
        if not starts_with_i:  # else an IOB1-style chunk start, as models emit
            guessed[start] = f"B-{chunk_type}"
    return guessed


@pytest.mark.parametrize("seed", range(4))
def test_corrupted_sciner_predictions_match_seqeval(sample_data, tmp_path, seed):
    # dev.txt line 170 has no tag: read it as O.
    sentences = conll.read_conll(str(sample_data / "sciner" / "dev.txt"), missing_tag="O")
    types = sorted({t[2:] for s in sentences for t in s.tags if t != "O"})
    rng = np.random.default_rng(seed)
    guessed = [_corrupt(s.tags, types, rng) for s in sentences]
    # Written as they are (conll.write_predictions would rewrite the I- chunk starts).
    path = tmp_path / "predictions.txt"
    path.write_text(
        "".join(
            "".join(f"{w} {g} {p}\n" for w, g, p in zip(s.words, s.tags, row)) + "\n"
            for s, row in zip(sentences, guessed)
        ),
        encoding="utf-8",
    )
    counts = conlleval.evaluate_file(str(path))
    gold = [list(s.tags) for s in sentences]
    assert _counts(counts) == _counts(_evaluate(gold, guessed))
    assert counts.num_tokens == 2640 and counts.found_correct == 134
    assert 0.4 < counts.precision_recall_f1()[2] < 0.9
    assert len(counts.types) == 7
    _assert_matches_seqeval(gold, guessed, counts)

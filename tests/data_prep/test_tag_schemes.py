"""data_prep.ner.tag_schemes: chunks read as conlleval reads them, and scheme conversions
(moved from test_conll and test_conlleval)."""

import pytest

from data_prep.ner import tag_schemes


def test_tag_scheme_conversions():
    iob1 = ["I-PER", "I-PER", "B-PER", "O", "I-LOC", "I-ORG", "I-ORG", "O", "I-ORG"]
    iob2 = ["B-PER", "I-PER", "B-PER", "O", "B-LOC", "B-ORG", "I-ORG", "O", "B-ORG"]
    iobes = ["B-PER", "E-PER", "S-PER", "O", "S-LOC", "B-ORG", "E-ORG", "O", "S-ORG"]
    assert tag_schemes.to_iob2(iob1) == iob2
    assert tag_schemes.to_iob2(iobes) == iob2
    assert tag_schemes.to_iob2(iob2) == iob2
    assert tag_schemes.from_iob2(iob2, "iob1") == iob1
    assert tag_schemes.from_iob2(iob2, "iobes") == iobes
    assert tag_schemes.from_iob2(iob2, "iob2") == iob2
    # IOB1 written canonically: B- only right after a chunk of the same type.
    assert tag_schemes.to_iob2(["O", "B-LOC"]) == ["O", "B-LOC"]
    assert tag_schemes.from_iob2(["O", "B-LOC"], "iob1") == ["O", "I-LOC"]
    # A chunk that starts with I- in IOB2 is read as conlleval reads it.
    assert tag_schemes.to_iob2(["O", "I-PER", "I-PER", "I-LOC"]) == ["O", "B-PER", "I-PER", "B-LOC"]
    assert tag_schemes.to_iob2(["B-A", "I-A", "I-A", "E-A", "S-B"]) == [
        "B-A",
        "I-A",
        "I-A",
        "I-A",
        "B-B",
    ]
    with pytest.raises(ValueError, match="tag_scheme"):
        tag_schemes.from_iob2(iob2, "bio")


def test_detect_tag_scheme():
    assert tag_schemes.detect_tag_scheme([["I-PER", "O", "I-LOC", "B-LOC"]]) == "iob1"
    assert tag_schemes.detect_tag_scheme([["B-PER", "O", "B-LOC", "I-LOC"]]) == "iob2"
    assert tag_schemes.detect_tag_scheme([["B-PER", "E-PER"], ["O"]]) == "iobes"
    assert tag_schemes.detect_tag_scheme([["O", "O"]]) == "iob2"
    # One stray I- start (an annotation error) does not make a BIO file IOB1.
    assert tag_schemes.detect_tag_scheme([["B-A", "O"], ["B-A", "I-B"], ["B-B", "I-B"]]) == "iob2"


def test_get_chunks():
    assert tag_schemes.get_chunks(["I-PER", "I-PER", "B-PER", "O", "I-LOC", "I-ORG"]) == [
        ("PER", 0, 2),
        ("PER", 2, 3),
        ("LOC", 4, 5),
        ("ORG", 5, 6),
    ]
    assert tag_schemes.get_chunks(["S-A", "B-A", "I-A", "E-A", "O"]) == [("A", 0, 1), ("A", 1, 4)]
    assert tag_schemes.get_chunks(["O", "O"]) == []

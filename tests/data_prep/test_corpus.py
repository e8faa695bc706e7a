"""Tests of data_prep/pretraining/corpus.py: document shards, raw formats, bad input."""

import io
import json
import random

import pytest

from data_prep.pretraining import corpus


def sentence_file_bytes(seed=0, num_documents=60) -> bytes:
    """Documents of 1-6 sentences, separated by 1-3 blank lines (some with
    spaces or a no-break space), leading and trailing blank lines."""
    rng = random.Random(seed)
    parts = ["\n \n"]
    for d in range(num_documents):
        sentences = [
            "Document %d, sentence %d: %s." % (d, s, "word " * rng.randint(0, 30))
            for s in range(rng.randint(1, 6))
        ]
        parts.append("\n".join(sentences) + "\n")
        parts.append(rng.choice(["\n", "\n\n", " \n", "\u00a0\n\n"]))
    return "".join(parts).encode("utf-8")


def plan(data: bytes, shard_bytes: int, input_format: str):
    reader = io.BytesIO(data)
    windows = corpus.num_windows(len(data), shard_bytes)
    scans = [
        corpus.scan_window(reader, "x/doc.txt", len(data), k, shard_bytes, input_format)
        for k in range(windows)
    ]
    return corpus.plan_shards("x/doc.txt", len(data), scans)


def document_starts(data: bytes, input_format: str) -> list[tuple[int, int]]:
    """(offset of each document's first line, offset of the line before it)."""
    starts, offset, previous, previous_blank = [], 0, 0, True
    for line in data.splitlines(keepends=True):
        blank = not line.decode("utf-8").strip()
        if input_format == "jsonl" and not blank:
            starts.append((offset, offset))
        elif not blank and previous_blank:
            starts.append((offset, previous if starts else 0))
        previous, previous_blank = offset, blank
        offset += len(line)
    return starts


@pytest.mark.parametrize("shard_bytes", [150, 700, 2000, 10**6])
def test_shards_hold_the_documents_starting_in_their_window(shard_bytes):
    data = sentence_file_bytes()
    shards = plan(data, shard_bytes, "sentences")
    # Contiguous, covering the file.
    assert shards[0].start == 0 and shards[-1].end == len(data)
    for before, after in zip(shards, shards[1:]):
        assert before.end == after.start
    # Document shard k: the documents whose separating blank line starts in
    # window k (the first document: shard 0).
    expected = {}
    for start, separator in document_starts(data, "sentences"):
        expected.setdefault(separator // shard_bytes, []).append(start)
    assert [s.index for s in shards] == sorted(expected)
    for shard in shards:
        starts = [
            start
            for start, _ in document_starts(data, "sentences")
            if shard.start <= start < shard.end
        ]
        assert starts == expected[shard.index]
        assert shard.first_line == data[: shard.start].count(b"\n") + 1
    windows = corpus.num_windows(len(data), shard_bytes)
    assert [s.name for s in shards] == [
        "doc" if windows == 1 else "doc-%05d" % s.index for s in shards
    ]
    if shard_bytes == 700:
        assert len(shards) > 5


def test_jsonl_shards_cut_at_lines():
    lines = [
        json.dumps({"text": "Line %d. %s" % (i, "x" * (i * 7 % 90))}) + "\n" for i in range(80)
    ]
    data = "".join(lines).encode("utf-8")
    shards = plan(data, 500, "jsonl")
    assert len(shards) > 5
    for shard in shards:
        assert shard.start // 500 == shard.index
        assert shard.start == 0 or data[shard.start - 1 : shard.start] == b"\n"
        assert shard.first_line == data[: shard.start].count(b"\n") + 1
    assert shards[-1].end == len(data)


def test_a_long_document_leaves_empty_windows_without_shards():
    data = ("short.\n\n" + "long sentence.\n" * 100 + "\nlast.\n").encode()
    shards = plan(data, 100, "sentences")
    assert [(s.index, s.first_line) for s in shards] == [(0, 1), (15, 104)]


def test_read_lines_names_a_non_utf8_line_and_goes_on():
    data = b"one\ncaf\xe9\nthree\n"
    shard = corpus.DocumentShard("f.txt", 0, 0, len(data), 1, "f")
    bad = corpus.BadInputLog("skip")
    assert list(corpus.read_lines(io.BytesIO(data), shard, bad)) == [(1, "one\n"), (3, "three\n")]
    assert bad.counts == {"non_utf8_line": 1}
    assert bad.examples[0].startswith("f.txt:2: not valid UTF-8")
    with pytest.raises(corpus.BadInputError, match=r"f.txt:2: not valid UTF-8"):
        list(corpus.read_lines(io.BytesIO(data), shard, corpus.BadInputLog("fail")))


def test_raw_documents_and_bad_json_lines():
    lines = list(
        enumerate(
            [
                json.dumps({"text": "First. Second one.\nNew paragraph."}),
                "",
                "{not json",
                json.dumps({"title": "no text"}),
                json.dumps({"text": 3}),
                json.dumps({"text": " \x00 "}),
                json.dumps(["text"]),
            ],
            start=1,
        )
    )
    bad = corpus.BadInputLog("skip")
    documents = list(
        corpus.sentence_documents(
            corpus.raw_documents(lines, "d.jsonl", "jsonl", bad),
            "d.jsonl",
            lambda text: [s for s in text.replace("\x00", "").split(". ") if s.strip()],
            bad,
        )
    )
    assert documents == [["First", "Second one.", "New paragraph."]]
    assert bad.counts == {"bad_json_line": 2, "json_line_without_text": 2, "empty_document": 1}
    assert [m.split(":")[1] for m in bad.examples] == ["3", "4", "5", "6", "7"]


def test_text_documents_join_wrapped_lines():
    lines = list(enumerate(["A wrapped", "paragraph.", "", "", "Next", "doc."], 1))
    documents = list(corpus.raw_documents(lines, "t.txt", "text", corpus.BadInputLog()))
    assert [(d.line, d.paragraphs) for d in documents] == [
        (1, ["A wrapped paragraph."]),
        (5, ["Next doc."]),
    ]
    assert "".join(corpus.format_sentences([["a", "b"], ["c"]])) == "a\nb\n\nc\n"


def test_bad_input_policy():
    with pytest.raises(ValueError, match="policy"):
        corpus.BadInputLog("ignore")
    bad = corpus.BadInputLog("skip")
    for line in range(30):
        bad.report("empty_document", "e.txt", line, "an empty document")
    bad.report("unreadable_file", "gone.txt", None, "cannot be read")
    assert bad.counts == {"empty_document": 30, "unreadable_file": 1}
    assert len(bad.examples) == corpus.NUM_LOGGED_PER_KIND + 1
    assert bad.examples[-1] == "gone.txt: cannot be read (unreadable_file)"


def test_split_sentences_cleans_as_the_tokenizer_and_splits():
    from data_prep.text import sentences

    assert sentences.clean_text(" a\x00b\tc\u2028d\u3000 e\x1c f\u200b ") == "ab c d e f"
    assert sentences.split_sentences(
        "Dr. Smith met\x00 Mr. Jones at 5 p.m. in the U.S. Army base.  Then\n they "
        'left; the meeting (see Fig. 2) ended. Why?  "Nobody knows."'
    ) == [
        "Dr. Smith met Mr. Jones at 5 p.m. in the U.S. Army base.",
        "Then they left; the meeting (see Fig. 2) ended.",
        "Why?",
        '"Nobody knows."',
    ]
    assert sentences.split_sentences(" \x00\u200b \n") == []

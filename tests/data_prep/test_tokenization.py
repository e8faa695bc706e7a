"""Tests of data_prep.tokenization: exact token lists, and ids identical to the
original release's tokenizer on more than a million characters of real text."""

import csv
import json
import pathlib
import unicodedata

import pytest

from data_prep.text import char_classes, tokenization
from tests.helpers import code_points

# A tiny vocabulary in which cased pieces and "##" continuations are explicit.
TINY_VOCAB = [
    "[PAD]",
    "[UNK]",
    "[CLS]",
    "[SEP]",
    "[MASK]",
    "hello",
    "H",
    "##é",
    "##llo",
    "w",
    "W",
    "##ö",
    "##or",
    "##rld",
    "##ld",
    "un",
    "##aff",
    "##able",
    "aff",
    ",",
    "!",
    "$",
    "1",
    ".",
    "50",
    "5",
    "##0",
    "[",
    "]",
    "cls",
    "mask",
    "and",
    "中",
    "文",
    "a",
    "b",
    "c",
    "##b",
    "##c",
    "x",
    "##x",
    "xx",
    "##xx",
]


# (do_lower_case, vocabulary) of the real-text comparisons: the usual pairs, and
# (slow) the crossed ones.
REAL_TEXT_CASES = [
    (True, "uncased"),
    (False, "cased"),
    pytest.param(False, "uncased", marks=pytest.mark.slow),
    pytest.param(True, "cased", marks=pytest.mark.slow),
]


def write_vocab(path: pathlib.Path, tokens) -> str:
    path.write_text("".join(token + "\n" for token in tokens), encoding="utf-8")
    return str(path)


@pytest.fixture
def tiny_vocab_file(tmp_path):
    return write_vocab(tmp_path / "tiny_vocab.txt", TINY_VOCAB)


@pytest.fixture(scope="module")
def uncased(vocab_file):
    return tokenization.FullTokenizer(vocab_file, do_lower_case=True)


def real_text_lines(sample_data: pathlib.Path) -> list[str]:
    """Every text line of the bundled sample data (about 1.7 million characters).

    Corpus lines, MRPC sentences, SQuAD titles, contexts, questions and answers,
    and SciNER sentences (their tokens joined by spaces).
    """
    lines = []
    for name in ("bert_paper_v1.txt", "bert_paper_v2.txt"):
        lines += (sample_data / "corpus" / name).read_text(encoding="utf-8").split("\n")
    for name in ("train.tsv", "dev.tsv", "test.tsv"):
        with open(sample_data / "glue" / "MRPC" / name, encoding="utf-8-sig") as f:
            rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
        for row in rows[1:]:
            lines += row[3:5]
    squad_file = sample_data / "squad" / "dev-v2.0-first5articles.json"
    for article in json.loads(squad_file.read_text(encoding="utf-8"))["data"]:
        lines.append(article["title"])
        for paragraph in article["paragraphs"]:
            lines.append(paragraph["context"])
            for qa in paragraph["qas"]:
                lines.append(qa["question"])
                answers = qa["answers"] + qa.get("plausible_answers", [])
                lines += [answer["text"] for answer in answers]
    for name in ("train.txt", "dev.txt"):
        text = (sample_data / "sciner" / name).read_text(encoding="utf-8")
        for sentence in text.split("\n\n"):
            words = [line.rsplit(" ", 1)[0] for line in sentence.split("\n") if line.strip()]
            if words:
                lines.append(" ".join(words))
    return lines


def cased_vocab_tokens(vocab_file: str) -> list[str]:
    """The uncased vocabulary plus capitalised and upper-case variants of its
    words and "##" pieces, so that cased text really meets cased pieces."""
    tokens = list(tokenization.load_vocab(vocab_file))
    seen = set(tokens)
    for token in list(tokens):
        if token.startswith("[") and token.endswith("]"):
            continue
        prefix, body = ("##", token[2:]) if token.startswith("##") else ("", token)
        for variant in (body.capitalize(), body.upper()):
            variant = prefix + variant
            if variant not in seen:
                seen.add(variant)
                tokens.append(variant)
    return tokens


# ----------------------------------------------------------------------------
# Exact token lists.
# ----------------------------------------------------------------------------

# (text, do_lower_case, expected tokens) with TINY_VOCAB.
TINY_VOCAB_CASES = [
    ("Héllo", True, ["hello"]),
    ("Héllo", False, ["H", "##é", "##llo"]),
    ("HÉLLO Wörld", True, ["hello", "w", "##or", "##ld"]),
    ("Wörld", False, ["W", "##ö", "##rld"]),
    ("中文字", True, ["中", "文", "[UNK]"]),
    ("a中b", False, ["a", "中", "b"]),
    ("a\x00b\ufffdc", True, ["a", "##b", "##c"]),
    ("a\tb\r\nc\u00a0a\u200bb", False, ["a", "b", "c", "a", "##b"]),
    ("hello,w!!", True, ["hello", ",", "w", "!", "!"]),
    ("$1.50", True, ["$", "1", ".", "50"]),
    ("[CLS] and [MASK]", True, ["[", "cls", "]", "and", "[", "mask", "]"]),
    ("[CLS]", False, ["[", "[UNK]", "]"]),
    ("unaffable", True, ["un", "##aff", "##able"]),
    ("affable", True, ["aff", "##able"]),
    ("unaffablé", False, ["[UNK]"]),  # "##é" exists, "##ablé" does not.
    ("hello ☃", True, ["hello", "[UNK]"]),
    ("", True, []),
    (" \t\r\n\u3000", True, []),
]

# (text, expected tokens) with the uncased vocabulary, do_lower_case=True.
UNCASED_VOCAB_CASES = [
    ("Héllo", ["hello"]),
    ("naïve Café", ["naive", "cafe"]),
    ("中文字", ["中", "文", "[UNK]"]),
    ("a\x00b\ufffdc", ["abc"]),
    ("tab\there\r\nnew\u00a0line\u200bzero", ["tab", "here", "new", "line", "##zer", "##o"]),
    ("Hello,world!!", ["hello", ",", "world", "!", "!"]),
    ("$1.50", ["$", "1", ".", "50"]),
    ("[CLS] and [MASK]", ["[", "cl", "##s", "]", "and", "[", "mask", "]"]),
    ("Unaffable", ["una", "##ffa", "##ble"]),
    ("ΟΔΥΣΣΕΥΣ", ["ο", "##δ", "##υ", "##σ", "##σ", "##ε", "##υ", "##ς"]),
    ("ﬁ ½ ǅ", ["ﬁ", "½", "[UNK]"]),
    ("İstanbul", ["istanbul"]),
]


@pytest.mark.parametrize("text, lower, expected", TINY_VOCAB_CASES)
def test_tiny_vocab_tokens(tiny_vocab_file, text, lower, expected):
    tokenizer = tokenization.FullTokenizer(tiny_vocab_file, do_lower_case=lower)
    assert tokenizer.tokenize(text) == expected


@pytest.mark.parametrize("text, expected", UNCASED_VOCAB_CASES)
def test_uncased_vocab_tokens(uncased, text, expected):
    assert uncased.tokenize(text) == expected


def test_cased_keeps_accents_and_case(vocab_file):
    tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case=False)
    assert tokenizer.tokenize("Hello café, world") == ["[UNK]", "[UNK]", ",", "world"]


def test_word_length_limit_counts_characters(uncased):
    pieces_200 = uncased.tokenize("e" * 200)
    assert pieces_200 == ["ee"] + ["##ee"] * 99
    assert uncased.tokenize("e" * 201) == ["[UNK]"]
    # 200 two-byte characters are still within the limit; 201 are not.
    assert uncased.tokenize("é" * 200) == pieces_200
    assert uncased.tokenize("é" * 201) == ["[UNK]"]
    assert uncased.tokenize("x " + "e" * 201 + " x") == ["x", "[UNK]", "x"]
    # Two- and three-byte characters that stay so after normalization.
    assert uncased.tokenize("я" * 200) == ["я"] + ["##я"] * 199
    assert uncased.tokenize("क" * 200) == ["क"] + ["##क"] * 199
    assert uncased.tokenize("क" * 201) == ["[UNK]"]


def test_ids_and_continuations(uncased):
    tokens = uncased.tokenize("Unaffable")
    ids = uncased.convert_tokens_to_ids(tokens)
    assert ids == [14477, 20961, 3468]
    assert uncased.convert_ids_to_tokens(ids) == tokens
    assert uncased.inv_vocab[3468] == "##ble"
    assert uncased.special_ids() == {"cls": 101, "sep": 102, "unk": 100, "mask": 103, "pad": 0}


def test_bytes_input_drops_invalid_utf8(uncased):
    assert uncased.tokenize(b"caf\xc3\xa9 a\xffb") == ["cafe", "ab"]


def test_component_api(uncased):
    assert uncased.basic_tokenizer.tokenize("HÉLLO, Wörld") == ["hello", ",", "world"]
    assert tokenization.BasicTokenizer(do_lower_case=False).tokenize("Wörld!") == ["Wörld", "!"]
    assert uncased.wordpiece_tokenizer.tokenize("unaffable hello") == [
        "una",
        "##ffa",
        "##ble",
        "hello",
    ]
    wordpiece = tokenization.WordpieceTokenizer(
        {"ab": 0, "##c": 1, "[UNK]": 2}, max_input_chars_per_word=3
    )
    assert wordpiece.tokenize("abc abcc ab abd") == ["ab", "##c", "[UNK]", "ab", "[UNK]"]
    assert tokenization.whitespace_tokenize("  a \t b\n") == ["a", "b"]
    assert tokenization.convert_to_unicode(b"\xc3\xa9") == "é"
    assert tokenization.printable_text("é") == "é"
    assert tokenization.convert_by_vocab({"a": 5}, ["a", "a"]) == [5, 5]


def test_char_classes():
    classes = tokenization.char_classes()
    removed, to_space = set(classes.removed), set(classes.to_space)
    punctuation, marks = set(classes.punctuation), set(classes.nonspacing_marks)
    for cp in list(range(0x10000)) + list(range(0x1F000, 0x1F100)) + [0xE0001, 0x10FFFF]:
        char = chr(cp)
        assert (cp in removed) == (cp in (0, 0xFFFD) or tokenization.is_control(char))
        assert (cp in to_space) == tokenization.is_whitespace(char)
        assert (cp in punctuation) == tokenization.is_punctuation(char)
    for char in "\x00\ufffd\x7f\u200b\u00ad\ufeff\U000e0001":
        assert ord(char) in removed
    assert {ord(c) for c in " \t\n\r\u00a0\u3000"} <= to_space
    assert {ord(c) for c in "$^`+<=>|~,.!?¿«»、。"} <= punctuation
    assert not {ord(c) for c in "aZ09é中"} & punctuation
    assert ord("_") in punctuation and ord("\u0301") in marks
    assert {0x2028, 0x2029} <= set(classes.split_space)
    assert tokenization.is_cjk("中") and tokenization.is_cjk("\U00020000")
    assert not tokenization.is_cjk("あ") and not tokenization.is_cjk("한")


def test_bundled_char_classes_are_the_scan_of_this_unicode_version(tmp_path, monkeypatch):
    """The classes a process reads from `char_classes.json` (instead of scanning every
    code point at its start) equal the scan; a Unicode version without bundled classes
    is scanned."""
    version = unicodedata.unidata_version
    bundled = char_classes._bundled(version)
    assert bundled is not None, f"run `python -m data_prep.text.char_classes` ({version})"
    scanned = char_classes.CharClasses()
    for name in char_classes.CLASS_NAMES:
        assert getattr(bundled, name) == getattr(scanned, name), name
    assert char_classes._bundled("0.0.0") is None
    monkeypatch.setattr(char_classes, "BUNDLED", str(tmp_path / "missing.json"))
    assert char_classes._bundled(version) is None
    for name, text in (
        ("cut.json", '{"%s": {"removed": [[0, 8' % version),
        ("empty.json", ""),
        ("a_list.json", "[]"),
        ("no_class.json", '{"%s": {"removed": [[0, 8]]}}' % version),
        ("bad_range.json", '{"%s": {"removed": [[0]]}}' % version),
    ):
        (tmp_path / name).write_text(text)
        monkeypatch.setattr(char_classes, "BUNDLED", str(tmp_path / name))
        assert char_classes._bundled(version) is None, name


# ----------------------------------------------------------------------------
# Vocabulary files.
# ----------------------------------------------------------------------------


def test_load_vocab_strips_lines_and_keeps_first_id(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_bytes(b"[PAD]\r\n a \nb\na\n\xc3\xa9")
    vocab = tokenization.load_vocab(str(path))
    assert list(vocab.items()) == [("[PAD]", 0), ("a", 1), ("b", 2), ("é", 3)]


def test_missing_vocab_file(tmp_path):
    missing = str(tmp_path / "nope.txt")
    with pytest.raises(ValueError, match="nope.txt.*does not exist"):
        tokenization.FullTokenizer(missing)


def test_empty_vocab_file(tmp_path):
    path = write_vocab(tmp_path / "empty.txt", [])
    with pytest.raises(ValueError, match="empty.txt.*empty"):
        tokenization.load_vocab(path)


def test_vocab_without_special_tokens(tmp_path):
    path = write_vocab(tmp_path / "plain.txt", ["[PAD]", "[CLS]", "a", "b"])
    with pytest.raises(ValueError, match=r"plain\.txt.*\[UNK\], \[SEP\]"):
        tokenization.FullTokenizer(path)
    path = write_vocab(tmp_path / "nomask.txt", ["[UNK]", "[CLS]", "[SEP]", "a"])
    tokenizer = tokenization.FullTokenizer(path)  # [MASK], [PAD] are optional here.
    with pytest.raises(ValueError, match=r"nomask\.txt.*\[PAD\], \[MASK\]"):
        tokenizer.special_ids()
    with pytest.raises(ValueError, match=r"v\.txt.*\[MASK\]"):
        tokenization.validate_vocab(tokenizer.vocab, required=["[MASK]"], vocab_file="v.txt")
    tokenization.validate_vocab(tokenizer.vocab, required=["[CLS]", "a"])


def test_validate_case_matches_checkpoint():
    tokenization.validate_case_matches_checkpoint(True, "x/uncased_L-12_H-768_A-12/bert_model.ckpt")
    tokenization.validate_case_matches_checkpoint(False, "x/my_model/bert_model.ckpt")
    tokenization.validate_case_matches_checkpoint(False, None)
    with pytest.raises(ValueError, match="do_lower_case=False"):
        tokenization.validate_case_matches_checkpoint(
            True, "x/cased_L-12_H-768_A-12/bert_model.ckpt"
        )
    with pytest.raises(ValueError, match="do_lower_case=True"):
        tokenization.validate_case_matches_checkpoint(
            False, "x/uncased_L-24_H-1024_A-16/bert_model.ckpt"
        )


# ----------------------------------------------------------------------------
# Truncation and packing.
# ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "len_a, len_b, max_num, kept_a, kept_b",
    [
        (5, 5, 10, 5, 5),
        (5, 5, 7, 4, 3),  # B loses on ties.
        (5, 5, 6, 3, 3),
        (8, 2, 6, 4, 2),  # Only the longer one is cut.
        (2, 8, 6, 2, 4),
        (3, 10, 5, 3, 2),
        (0, 7, 4, 0, 4),
        (4, 4, 0, 0, 0),
    ],
)
def test_truncate_seq_pair(len_a, len_b, max_num, kept_a, kept_b):
    tokens_a, tokens_b = list(range(len_a)), list(range(100, 100 + len_b))
    tokenization.truncate_seq_pair(tokens_a, tokens_b, max_num)
    assert tokens_a == list(range(kept_a))
    assert tokens_b == list(range(100, 100 + kept_b))


def test_pack_inputs_two_segments_with_truncation():
    packed = tokenization.pack_inputs([1, 2, 3, 4, 5], [6, 7], 8, cls_id=101, sep_id=102)
    assert packed == {
        "input_word_ids": [101, 1, 2, 3, 102, 6, 7, 102],
        "input_mask": [1] * 8,
        "input_type_ids": [0, 0, 0, 0, 0, 1, 1, 1],
    }


def test_pack_inputs_two_segments_with_padding():
    packed = tokenization.pack_inputs([1, 2], [6], 8, cls_id=101, sep_id=102)
    assert packed == {
        "input_word_ids": [101, 1, 2, 102, 6, 102, 0, 0],
        "input_mask": [1, 1, 1, 1, 1, 1, 0, 0],
        "input_type_ids": [0, 0, 0, 0, 1, 1, 0, 0],
    }


def test_pack_inputs_one_segment():
    assert tokenization.pack_inputs([1, 2, 3, 4, 5], None, 5, 101, 102) == {
        "input_word_ids": [101, 1, 2, 3, 102],
        "input_mask": [1, 1, 1, 1, 1],
        "input_type_ids": [0, 0, 0, 0, 0],
    }
    assert tokenization.pack_inputs([], None, 4, 101, 102) == {
        "input_word_ids": [101, 102, 0, 0],
        "input_mask": [1, 1, 0, 0],
        "input_type_ids": [0, 0, 0, 0],
    }


def test_pack_inputs_leaves_inputs_alone_and_rejects_short_length():
    tokens_a, tokens_b = [1, 2, 3], [4, 5, 6]
    tokenization.pack_inputs(tokens_a, tokens_b, 5, 101, 102)
    assert tokens_a == [1, 2, 3] and tokens_b == [4, 5, 6]
    with pytest.raises(ValueError, match="seq_length=2"):
        tokenization.pack_inputs(tokens_a, tokens_b, 2, 101, 102)


# ----------------------------------------------------------------------------
# The original release as an oracle.
# ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def original_tokenization():
    from absl import flags
    from bert import tokenization as original  # Defines --preserve_unused_tokens.

    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()
    return original


@pytest.mark.parametrize("do_lower_case, which_vocab", REAL_TEXT_CASES)
def test_identical_to_original_release(
    original_tokenization, text_lines, vocab_file, cased_vocab_file, do_lower_case, which_vocab
):
    path = vocab_file if which_vocab == "uncased" else cased_vocab_file
    ours = tokenization.FullTokenizer(path, do_lower_case=do_lower_case)
    theirs = original_tokenization.FullTokenizer(path, do_lower_case=do_lower_case)
    assert ours.vocab == theirs.vocab
    mismatches = [line for line in text_lines if ours.tokenize(line) != theirs.tokenize(line)]
    assert not mismatches[:5]
    if which_vocab == "cased" and not do_lower_case:
        # Cased words and "##" pieces are really exercised.
        pieces = [piece for line in text_lines for piece in ours.tokenize(line)]
        assert sum(piece != piece.lower() for piece in pieces) > 50_000
        assert sum(piece.startswith("##") and piece != piece.lower() for piece in pieces) > 1_000


def test_tokenize_to_ids_equals_tokens_then_ids(text_lines, vocab_file):
    """The remembered ids of words are those of tokenize + convert, also once
    the memory has been cleared and refilled."""
    tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case=True)
    tokenizer.WORD_CACHE_SIZE = 1000
    text_lines = text_lines + [
        "a\x1cb c",
        "x\x0by\x85z",
        "\u00adΣ, \u3000ΣΑ.",
        "un\x00aff\u200bable",
        b"caf\xc3\xa9 \xff",
    ]
    ids = [tokenizer.tokenize_to_ids(line) for line in text_lines]
    expected = [tokenizer.convert_tokens_to_ids(tokenizer.tokenize(line)) for line in text_lines]
    assert ids == expected
    assert sum(map(len, ids)) > 300_000


@pytest.mark.slow
@pytest.mark.parametrize("do_lower_case", [True, False])
def test_identical_to_original_release_on_code_points_of_every_kind(
    original_tokenization, vocab_file, do_lower_case
):
    """Both sides of every boundary between character kinds, in all planes (all code
    points: `python -m benchmarks.robustness.tokenizer_code_points`)."""
    ours = tokenization.FullTokenizer(vocab_file, do_lower_case=do_lower_case)
    theirs = original_tokenization.FullTokenizer(vocab_file, do_lower_case=do_lower_case)
    texts = code_points.texts(code_points.sampled_code_points())
    mismatches = [text for text in texts if ours.tokenize(text) != theirs.tokenize(text)]
    assert not mismatches[:5]


# ----------------------------------------------------------------------------
# preserve_unused_tokens (the original's flag, an argument here).
# ----------------------------------------------------------------------------


def test_preserve_unused_tokens_keeps_unused_entries_whole(vocab_file):
    text = "[unused0] Héllo [unused0]. [UNUSED1] [MASK] [unused994] \u200b[unused993]"
    plain = tokenization.FullTokenizer(vocab_file)
    kept = tokenization.FullTokenizer(vocab_file, preserve_unused_tokens=True)
    assert plain.tokenize("[unused0]") == ["[", "unused", "##0", "]"]
    assert kept.tokenize(text) == (
        ["[unused0]", "hello"]
        + ["[", "unused", "##0", "]", "."]  # Not a word between spaces.
        + ["[", "unused", "##1", "]"]  # Lower-cased after the check, as the original.
        + ["[", "mask", "]"]  # Only [unusedN] entries.
        + ["[", "unused", "##9", "##9", "##4", "]"]  # Not in the vocabulary.
        + ["[unused993]"]  # Cleaning drops the zero-width space first.
    )
    assert kept.convert_tokens_to_ids(kept.tokenize("[unused0] [unused993]")) == [1, 998]
    assert kept.tokenize_to_ids(text) == kept.convert_tokens_to_ids(kept.tokenize(text))
    basic = tokenization.BasicTokenizer(False, kept.vocab, preserve_unused_tokens=True)
    assert basic.tokenize("A [unused5]B [unused5]") == ["A", "[", "unused5", "]", "B", "[unused5]"]
    assert tokenization.BasicTokenizer(preserve_unused_tokens=True).tokenize("[unused5]") == [
        "[",
        "unused5",
        "]",
    ]  # No vocabulary given: nothing to keep, as the original.


def _with_unused_words(lines):
    """Real lines with [unusedN] words and look-alikes put between their words."""
    words = ["[unused%d]" % (i * 7 % 1000) for i in range(50)]
    words += ["[unused3],", "([unused4])", "[UNUSED5]", "[unused٣]", "中[unused6]", "[MASK]"]
    out = []
    for i, line in enumerate(lines):
        parts = line.split(" ")
        parts.insert(i % (len(parts) + 1), words[i % len(words)])
        out.append(" ".join(parts))
    return out


@pytest.mark.parametrize("do_lower_case", [True, False])
def test_preserve_unused_tokens_as_the_original(
    original_tokenization, text_lines, vocab_file, do_lower_case
):
    from absl.testing import flagsaver

    lines = _with_unused_words(text_lines[:3000])
    ours = tokenization.FullTokenizer(vocab_file, do_lower_case, preserve_unused_tokens=True)
    with flagsaver.flagsaver(preserve_unused_tokens=True):
        theirs = original_tokenization.FullTokenizer(vocab_file, do_lower_case=do_lower_case)
        expected = [theirs.tokenize(line) for line in lines]
    assert [ours.tokenize(line) for line in lines] == expected
    assert [ours.tokenize_to_ids(line) for line in lines] == [
        theirs.convert_tokens_to_ids(tokens) for tokens in expected
    ]
    assert sum(token.startswith("[unused") for tokens in expected for token in tokens) > 2000

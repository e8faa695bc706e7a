"""Tests of data_prep.text.tf_tokenization: the in-graph tokenizer gives the Python
tokenizer's ids, in eager mode, in tf.function, in tf.data and after a SavedModel
round trip; bert_pack_inputs packs as tokenization.pack_inputs does."""

import itertools
import os
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the ops a loaded SavedModel needs)

from data_prep.text import tf_tokenization
from data_prep.text import tokenization
from tests.data_prep.test_tokenization import (
    REAL_TEXT_CASES,
    TINY_VOCAB,
    TINY_VOCAB_CASES,
    UNCASED_VOCAB_CASES,
    _with_unused_words,
    write_vocab,
)
from tests.helpers import code_points

CLS, SEP = 101, 102


def python_ids(tokenizer, texts):
    return [tokenizer.convert_tokens_to_ids(tokenizer.tokenize(t)) for t in texts]


def tf_tokens(tokenizer, python_tokenizer, texts):
    ids = tokenizer.tokenize(tf.constant(texts, tf.string)).to_list()
    return [python_tokenizer.convert_ids_to_tokens(row) for row in ids]


# ----------------------------------------------------------------------------
# Tokenization.
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("do_lower_case, which_vocab", REAL_TEXT_CASES)
def test_identical_to_python_on_real_text(
    text_lines, vocab_file, cased_vocab_file, do_lower_case, which_vocab
):
    path = vocab_file if which_vocab == "uncased" else cased_vocab_file
    expected = python_ids(tokenization.FullTokenizer(path, do_lower_case), text_lines)
    tokenizer = tf_tokenization.TFBertTokenizer(path, do_lower_case)
    got = tokenizer.tokenize(tf.constant(text_lines)).to_list()
    mismatches = [(line, e, g) for line, e, g in zip(text_lines, expected, got) if e != g]
    assert not mismatches[:3]


def test_fast_and_classic_wordpiece_agree_on_real_text(text_lines, vocab_file):
    # Released vocabularies take FastWordpieceTokenizer; a vocabulary with gaps in
    # its ids takes the classic WordpieceTokenizer. Both must give the same pieces.
    tokenizer = tf_tokenization.TFBertTokenizer(vocab_file)
    assert isinstance(tokenizer._wordpiece, tensorflow_text.FastWordpieceTokenizer)
    vocab = tokenization.load_vocab(vocab_file)
    classic = tf_tokenization._wordpiece_tokenizer(
        dict(vocab, **{"[UNUSED-GAP]": len(vocab) + 5}),
        tokenizer.vocab_table,
        4 * tokenization.MAX_INPUT_CHARS_PER_WORD,
    )
    assert isinstance(classic, tensorflow_text.WordpieceTokenizer)
    # WordPiece works word by word: every distinct word of the real text, once.
    words, _ = tf.unique(tokenizer.split_words(tf.constant(text_lines)).flat_values)
    assert words.shape[0] > 15_000
    fast_ids = tokenizer._wordpiece.tokenize(words)
    assert fast_ids.flat_values.shape[0] > 25_000
    assert fast_ids.to_list() == classic.tokenize(words).to_list()


def test_tiny_vocab_cases(tmp_path):
    path = write_vocab(tmp_path / "tiny.txt", TINY_VOCAB)
    for lower in (True, False):
        cases = [
            (text, expected)
            for text, case_lower, expected in TINY_VOCAB_CASES
            if case_lower == lower
        ]
        python_tokenizer = tokenization.FullTokenizer(path, lower)
        tokenizer = tf_tokenization.TFBertTokenizer(path, lower)
        got = tf_tokens(tokenizer, python_tokenizer, [text for text, _ in cases])
        assert got == [expected for _, expected in cases]


def test_uncased_vocab_cases(vocab_file):
    python_tokenizer = tokenization.FullTokenizer(vocab_file)
    tokenizer = tf_tokenization.TFBertTokenizer(vocab_file)
    texts = [text for text, _ in UNCASED_VOCAB_CASES]
    assert tf_tokens(tokenizer, python_tokenizer, texts) == [
        expected for _, expected in UNCASED_VOCAB_CASES
    ]


def test_word_length_limit_counts_characters(vocab_file):
    python_tokenizer = tokenization.FullTokenizer(vocab_file)
    tokenizer = tf_tokenization.TFBertTokenizer(vocab_file)
    got = tf_tokens(
        tokenizer,
        python_tokenizer,
        [
            "e" * 200,
            "é" * 200,
            "e" * 201,
            "é" * 201,
            "x " + "€" * 201 + " x",
            "я" * 200,
            "क" * 200,
            "я" * 201,
            "क" * 201,
        ],
    )
    pieces_200 = ["ee"] + ["##ee"] * 99
    assert got == [
        pieces_200,
        pieces_200,
        ["[UNK]"],
        ["[UNK]"],
        ["x", "[UNK]", "x"],
        ["я"] + ["##я"] * 199,
        ["क"] + ["##क"] * 199,
        ["[UNK]"],
        ["[UNK]"],
    ]


@pytest.mark.parametrize("do_lower_case", [True, False])
def test_basic_tokenize_is_the_basic_tokenizer(vocab_file, text_lines, do_lower_case):
    """Whole words, however long, and no [unusedN] kept: as the original's get_final_text."""
    tokenizer = tf_tokenization.TFBertTokenizer(
        vocab_file, do_lower_case, preserve_unused_tokens=True
    )
    basic = tokenization.BasicTokenizer(do_lower_case)
    texts = ["Steve Smith's café,  [unused0]!", "e" * 201, *text_lines[:300]]
    got = [
        [w.decode() for w in row] for row in tokenizer.basic_tokenize(tf.constant(texts)).to_list()
    ]
    assert got == [basic.tokenize(text) for text in texts]
    cased = ["Steve", "Smith", "'", "s", "café", ",", "[", "unused0", "]", "!"]
    assert got[0] == ([w.lower().replace("é", "e") for w in cased] if do_lower_case else cased)
    assert got[1] == ["e" * 201]


def test_invalid_utf8_and_special_characters(vocab_file):
    texts = [
        b"caf\xc3\xa9 a\xffb",
        b"\xe4\xb8a",
        b"\xed\xa0\x80x",
        b"ab\xe4",
        "ΑΣ. ΑΣΑ aΣ'a".encode(),
        "İstanbul ıi".encode(),
        "a\u2028b\u2029c\x85d\x1ce\x0bf".encode(),
        "ﬁ ½ Ａ ǅ ẞ ß".encode(),
    ]
    for lower in (True, False):
        python_tokenizer = tokenization.FullTokenizer(vocab_file, lower)
        tokenizer = tf_tokenization.TFBertTokenizer(vocab_file, lower)
        assert tokenizer.tokenize(tf.constant(texts)).to_list() == python_ids(
            python_tokenizer, texts
        )


@pytest.mark.parametrize("do_lower_case", [True, False])
def test_plain_ascii_rows_and_other_rows_keep_their_order(vocab_file, do_lower_case):
    # Rows of printable ASCII skip the full normalization; the others take it; the
    # batch comes back in its own order whatever the mix, empty batches included.
    plain = ["Hello, World!", "", "A $5 fee (10%) <b>", "ISN'T it ~ok~?"]
    other = ["Café ÉTÉ", "tab\there", "naïve\nline", "東京 Tower", "x\x00y"]
    python_tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case)
    tokenizer = tf_tokenization.TFBertTokenizer(vocab_file, do_lower_case)
    for texts in (plain, other, plain[:2] + other[:2] + plain[2:] + other[2:], []):
        got = tokenizer.tokenize(tf.constant(texts, tf.string)).to_list()
        assert got == python_ids(python_tokenizer, texts), texts


def test_tokenize_words_layout(vocab_file):
    tokenizer = tf_tokenization.TFBertTokenizer(vocab_file)
    words = tokenizer.tokenize_words(tf.constant(["Unaffable hello!", ""]))
    assert words.dtype == tf.int32
    assert words.to_list() == [[[14477, 20961, 3468], [7592], [999]], []]


def test_in_tf_data_and_tf_function(vocab_file, text_lines):
    lines = text_lines[:300] + ["", " "]
    expected = python_ids(tokenization.FullTokenizer(vocab_file), lines)
    tokenizer = tf_tokenization.TFBertTokenizer(vocab_file)
    dataset = tf.data.Dataset.from_tensor_slices(lines).batch(64).map(tokenizer.tokenize)
    got = [row for batch in dataset for row in batch.to_list()]
    assert got == expected

    @tf.function
    def pack(text):
        return tokenizer.bert_pack_inputs([tokenizer.tokenize(text)], seq_length=16)

    packed = pack(tf.constant(lines))
    assert packed["input_word_ids"].numpy().tolist() == [
        tokenization.pack_inputs(ids, None, 16, CLS, SEP)["input_word_ids"] for ids in expected
    ]


def test_saved_model_keeps_vocab_as_asset(vocab_file, tmp_path):
    local_vocab = tmp_path / "vocab.txt"
    shutil.copy(vocab_file, local_vocab)
    tokenizer = tf_tokenization.TFBertTokenizer(str(local_vocab))
    assert tokenizer.vocab_file is not None
    tf.saved_model.save(tokenizer, str(tmp_path / "saved"))
    local_vocab.unlink()  # The SavedModel must carry its own copy.
    loaded = tf.saved_model.load(str(tmp_path / "saved"))
    assert (tmp_path / "saved" / "assets" / "vocab.txt").exists()
    texts = tf.constant(["Héllo, wörld!", "", "unaffable [MASK]"])
    assert loaded.tokenize(texts).to_list() == [
        [7592, 1010, 2088, 999],
        [],
        [14477, 20961, 3468, 1031, 7308, 1033],
    ]
    assert loaded.tokenize_words(texts).to_list()[0] == [[7592], [1010], [2088], [999]]


def test_irregular_vocab_file_gets_python_ids(tmp_path):
    # Whitespace around tokens and a repeated token: line numbers are not ids.
    path = write_vocab(
        tmp_path / "odd.txt", ["[PAD]", " [UNK] ", "[CLS]", "[SEP]", "a", "a", "##b", "c "]
    )
    tokenizer = tf_tokenization.TFBertTokenizer(path)
    assert tokenizer.vocab_file is None
    assert tokenizer.tokenize(tf.constant(["ab c x"])).to_list() == [[4, 5, 6, 1]]
    assert tokenization.FullTokenizer(path).convert_tokens_to_ids(["a", "##b", "c", "[UNK]"]) == [
        4,
        5,
        6,
        1,
    ]


def test_vocab_errors(tmp_path):
    with pytest.raises(ValueError, match="nope.txt.*does not exist"):
        tf_tokenization.TFBertTokenizer(str(tmp_path / "nope.txt"))
    path = write_vocab(tmp_path / "nosep.txt", ["[UNK]", "[CLS]", "a"])
    with pytest.raises(ValueError, match=r"nosep\.txt.*\[SEP\]"):
        tf_tokenization.TFBertTokenizer(path)


# Words kept whole by preserve_unused_tokens, and look-alikes, in every path: ASCII
# rows, other rows, cleaning that joins a word, a word over the length limit.
PRESERVE_TEXTS = [
    "[unused0]",
    " [unused0] x",
    "[UNUSED0] [unused0]. [MASK]",
    "a\u200b[unused1] [un\u200bused2]",
    "[unused3]\n[unused4]\t\u3000[unused5]中[unused6] 中 [unused7]",
    "",
    "[]",
    "x" * 300 + " [unused8] Héllo",
    b"\xff[unused9] caf\xc3\xa9 [unused10]",
]


@pytest.mark.parametrize("do_lower_case", [True, False])
def test_preserve_unused_tokens_identical_to_python(text_lines, vocab_file, do_lower_case):
    texts = _with_unused_words(text_lines[:1500]) + PRESERVE_TEXTS
    python = tokenization.FullTokenizer(vocab_file, do_lower_case, preserve_unused_tokens=True)
    tokenizer = tf_tokenization.TFBertTokenizer(
        vocab_file, do_lower_case, preserve_unused_tokens=True
    )
    expected = python_ids(python, texts)
    got = tokenizer.tokenize(tf.constant(texts)).to_list()
    mismatches = [(t, e, g) for t, e, g in zip(texts, expected, got) if e != g]
    assert not mismatches[:3]
    assert got[len(texts) - len(PRESERVE_TEXTS)] == [1]  # "[unused0]": one piece, id 1.
    assert sum(1 <= i < 100 or 104 <= i < 999 for row in got for i in row) > 1000  # [unusedN]
    words = tokenizer.tokenize_words(tf.constant(PRESERVE_TEXTS)).to_list()
    assert [[p for word in row for p in word] for row in words] == expected[-len(PRESERVE_TEXTS) :]
    assert words[1][0] == [1]
    # The path every row takes when FastWordpieceTokenizer cannot hold the vocabulary.
    exact = tokenizer._exact_ids(tf.constant(PRESERVE_TEXTS)).to_list()
    assert exact == expected[-len(PRESERVE_TEXTS) :]


@pytest.mark.slow
@pytest.mark.parametrize("do_lower_case", [True, False])
def test_identical_to_python_on_code_points_of_every_kind(vocab_file, do_lower_case):
    """Both sides of every boundary between character kinds, in all planes (all code
    points, where ICU's tables could differ inside a run: `python -m
    benchmarks.robustness.tokenizer_code_points`)."""
    python_tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case)
    tokenizer = tf_tokenization.TFBertTokenizer(vocab_file, do_lower_case)
    texts = code_points.texts(code_points.sampled_code_points())
    got = tokenizer.tokenize(tf.constant(texts)).to_list()
    expected = python_ids(python_tokenizer, texts)
    mismatches = [text for text, e, g in zip(texts, expected, got) if e != g]
    assert not mismatches[:5]


# ----------------------------------------------------------------------------
# Packing.
# ----------------------------------------------------------------------------


def ragged(rows):
    return tf.ragged.constant(rows, dtype=tf.int32, ragged_rank=1)


def expected_packing(rows_a, rows_b, seq_length):
    packed = [
        tokenization.pack_inputs(a, b, seq_length, CLS, SEP)
        for a, b in zip(rows_a, rows_b or [None] * len(rows_a))
    ]
    return {key: [p[key] for p in packed] for key in packed[0]}


def numpy_lists(features):
    for value in features.values():
        assert value.dtype == tf.int32
    return {key: value.numpy().tolist() for key, value in features.items()}


def test_bert_pack_inputs_exact_lists():
    packed = tf_tokenization.bert_pack_inputs(
        [ragged([[1, 2, 3, 4, 5], [], [7]]), ragged([[6, 7], [8], []])], 8, CLS, SEP
    )
    assert numpy_lists(packed) == {
        "input_word_ids": [
            [101, 1, 2, 3, 102, 6, 7, 102],
            [101, 102, 8, 102, 0, 0, 0, 0],
            [101, 7, 102, 102, 0, 0, 0, 0],
        ],
        "input_mask": [
            [1, 1, 1, 1, 1, 1, 1, 1],
            [1, 1, 1, 1, 0, 0, 0, 0],
            [1, 1, 1, 1, 0, 0, 0, 0],
        ],
        "input_type_ids": [
            [0, 0, 0, 0, 0, 1, 1, 1],
            [0, 0, 1, 1, 0, 0, 0, 0],
            [0, 0, 0, 1, 0, 0, 0, 0],
        ],
    }


@pytest.mark.parametrize("seq_length", [2, 3, 4, 5, 8, 13, 20])
def test_bert_pack_inputs_equals_pack_inputs_on_all_length_pairs(seq_length):
    pairs = list(itertools.product(range(12), range(12)))
    rows_a = [list(range(1000, 1000 + la)) for la, _ in pairs]
    rows_b = [list(range(2000, 2000 + lb)) for _, lb in pairs]
    single = tf_tokenization.bert_pack_inputs([ragged(rows_a)], seq_length, CLS, SEP)
    assert numpy_lists(single) == expected_packing(rows_a, None, seq_length)
    if seq_length >= 3:
        pair = tf_tokenization.bert_pack_inputs(
            [ragged(rows_a), ragged(rows_b)], seq_length, CLS, SEP
        )
        assert numpy_lists(pair) == expected_packing(rows_a, rows_b, seq_length)


def test_bert_pack_inputs_on_tokenized_text_with_empty_strings(vocab_file, text_lines):
    lines_a = text_lines[1000:1200] + ["", "", "Hello"]
    lines_b = text_lines[2000:2200] + ["", "World", ""]
    python_tokenizer = tokenization.FullTokenizer(vocab_file)
    tokenizer = tf_tokenization.TFBertTokenizer(vocab_file)
    for seq_length in (8, 64):
        packed = tokenizer.bert_pack_inputs(
            [
                tokenizer.tokenize(tf.constant(lines_a)),
                tokenizer.tokenize_words(tf.constant(lines_b)),
            ],
            seq_length,
        )
        assert numpy_lists(packed) == expected_packing(
            python_ids(python_tokenizer, lines_a), python_ids(python_tokenizer, lines_b), seq_length
        )


def test_bert_pack_inputs_all_empty_batch():
    packed = tf_tokenization.bert_pack_inputs([ragged([[], []]), ragged([[], []])], 4, CLS, SEP)
    np.testing.assert_array_equal(packed["input_word_ids"], [[101, 102, 102, 0]] * 2)
    np.testing.assert_array_equal(packed["input_type_ids"], [[0, 0, 1, 0]] * 2)


def test_bert_pack_inputs_errors():
    with pytest.raises(ValueError, match="1 or 2 segments"):
        tf_tokenization.bert_pack_inputs([ragged([[1]])] * 3, 8, CLS, SEP)
    with pytest.raises(ValueError, match="seq_length=2"):
        tf_tokenization.bert_pack_inputs([ragged([[1]])] * 2, 2, CLS, SEP)


@pytest.mark.slow
def test_lower_casing_ignores_the_locale(vocab_file):
    # ICU lower-cases "I" to a dotless "ı" under a Turkish default locale.
    script = (
        "import sys, tensorflow as tf\n"
        "from data_prep.text import tf_tokenization\n"
        "tokenizer = tf_tokenization.TFBertTokenizer(sys.argv[1])\n"
        "print(tokenizer.tokenize(tf.constant(['IBM Istanbul İ'])).to_list())\n"
    )
    env = dict(os.environ, LANG="tr_TR.UTF-8", LC_ALL="tr_TR.UTF-8", TF_CPP_MIN_LOG_LEVEL="3")
    root = pathlib.Path(__file__).resolve().parent.parent.parent
    result = subprocess.run(
        [sys.executable, "-c", script, vocab_file],
        env=env,
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    )
    expected = tokenization.FullTokenizer(vocab_file).tokenize("IBM Istanbul İ")
    assert expected == ["ibm", "istanbul", "i"]
    vocab = tokenization.load_vocab(vocab_file)
    assert result.stdout.strip().splitlines()[-1] == str([[vocab[t] for t in expected]])

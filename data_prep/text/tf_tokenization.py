"""In-graph WordPiece tokenization and input packing on `tensorflow_text`.

`TFBertTokenizer` gives exactly the ids of `data_prep.tokenization.FullTokenizer`
(and so of the original release) with TensorFlow ops only, so that it runs in a
`tf.data` pipeline, in a `tf.function` and in an exported SavedModel (which
keeps the vocabulary file as an asset). Loading such a SavedModel needs
`import tensorflow_text` first, which registers its ops.

The Python tokenizer's character classes (control, whitespace, punctuation,
non-spacing marks) are turned into explicit RE2 character classes, so both
tokenizers classify every character from the same Unicode database. Lower-casing
(`tf.strings.lower` with UTF-8) and NFD decomposition (`normalize_utf8`) come
from ICU; they agree with Python's `str.lower` and `unicodedata` on every code
point assigned in both Unicode versions (on all code points by
`python -m benchmarks.robustness.tokenizer_code_points`; the suite checks a sample of
every kind).

`tensorflow_text`'s own `BertTokenizer` and `FastBertTokenizer` are not used:
their lower-casing applies NFKC-style compatibility mappings, which differ from the
original release's `str.lower()` plus accent stripping (e.g. "½" -> "1⁄2", "…" ->
"...", "µ" -> "μ", "´" -> a space and a stripped accent: 10 of 13k strings of MRPC
and SQuAD text), and their `max_bytes_per_word` counts bytes where the original
counts characters. `tokenize` takes their speed where it is exact: this module's
normalization, then `FastWordpieceTokenizer`'s own splitting on whitespace and
punctuation and its WordPiece in one pass (3x the speed of splitting with
`regex_split` first). That splitting classifies characters with ICU, which agrees
with Python's Unicode database on every code point that database assigns (the same
benchmark); the strings it cannot tokenize exactly, those holding a code point
that Python's database leaves unassigned or a word longer than
`max_input_chars_per_word` bytes, take the exact path (as `tokenize_words`). Strings
of printable ASCII alone skip the normalization passes (lower-casing is all they
need), which more than doubles the speed on English text.

With `preserve_unused_tokens` (the original's flag), a word between spaces that is a
`[unusedN]` entry of the vocabulary is one piece, as in the Python tokenizer: the
strings holding a "[" and a "]" are split on whitespace first and take the exact path.
"""

import tensorflow as tf
import tensorflow_text as tf_text

from common.errors import UserError
from data_prep.text import tokenization

_MAX_BYTES_PER_CHAR = 4  # UTF-8.


def _re2_class(code_points) -> str:
    return tokenization.regex_class(tokenization.code_point_ranges(code_points))


class TFBertTokenizer(tf.Module):
    """WordPiece tokenizer of BERT as TensorFlow ops.

    Attributes:
        vocab_file: a `tf.saved_model.Asset` of the vocabulary (when the file's
            line numbers are its token ids, which holds for every released
            BERT vocabulary), else None and the table is built from constants.
        vocab_table: `tf.lookup.StaticHashTable` token -> id (int64), -1 if absent.
        do_lower_case: whether text is lower-cased and stripped of accents.
        preserve_unused_tokens: whether `[unusedN]` words stay whole.
        cls_id, sep_id: ids of [CLS] and [SEP].
        vocab_size: number of distinct tokens.
    """

    def __init__(
        self,
        vocab_file: "str | tokenization.VocabFile",
        do_lower_case: bool = True,
        max_input_chars_per_word: int = tokenization.MAX_INPUT_CHARS_PER_WORD,
        name: str | None = None,
        preserve_unused_tokens: bool = False,
    ):
        """Constructs a TFBertTokenizer.

        Args:
            vocab_file: path of the vocabulary, one token per line, or the file read
                already (a `tokenization.VocabFile`: it is not read again).
            do_lower_case: lower-case and strip accents (uncased models).
            max_input_chars_per_word: longer words become [UNK].
            name: name of the module.
            preserve_unused_tokens: a word between spaces that is a `[unusedN]`
                entry of the vocabulary is one piece (`tokenization.FullTokenizer`).

        Raises:
            ValueError: the vocabulary is missing, empty, or lacks [UNK],
                [CLS] or [SEP].
        """
        super().__init__(name=name)
        read = tokenization.read_vocab_file(vocab_file)
        vocab = read.tokens
        tokenization.validate_vocab(
            vocab,
            (tokenization.UNK_TOKEN, tokenization.CLS_TOKEN, tokenization.SEP_TOKEN),
            read.path,
        )
        self.do_lower_case = do_lower_case
        self.max_input_chars_per_word = max_input_chars_per_word
        self.cls_id = vocab[tokenization.CLS_TOKEN]
        self.sep_id = vocab[tokenization.SEP_TOKEN]
        self.vocab_size = len(vocab)
        self.vocab_file, self.vocab_table = _build_vocab_table(read)
        self._unk_id = vocab[tokenization.UNK_TOKEN]
        self._wordpiece = _wordpiece_tokenizer(
            vocab, self.vocab_table, _MAX_BYTES_PER_CHAR * max_input_chars_per_word
        )
        self._end_to_end = _end_to_end_tokenizer(vocab, max_input_chars_per_word)
        self.preserve_unused_tokens = preserve_unused_tokens
        preserved = sorted(tokenization.preserved_tokens(vocab)) if preserve_unused_tokens else []
        self._preserved = None
        if preserved:
            self._preserved = tf.lookup.StaticHashTable(
                tf.lookup.KeyValueTensorInitializer(preserved, [vocab[t] for t in preserved]),
                default_value=-1,
            )
        self._build_patterns()

    def _build_patterns(self):
        classes = tokenization.char_classes()
        self._removed = _re2_class(classes.removed)
        self._to_space = _re2_class(classes.to_space)
        self._cjk = tokenization.regex_class(tokenization.CJK_RANGES)
        self._marks = _re2_class(classes.nonspacing_marks)
        punctuation = _re2_class(classes.punctuation)
        self._spaces = _re2_class(classes.split_space) + "+"
        self._split_delimiters = "%s|%s" % (punctuation, self._spaces)
        self._split_keep = punctuation
        # Strings holding a code point Python leaves unassigned (ICU may know it as
        # punctuation) take the exact path.
        unassigned = tokenization.char_classes().unassigned
        self._unassigned = "(?s).*%s.*" % _re2_class(unassigned) if unassigned else None

    def normalize(self, text: tf.Tensor) -> tf.Tensor:
        """Cleans, spaces CJK characters and, if lower-casing, strips accents.

        Args:
            text: tf.string Tensor of any shape, UTF-8 (invalid bytes dropped).

        Returns:
            tf.string Tensor of the same shape.
        """
        return self._fold_case(self._clean(text))

    def _clean(self, text: tf.Tensor) -> tf.Tensor:
        text = tf.strings.unicode_transcode(text, "UTF-8", "UTF-8", errors="ignore")
        text = tf.strings.regex_replace(text, self._removed, "")
        text = tf.strings.regex_replace(text, self._to_space, " ")
        return tf.strings.regex_replace(text, self._cjk, r" \0 ")

    def _fold_case(self, text: tf.Tensor) -> tf.Tensor:
        if not self.do_lower_case:
            return text
        # ICU lower-cases with the process's locale: under tr/az "I" would
        # become a dotless "ı". Python's `str.lower` ignores the locale;
        # other locale rules (lt) only add marks that are stripped below.
        text = tf.strings.regex_replace(text, "I", "i")
        text = tf.strings.lower(text, encoding="utf-8")
        text = tf_text.normalize_utf8(text, "NFD")
        return tf.strings.regex_replace(text, self._marks, "")

    def split_words(self, text: tf.Tensor) -> tf.RaggedTensor:
        """Words and punctuation marks of each string.

        Args:
            text: tf.string Tensor [B].

        Returns:
            tf.string RaggedTensor [B, (W)].
        """
        if self._preserved is None:
            return self._split_normalized(self.normalize(text))
        # The original checks each word between spaces before lower-casing it.
        spaced = tf_text.regex_split(self._clean(text), self._spaces)  # [B, (V)]
        kept = self._preserved.lookup(spaced.flat_values) >= 0  # [sum V]
        folded = tf.where(kept, "x", self._fold_case(spaced.flat_values))
        words = self._split_normalized(folded)  # [sum V, (W)]; a kept word is one word.
        kept_at = tf.boolean_mask(words.row_starts(), kept)[:, tf.newaxis]
        values = tf.tensor_scatter_nd_update(
            words.flat_values, kept_at, tf.boolean_mask(spaced.flat_values, kept)
        )
        return spaced.with_flat_values(words.with_flat_values(values)).merge_dims(1, 2)

    def basic_tokenize(self, text: tf.Tensor) -> tf.RaggedTensor:
        """`tokenization.BasicTokenizer(do_lower_case).tokenize` of each string:
        normalized (`normalize`), then split on whitespace and punctuation. Unlike
        `split_words`, a word longer than max_input_chars_per_word is kept whole and
        `[unusedN]` words are not preserved (the original's get_final_text reads
        answers so).

        Args:
            text: tf.string Tensor [B].

        Returns:
            tf.string RaggedTensor [B, (W)].
        """
        return tf_text.regex_split(self.normalize(text), self._split_delimiters, self._split_keep)

    def _split_normalized(self, text: tf.Tensor) -> tf.RaggedTensor:
        words = tf_text.regex_split(text, self._split_delimiters, self._split_keep)
        # The original maps a word over the limit to [UNK] whatever its pieces.
        too_long = tf.strings.length(words.flat_values, unit="UTF8_CHAR") > (
            self.max_input_chars_per_word
        )
        return words.with_flat_values(tf.where(too_long, tokenization.UNK_TOKEN, words.flat_values))

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
    def tokenize(self, text: tf.Tensor) -> tf.RaggedTensor:
        """Word-piece ids of each string.

        Args:
            text: tf.string Tensor [B].

        Returns:
            int32 RaggedTensor [B, (T)]: the word pieces of each string.
        """
        if self._end_to_end is None:
            return self._exact_ids(text)
        normalized, unassigned = self._normalize_by_row(text)
        fast = tf.cast(self._end_to_end.tokenize(normalized), tf.int32)
        # `_end_to_end` maps a word of more than max_input_chars_per_word bytes to
        # [UNK], where the original counts characters: such a row (and any row with
        # an [UNK] and that many bytes) takes the exact path, as do rows with
        # unassigned code points, and rows that may hold a word kept whole.
        exact = tf.logical_and(
            tf.reduce_any(tf.equal(fast, self._unk_id), axis=1),
            tf.strings.length(normalized) > self.max_input_chars_per_word,
        )
        exact = tf.logical_or(exact, unassigned)
        if self._preserved is not None:  # Normalizing adds and drops no bracket.
            exact = tf.logical_or(exact, tf.strings.regex_full_match(normalized, r".*\[.*\].*"))
        return tf.cond(
            tf.reduce_any(exact),
            lambda: _replace_rows(fast, exact, self._exact_ids(tf.boolean_mask(text, exact))),
            lambda: fast,
        )

    def _normalize_by_row(self, text: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """`normalize(text)` [B], and which rows hold a code point Python leaves
        unassigned (bool [B]).

        A row of printable ASCII alone (most English text) needs no cleaning, CJK
        spacing or accent stripping: lower-casing is its whole normalization, and
        ASCII lower-casing is Python's there. Only the other rows go through
        `normalize` (a transcoding, five regex replacements, ICU lower-casing and
        NFD), which more than doubles the whole tokenizer's speed on such text.
        """
        plain = tf.cast(tf.strings.regex_full_match(text, "[ -~]*"), tf.int32)
        rows = tf.range(tf.size(text))
        other_rows, plain_rows = tf.dynamic_partition(rows, plain, 2)
        other_text, plain_text = tf.dynamic_partition(text, plain, 2)
        if self.do_lower_case:
            plain_text = tf.strings.lower(plain_text)
        other_text = self.normalize(other_text)
        normalized = tf.dynamic_stitch([plain_rows, other_rows], [plain_text, other_text])
        if self._unassigned is None:
            return normalized, tf.zeros_like(rows, tf.bool)
        unassigned = tf.strings.regex_full_match(other_text, self._unassigned)
        flags = [tf.zeros_like(plain_rows, tf.bool), unassigned]
        return normalized, tf.dynamic_stitch([plain_rows, other_rows], flags)

    def _exact_ids(self, text: tf.Tensor) -> tf.RaggedTensor:
        """[B, (T)] int32 ids of strings, split with `regex_split` (`split_words`)."""
        pieces = self._wordpiece.tokenize(self.split_words(text))
        return tf.cast(pieces.merge_dims(-2, -1), tf.int32)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
    def tokenize_words(self, text: tf.Tensor) -> tf.RaggedTensor:
        """Word-piece ids of each word of each string (the TF Hub layout).

        Args:
            text: tf.string Tensor [B].

        Returns:
            int32 RaggedTensor [B, (W), (P)]: the pieces of each word.
        """
        return tf.cast(self._wordpiece.tokenize(self.split_words(text)), tf.int32)

    def bert_pack_inputs(self, segments, seq_length: int) -> dict[str, tf.Tensor]:
        """Packs segments as `[CLS] A [SEP] (B [SEP])` with `bert_pack_inputs`."""
        return bert_pack_inputs(segments, seq_length, self.cls_id, self.sep_id)


def _wordpiece_tokenizer(vocab, vocab_table, max_bytes_per_word):
    """Greedy longest-match-first WordPiece over words that are already split.

    `FastWordpieceTokenizer` (linear-time matching, about 2x the speed of the whole
    tokenizer here) gives the same pieces as the classic greedy algorithm; where it
    cannot hold the vocabulary (`_fast_wordpiece`), `WordpieceTokenizer` on the lookup
    table does.
    """
    fast = _fast_wordpiece(vocab, max_bytes_per_word, no_pretokenization=True)
    if fast is not None:
        return fast
    return tf_text.WordpieceTokenizer(
        vocab_table,
        suffix_indicator=tokenization.WORDPIECE_PREFIX,
        max_bytes_per_word=max_bytes_per_word,
        token_out_type=tf.int64,
        unknown_token=tokenization.UNK_TOKEN,
    )


def _end_to_end_tokenizer(vocab, max_bytes_per_word):
    """`FastWordpieceTokenizer` that also splits on whitespace and punctuation (None
    where it cannot hold the vocabulary, see `_fast_wordpiece`)."""
    return _fast_wordpiece(vocab, max_bytes_per_word, no_pretokenization=False)


def _fast_wordpiece(vocab, max_bytes_per_word, no_pretokenization: bool):
    """`FastWordpieceTokenizer` over `vocab`, or None where it cannot hold it: it needs
    the ids to be the positions 0..n-1 of the vocabulary list (true of every released
    vocabulary; not of one with gaps in its ids, a repeated line), and rejects some
    tokens."""
    tokens = list(vocab)
    if sorted(vocab.values()) != list(range(len(tokens))):
        return None
    try:
        return tf_text.FastWordpieceTokenizer(
            vocab=sorted(tokens, key=vocab.__getitem__),
            suffix_indicator=tokenization.WORDPIECE_PREFIX,
            max_bytes_per_word=max_bytes_per_word,
            token_out_type=tf.int64,
            unknown_token=tokenization.UNK_TOKEN,
            no_pretokenization=no_pretokenization,
        )
    except (RuntimeError, ValueError, tf.errors.OpError):
        return None  # A token the fast model cannot hold.


def _replace_rows(
    ragged: tf.RaggedTensor, mask: tf.Tensor, rows: tf.RaggedTensor
) -> tf.RaggedTensor:
    """`ragged` [B, (T)] with the rows where `mask` [B] is True replaced, in order,
    by those of `rows` [sum(mask), (T)]."""
    batch = ragged.nrows(out_type=tf.int32)
    index = tf.cast(tf.where(mask)[:, 0], tf.int32)
    order = tf.tensor_scatter_nd_update(
        tf.range(batch), index[:, tf.newaxis], batch + tf.range(tf.size(index))
    )
    return tf.gather(tf.concat([ragged, tf.cast(rows, ragged.dtype)], axis=0), order)


def _build_vocab_table(read: tokenization.VocabFile):
    """A token -> id table of the vocabulary `read`, with the file as an asset where
    it can.

    A `TextFileInitializer` gives each line its line number, which equals the
    id only if no line repeats a token or carries surrounding whitespace;
    otherwise the table is built from the ids of `load_vocab`.

    Returns:
        (tf.saved_model.Asset or None, tf.lookup.StaticHashTable).
    """
    lines, vocab = read.lines, read.tokens
    if len(lines) == len(vocab) and all(line == token for line, token in zip(lines, vocab)):
        asset = tf.saved_model.Asset(read.path)
        initializer = tf.lookup.TextFileInitializer(
            asset,
            key_dtype=tf.string,
            key_index=tf.lookup.TextFileIndex.WHOLE_LINE,
            value_dtype=tf.int64,
            value_index=tf.lookup.TextFileIndex.LINE_NUMBER,
        )
    else:
        asset = None
        initializer = tf.lookup.KeyValueTensorInitializer(
            list(vocab.keys()), list(vocab.values()), key_dtype=tf.string, value_dtype=tf.int64
        )
    return asset, tf.lookup.StaticHashTable(initializer, default_value=-1)


def graph_check(condition, message: str, *values):
    """tf.errors.InvalidArgumentError with `message` (then `values`, integers) when
    `condition` (a scalar bool) does not hold; the check op, or None when run eagerly.

    The same error as `tf.debugging.assert_equal` and its kin, from one Assert op: those
    wrap theirs in a `tf.cond` (to print float data), each one a function graph to trace
    and save; with only strings and int32 values TensorFlow needs no cond."""
    data = [message, *(tf.cast(v, tf.int32) for v in values)]
    return tf.debugging.Assert(condition, data)


def _checked_segments(segments) -> list[tf.RaggedTensor]:
    """The segments as RaggedTensors, once they are checked to be well-formed and to
    hold one row per example each (the same number of rows).

    tensorflow_text's trimmer and packing trust their inputs: segments of different
    batch sizes, or row partitions that do not fit their values (a RaggedTensor built
    with validate=False and passed to a SavedModel), make it read out of bounds and
    abort the process. The checks fail first, with tf.errors.InvalidArgumentError
    naming the segment, and every later op waits for them.
    """
    segments = [
        s if isinstance(s, tf.RaggedTensor) else tf.RaggedTensor.from_tensor(s) for s in segments
    ]
    checks = []
    for number, segment in enumerate(segments, 1):
        what = f"bert_pack_inputs: segment {number} is not a well-formed RaggedTensor"
        sizes = [tf.size(splits, out_type=tf.int64) - 1 for splits in segment.nested_row_splits]
        lengths = sizes[1:] + [tf.size(segment.flat_values, out_type=tf.int64)]
        for level, (splits, length) in enumerate(zip(segment.nested_row_splits, lengths)):
            splits = tf.cast(splits, tf.int64)
            well_formed = tf.reduce_all(
                [
                    tf.size(splits) > 0,
                    tf.reduce_all(tf.equal(splits[:1], 0)),
                    tf.reduce_all(splits[1:] >= splits[:-1]),
                    tf.reduce_all(tf.equal(splits[-1:], length)),
                ]
            )
            checks.append(
                graph_check(
                    well_formed,
                    f"{what}: the row_splits of its ragged dimension {level + 1} must start "
                    "at 0, never decrease and end at the number of its values",
                )
            )
    rows = [segment.nrows(out_type=tf.int64) for segment in segments]
    for number, count in enumerate(rows[1:], 2):
        checks.append(
            graph_check(
                tf.equal(count, rows[0]),
                f"bert_pack_inputs: segment {number} and segment 1 hold different "
                "numbers of rows; every segment must hold one row per example",
                count,
                rows[0],
            )
        )
    checks = [c for c in checks if c is not None]  # None when run eagerly
    if not checks:
        return segments
    with tf.control_dependencies(checks):
        return [
            tf.RaggedTensor.from_nested_row_splits(
                tf.identity(s.flat_values),
                [tf.identity(splits) for splits in s.nested_row_splits],
                validate=False,
            )
            for s in segments
        ]


def _merge_to_rank_2(ids: tf.RaggedTensor) -> tf.RaggedTensor:
    """[B, (T)] or [B, (W), (P)] ragged ids -> int32 RaggedTensor [B, (T)]."""
    if ids.shape.rank > 2:
        ids = ids.merge_dims(1, -1)
    return tf.cast(ids, tf.int32)


def bert_pack_inputs(segments, seq_length, cls_id: int, sep_id: int) -> dict[str, tf.Tensor]:
    """Truncates, packs and pads one or two segments into BERT's inputs.

    Layout `[CLS] A [SEP]` or `[CLS] A [SEP] B [SEP]`, then padding; segment id 0
    for [CLS], A and its [SEP], 1 for B and its [SEP], 0 for padding. Segments
    are truncated as the original release's `_truncate_seq_pair` does (tokens
    are dropped from the end of the longer segment, B on ties), which is what
    `RoundRobinTrimmer` computes (tested against `tokenization.pack_inputs`).

    Args:
        segments: list of one or two int RaggedTensors [B, (T)] (or [B, (W), (P)])
            of word-piece ids without special tokens.
        seq_length: Python int or scalar int Tensor (the saved preprocessing model
            takes it at call time), length of the packed sequences.
        cls_id, sep_id: ids of [CLS] and [SEP].

    Returns:
        dict of int32 Tensors [B, seq_length]: "input_word_ids", "input_mask"
        (1 for real tokens), "input_type_ids".

    Raises:
        tf.errors.InvalidArgumentError (when the ops run) naming the segment: segments
        with different numbers of rows, a malformed RaggedTensor, or a seq_length too
        short for the special tokens.
    """
    if len(segments) not in (1, 2):
        raise UserError("bert_pack_inputs takes 1 or 2 segments, got %d." % len(segments))
    static = tf.get_static_value(seq_length)
    if static is not None:
        seq_length = int(static)
        budget = seq_length - 1 - len(segments)
        if budget < 0:
            raise UserError(
                "seq_length=%d is too short for %d segment(s) and their "
                "special tokens." % (seq_length, len(segments))
            )
    else:
        seq_length = tf.cast(seq_length, tf.int32)
        budget = seq_length - 1 - len(segments)
        check = graph_check(
            budget >= 0,
            "bert_pack_inputs: seq_length is too short for the segments "
            "and their [CLS] / [SEP] tokens",
        )
        with tf.control_dependencies([check]):
            budget = tf.identity(budget)
    segments = [_merge_to_rank_2(s) for s in _checked_segments(segments)]
    trimmed = tf_text.RoundRobinTrimmer(max_seq_length=budget).trim(segments)
    return combine_and_pad(trimmed, seq_length, cls_id, sep_id)


def combine_and_pad(
    segments: list, seq_length: int, cls_id: int, sep_id: int
) -> dict[str, tf.Tensor]:
    """`[CLS] A [SEP] (B [SEP] ...)` of segments already cut to fit (int [N, (T)]
    RaggedTensors), padded to seq_length: the three int32 [N, seq_length] model inputs."""
    word_ids, type_ids = tf_text.combine_segments(
        segments, start_of_sequence_id=cls_id, end_of_segment_id=sep_id
    )
    word_ids, mask = tf_text.pad_model_inputs(word_ids, seq_length)
    type_ids, _ = tf_text.pad_model_inputs(type_ids, seq_length, pad_value=0)
    return {
        "input_word_ids": tf.cast(word_ids, tf.int32),
        "input_mask": tf.cast(mask, tf.int32),
        "input_type_ids": tf.cast(type_ids, tf.int32),
    }

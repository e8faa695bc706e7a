"""WordPiece tokenization, id for id with the original BERT release.

The public API matches the original `tokenization.py` (`FullTokenizer`,
`BasicTokenizer`, `WordpieceTokenizer`, `load_vocab`, `convert_to_unicode`,
`printable_text`, `whitespace_tokenize`, `convert_by_vocab`...), so code written
against it runs unchanged. The original's flag `--preserve_unused_tokens` is the
argument `preserve_unused_tokens` here: with it, a word of the text (between spaces)
that is a vocabulary entry `[unusedN]` is one token, not split on its brackets; every
other text, "[MASK]" and "[UNUSED0]" included, is tokenized as usual.

Pipeline of `FullTokenizer.tokenize`:
  1. clean: drop NUL, U+FFFD and control/format characters (categories Cc, Cf,
     except tab, newline and carriage return); every whitespace character
     (tab, newline, carriage return, category Zs) becomes a space;
  2. put spaces around CJK ideographs;
  3. if `do_lower_case`: lower-case, NFD-decompose and drop non-spacing marks
     (category Mn), which strips accents;
  4. split on whitespace and around every punctuation character (Unicode
     category P*, plus every ASCII character that is neither a letter, a digit
     nor a space);
  5. greedy longest-match-first WordPiece on each word, "##" marking pieces
     that continue a word; a word longer than 200 characters, or one that
     cannot be covered by vocabulary pieces, becomes "[UNK]".

Steps 1 to 4 run on whole strings with precomputed character classes rather
than character by character; the result is the same because none of the steps
looks across a space.
"""

import collections
import dataclasses
import functools
import hashlib
import re
import unicodedata
from typing import Iterable, Mapping, Sequence

from common.errors import UserError
from data_prep.text.char_classes import (  # Re-exported: the tokenizers' character classes.
    CJK_RANGES as CJK_RANGES,
    CharClasses as CharClasses,
    char_classes as char_classes,
    code_point_ranges as code_point_ranges,
    is_cjk as is_cjk,
    is_control as is_control,
    is_punctuation as is_punctuation,
    is_whitespace as is_whitespace,
    regex_class as regex_class,
)

UNK_TOKEN = "[UNK]"
CLS_TOKEN = "[CLS]"
SEP_TOKEN = "[SEP]"
MASK_TOKEN = "[MASK]"
PAD_TOKEN = "[PAD]"
SPECIAL_TOKENS = (PAD_TOKEN, UNK_TOKEN, CLS_TOKEN, SEP_TOKEN, MASK_TOKEN)

WORDPIECE_PREFIX = "##"
_UNUSED_TOKEN = re.compile(r"\[unused\d+\]")
MAX_INPUT_CHARS_PER_WORD = 200


class _Patterns:
    """Compiled Python regular expressions and translation tables."""

    def __init__(self, classes: CharClasses):
        def pyclass(cps, negate=False):
            return regex_class(code_point_ranges(cps), negate, syntax="python")

        self.clean_table = {cp: None for cp in classes.removed}
        self.clean_table.update({cp: " " for cp in classes.to_space})
        self.strip_marks_table = {cp: None for cp in classes.nonspacing_marks}
        self.cjk = re.compile(regex_class(CJK_RANGES, syntax="python"))
        punct = pyclass(classes.punctuation)
        # A word: one punctuation character, or a run of characters that are
        # neither punctuation nor `str.split()` separators.
        not_word = pyclass(classes.punctuation + classes.split_space, negate=True)
        self.words = re.compile(punct + "|" + not_word + "+")
        # Where splitting on `str.split()` spaces first would differ from
        # cleaning first (see `FullTokenizer.tokenize_to_ids`).
        split_space, to_space = set(classes.split_space), set(classes.to_space)
        self.split_differs = re.compile(
            pyclass((split_space & set(classes.removed)) | (to_space - split_space))
        )


@functools.lru_cache(maxsize=None)
def _patterns() -> _Patterns:
    return _Patterns(char_classes())


# ----------------------------------------------------------------------------
# Text and vocabulary helpers (the original release's module-level API).
# ----------------------------------------------------------------------------


def convert_to_unicode(text) -> str:
    """Returns `text` as `str`, decoding `bytes` as UTF-8 (bad bytes dropped)."""
    if isinstance(text, str):
        return text
    if isinstance(text, bytes):
        return text.decode("utf-8", "ignore")
    raise UserError("Unsupported string type: %s" % type(text))


def printable_text(text) -> str:
    """Returns `text` as a `str` suitable for printing or logging."""
    return convert_to_unicode(text)


def whitespace_tokenize(text: str) -> list[str]:
    """Splits `text` on whitespace (as `str.split()` does)."""
    return text.split()


def load_vocab(vocab_file: str) -> "collections.OrderedDict[str, int]":
    """Reads a vocabulary file, one token per line, into an ordered token->id map.

    As in the original release, each line is stripped of surrounding whitespace
    and a repeated token keeps the id of its first occurrence (so ids are
    consecutive and may differ from line numbers only when a token repeats).

    Args:
        vocab_file: path of a UTF-8 text file (local or any `tf.io.gfile` path).

    Returns:
        OrderedDict mapping each token to its id.

    Raises:
        ValueError: the file does not exist or holds no token.
    """
    return parse_vocab(_read_text(vocab_file), vocab_file)


def parse_vocab(text: str, vocab_file: str = "<vocab>") -> "collections.OrderedDict[str, int]":
    """`load_vocab` of a vocabulary's text, read already (bad bytes dropped)."""
    lines = text.split("\n")
    if not lines[-1]:
        lines.pop()  # The file ends with a newline.
    vocab = collections.OrderedDict()
    for line in lines:
        token = line.strip()
        if token not in vocab:
            vocab[token] = len(vocab)
    if not vocab or (len(vocab) == 1 and "" in vocab):
        raise UserError("Vocabulary file %r is empty." % vocab_file)
    return vocab


def _read_text(path: str) -> str:
    """Reads a UTF-8 text file (bad bytes dropped), local or remote (gs://...).

    Raises:
        ValueError: naming `path` if it is not an existing file.
    """
    return decode_vocab(read_vocab_bytes(path))


def decode_vocab(data: bytes) -> str:
    """A vocabulary file's bytes as `load_vocab` reads them (bad bytes dropped)."""
    return data.decode("utf-8", "ignore")


def read_vocab_bytes(path: str) -> bytes:
    """The bytes of a vocabulary file, local or remote (gs://...).

    Raises:
        ValueError: naming `path` if it is not an existing file.
    """
    if "://" in path:
        import tensorflow as tf  # Only remote file systems need it.

        if not tf.io.gfile.exists(path) or tf.io.gfile.isdir(path):
            raise UserError("Vocabulary file %r does not exist." % path)
        with tf.io.gfile.GFile(path, "rb") as f:
            data = f.read()
    else:
        try:
            with open(path, "rb") as f:
                data = f.read()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise UserError("Vocabulary file %r does not exist." % path) from None
    return data


@dataclasses.dataclass(frozen=True, eq=False)
class VocabFile:
    """A vocabulary file, read once: its bytes, and what every use of it takes from
    them (its tokens as `load_vocab` reads them, its entries, their fingerprints). The
    tokenizers (`FullTokenizer`, the in-graph `TFBertTokenizer`) take it in place of
    the path, so that a run reads its model's vocabulary once."""

    path: str
    data: bytes = dataclasses.field(repr=False)

    @classmethod
    def read(cls, path: str) -> "VocabFile":
        """The vocabulary file at `path` (local or remote), read."""
        return cls(path, read_vocab_bytes(path))

    @functools.cached_property
    def tokens(self) -> "collections.OrderedDict[str, int]":
        """token -> id, as `load_vocab` reads the file."""
        return parse_vocab(decode_vocab(self.data), self.path)

    @property
    def size(self) -> int:
        return len(self.tokens)

    @functools.cached_property
    def lines(self) -> list[str]:
        """The lines as `load_vocab` decodes them (bad bytes dropped), unstripped."""
        lines = decode_vocab(self.data).split("\n")
        if not lines[-1]:
            lines.pop()
        return lines

    @functools.cached_property
    def entries(self) -> list[str]:
        """The entries, one per line, stripped as `load_vocab` strips them."""
        from common import file_io  # It imports TensorFlow, which tokenizing needs not.

        self.tokens  # Its checks: the file holds tokens.
        lines = file_io.decode_text(self.data, self.path).split("\n")
        if lines and not lines[-1]:
            lines.pop()
        return [line.strip() for line in lines]

    @functools.cached_property
    def sha256(self) -> str:
        """SHA-256 of the entries (so line endings and a final newline do not count):
        model_info.json records the model's, to check a --vocab_file against."""
        return hashlib.sha256("\n".join(self.entries).encode("utf-8")).hexdigest()

    @functools.cached_property
    def file_sha256(self) -> str:
        """SHA-256 of the file's bytes (`data_prep.records.file_sha256` of the file):
        record metadata keys the records on it."""
        return hashlib.sha256(self.data).hexdigest()


def read_vocab_file(vocab_file: "str | VocabFile") -> VocabFile:
    """The vocabulary file `vocab_file` (a path) read, or as it is when read already."""
    return vocab_file if isinstance(vocab_file, VocabFile) else VocabFile.read(vocab_file)


def validate_vocab(
    vocab: Mapping[str, int], required: Sequence[str] = SPECIAL_TOKENS, vocab_file: str = "<vocab>"
) -> None:
    """Checks that `vocab` holds every token of `required`.

    Raises:
        ValueError: naming `vocab_file` and every missing token.
    """
    missing = [token for token in required if token not in vocab]
    if missing:
        raise UserError(
            "Vocabulary file %r lacks the special token(s) %s." % (vocab_file, ", ".join(missing))
        )


def convert_by_vocab(vocab: Mapping, items: Iterable) -> list:
    """Maps each of `items` (tokens or ids) through `vocab`."""
    return [vocab[item] for item in items]


def convert_tokens_to_ids(vocab: Mapping[str, int], tokens) -> list[int]:
    return convert_by_vocab(vocab, tokens)


def convert_ids_to_tokens(inv_vocab: Mapping[int, str], ids) -> list[str]:
    return convert_by_vocab(inv_vocab, ids)


_LOWER_MODELS = (
    "uncased_L-24_H-1024_A-16",
    "uncased_L-12_H-768_A-12",
    "multilingual_L-12_H-768_A-12",
    "chinese_L-12_H-768_A-12",
)
_CASED_MODELS = ("cased_L-12_H-768_A-12", "cased_L-24_H-1024_A-16", "multi_cased_L-12_H-768_A-12")


def validate_case_matches_checkpoint(do_lower_case: bool, init_checkpoint: str | None) -> None:
    """Raises if `do_lower_case` contradicts a released checkpoint's name.

    Only the directory names of Google's released checkpoints
    (".../uncased_L-12_H-768_A-12/bert_model.ckpt"...) are recognised; any other
    path passes.
    """
    if not init_checkpoint:
        return
    match = re.match(r"^.*?([A-Za-z0-9_-]+)/bert_model\.ckpt", init_checkpoint)
    if match is None:
        return
    model_name = match.group(1)
    if model_name in _LOWER_MODELS and not do_lower_case:
        wanted = True
    elif model_name in _CASED_MODELS and do_lower_case:
        wanted = False
    else:
        return
    raise UserError(
        "`do_lower_case=%s` does not match the checkpoint %r: `%s` is a %s "
        "model, pass `do_lower_case=%s`."
        % (do_lower_case, init_checkpoint, model_name, "lower-cased" if wanted else "cased", wanted)
    )


# ----------------------------------------------------------------------------
# Tokenizers.
# ----------------------------------------------------------------------------


def preserved_tokens(vocab: Iterable[str]) -> frozenset[str]:
    """The entries of `vocab` that `preserve_unused_tokens` keeps whole: those matching
    the original's `^\\[unused\\d+\\]$` ("[unused0]" ... "[unused993]")."""
    return frozenset(token for token in vocab if _UNUSED_TOKEN.fullmatch(token))


class BasicTokenizer:
    """Cleans text, optionally lower-cases it, splits on whitespace and punctuation."""

    def __init__(
        self, do_lower_case: bool = True, vocab: Iterable[str] = (), preserve_unused_tokens=False
    ):
        """Constructs a BasicTokenizer.

        Args:
            do_lower_case: lower-case and strip accents.
            vocab: the vocabulary (its `[unusedN]` entries, with
                `preserve_unused_tokens`).
            preserve_unused_tokens: a word (between spaces, after cleaning) that is a
                `[unusedN]` entry of `vocab` stays whole, as the original's flag.
        """
        self.do_lower_case = do_lower_case
        self.vocab = vocab
        self.preserve_unused_tokens = preserve_unused_tokens
        self._preserved = preserved_tokens(vocab) if preserve_unused_tokens else frozenset()

    def normalize(self, text) -> str:
        """Steps 1-3 of the pipeline: cleaning, CJK spacing, lower-casing."""
        return self._fold_case(self._clean(text))

    def _clean(self, text) -> str:
        patterns = _patterns()
        text = convert_to_unicode(text).translate(patterns.clean_table)
        return text if text.isascii() else patterns.cjk.sub(r" \g<0> ", text)

    def _fold_case(self, text: str) -> str:
        if not self.do_lower_case:
            return text
        text = text.lower()
        if text.isascii():  # No accents: the common case, shortened.
            return text
        return unicodedata.normalize("NFD", text).translate(_patterns().strip_marks_table)

    def tokenize(self, text) -> list[str]:
        """Splits `text` (str or UTF-8 bytes) into words and punctuation marks."""
        words = _patterns().words
        if not self._preserved:
            return words.findall(self.normalize(text))
        tokens = []
        for word in self._clean(text).split():  # No step looks across a space.
            if word in self._preserved:
                tokens.append(word)
            else:
                tokens += words.findall(self._fold_case(word))
        return tokens


class WordpieceTokenizer:
    """Greedy longest-match-first WordPiece tokenization of single words."""

    def __init__(
        self,
        vocab: Mapping[str, int],
        unk_token: str = UNK_TOKEN,
        max_input_chars_per_word: int = MAX_INPUT_CHARS_PER_WORD,
    ):
        """Constructs a WordpieceTokenizer.

        Args:
            vocab: token -> id; pieces that continue a word start with "##".
            unk_token: the token emitted for a word that cannot be tokenized.
            max_input_chars_per_word: longer words become `unk_token` outright.
        """
        self.vocab = vocab
        self.unk_token = unk_token
        self.max_input_chars_per_word = max_input_chars_per_word

    def tokenize(self, text) -> list[str]:
        """Tokenizes whitespace-separated words into word pieces.

        For example "unaffable" -> ["un", "##aff", "##able"].

        Args:
            text: one word or several separated by whitespace, already passed
                through `BasicTokenizer`.

        Returns:
            A list of word pieces.
        """
        pieces = []
        for word in whitespace_tokenize(convert_to_unicode(text)):
            pieces.extend(self.tokenize_word(word))
        return pieces

    def tokenize_word(self, word: str) -> list[str]:
        """Word pieces of one word, or `[unk_token]`."""
        if len(word) > self.max_input_chars_per_word:
            return [self.unk_token]
        pieces = []
        start = 0
        while start < len(word):
            prefix = WORDPIECE_PREFIX if start > 0 else ""
            for end in range(len(word), start, -1):
                piece = prefix + word[start:end]
                if piece in self.vocab:
                    break
            else:
                return [self.unk_token]
            pieces.append(piece)
            start = end
        return pieces


class FullTokenizer:
    """End-to-end tokenization: `BasicTokenizer`, then `WordpieceTokenizer`."""

    WORD_CACHE_SIZE = 1 << 18  # Texts between spaces whose ids `tokenize_to_ids` keeps.

    def __init__(
        self,
        vocab_file: "str | VocabFile",
        do_lower_case: bool = True,
        preserve_unused_tokens: bool = False,
    ):
        """Constructs a FullTokenizer.

        Args:
            vocab_file: path of the vocabulary, one token per line, or the file read
                already (a `VocabFile`: it is not read again).
            do_lower_case: lower-case and strip accents (uncased models).
            preserve_unused_tokens: keep a word that is a `[unusedN]` entry of the
                vocabulary whole (`BasicTokenizer`), as the original's flag.

        Raises:
            ValueError: the vocabulary is missing, empty, or lacks [UNK], [CLS] or
                [SEP].
        """
        self.vocab_read = read_vocab_file(vocab_file)  # What records are keyed on.
        self.vocab_file = self.vocab_read.path
        self.do_lower_case = do_lower_case
        self.vocab = self.vocab_read.tokens
        validate_vocab(self.vocab, (UNK_TOKEN, CLS_TOKEN, SEP_TOKEN), self.vocab_file)
        self.inv_vocab = {v: k for k, v in self.vocab.items()}
        self.preserve_unused_tokens = preserve_unused_tokens
        self.basic_tokenizer = BasicTokenizer(do_lower_case, self.vocab, preserve_unused_tokens)
        self.wordpiece_tokenizer = WordpieceTokenizer(vocab=self.vocab)
        self._word_ids = {}

    def tokenize(self, text) -> list[str]:
        """Word pieces of `text` (str or UTF-8 bytes)."""
        pieces = []
        for word in self.basic_tokenizer.tokenize(text):
            pieces.extend(self.wordpiece_tokenizer.tokenize_word(word))
        return pieces

    def tokenize_to_ids(self, text) -> list[int]:
        """`convert_tokens_to_ids(tokenize(text))`, faster on running text.

        The text is split on whitespace first, and the ids of each distinct
        piece of text between spaces are remembered (they repeat: a few
        thousand make up most of any text), up to `WORD_CACHE_SIZE` of them;
        the memory is then cleared and refilled. The ids are the same because
        no step of the tokenizer looks across a space. A text holding one of
        the few characters that `str.split` takes for a space but cleaning
        drops (U+000B, U+000C, U+001C..U+001F, U+0085) is tokenized whole.
        """
        text = convert_to_unicode(text)
        if _patterns().split_differs.search(text):
            return self.convert_tokens_to_ids(self.tokenize(text))
        cache = self._word_ids
        ids = []
        for chunk in text.split():
            chunk_ids = cache.get(chunk)
            if chunk_ids is None:
                if len(cache) >= self.WORD_CACHE_SIZE:
                    cache.clear()
                chunk_ids = cache[chunk] = self.convert_tokens_to_ids(self.tokenize(chunk))
            ids += chunk_ids
        return ids

    def convert_tokens_to_ids(self, tokens) -> list[int]:
        return convert_by_vocab(self.vocab, tokens)

    def convert_ids_to_tokens(self, ids) -> list[str]:
        return convert_by_vocab(self.inv_vocab, ids)

    def special_ids(self) -> dict[str, int]:
        """Ids of the special tokens: keys "cls", "sep", "unk", "mask", "pad".

        Raises:
            ValueError: naming the vocabulary file if [MASK] or [PAD] is missing
                (use `self.vocab` directly if you need only some of them).
        """
        validate_vocab(self.vocab, SPECIAL_TOKENS, self.vocab_file)
        return {
            "cls": self.vocab[CLS_TOKEN],
            "sep": self.vocab[SEP_TOKEN],
            "unk": self.vocab[UNK_TOKEN],
            "mask": self.vocab[MASK_TOKEN],
            "pad": self.vocab[PAD_TOKEN],
        }


# ----------------------------------------------------------------------------
# Sequence pairs.
# ----------------------------------------------------------------------------


def truncate_seq_pair(tokens_a: list, tokens_b: list, max_num_tokens: int) -> None:
    """Truncates a pair of sequences in place to at most `max_num_tokens` in all.

    Removes one token at a time from the end of the longer sequence (of
    `tokens_b` on ties), as the original release does: a short sequence keeps
    more of its tokens than proportional truncation would leave it.
    """
    while len(tokens_a) + len(tokens_b) > max_num_tokens:
        if len(tokens_a) > len(tokens_b):
            tokens_a.pop()
        else:
            tokens_b.pop()


def pack_inputs(
    tokens_a_ids: Sequence[int],
    tokens_b_ids: Sequence[int] | None,
    seq_length: int,
    cls_id: int,
    sep_id: int,
) -> dict[str, list[int]]:
    """Packs one or two id sequences as `[CLS] A [SEP] (B [SEP])`, zero-padded.

    The pure-Python reference of the in-graph `bert_pack_inputs`. Pairs are
    truncated by `truncate_seq_pair` to `seq_length - 3` ids; a single sequence
    keeps its first `seq_length - 2` ids. The inputs are not modified.

    Args:
        tokens_a_ids: ids of the first segment.
        tokens_b_ids: ids of the second segment, or None for a single segment.
        seq_length: length of every output list.
        cls_id, sep_id: ids of [CLS] and [SEP].

    Returns:
        dict of int lists of length `seq_length`: "input_word_ids", "input_mask"
        (1 for real tokens) and "input_type_ids" (0 for [CLS], A and its [SEP]; 1
        for B and its [SEP]; 0 for padding).
    """
    tokens_a = list(tokens_a_ids)
    if tokens_b_ids is None:
        if seq_length < 2:
            raise UserError("seq_length=%d is too short for [CLS] and [SEP]." % seq_length)
        tokens_b = None
        tokens_a = tokens_a[: seq_length - 2]
    else:
        if seq_length < 3:
            raise UserError("seq_length=%d is too short for [CLS] and two [SEP]." % seq_length)
        tokens_b = list(tokens_b_ids)
        truncate_seq_pair(tokens_a, tokens_b, seq_length - 3)
    word_ids = [cls_id] + tokens_a + [sep_id]
    type_ids = [0] * len(word_ids)
    if tokens_b is not None:
        word_ids += tokens_b + [sep_id]
        type_ids += [1] * (len(tokens_b) + 1)
    padding = [0] * (seq_length - len(word_ids))
    return {
        "input_word_ids": word_ids + padding,
        "input_mask": [1] * len(word_ids) + padding,
        "input_type_ids": type_ids + padding,
    }

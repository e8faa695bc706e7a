"""WordPiece vocabularies learned from word counts, in the original release's layout.

Layout (that of the released BERT vocabularies, so that code and checkpoints that
rely on the special ids keep working):

    0          [PAD]
    1..99      [unused0] .. [unused98]
    100..103   [UNK] [CLS] [SEP] [MASK]
    104..998   [unused99] .. [unused993]
    999..      single characters (sorted), then word pieces and words, the most
               frequent first, "##" marking a piece that continues a word

Words are counted as the tokenizer splits text (`tokenization.BasicTokenizer`:
cleaning, optional lower-casing and accent stripping, punctuation split off), so
that the pieces fit the words the tokenizer will look up. The counts of many
shards add up (`count_words` per shard, summed), which is how the pipeline
computes them in parallel.

The learner is tensorflow-text's (`tensorflow_text.tools.wordpiece_vocab`), the
WordPiece algorithm TensorFlow's BERT guides use: for a frequency threshold it
keeps the substrings of words that occur at least that often, counting each word
through its current greedy longest-match segmentation, for a few iterations. It
learns from word counts, not text, which is what a distributed count produces.
Its own search for the threshold stops anywhere within 5% below the requested
size; `learn_vocab` searches for the threshold itself and cuts the least frequent
learned pieces so that the vocabulary has exactly `vocab_size` entries. Every
character that is kept has a "##" form too, so any word of kept characters can be
tokenized.
"""

from __future__ import annotations

import collections
from typing import Iterable, Mapping

from absl import logging

from common.errors import UserError
from data_prep.text import tokenization

NUM_UNUSED = 994
_UNUSED_BEFORE_UNK = 99


def original_reserved_tokens() -> list[str]:
    """The 999 first entries of the released vocabularies (ids 0..998)."""
    unused = ["[unused%d]" % i for i in range(NUM_UNUSED)]
    return (
        [tokenization.PAD_TOKEN]
        + unused[:_UNUSED_BEFORE_UNK]
        + [
            tokenization.UNK_TOKEN,
            tokenization.CLS_TOKEN,
            tokenization.SEP_TOKEN,
            tokenization.MASK_TOKEN,
        ]
        + unused[_UNUSED_BEFORE_UNK:]
    )


def count_words(lines: Iterable[str], do_lower_case: bool) -> collections.Counter:
    """Counts of the words the tokenizer splits `lines` into."""
    basic_tokenizer = tokenization.BasicTokenizer(do_lower_case=do_lower_case)
    counts = collections.Counter()
    for line in lines:
        counts.update(basic_tokenizer.tokenize(line))
    return counts


def learn_vocab(
    word_counts: Mapping[str, int] | Iterable[tuple[str, int]],
    vocab_size: int,
    max_input_words: int = 5_000_000,
    max_word_length: int = 50,
    max_unique_chars: int = 1000,
    num_iterations: int = 4,
) -> list[str]:
    """A WordPiece vocabulary of exactly `vocab_size` entries, in the original layout.

    Args:
        word_counts: word -> count (or pairs).
        vocab_size: entries, the 999 reserved ones included.
        max_input_words: only the most frequent words are learned from (of
            equal counts, the later words in code point order).
        max_word_length: longer words are left out of learning.
        max_unique_chars: the alphabet: the most frequent characters; words
            with others are left out of learning (and become [UNK]).
        num_iterations: segmentation passes of the learner per threshold.

    Returns:
        The tokens, in id order.

    Raises:
        ValueError: `vocab_size` cannot hold the reserved tokens and the
            alphabet, or there is no word.
    """
    from tensorflow_text.tools.wordpiece_vocab import wordpiece_tokenizer_learner_lib as learner

    reserved = original_reserved_tokens()
    word_counts = list(word_counts.items() if isinstance(word_counts, Mapping) else word_counts)
    if not word_counts:
        raise UserError("No word to learn a vocabulary from.")
    # The most frequent words, ties to the later word: what a distributed
    # `Top.Of(max_input_words, key=(count, word))` keeps.
    word_counts = sorted(word_counts, key=lambda item: (item[1], item[0]), reverse=True)[
        :max_input_words
    ]
    params = learner.Params(
        upper_thresh=None,
        lower_thresh=1,
        num_iterations=num_iterations,
        max_input_tokens=max_input_words,
        max_token_length=max_word_length,
        max_unique_chars=max_unique_chars,
        vocab_size=vocab_size,
        slack_ratio=0.0,
        include_joiner_token=True,
        joiner=tokenization.WORDPIECE_PREFIX,
        reserved_tokens=reserved,
    )
    words = learner.get_input_words(word_counts, reserved, max_word_length)
    allowed_chars = learner.get_allowed_chars(words, max_unique_chars)
    words = learner.filter_input_words(words, allowed_chars, -1)
    minimum = len(reserved) + 2 * len(allowed_chars)
    if vocab_size < minimum:
        raise UserError(
            "vocab_size=%d cannot hold the %d reserved tokens and the %d "
            "characters of the text with their ## forms: at least %d."
            % (vocab_size, len(reserved), len(allowed_chars), minimum)
        )
    return _learn_exact_size(learner, words, params)


def _learn_exact_size(learner, words, params) -> list[str]:
    """The smallest threshold whose vocabulary fits; that of the threshold below
    it (larger) cut down to size, or [unusedN] entries added when even the
    threshold 1 gives fewer tokens."""
    size = params.vocab_size
    cache = {}

    def vocab_at(threshold):
        if threshold not in cache:
            cache[threshold] = learner.learn_with_thresh(words, threshold, params)
            logging.info("WordPiece threshold %d: %d tokens.", threshold, len(cache[threshold]))
        return cache[threshold]

    low, high = 1, max(count for _, count in words) + 1
    while low < high:  # Smallest threshold whose vocabulary fits.
        middle = (low + high) // 2
        if len(vocab_at(middle)) <= size:
            high = middle
        else:
            low = middle + 1
    vocab = vocab_at(low)
    if len(vocab) < size and low > 1:
        vocab = _cut(vocab_at(low - 1), size, len(params.reserved_tokens))
    if len(vocab) < size:
        logging.warning(
            "The text holds only %d WordPiece tokens; %d [unused] "
            "entries fill the vocabulary to %d.",
            len(vocab),
            size - len(vocab),
            size,
        )
        vocab = vocab + [
            "[unused%d]" % i for i in range(NUM_UNUSED, NUM_UNUSED + size - len(vocab))
        ]
    return vocab


def _cut(vocab: list[str], size: int, num_reserved: int) -> list[str]:
    """`vocab` without its last (least frequent) pieces longer than a character."""
    excess = len(vocab) - size
    keep = [True] * len(vocab)
    for index in range(len(vocab) - 1, num_reserved - 1, -1):
        if excess == 0:
            break
        token = vocab[index]
        if (
            len(
                token[len(tokenization.WORDPIECE_PREFIX) :]
                if token.startswith(tokenization.WORDPIECE_PREFIX)
                else token
            )
            > 1
        ):
            keep[index] = False
            excess -= 1
    return [token for token, kept in zip(vocab, keep) if kept]


def write_vocab(path: str, vocab: list[str]) -> None:
    """One token a line, written atomically."""
    from common import file_io

    file_io.write_text(path, "".join(token + "\n" for token in vocab))

"""Texts of Unicode code points for comparing tokenizers: every code point (the
on-demand sweep, `python -m benchmarks.robustness.tokenizer_code_points`) or a
deterministic sample that the suite can afford (`sampled_code_points`).

Each code point goes into one text in a few contexts: inside a word, doubled as a
word of its own, and at the end of a capitalized word.
"""

from __future__ import annotations

import functools
import unicodedata
from typing import Iterable, Iterator

from data_prep.text import tokenization

SURROGATES = range(0xD800, 0xE000)
STRIDE = 997  # A prime: the sample also lands inside every long run, off its ends.


def text_of(cp: int) -> str:
    char = chr(cp)
    return "a%sb %s%s Ab%s" % (char, char, char, char)


def every_code_point() -> Iterator[int]:
    """All 1,112,064 code points but the surrogates."""
    return (cp for cp in range(0x110000) if cp not in SURROGATES)


def _kind(char: str) -> tuple:
    """What the tokenizers decide a character by: its general category (control,
    whitespace, punctuation, marks, letters), whether lower-casing or NFD changes it.
    Unassigned (Cn) and private-use (Co) characters are one kind each."""
    category = unicodedata.category(char)
    if category in ("Cn", "Co"):
        return (category,)
    return (category, char.lower() != char, unicodedata.normalize("NFD", char) != char)


@functools.lru_cache(maxsize=1)
def sampled_code_points() -> tuple[int, ...]:
    """About 7,500 code points from all planes, the same every run: both ends of every
    run of consecutive code points of one kind (`_kind`), both sides of every range of
    the tokenizer's character classes and of its CJK ranges, all of ASCII, and every
    STRIDE-th code point."""
    picked = set(range(0x80)) | set(range(0, 0x110000, STRIDE)) | {0x10FFFF}
    previous, previous_cp = None, None
    for cp in every_code_point():
        kind = _kind(chr(cp))
        if kind != previous:
            picked.update((previous_cp, cp))
        previous, previous_cp = kind, cp
    classes = tokenization.char_classes()
    ranges = list(tokenization.CJK_RANGES)
    for name in ("removed", "to_space", "punctuation", "nonspacing_marks", "split_space"):
        ranges += tokenization.code_point_ranges(getattr(classes, name))
    for first, last in ranges:
        picked.update((first - 1, first, last, last + 1))
    return tuple(
        sorted(cp for cp in picked - {None} if 0 <= cp < 0x110000 and cp not in SURROGATES)
    )


def texts(code_points: Iterable[int]) -> list[str]:
    return [text_of(cp) for cp in code_points]

"""Sentence splitting of raw text into the lines the pre-training data reads.

The splitter is `nupunkt` (MIT licence, no dependencies): the Punkt algorithm
(Kiss & Strunk, 2006) with a model that ships inside the package, so nothing is
downloaded at run time. On the bundled real text it made 36.7 boundary errors per
1,000 sentences at about 3 MB/s per core; `benchmarks/speed/bench_sentence_splitting.py`
compares it with sentencex, blingfire and pysbd (figures in the README).

Each sentence is cleaned as the original tokenizer cleans text (control and
format characters dropped, every whitespace character a space), with runs of
spaces collapsed and the ends stripped, so that it is one non-blank line of the
sentences format and tokenizes exactly as the raw text would.
"""

from __future__ import annotations

import functools
import re

from data_prep.text import tokenization

_SPACES = re.compile(r"\s+")


@functools.lru_cache(maxsize=None)
def _splitter():
    import nupunkt  # Loaded on first use: the model is read from the package.

    return nupunkt.load("default")


@functools.lru_cache(maxsize=None)
def _removed() -> re.Pattern:
    """Characters the tokenizer's cleaning drops (control and format ones)."""
    ranges = tokenization.code_point_ranges(tokenization.char_classes().removed)
    return re.compile(tokenization.regex_class(ranges, syntax="python"))


def clean_text(text: str) -> str:
    """Control characters dropped, whitespace runs one space, ends stripped.

    The tokenizer's own whitespace (Unicode Zs, tab, newline, carriage return)
    is a subset of `str.isspace`, which is what is collapsed here.
    """
    return _SPACES.sub(" ", _removed().sub("", text)).strip()


def split_sentences(paragraph: str) -> list[str]:
    """The cleaned, non-empty sentences of one paragraph of running text."""
    text = clean_text(paragraph)
    if not text:
        return []
    sentences = (clean_text(sentence) for sentence in _splitter().tokenize(text))
    return [sentence for sentence in sentences if sentence]

"""The character classes of BERT's tokenization, as the original release defines them.

Whitespace, control characters, punctuation (Unicode category P*, plus every ASCII
character that is neither a letter, a digit nor a space) and CJK ideographs, each as a
test of one character and as explicit code point sets (`CharClasses`) that the Python
tokenizer (`tokenization`), the in-graph one (`tf_tokenization`) and the sentence
splitter turn into regular expressions, so all of them classify every character from
the same Unicode database.

Scanning every code point takes about 0.3 s, which every process that
tokenizes would pay at its start; the classes of the Unicode versions of the Python
versions this project supports are bundled (`char_classes.json`, written by
`python -m data_prep.text.char_classes` under each Python, checked against the scan by
the tests), and any other Unicode version is scanned.
"""

import functools
import json
import os
import sys
import unicodedata
from typing import Iterable

from common.errors import UserError

BUNDLED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "char_classes.json")
CLASS_NAMES = (
    "removed",
    "to_space",
    "punctuation",
    "nonspacing_marks",
    "split_space",
    "unassigned",
)

# CJK Unified Ideographs and their extensions and compatibility blocks, as the
# original release defines "Chinese characters" (not Hangul, Hiragana, ...).
CJK_RANGES = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B820, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)

# Non-alphanumeric printable ASCII counts as punctuation even where Unicode
# says otherwise ("$", "^", "`", "+", ...).
_ASCII_PUNCTUATION_RANGES = ((33, 47), (58, 64), (91, 96), (123, 126))


# ----------------------------------------------------------------------------
# Character classes.
# ----------------------------------------------------------------------------


def is_whitespace(char: str) -> bool:
    """Whether `char` becomes a space when cleaning text."""
    return char in " \t\n\r" or unicodedata.category(char) == "Zs"


def is_control(char: str) -> bool:
    """Whether `char` is a control/format character dropped when cleaning text."""
    if char in "\t\n\r":
        return False
    return unicodedata.category(char) in ("Cc", "Cf")


def is_punctuation(char: str) -> bool:
    """Whether `char` is split off as a token of its own."""
    cp = ord(char)
    if any(lo <= cp <= hi for lo, hi in _ASCII_PUNCTUATION_RANGES):
        return True
    return unicodedata.category(char).startswith("P")


def is_cjk(char: str) -> bool:
    """Whether `char` is a CJK ideograph, surrounded by spaces before splitting."""
    cp = ord(char)
    return any(lo <= cp <= hi for lo, hi in CJK_RANGES)


class CharClasses:
    """Explicit code point sets of the character classes used by the tokenizer.

    Built once by scanning every code point with Python's `unicodedata`; the
    in-graph tokenizer turns the same sets into regular expressions so that both
    tokenizers classify every character identically.

    Attributes:
        removed: code points dropped when cleaning (NUL, U+FFFD, Cc, Cf but not
            tab, newline, carriage return).
        to_space: code points replaced by a space when cleaning.
        punctuation: code points split off as single-character tokens.
        nonspacing_marks: code points of category Mn (dropped after NFD when
            lower-casing).
        split_space: code points that `str.split()` treats as separators.
        unassigned: code points of category Cn (no character in this Python's
            Unicode version; a newer one, e.g. ICU's, may make them punctuation).
    """

    def __init__(self):
        self.removed = []
        self.to_space = []
        self.punctuation = []
        self.nonspacing_marks = []
        self.split_space = []
        self.unassigned = []
        # One `category` call per code point; the result equals that of
        # `is_control`, `is_whitespace` and `is_punctuation`.
        ascii_punctuation = {cp for lo, hi in _ASCII_PUNCTUATION_RANGES for cp in range(lo, hi + 1)}
        category = unicodedata.category
        for cp in range(sys.maxunicode + 1):
            char = chr(cp)
            cat = category(char)
            if cp in (0, 0xFFFD) or (cat in ("Cc", "Cf") and char not in "\t\n\r"):
                self.removed.append(cp)
            elif cat == "Zs" or char in "\t\n\r":
                self.to_space.append(cp)
            if cat[0] == "P" or cp in ascii_punctuation:
                self.punctuation.append(cp)
            elif cat == "Mn":
                self.nonspacing_marks.append(cp)
            elif cat == "Cn":
                self.unassigned.append(cp)
            if char.isspace():
                self.split_space.append(cp)

    @classmethod
    def from_ranges(cls, ranges: dict) -> "CharClasses":
        """The classes of {class name: inclusive [first, last] ranges} (`as_ranges`)."""
        classes = cls.__new__(cls)
        for name in CLASS_NAMES:
            code_points = []
            for first, last in ranges[name]:
                code_points.extend(range(first, last + 1))
            setattr(classes, name, code_points)
        return classes

    def as_ranges(self) -> dict:
        return {name: code_point_ranges(getattr(self, name)) for name in CLASS_NAMES}


def _bundled(version: str) -> CharClasses | None:
    """The bundled classes of Unicode `version`, or None when none are bundled (or the
    file is not whole or not of this shape: the scan gives the same classes)."""
    try:
        with open(BUNDLED, encoding="utf-8") as f:
            ranges = json.load(f).get(version)
        return None if ranges is None else CharClasses.from_ranges(ranges)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


@functools.lru_cache(maxsize=None)
def char_classes() -> CharClasses:
    """The `CharClasses` of this Python's Unicode database (computed once): the bundled
    ones of its Unicode version, else a scan."""
    return _bundled(unicodedata.unidata_version) or CharClasses()


def write_bundled() -> str:
    """Adds this Python's Unicode version, scanned, to the bundled classes (the other
    versions kept); returns the version."""
    table = {}
    if os.path.exists(BUNDLED):
        with open(BUNDLED, encoding="utf-8") as f:
            try:
                table = json.load(f)
            except ValueError as e:
                raise UserError(f"{BUNDLED} is not whole ({e}): restore it from git.") from e
    table[unicodedata.unidata_version] = CharClasses().as_ranges()
    lines = ",\n".join(
        f"  {json.dumps(version)}: {json.dumps(table[version], separators=(',', ':'))}"
        for version in sorted(table, key=lambda v: tuple(map(int, v.split("."))))
    )
    # Written under each supported Python, where TensorFlow (and so `common.file_io`)
    # need not be installed: a temporary name, then a rename.
    temporary = f"{BUNDLED}.tmp-{os.getpid()}"
    with open(temporary, "w", encoding="utf-8") as f:
        f.write("{\n" + lines + "\n}\n")
    os.replace(temporary, BUNDLED)
    return unicodedata.unidata_version


def code_point_ranges(code_points: Iterable[int]) -> list[tuple[int, int]]:
    """Merges sorted code points into inclusive `(first, last)` ranges."""
    ranges = []
    for cp in sorted(code_points):
        if ranges and ranges[-1][1] == cp - 1:
            ranges[-1] = (ranges[-1][0], cp)
        else:
            ranges.append((cp, cp))
    return ranges


def regex_class(
    ranges: Iterable[tuple[int, int]], negate: bool = False, syntax: str = "re2"
) -> str:
    """A regular-expression character class `[...]` matching `ranges`.

    Args:
        ranges: inclusive `(first, last)` code point ranges.
        negate: match every code point outside `ranges` instead.
        syntax: "re2" (TensorFlow's regex ops) or "python" (`re`); they differ
            only in how a code point is escaped.
    """
    if syntax == "re2":
        escape = "\\x{%x}".__mod__
    elif syntax == "python":
        escape = "\\U%08x".__mod__
    else:
        raise UserError("Unknown regex syntax %r." % syntax)
    parts = []
    for lo, hi in ranges:
        parts.append(escape(lo) if lo == hi else escape(lo) + "-" + escape(hi))
    return "[" + ("^" if negate else "") + "".join(parts) + "]"


if __name__ == "__main__":
    try:
        print(f"Wrote the classes of Unicode {write_bundled()} to {BUNDLED}")
    except UserError as error:
        sys.exit(f"error: {error}")

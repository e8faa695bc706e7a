"""Tag schemes of chunk annotations (IOB1, IOB2, IOBES) and the chunks in a tag sequence.

Chunks are read from tags by the rules of the CoNLL `conlleval` script (version
2004-01-26), which never builds a list of entities: it decides, between each pair
of neighbouring tags, whether a chunk ends and whether one starts. `get_chunks`
applies the same rules, so it reads any tag sequence, valid or not, as the scorer
(`evaluation.conlleval`) counts it:

  * a chunk may start with I- (after O, after another type, or at a sentence
    start): that is how IOB1, CoNLL-2003's own scheme, marks chunks;
  * B- always starts a new chunk after B- or I-, so "I-PER I-PER B-PER" holds
    two PER chunks;
  * a change of type ends a chunk ("B-PER I-LOC" holds two chunks), except
    after O or ".";
  * "[" and "]" (the open/close bracket representations) are one-token
    chunks, and "." never starts a chunk;
  * a tag is split at its first "-" (types may contain "-"); a tag without
    "-" has the empty type, and, as in Perl, so does the type "0".

E- and S- tags. The Perl script knows E- only from the IOE schemes (E- ends a
chunk) and has no rule for S-; on IOBES tags it therefore merges neighbouring
chunks of the same type ("S-PER S-PER" and "B-PER E-PER B-PER E-PER" are one
chunk each for it). With `iobes=True` (the default) two rules are added: S- is a
single-token chunk, and B- after E- starts a new chunk. They change nothing on
sequences without S- tags and without an E- followed by a B- (IOB1, IOB2, IOE1,
IOE2), and make IOBES count correctly, as `seqeval` and the widely used Python
ports of conlleval do. `iobes=False` gives the script's rules verbatim.

Schemes. "iob1" (CoNLL-2003's own: I- may start a chunk, B- only starts a chunk
right after one of the same type), "iob2" (BIO: B- starts every chunk) and "iobes"
(B-, I-, E- ending a chunk, S- a one-token chunk). `tag_error` checks a tag against
a scheme, `detect_tag_scheme` guesses the scheme of tag sequences, `to_iob2` and
`from_iob2` rewrite the chunks in another scheme; both read any tags, also a model's
predictions that break their scheme's rules, as conlleval reads them.
"""

from __future__ import annotations

import collections
from typing import Sequence

from common.errors import UserError

OUTSIDE = "O"
TAG_SCHEMES = ("iob1", "iob2", "iobes")
_SCHEME_PREFIXES = {"iob1": ("B", "I"), "iob2": ("B", "I"), "iobes": ("B", "I", "E", "S")}

# (previous prefix, current prefix) pairs at which the script ends / starts a chunk.
_END_PAIRS = frozenset(
    {("B", "B"), ("B", "O"), ("I", "B"), ("I", "O"), ("E", "E"), ("E", "I"), ("E", "O")}
)
_START_PAIRS = frozenset(
    {("B", "B"), ("I", "B"), ("O", "B"), ("O", "I"), ("E", "E"), ("E", "I"), ("O", "E")}
)
# Pairs added for IOBES (besides "S- always ends and starts a chunk").
_IOBES_END_PAIRS = frozenset({("B", "S"), ("I", "S"), ("E", "S"), ("E", "B")})
_IOBES_START_PAIRS = frozenset({("E", "B"), ("S", "B"), ("S", "I"), ("S", "E")})
# Prefixes after which a change of type does not end a chunk.
_NO_CHUNK_PREFIXES = ("O", ".")
# Open/close bracket representations: every such tag is a one-token chunk.
_BRACKETS = ("[", "]")


# ----------------------------------------------------------------------------
# Chunks.
# ----------------------------------------------------------------------------


def split_tag(tag: str) -> tuple[str, str]:
    """Splits a tag into (prefix, type) at its first "-": "B-PER" -> ("B", "PER").

    "O" -> ("O", ""); "B-Hyper-Param" -> ("B", "Hyper-Param"). Perl's truth
    test turns the type "0" into "", and so does this function.
    """
    prefix, separator, chunk_type = tag.partition("-")
    if not separator or chunk_type == "0":
        return prefix, ""
    return prefix, chunk_type


def end_of_chunk(
    prev_prefix: str, prefix: str, prev_type: str, chunk_type: str, iobes: bool = True
) -> bool:
    """Whether a chunk ends between the previous and the current token."""
    if (prev_prefix, prefix) in _END_PAIRS or prev_prefix in _BRACKETS:
        return True
    if prev_prefix not in _NO_CHUNK_PREFIXES and prev_type != chunk_type:
        return True
    if iobes:
        return prev_prefix == "S" or (prev_prefix, prefix) in _IOBES_END_PAIRS
    return False


def start_of_chunk(
    prev_prefix: str, prefix: str, prev_type: str, chunk_type: str, iobes: bool = True
) -> bool:
    """Whether a chunk starts at the current token."""
    if (prev_prefix, prefix) in _START_PAIRS or prefix in _BRACKETS:
        return True
    if prefix not in _NO_CHUNK_PREFIXES and prev_type != chunk_type:
        return True
    if iobes:
        return prefix == "S" or (prev_prefix, prefix) in _IOBES_START_PAIRS
    return False


def get_chunks(tags: Sequence[str], iobes: bool = True) -> list[tuple[str, int, int]]:
    """The chunks of one sentence's tags, as (type, start, end) with `end` exclusive.

    Uses the same start/end rules as the scorer, so it reads IOB1, IOB2 and IOBES
    tags (prefixes B, I, E, S, O), valid or not, the way conlleval does.
    """
    chunks = []
    prev_prefix, prev_type = OUTSIDE, ""
    chunk_start = None
    for index, tag in enumerate(list(tags) + [OUTSIDE]):
        prefix, chunk_type = split_tag(tag)
        if chunk_start is not None and end_of_chunk(
            prev_prefix, prefix, prev_type, chunk_type, iobes
        ):
            chunks.append((prev_type, chunk_start, index))
            chunk_start = None
        if index < len(tags) and start_of_chunk(prev_prefix, prefix, prev_type, chunk_type, iobes):
            chunk_start = index
        prev_prefix, prev_type = prefix, chunk_type
    return chunks


# ----------------------------------------------------------------------------
# Schemes.
# ----------------------------------------------------------------------------


def check_scheme(tag_scheme: str) -> None:
    if tag_scheme not in TAG_SCHEMES:
        raise UserError(f"tag_scheme must be one of {TAG_SCHEMES}, got {tag_scheme!r}")


def scheme_prefixes(tag_scheme: str) -> tuple[str, ...]:
    """The chunk prefixes of a scheme: ("B", "I"), or ("B", "I", "E", "S") for IOBES."""
    check_scheme(tag_scheme)
    return _SCHEME_PREFIXES[tag_scheme]


def tag_error(tag: str, tag_scheme: str) -> str | None:
    """Why `tag` is not a tag of `tag_scheme`, or None if it is.

    A tag is "O" or <prefix>-<type> with a non-empty type (which may contain "-")
    and a prefix of the scheme: B or I for IOB1/IOB2, B, I, E or S for IOBES. The
    type "0" is refused too: conlleval reads it as no type.
    """
    if tag == OUTSIDE:
        return None
    prefixes = _SCHEME_PREFIXES[tag_scheme]
    prefix, separator, chunk_type = tag.partition("-")
    if separator and chunk_type not in ("", "0") and prefix in prefixes:
        return None
    allowed = ", ".join(f"{p}-<type>" for p in prefixes)
    return f"tag {tag!r} is not an {tag_scheme} tag (expected O, {allowed})"


def detect_tag_scheme(tag_sequences: Sequence[Sequence[str]]) -> str:
    """Guesses the scheme of tag sequences: "iobes", "iob1" or "iob2".

    "iobes" if any tag has an E- or S- prefix; otherwise "iob1" if more chunks
    start with I- than with B- (in IOB1, B- starts only the rare chunk that
    follows one of the same type; counting, rather than looking for one I- start,
    keeps a stray annotation error in an IOB2 file from deciding); otherwise
    "iob2" (also for sequences without entities).
    """
    prefixes = {split_tag(tag)[0] for tags in tag_sequences for tag in tags}
    if prefixes & {"E", "S"}:
        return "iobes"
    starts = collections.Counter(
        split_tag(tags[start])[0] for tags in tag_sequences for _, start, _ in get_chunks(tags)
    )
    return "iob1" if starts["I"] > starts["B"] else "iob2"


def to_iob2(tags: Sequence[str]) -> list[str]:
    """Rewrites IOB1, IOB2 or IOBES tags as IOB2, keeping the chunks conlleval reads.

    >>> to_iob2(["I-PER", "I-PER", "B-PER", "O", "I-LOC"])
    ['B-PER', 'I-PER', 'B-PER', 'O', 'B-LOC']
    >>> to_iob2(["S-PER", "B-LOC", "E-LOC"])
    ['B-PER', 'B-LOC', 'I-LOC']
    """
    iob2 = [OUTSIDE] * len(tags)
    for chunk_type, start, end in get_chunks(tags):
        iob2[start] = f"B-{chunk_type}"
        iob2[start + 1 : end] = [f"I-{chunk_type}"] * (end - start - 1)
    return iob2


def from_iob2(tags: Sequence[str], tag_scheme: str) -> list[str]:
    """Rewrites the chunks of IOB2 tags in `tag_scheme` ("iob1", "iob2" or "iobes").

    The chunks are read by `get_chunks`, so the tags may also be IOB1 or IOBES, or a
    model's predictions that break their scheme's rules ("O I-PER" in IOB2): the
    output holds the chunks conlleval reads in them, in valid tags. IOB1 output is
    canonical: I- throughout, B- only where a chunk directly follows one of the same
    type.

    >>> from_iob2(["B-PER", "I-PER", "B-PER", "O", "B-LOC"], "iob1")
    ['I-PER', 'I-PER', 'B-PER', 'O', 'I-LOC']
    >>> from_iob2(["B-PER", "I-PER", "O", "I-LOC"], "iob2")
    ['B-PER', 'I-PER', 'O', 'B-LOC']
    """
    check_scheme(tag_scheme)
    out = [OUTSIDE] * len(tags)
    previous_end, previous_type = None, None
    for chunk_type, start, end in get_chunks(tags):
        inside = [f"I-{chunk_type}"] * (end - start)
        if tag_scheme == "iob2":
            inside[0] = f"B-{chunk_type}"
        elif tag_scheme == "iob1":
            if previous_end == start and previous_type == chunk_type:
                inside[0] = f"B-{chunk_type}"
        elif end - start == 1:
            inside[0] = f"S-{chunk_type}"
        else:
            inside[0], inside[-1] = f"B-{chunk_type}", f"E-{chunk_type}"
        out[start:end] = inside
        previous_end, previous_type = end, chunk_type
    return out

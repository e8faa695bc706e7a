"""CoNLL named-entity files: sentences in, predictions out.

Files. One token per line, fields separated by spaces or tabs, the tag in the
last field: `token TAG`, or CoNLL-2003's `token POS chunk TAG`. A blank line ends
a sentence. UTF-8 (a leading BOM is ignored), LF or CRLF line ends.

Documents. A `-DOCSTART-` line (any fields after it) separates documents, wherever
the file puts it: before each document (CoNLL-2003) or after each (WikiGold as
published); the sentences between two markers are one document. Each sentence keeps
its document's index (`Sentence.document`, 0-based, in file order) and the markers
next to it (`docstart_before`, `docstart_after`), so that `write_predictions` writes
them back where they stood. A file without markers is one document;
`has_documents` tells the two apart.

Tag schemes. "iob1", "iob2" or "iobes" (`data_prep.ner.tag_schemes`);
`detect_file_tag_scheme` guesses a file's. Sentences hold IOB2 tags whatever the
file's scheme: the chunks are those that conlleval reads in the tags
(`tag_schemes.get_chunks`), so an I- that starts a chunk in an "iob2" file becomes
B-. A model may learn its labels in another scheme (`ner_features`).

Labels. `label_list`: "O", then the labels that occur in the training sentences
once their tags are written in the scheme the model learns in, types sorted by code
point and each type's prefixes in the scheme's order (B-, I- for IOB1 and IOB2; B-, I-,
E-, S- for IOBES), as Hugging Face's token-classification examples take the training
file's tags. A label that never occurs in training is not one the model can learn, and
a softmax over classes it never sees learns the others more slowly (IOB1's B- is rare:
listing every prefix cost sciner in IOB1 a third more dev loss after two epochs). An
evaluation tag of a known type with a prefix training never had is left out of the
loss (`ner_features`); a type training never had is an error.

Predictions are written (atomically) as `token gold guess` lines that conlleval
reads (`write_predictions`), in the scheme of the file they are made for, whatever
scheme the model predicts in. Word pieces, windows, TFRecords and tf.data are in
`ner_features`.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Sequence


from common.errors import UserError
from common import file_io
from data_prep.ner import tag_schemes

DOCSTART = "-DOCSTART-"
_FIELD_SEPARATOR = re.compile(r"[ \t]+")


# ----------------------------------------------------------------------------
# Reading CoNLL files.
# ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Sentence:
    """One sentence of a CoNLL file.

    Attributes:
        words: the tokens (first field of each line).
        tags: one IOB2 tag per word.
        line_numbers: the 1-based line of each word in `path`.
        path: the file it was read from, for error messages.
        document: index of its document in the file (0 in a file without markers).
        docstart_before: -DOCSTART- lines between the previous sentence (or the
            file's start) and this one.
        docstart_after: -DOCSTART- lines after the file's last sentence (0 for any
            other sentence).
    """

    words: tuple[str, ...]
    tags: tuple[str, ...]
    line_numbers: tuple[int, ...]
    path: str = "<string>"
    document: int = 0
    docstart_before: int = 0
    docstart_after: int = 0


def has_documents(sentences: Sequence[Sentence]) -> bool:
    """Whether the sentences' file marks its documents (holds a -DOCSTART- line)."""
    return any(s.docstart_before or s.docstart_after for s in sentences)


def read_conll(
    path: str, tag_scheme: str = "iob2", missing_tag: str | None = None
) -> list[Sentence]:
    """Reads a CoNLL file into sentences with IOB2 tags.

    Args:
        path: the file (UTF-8).
        tag_scheme: "iob1", "iob2" or "iobes" (`detect_file_tag_scheme` guesses it).
        missing_tag: tag given to a line that has a token but no tag; None (the
            default) makes such a line an error.

    Returns:
        The sentences, in file order.

    Raises:
        ValueError: naming the file and the line, for a line without a tag, a tag
            outside the scheme, text that is not UTF-8, or a file without sentences.
    """
    return parse_conll(
        file_io.read_text(path), path=str(path), tag_scheme=tag_scheme, missing_tag=missing_tag
    )


def detect_file_tag_scheme(path: str, missing_tag: str | None = None) -> str:
    """Guesses the tag scheme of a CoNLL file with `detect_tag_scheme`.

    Raises:
        ValueError: as `read_conll`, for a tag that is in none of the schemes.
    """
    groups = _split_sentences(file_io.read_text(path), str(path), "iobes", missing_tag)
    return tag_schemes.detect_tag_scheme([[tag for _, tag, _ in g.lines] for g in groups])


@dataclasses.dataclass
class _Group:
    """The (word, tag, line number) of one sentence's lines, and its place among the
    documents."""

    lines: list
    document: int
    docstart_before: int
    docstart_after: int = 0


def _split_sentences(text: str, path: str, tag_scheme: str, missing_tag: str | None) -> list:
    """Groups the (word, tag, line number) of each line into sentences (`_Group`s).

    Tags are checked against `tag_scheme` but not converted.
    """
    groups, current = [], []
    # Markers since the last sentence; the document of the next sentence.
    markers, document = 0, 0
    line_number = 0
    for line_number, line in enumerate(text.split("\n"), start=1):
        line = line.strip(" \t\r")
        fields = _FIELD_SEPARATOR.split(line) if line else []
        if not fields or fields[0] == DOCSTART:
            if current:
                groups.append(_Group(current, document, markers))
                current, markers = [], 0
            if fields:
                # A marker after a document's sentences ends that document.
                if groups and markers == 0:
                    document += 1
                markers += 1
            continue
        if len(fields) == 1:
            if missing_tag is None:
                raise UserError(
                    f"{path}:{line_number}: missing tag: expected "
                    f"'token ... TAG', got only {line!r}"
                )
            fields.append(missing_tag)
        error = tag_schemes.tag_error(fields[-1], tag_scheme)
        if error:
            raise UserError(f"{path}:{line_number}: {error}")
        current.append((fields[0], fields[-1], line_number))
    if current:
        groups.append(_Group(current, document, markers))
        markers = 0
    if not groups:
        raise UserError(
            f"{path}:{line_number}: no sentence in the file (it is empty "
            "or holds only blank and -DOCSTART- lines)"
        )
    groups[-1].docstart_after = markers
    return groups


def parse_conll(
    text: str, path: str = "<string>", tag_scheme: str = "iob2", missing_tag: str | None = None
) -> list[Sentence]:
    """Parses the text of a CoNLL file; see `read_conll`. `path` names it in errors."""
    tag_schemes.check_scheme(tag_scheme)
    groups = _split_sentences(text, path, tag_scheme, missing_tag)
    sentences = []
    for group in groups:
        words, tags, line_numbers = zip(*group.lines)
        sentences.append(
            Sentence(
                words=words,
                tags=tuple(tag_schemes.to_iob2(tags)),
                line_numbers=line_numbers,
                path=path,
                document=group.document,
                docstart_before=group.docstart_before,
                docstart_after=group.docstart_after,
            )
        )
    return sentences


def label_list(sentences: Sequence[Sentence], tag_scheme: str = "iob2") -> list[str]:
    """The label list of training sentences for a model that learns in `tag_scheme`:
    "O", then the labels of the sentences' tags written in that scheme, by sorted type
    and in the scheme's prefix order ("O", "B-X", "I-X", "B-Y", ...)."""
    found = {
        tag
        for sentence in sentences
        for tag in tag_schemes.from_iob2(sentence.tags, tag_scheme)
        if tag != tag_schemes.OUTSIDE
    }
    types = sorted({tag_schemes.split_tag(tag)[1] for tag in found})
    return [tag_schemes.OUTSIDE] + [
        label
        for chunk_type in types
        for prefix in tag_schemes.scheme_prefixes(tag_scheme)
        if (label := f"{prefix}-{chunk_type}") in found
    ]


# ----------------------------------------------------------------------------
# Predictions.
# ----------------------------------------------------------------------------


_MARKER_LINES = [f"{DOCSTART} {tag_schemes.OUTSIDE} {tag_schemes.OUTSIDE}\n", "\n"]


def write_predictions(
    path: str,
    sentences: Sequence[Sentence],
    predicted_tags: Sequence[Sequence[str]],
    tag_scheme: str = "iob2",
) -> None:
    """Writes `token gold guess` lines, a blank line after each sentence, for conlleval;
    a sentence's -DOCSTART- markers (`Sentence.docstart_before`, `docstart_after`) as
    `-DOCSTART- O O` and a blank line, where the file had them (conlleval counts such a
    line as a token, as CoNLL-2003's scored outputs had it; F1 does not change).

    Both columns are written in `tag_scheme` (`tag_schemes.from_iob2`), so conlleval
    counts the same chunks, in any scheme, as in the predicted tags.

    Args:
        path: output file (UTF-8), written atomically.
        sentences: the sentences, with their gold IOB2 tags.
        predicted_tags: one tag per word of each sentence, in any scheme (a model's
            labels: IOB1, IOB2 or IOBES), read as conlleval reads them: an IOB1 model's
            "I-PER I-PER B-PER" is two chunks, an IOB2 model's "O I-PER" is one.
        tag_scheme: the scheme of the written tags (the file's own).
    """
    tag_schemes.check_scheme(tag_scheme)
    if len(sentences) != len(predicted_tags):
        raise UserError(f"{len(sentences)} sentences but {len(predicted_tags)} predicted tag lists")
    lines = []
    for index, (sentence, guessed) in enumerate(zip(sentences, predicted_tags)):
        if len(guessed) != len(sentence.words):
            raise UserError(
                f"sentence {index}: {len(sentence.words)} words but {len(guessed)} predicted tags"
            )
        gold = tag_schemes.from_iob2(sentence.tags, tag_scheme)
        guessed = tag_schemes.from_iob2(guessed, tag_scheme)
        lines.extend(_MARKER_LINES * sentence.docstart_before)
        lines.extend(
            f"{word} {gold_tag} {guessed_tag}\n"
            for word, gold_tag, guessed_tag in zip(sentence.words, gold, guessed)
        )
        lines.append("\n")
        lines.extend(_MARKER_LINES * sentence.docstart_after)
    file_io.write_text(path, "".join(lines))

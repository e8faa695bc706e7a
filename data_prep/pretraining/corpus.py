"""Reading a pre-training corpus in document shards, with bad input named and counted.

Input formats:
    sentences  the original release's: one sentence per line, a blank line (empty
               after stripping whitespace) between documents;
    text       raw text: a blank line between documents; the lines of a document
               are running text, wrapped anywhere, to be split into sentences;
    jsonl      raw documents, one JSON object per line with the document's text
               under "text" (line breaks in it separate paragraphs).

Document shards. A file is cut, at document boundaries, into pieces of about
`shard_bytes`, so that the work and the memory of one piece do not depend on how
the corpus was cut into files. Window k of a file is bytes [k * shard_bytes,
(k + 1) * shard_bytes); document shard k holds the documents that start in
window k:
    sentences, text: a document starts at a non-blank line that follows a blank
        line, both lines starting inside or after the window (shard 0 starts at
        byte 0: leading blank lines separate nothing);
    jsonl: every line starts a document.
Shard k runs from its first document to the next shard's first document (or the
end of the file), so shards cover the file, hold whole documents, and a window in
which no document starts gives no shard. A file no larger than `shard_bytes` is
one shard, the whole file, and so is a compressed file (its name ends in .gz, .bz2,
.zst, .xz, ...: it is read whole through its decompressor). Finding the cuts reads each
window once (`scan_window`,
which also counts its lines, so that every message names the file's own line
numbers); the windows of a file can be scanned in parallel.

Bad input (`BadInputLog`): an unreadable file, a damaged compressed file (cut short
or corrupted: `damage.open_decompressed`; none of its text is used), a line that is
not UTF-8, an empty document, a JSON line that is not an object with a string "text". Each is logged
with its file and line and counted; under the policy "fail" the first one stops
the run with that message instead.
"""

from __future__ import annotations

import dataclasses
import json
import os
import posixpath
from typing import BinaryIO, Callable, Iterable, Iterator

from absl import logging

from common.errors import UserError
from data_prep import damage

FORMATS = ("sentences", "text", "jsonl")
BAD_INPUT_KINDS = (
    "unreadable_file",
    "damaged_file",
    "non_utf8_line",
    "empty_document",
    "bad_json_line",
    "json_line_without_text",
)
POLICIES = ("skip", "fail")
NUM_LOGGED_PER_KIND = 20
_READ_BYTES = 1 << 20


class BadInputError(UserError):
    """Bad input under the policy "fail"; the message names file and line."""


class BadInputLog:
    """Names, counts and (policy "fail") raises on bad input.

    Attributes:
        policy: "skip" (log, count and go on) or "fail" (raise `BadInputError`).
        counts: kind -> number of occurrences (see `BAD_INPUT_KINDS`).
        examples: the first messages, up to `NUM_LOGGED_PER_KIND` per kind.
    """

    def __init__(self, policy: str = "fail"):
        if policy not in POLICIES:
            raise UserError("Bad-input policy %r is not one of %s." % (policy, ", ".join(POLICIES)))
        self.policy = policy
        self.counts = {}
        self.examples = []

    def report(self, kind: str, path: str, line: int | None, detail: str) -> None:
        """Records one bad input at `path`:`line` (None: the whole file)."""
        where = path if line is None else "%s:%d" % (path, line)
        message = "%s: %s (%s)" % (where, detail, kind)
        if self.policy == "fail":
            raise BadInputError(message + "; --bad_input=skip skips such input")
        count = self.counts[kind] = self.counts.get(kind, 0) + 1
        if count <= NUM_LOGGED_PER_KIND:
            self.examples.append(message)
            logging.warning("Skipped %s", message)
        elif count == NUM_LOGGED_PER_KIND + 1:
            logging.warning("More input of kind %s skipped; only counted from now on.", kind)


# ----------------------------------------------------------------------------
# Document shards.
# ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class WindowScan:
    """What `scan_window` finds in window `index` of a file.

    Attributes:
        path, index: the file and the window.
        start: offset of the first document starting in the window (or the
            file's size if none does); 0 for window 0.
        lines_before_start: line breaks in [index * shard_bytes, start).
        lines_in_window: line breaks in the window.
    """

    path: str
    index: int
    start: int
    lines_before_start: int
    lines_in_window: int


@dataclasses.dataclass(frozen=True)
class DocumentShard:
    """Bytes [start, end) of a file: the documents starting in one window.

    Attributes:
        path: the input file.
        index: the window k; it offsets the run's random seed (see the pipeline).
        start, end: byte range; `end` None: to the end of the file (a
            compressed file, read whole through its decompressor).
        first_line: line number (from 1) of the line at `start`.
        name: output name: the file's name without its extension, with
            "-<k, 5 digits>" when the file spans more than one window.
        origin: the raw-text shard these are the sentences of, if any.
    """

    path: str
    index: int
    start: int
    end: int | None
    first_line: int
    name: str
    origin: "DocumentShard | None" = None

    def describe(self) -> dict:
        """Where the documents come from, for metadata."""
        described = {
            "file": self.path,
            "window": self.index,
            "first_byte": self.start,
            "end_byte": self.end,
            "first_line": self.first_line,
        }
        if self.origin is not None:
            described["sentences_of"] = self.origin.describe()
        return described


def num_windows(size: int, shard_bytes: int) -> int:
    """Windows of a file of `size` bytes (at least 1)."""
    return max(1, -(-size // shard_bytes))


COMPRESSION_SUFFIXES = damage.COMPRESSION_SUFFIXES


def is_compressed(path: str) -> bool:
    """Whether the name says the file is compressed (read whole, never cut)."""
    return path.lower().endswith(COMPRESSION_SUFFIXES)


def file_stem(path: str) -> str:
    """The file's name without directory, compression suffix and extension."""
    name = posixpath.basename(path) if "://" in path else os.path.basename(path)
    if is_compressed(name):
        name = os.path.splitext(name)[0]
    return os.path.splitext(name)[0]


def shard_name(path: str, index: int, windows: int) -> str:
    """`file_stem(path)`, with "-%05d" % index when the file has several windows."""
    stem = file_stem(path)
    return stem if windows == 1 else "%s-%05d" % (stem, index)


def _is_blank(raw_line: bytes) -> bool:
    """Whether a line is empty after stripping whitespace (as decoded text)."""
    return not raw_line.decode("utf-8", "replace").strip()


def scan_window(
    reader: BinaryIO, path: str, size: int, index: int, shard_bytes: int, input_format: str
) -> WindowScan:
    """Finds where document shard `index` starts and counts the window's lines.

    Args:
        reader: the file, opened for binary reading (seekable).
        path, size: its name and size in bytes.
        index: the window.
        shard_bytes: the window size.
        input_format: one of `FORMATS`.
    """
    window_start = index * shard_bytes
    window_end = min(size, window_start + shard_bytes)
    if index == 0:
        start, before = 0, 0
    else:
        start, before = _first_document_start(reader, window_start, size, input_format)
    return WindowScan(
        path=path,
        index=index,
        start=start,
        lines_before_start=before,
        lines_in_window=_count_line_breaks(reader, window_start, window_end),
    )


def _first_document_start(
    reader: BinaryIO, offset: int, size: int, input_format: str
) -> tuple[int, int]:
    """(offset of the first document start at or after `offset`, line breaks
    between the two); (size, ...) if there is none."""
    # The rest of the line holding byte offset - 1: the next line starts at or
    # after `offset`.
    reader.seek(offset - 1)
    head = reader.readline()
    position = offset - 1 + len(head)
    breaks = int(position > offset and head.endswith(b"\n"))
    previous_blank = False  # That of a line starting before the window.
    while position < size:
        line = reader.readline()
        if not line:
            break
        if input_format == "jsonl" or (previous_blank and not _is_blank(line)):
            return position, breaks
        previous_blank = _is_blank(line)
        position += len(line)
        breaks += line.endswith(b"\n")
    return size, breaks


def _count_line_breaks(reader: BinaryIO, start: int, end: int) -> int:
    reader.seek(start)
    count = 0
    remaining = end - start
    while remaining > 0:
        block = reader.read(min(_READ_BYTES, remaining))
        if not block:
            break
        count += block.count(b"\n")
        remaining -= len(block)
    return count


def plan_shards(path: str, size: int, scans: Iterable[WindowScan]) -> list[DocumentShard]:
    """The document shards of one file from the scans of all its windows."""
    scans = sorted(scans, key=lambda scan: scan.index)
    if [scan.index for scan in scans] != list(range(len(scans))):
        raise UserError("%s: window scans missing (%s)." % (path, [scan.index for scan in scans]))
    shards = []
    lines_before_window = 0
    for k, scan in enumerate(scans):
        end = scans[k + 1].start if k + 1 < len(scans) else size
        if scan.start < end:
            shards.append(
                DocumentShard(
                    path=path,
                    index=k,
                    start=scan.start,
                    end=end,
                    first_line=1 + lines_before_window + scan.lines_before_start,
                    name=shard_name(path, k, len(scans)),
                )
            )
        lines_before_window += scan.lines_in_window
    return shards


# ----------------------------------------------------------------------------
# Lines and documents.
# ----------------------------------------------------------------------------


def read_lines(
    reader: BinaryIO, shard: DocumentShard, bad_input: BadInputLog
) -> Iterator[tuple[int, str]]:
    """(line number, text) of the lines of a shard, split on "\\n" only.

    A line that is not UTF-8 is reported and left out.
    """
    reader.seek(shard.start)
    position = shard.start
    line_number = shard.first_line
    while shard.end is None or position < shard.end:
        raw = reader.readline() if shard.end is None else reader.readline(shard.end - position)
        if not raw:
            return
        position += len(raw)
        try:
            yield line_number, raw.decode("utf-8")
        except UnicodeDecodeError as e:
            bad_input.report(
                "non_utf8_line",
                shard.path,
                line_number,
                "not valid UTF-8 (%s)" % e.reason + " at byte %d of the line" % e.start,
            )
        line_number += 1


@dataclasses.dataclass
class RawDocument:
    """A document of a raw-text format.

    Attributes:
        line: line number where it starts.
        paragraphs: its text, cut where no sentence may run across.
    """

    line: int
    paragraphs: list


def raw_documents(
    lines: Iterable[tuple[int, str]], path: str, input_format: str, bad_input: BadInputLog
) -> Iterator[RawDocument]:
    """Documents of "text" or "jsonl" lines (see the module docstring).

    Malformed JSON lines are reported and left out.
    """
    if input_format == "jsonl":
        for line_number, line in lines:
            if not line.strip():
                continue
            text = _json_text(line, path, line_number, bad_input)
            if text is not None:
                yield RawDocument(line_number, text.split("\n"))
        return
    if input_format != "text":
        raise UserError("Not a raw-text format: %r." % input_format)
    document = None
    for line_number, line in lines:
        if not line.strip():
            if document is not None:
                yield document
            document = None
        elif document is None:
            document = RawDocument(line_number, [line])
        else:
            document.paragraphs[0] += " " + line
    if document is not None:
        yield document


def _json_text(line: str, path: str, line_number: int, bad_input: BadInputLog) -> str | None:
    try:
        value = json.loads(line)
    except json.JSONDecodeError as e:
        bad_input.report("bad_json_line", path, line_number, "not JSON (%s)" % e)
        return None
    if not isinstance(value, dict) or "text" not in value:
        bad_input.report(
            "json_line_without_text", path, line_number, 'a JSON line without a "text" field'
        )
        return None
    if not isinstance(value["text"], str):
        bad_input.report(
            "bad_json_line",
            path,
            line_number,
            '"text" is a %s, not a string' % type(value["text"]).__name__,
        )
        return None
    return value["text"]


def sentence_documents(
    documents: Iterable[RawDocument],
    path: str,
    split: Callable[[str], list[str]],
    bad_input: BadInputLog,
) -> Iterator[list[str]]:
    """The sentences of each raw document (`split` cuts one paragraph); a
    document without any is reported as empty and left out."""
    for document in documents:
        sentences = [sentence for paragraph in document.paragraphs for sentence in split(paragraph)]
        if sentences:
            yield sentences
        else:
            bad_input.report("empty_document", path, document.line, "an empty document")


def format_sentences(documents: Iterable[list[str]]) -> Iterator[str]:
    """Lines of the sentences format: a sentence a line, a blank line between
    documents (none after the last)."""
    first = True
    for sentences in documents:
        if not first:
            yield "\n"
        first = False
        for sentence in sentences:
            yield sentence + "\n"

"""Entity-level precision, recall and F1, counted as the CoNLL `conlleval` script does.

`conlleval` (the Perl script of the CoNLL-2000/2003 shared tasks, version
2004-01-26) is the reference scorer of NER and chunking results. It never builds a
list of entities: it walks the tag sequence once and decides, between each pair of
neighbouring tags, whether a chunk ends and whether one starts. This module
applies the same rules to the raw tags (`data_prep.ner.tag_schemes`, where `get_chunks`
reads chunks by them), so its counts are those of the script, including on tag
sequences that are not valid IOB2 (a chunk may start with I-, B- always starts a new
chunk, a change of type ends one...). A sentence boundary (blank line, or a line whose
first field is "-X-") reads as an O tag (ending the chunks of B-, I-, E- and S- tags)
and is not counted as a token.

A chunk counts as correct when gold and guess start it on the same token with
the same type, keep the same type, and end it on the same token.

IOBES. With `iobes=True` (the default) S- is a one-token chunk and B- after E- starts
a new chunk, as `seqeval` and the Python ports of conlleval count them; `iobes=False`
gives the script's rules verbatim, which merge neighbouring IOBES chunks of one type
(see `data_prep.ner.tag_schemes`).

Reading files differs from the script only where it cannot matter for well-formed
files: fields are separated by runs of spaces or tabs (the script splits on
every single space), trailing carriage returns are dropped, and a line needs at
least three fields (token ... gold guess).

Percentages in `report` are computed with the script's arithmetic and printed with
its formats, so the text is byte for byte what the script prints.
"""

from __future__ import annotations

import collections
import dataclasses
import re
from typing import Iterable, Mapping

from common.errors import UserError
from common import file_io
from data_prep import records
from data_prep.ner import tag_schemes

BOUNDARY = "-X-"

_FIELD_SEPARATOR = re.compile(r"[ \t]+")


def _percent(numerator: int, denominator: int) -> float:
    """100 * numerator / denominator in the script's order of operations; 0 if /0."""
    return 100 * numerator / denominator if denominator > 0 else 0.0


def _fb1(precision: float, recall: float) -> float:
    return 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0


@dataclasses.dataclass
class ChunkCounts:
    """What conlleval counts.

    Attributes:
        num_tokens: tokens scored (sentence boundaries excluded).
        correct_tags: tokens whose guessed tag equals the gold tag.
        found_correct: chunks in the gold tags.
        found_guessed: chunks in the guessed tags.
        correct_chunks: guessed chunks that match a gold chunk exactly.
        found_correct_by_type, found_guessed_by_type, correct_chunks_by_type: the
            same three counts per chunk type.
    """

    num_tokens: int = 0
    correct_tags: int = 0
    found_correct: int = 0
    found_guessed: int = 0
    correct_chunks: int = 0
    found_correct_by_type: collections.Counter = dataclasses.field(
        default_factory=collections.Counter
    )
    found_guessed_by_type: collections.Counter = dataclasses.field(
        default_factory=collections.Counter
    )
    correct_chunks_by_type: collections.Counter = dataclasses.field(
        default_factory=collections.Counter
    )

    @property
    def types(self) -> list[str]:
        """Chunk types found in the gold or the guessed tags, sorted as the script does."""
        return sorted(set(self.found_correct_by_type) | set(self.found_guessed_by_type))

    @property
    def accuracy(self) -> float:
        """Fraction of tokens with the correct tag (0 if there are none)."""
        return self.correct_tags / self.num_tokens if self.num_tokens else 0.0

    def precision_recall_f1(self, chunk_type: str | None = None) -> tuple[float, float, float]:
        """(precision, recall, F1) as fractions, overall or for one chunk type.

        Each is 0 where its denominator is 0, as in the script.
        """
        if chunk_type is None:
            correct, guessed, gold = (self.correct_chunks, self.found_guessed, self.found_correct)
        else:
            correct = self.correct_chunks_by_type[chunk_type]
            guessed = self.found_guessed_by_type[chunk_type]
            gold = self.found_correct_by_type[chunk_type]
        precision = correct / guessed if guessed else 0.0
        recall = correct / gold if gold else 0.0
        return precision, recall, _fb1(precision, recall)

    def report(self) -> str:
        """The text that `conlleval` prints for these counts."""
        precision = _percent(self.correct_chunks, self.found_guessed)
        recall = _percent(self.correct_chunks, self.found_correct)
        lines = [
            f"processed {self.num_tokens} tokens with {self.found_correct} "
            f"phrases; found: {self.found_guessed} phrases; "
            f"correct: {self.correct_chunks}.\n"
        ]
        if self.num_tokens > 0:
            accuracy = _percent(self.correct_tags, self.num_tokens)
            lines.append(
                f"accuracy: {accuracy:6.2f}%; precision: {precision:6.2f}%; "
                f"recall: {recall:6.2f}%; FB1: {_fb1(precision, recall):6.2f}\n"
            )
        for chunk_type in self.types:
            guessed = self.found_guessed_by_type[chunk_type]
            precision = _percent(self.correct_chunks_by_type[chunk_type], guessed)
            recall = _percent(
                self.correct_chunks_by_type[chunk_type], self.found_correct_by_type[chunk_type]
            )
            # Perl's %17s pads to 17 bytes of UTF-8, not 17 characters.
            padding = " " * max(0, 17 - len(chunk_type.encode("utf-8")))
            lines.append(
                f"{padding}{chunk_type}: precision: {precision:6.2f}%; "
                f"recall: {recall:6.2f}%; "
                f"FB1: {_fb1(precision, recall):6.2f}  {guessed}\n"
            )
        return "".join(lines)


class _Scorer:
    """The script's single pass over (gold, guess) tag pairs."""

    def __init__(self, iobes: bool):
        self.iobes = iobes
        self.counts = ChunkCounts()
        self._last_correct = (tag_schemes.OUTSIDE, "")
        self._last_guessed = (tag_schemes.OUTSIDE, "")
        self._in_correct = False  # inside a chunk that is correct so far

    def _chunk_edges(self, last, current) -> tuple[bool, bool]:
        args = (last[0], current[0], last[1], current[1], self.iobes)
        return tag_schemes.end_of_chunk(*args), tag_schemes.start_of_chunk(*args)

    def step(self, correct_tag: str, guessed_tag: str) -> None:
        """Scores one token."""
        self._advance(
            tag_schemes.split_tag(correct_tag), tag_schemes.split_tag(guessed_tag), is_token=True
        )

    def boundary(self) -> None:
        """A sentence break: both tags read as "O", not counted as a token."""
        self._advance((tag_schemes.OUTSIDE, ""), (tag_schemes.OUTSIDE, ""), is_token=False)

    def _advance(self, correct, guessed, is_token: bool) -> None:
        counts = self.counts
        end_correct, start_correct = self._chunk_edges(self._last_correct, correct)
        end_guessed, start_guessed = self._chunk_edges(self._last_guessed, guessed)
        if self._in_correct:
            if end_correct and end_guessed and self._last_guessed[1] == self._last_correct[1]:
                self._in_correct = False
                self._count_correct_chunk()
            elif end_correct != end_guessed or guessed[1] != correct[1]:
                self._in_correct = False
        if start_correct and start_guessed and guessed[1] == correct[1]:
            self._in_correct = True
        if start_correct:
            counts.found_correct += 1
            counts.found_correct_by_type[correct[1]] += 1
        if start_guessed:
            counts.found_guessed += 1
            counts.found_guessed_by_type[guessed[1]] += 1
        if is_token:
            counts.num_tokens += 1
            counts.correct_tags += int(correct == guessed)
        self._last_correct, self._last_guessed = correct, guessed

    def _count_correct_chunk(self) -> None:
        self.counts.correct_chunks += 1
        self.counts.correct_chunks_by_type[self._last_correct[1]] += 1

    def finish(self) -> ChunkCounts:
        if self._in_correct:
            self._in_correct = False
            self._count_correct_chunk()
        return self.counts


def evaluate_lines(
    lines: Iterable[str], source: str = "<lines>", iobes: bool = True
) -> ChunkCounts:
    """Scores conlleval input: "token ... gold guess" per line, blank line between sentences.

    Args:
        lines: the lines (with or without line ends).
        source: name used in error messages (a file name).
        iobes: add the S-/E-B rules of IOBES (see the module docstring).

    Raises:
        ValueError: naming `source` and the line, for a line with fewer than three
            fields or with another number of fields than the first line.
    """
    scorer = _Scorer(iobes)
    num_fields = None
    for line_number, line in enumerate(lines, start=1):
        line = line.strip(" \t\r\n")
        if not line:
            scorer.boundary()
            continue
        fields = _FIELD_SEPARATOR.split(line)
        if num_fields is None:
            num_fields = len(fields)
            if num_fields < 3:
                raise UserError(
                    f"{source}:{line_number}: expected 'token ... gold guess' "
                    f"(at least 3 fields), got {num_fields}: {line!r}"
                )
        elif len(fields) != num_fields:
            raise UserError(
                f"{source}:{line_number}: expected {num_fields} fields as on the "
                f"first line, got {len(fields)}: {line!r}"
            )
        if fields[0] == BOUNDARY:
            scorer.boundary()
        else:
            scorer.step(fields[-2], fields[-1])
    return scorer.finish()


def evaluate_file(path: str, iobes: bool = True) -> ChunkCounts:
    """Scores a conlleval file (UTF-8), e.g. one written by `conll.write_predictions`."""
    lines = (line for _, line in records.read_lines(str(path)))
    return evaluate_lines(lines, source=str(path), iobes=iobes)


def eval_results(counts: ChunkCounts, prefix: str = "eval_") -> dict[str, float | int]:
    """The metrics for eval_results.txt: fractions overall and per type, and the counts.

    Keys: accuracy, precision, recall, f1, num_tokens, found_correct,
    found_guessed, correct_chunks, and precision_<type>, recall_<type>,
    f1_<type> for every chunk type, each after `prefix`.
    """
    precision, recall, f1 = counts.precision_recall_f1()
    results = {
        "accuracy": counts.accuracy,
        "precision": precision,
        "recall": recall,
        "f1": f1,
        "num_tokens": counts.num_tokens,
        "found_correct": counts.found_correct,
        "found_guessed": counts.found_guessed,
        "correct_chunks": counts.correct_chunks,
    }
    for chunk_type in counts.types:
        precision, recall, f1 = counts.precision_recall_f1(chunk_type)
        results[f"precision_{chunk_type}"] = precision
        results[f"recall_{chunk_type}"] = recall
        results[f"f1_{chunk_type}"] = f1
    return {prefix + key: value for key, value in results.items()}


def write_eval_results(
    path: str, counts: ChunkCounts, extra: Mapping[str, object] | None = None
) -> None:
    """Writes eval_results.txt ("key = value" lines, sorted) from `eval_results`.

    Args:
        path: output file, written atomically.
        counts: the scores.
        extra: more entries, e.g. {"eval_loss": ..., "global_step": ...}.
    """
    file_io.write_results(path, {**eval_results(counts), **(extra or {})})

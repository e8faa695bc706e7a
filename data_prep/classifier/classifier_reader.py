"""Reading a sentence (pair) classification task's files into examples.

A task's reader ("processor", `DataProcessor`) knows where each split's file is in a
data directory and where each field is in it (`FileLayout`: columns by header name or
0-based position, delimiter, quoting); the tasks themselves are in
`classifier_tasks`, their features and records in `classifier_features`.

Files are read as the original release reads GLUE's TSVs: quoting off
(`quotechar=None`), so a `"` is an ordinary character of the text. A malformed row
raises ValueError naming the file and line; nothing is skipped silently (only blank
lines, and rows of other languages in a file with a language column, are passed
over). Rows are streamed: a large file is never held in memory.
"""

from __future__ import annotations

import csv
import dataclasses
import math
import os
from typing import Iterator, Sequence

import tensorflow as tf

from common.errors import MissingFileError, UserError
from data_prep import records

# A column of a file: a header name, or a 0-based position.
Column = str | int

# ----------------------------------------------------------------------------
# Examples.
# ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class InputExample:
    """One example of a (pair) classification or regression task.

    Attributes:
      guid: unique id, "<split>-<line number>".
      text_a: the first sequence (untokenized).
      text_b: the second sequence, or None for single-sequence tasks.
      label: label name (classification), float score (regression), a tuple of
        label names, possibly empty (multi-label: `DataProcessor.label_separator`),
        or None where the file has no labels (test sets).
      index: the file's `index`/`id` column (what the GLUE server wants in a
        submission file), or the example's position where there is none.
    """

    guid: str
    text_a: str
    text_b: str | None = None
    label: str | float | tuple[str, ...] | None = None
    index: str = ""


@dataclasses.dataclass(frozen=True)
class MultipleChoiceExample:
    """One multiple-choice example: a context and its candidate continuations.

    Attributes:
      guid: unique id, "<split>-<line number>".
      context: the first sequence, shared by every choice.
      choices: the second sequence of each choice.
      label: the correct choice's label ("0".."C-1"), or None (unlabelled test).
      index: the example's position in its file.
    """

    guid: str
    context: str
    choices: tuple[str, ...]
    label: str | None = None
    index: str = ""


# ----------------------------------------------------------------------------
# File reading.
# ----------------------------------------------------------------------------


def _is_remote(path: str) -> bool:
    return "://" in path


def file_exists(path: str) -> bool:
    """Whether `path` exists (local, or any `tf.io.gfile` file system)."""
    return tf.io.gfile.exists(path) if _is_remote(path) else os.path.isfile(path)


def require_file(path: str, what: str) -> str:
    """Returns `path`, or raises FileNotFoundError naming it and `what` it is."""
    if not file_exists(path):
        raise MissingFileError(f"{what} not found: {path}")
    return path


def iter_rows(
    path: str, delimiter: str = "\t", quotechar: str | None = None
) -> Iterator[tuple[int, list[str]]]:
    """Yields the (line number, fields) of each row of a delimited text file.

    A UTF-8 byte-order mark at the start of the file is dropped; blank lines are
    passed over. With `quotechar=None` quoting is off and every line is one row.
    Rows are streamed: a large file (MNLI's train.tsv with its parse trees) is
    never held in memory.

    Raises:
      ValueError: the file cannot be parsed, or is not UTF-8 (naming file and line).
    """
    reader = csv.reader(
        (text for _, text in records.read_lines(path)),
        delimiter=delimiter,
        quotechar=quotechar,
        quoting=csv.QUOTE_NONE if quotechar is None else csv.QUOTE_MINIMAL,
    )
    first = True
    try:
        for fields in reader:
            if first and fields and fields[0].startswith("\ufeff"):
                fields[0] = fields[0][1:]
            first = False
            if fields:
                yield reader.line_num, fields
    except csv.Error as e:
        raise UserError(f"{path}:{reader.line_num}: {e}") from None


def rows_and_header(
    path: str, layout: FileLayout
) -> tuple[Iterator[tuple[int, list[str]]], list[str] | None]:
    """The file's rows after the header, and the header (None if it has none)."""
    rows = iter_rows(path, layout.delimiter, layout.quotechar)
    if not layout.has_header:
        return rows, None
    try:
        return rows, next(rows)[1]
    except StopIteration:
        raise UserError(f"{path}: empty file, expected a header") from None


def resolve_column(column: Column, header: list[str] | None, path: str) -> int:
    """Position of `column`: itself if an int, else its index in `header`."""
    if isinstance(column, int):
        return column
    if header is None:
        raise UserError(
            f"{path}: column {column!r} is named, but the file is read without a "
            f"header; give its 0-based position instead"
        )
    if column not in header:
        raise UserError(f"{path}:1: the header has no column {column!r}; header: {header}")
    return header.index(column)


def read_field(
    fields: list[str], position: int, name: str, path: str, line: int, allow_empty: bool = False
) -> str:
    """Returns one field, raising if a text field is empty."""
    value = fields[position]
    if not allow_empty and not value.strip():
        raise UserError(f"{path}:{line}: empty {name} (column {position})")
    return value


def check_width(fields: list[str], width: int, delimiter: str, path: str, line: int) -> None:
    if len(fields) < width:
        raise UserError(
            f"{path}:{line}: expected at least {width} columns separated by "
            f"{delimiter!r}, got {len(fields)}"
        )


@dataclasses.dataclass(frozen=True)
class FileLayout:
    """Where the fields of one split are in its file.

    Attributes:
      file_name: path relative to the data directory.
      has_header: whether the first row names the columns.
      text_a, text_b, label, index: the columns (names need a header); None where
        the file has no such field (text_b of single-sequence tasks, the label of
        test sets, an index column).
      language: XNLI's language column; rows of other languages are passed over.
      delimiter, quotechar: as for `csv.reader` (quotechar None: quoting off).
    """

    file_name: str
    has_header: bool = True
    text_a: Column = 0
    text_b: Column | None = None
    label: Column | None = None
    index: Column | None = None
    language: Column | None = None
    delimiter: str = "\t"
    quotechar: str | None = None


def tsv(file_name: str, has_header: bool = True, **columns) -> FileLayout:
    return FileLayout(file_name, has_header, **columns)


def split_labels(value, separator: str) -> tuple[str, ...]:
    """A multi-label field as its labels: "LOC, PER" -> ("LOC", "PER") with separator
    ","; "" -> () (no label). Each label is stripped; empty ones and repeats are
    dropped. A list or tuple (a reader of one's own may give one) is taken as is."""
    parts = value if isinstance(value, (list, tuple)) else str(value).split(separator)
    labels = (str(part).strip() for part in parts)
    return tuple(dict.fromkeys(label for label in labels if label))


# ----------------------------------------------------------------------------
# The reader of a task.
# ----------------------------------------------------------------------------


class DataProcessor:
    """Reads one task's files from a data directory into examples.

    Class attributes:
      name: the task's name in `PROCESSORS`.
      labels: the label list (label id = position); empty for regression.
      is_regression: labels are float scores.
      num_choices: choices per example (multiple choice), else None.
      layouts: split name -> FileLayout.
      split_aliases: other names of splits ("dev" -> "dev_matched" for MNLI).
      eval_splits / test_splits: the labelled evaluation and prediction splits.
      label_aliases: label spellings mapped to a label-list entry on reading.
      label_range: inclusive bounds of a regression score, or None.
      language: the language kept from files with a language column (XNLI).
      metrics: names of its metrics (`evaluation.glue_metrics`: accuracy, f1, mcc,
        pearson, spearman); None: accuracy, or pearson and spearman for regression.
      score_metrics: those of its metrics whose mean is its score, which picks the
        best model (its GLUE score); None: all of them.
      glue_submission: prediction split -> its GLUE server file name, without ".tsv".
      label_separator: None for one label per example; multi-label (run_classifier's
        --multi_label): the separator of the zero or more labels of a label field,
        which is then read as a tuple of labels (`split_labels`).
    """

    name = ""
    labels: tuple[str, ...] = ()
    is_regression = False
    num_choices: int | None = None
    layouts: dict[str, FileLayout] = {}
    split_aliases: dict[str, str] = {}
    eval_splits: tuple[str, ...] = ("dev",)
    test_splits: tuple[str, ...] = ("test",)
    label_aliases: dict[str, str] = {}
    label_range: tuple[float, float] | None = None
    language: str | None = None
    metrics: tuple[str, ...] | None = None
    score_metrics: tuple[str, ...] | None = None
    glue_submission: dict[str, str] = {}
    label_separator: str | None = None

    def options(self) -> dict:
        """Settings that change what is read (part of the feature cache key)."""
        return {}

    def examples_key(self, data_dir: str, split: str) -> dict:
        """What decides a split's examples besides `options()` and its input files
        (part of the feature cache key): nothing for a reader of the files it names."""
        del data_dir, split
        return {}

    def get_labels(self, data_dir: str | None = None) -> list[str]:
        """The label list; `data_dir` is used only by tasks that read it there."""
        del data_dir
        return list(self.labels)

    def split_name(self, split: str) -> str:
        """The canonical name of `split` ("dev" -> "dev_matched" for MNLI)."""
        split = self.split_aliases.get(split, split)
        if split not in self.layouts:
            raise UserError(
                f"Task {self.name!r} has no split {split!r}; its splits: {', '.join(self.layouts)}"
            )
        return split

    def layout(self, data_dir: str, split: str) -> FileLayout:
        """The FileLayout of a (canonical) split."""
        del data_dir
        return self.layouts[split]

    def input_files(self, data_dir: str, split: str) -> list[str]:
        """The files read for `split`, each checked to exist."""
        split = self.split_name(split)
        path = os.path.join(data_dir, self.layout(data_dir, split).file_name)
        return [require_file(path, f"{self.name} {split} file")]

    def get_examples(self, data_dir: str, split: str) -> list:
        """Reads the examples of `split` ("train", "dev", "test", ...)."""
        split = self.split_name(split)
        path = self.input_files(data_dir, split)[0]
        return self._read(path, self.layout(data_dir, split), split, self.get_labels(data_dir))

    def get_train_examples(self, data_dir: str) -> list:
        return self.get_examples(data_dir, "train")

    def get_dev_examples(self, data_dir: str) -> list:
        return self.get_examples(data_dir, "dev")

    def get_test_examples(self, data_dir: str) -> list:
        return self.get_examples(data_dir, "test")

    @classmethod
    def _read_tsv(cls, input_file: str, quotechar: str | None = None) -> list[list[str]]:
        """The rows of a tab-separated file, each a list of its fields: the original
        release's helper, for readers written for it (`classifier_compat`). Quoting is
        off with `quotechar=None`; blank lines are passed over.

        Raises:
          FileNotFoundError, ValueError: naming the file (and line).
        """
        require_file(input_file, "Input file")
        return [fields for _, fields in iter_rows(input_file, "\t", quotechar)]

    def parse_label(
        self, value: str, labels: Sequence[str] | None, path: str, line: int
    ) -> str | float:
        """Checks a label field: a known label name, or a float score in range.

        `labels=None` accepts any non-empty name (label discovery).
        """
        if self.label_separator is not None:
            return self._parse_labels(value, labels, path, line)
        value = self.label_aliases.get(value, value)
        if self.is_regression:
            try:
                score = float(value)
            except ValueError:
                score = math.nan
            if not math.isfinite(score):
                raise UserError(f"{path}:{line}: label {value!r} is not a number")
            if self.label_range and not (self.label_range[0] <= score <= self.label_range[1]):
                raise UserError(f"{path}:{line}: score {score} is outside {self.label_range}")
            return score
        if labels is None:
            if not value.strip():
                raise UserError(f"{path}:{line}: empty label")
        elif value not in labels:
            raise UserError(f"{path}:{line}: label {value!r} is not one of {list(labels)}")
        return value

    def _parse_labels(
        self, value: str, labels: Sequence[str] | None, path: str, line: int
    ) -> tuple[str, ...]:
        """A multi-label field: zero or more labels, each known (unless discovering)."""
        found = tuple(
            self.label_aliases.get(v, v) for v in split_labels(value, self.label_separator)
        )
        unknown = [label for label in found if labels is not None and label not in labels]
        if unknown:
            raise UserError(
                f"{path}:{line}: label {unknown[0]!r} is not one of {list(labels)} "
                f"(labels separated by {self.label_separator!r})"
            )
        return found

    def _read(
        self, path: str, layout: FileLayout, split: str, labels: Sequence[str] | None
    ) -> list[InputExample]:
        """Reads InputExamples from one file."""
        rows, header = rows_and_header(path, layout)
        fields_at = {
            name: resolve_column(column, header, path)
            for name, column in dataclasses.asdict(layout).items()
            if name in ("text_a", "text_b", "label", "index", "language") and column is not None
        }
        width = max(fields_at.values()) + 1
        examples = []
        for line, fields in rows:
            check_width(fields, width, layout.delimiter, path, line)
            if "language" in fields_at and fields[fields_at["language"]] != self.language:
                continue
            text_b = None
            if "text_b" in fields_at:
                text_b = read_field(fields, fields_at["text_b"], "text_b", path, line)
            label = None
            if "label" in fields_at:
                label = self.parse_label(fields[fields_at["label"]], labels, path, line)
            index = str(len(examples))
            if "index" in fields_at:
                index = read_field(fields, fields_at["index"], "index", path, line)
            examples.append(
                InputExample(
                    guid=f"{split}-{line}",
                    text_a=read_field(fields, fields_at["text_a"], "text_a", path, line),
                    text_b=text_b,
                    label=label,
                    index=index,
                )
            )
        return examples

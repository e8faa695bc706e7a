"""The "generic" classification task: a user's own TSV or CSV files, with the columns,
delimiter, quoting, labels (or a regression) given as arguments (run_classifier's
--text_a_column, --label_column, ...). Listed in `classifier_tasks.TASKS` with the
tasks of known data sets.
"""

from __future__ import annotations

import os
from typing import Sequence

from common.errors import MissingFileError, UserError
from data_prep.classifier.classifier_reader import (
    Column,
    DataProcessor,
    FileLayout,
    file_exists,
)

_EXTENSION_DELIMITERS = {"tsv": "\t", "csv": ","}
_EXTENSION_QUOTECHARS = {"tsv": None, "csv": '"'}
_AUTO = "auto"


def _column_spec(value: Column | None, has_header: bool, argument: str) -> Column | None:
    """A user's column argument: a name with a header, a position without."""
    if value is None or has_header:
        return value
    try:
        return int(value)
    except ValueError:
        raise UserError(
            f"{argument}={value!r}: without a header, columns are 0-based positions"
        ) from None


class GenericProcessor(DataProcessor):
    """A user's own task: {train,dev,test}.tsv or .csv in the data directory.

    The columns are arguments: by name when the files have a header row, by
    0-based position otherwise. The delimiter follows the extension (tab for
    .tsv, comma for .csv) unless given; .tsv files are read with quoting off
    (as GLUE's), .csv files with `"` quoting. Labels are the sorted distinct
    values of the label column of train.tsv/csv (or `labels` when given); a
    regression task reads float scores. The test file's labels, if any, are not
    read.
    """

    name = "generic"

    def __init__(
        self,
        text_a_column: Column | None = None,
        label_column: Column | None = None,
        text_b_column: Column | None = None,
        has_header: bool = True,
        delimiter: str | None = None,
        quotechar: str | None = _AUTO,
        is_regression: bool = False,
        labels: Sequence[str] | None = None,
    ):
        if text_a_column is None or label_column is None:
            raise UserError(
                "The generic task needs text_a_column and label_column "
                f"(got {text_a_column!r}, {label_column!r})"
            )
        self.text_a_column = _column_spec(text_a_column, has_header, "text_a_column")
        self.text_b_column = _column_spec(text_b_column, has_header, "text_b_column")
        self.label_column = _column_spec(label_column, has_header, "label_column")
        self.has_header = has_header
        self.delimiter = delimiter
        self.quotechar = quotechar
        self.is_regression = is_regression
        self.layouts = {"train": None, "dev": None, "test": None}
        self._given_labels = list(labels) if labels is not None else None
        self._labels_by_dir = {}

    def options(self) -> dict:
        return {
            "text_a_column": self.text_a_column,
            "text_b_column": self.text_b_column,
            "label_column": self.label_column,
            "has_header": self.has_header,
            "delimiter": self.delimiter,
            "quotechar": self.quotechar,
            "is_regression": self.is_regression,
            "labels": self._given_labels,
        }

    def _file_name(self, data_dir: str, split: str) -> str:
        names = [f"{split}.{extension}" for extension in _EXTENSION_DELIMITERS]
        found = [name for name in names if file_exists(os.path.join(data_dir, name))]
        if not found:
            raise MissingFileError(
                f"generic {split} file not found: "
                f"{' or '.join(os.path.join(data_dir, name) for name in names)}"
            )
        if len(found) > 1:
            raise UserError(f"Both {' and '.join(found)} are in {data_dir}: keep one")
        return found[0]

    def layout(self, data_dir: str, split: str) -> FileLayout:
        file_name = self._file_name(data_dir, split)
        extension = file_name.rsplit(".", 1)[1]
        quotechar = self.quotechar
        if quotechar == _AUTO:
            quotechar = _EXTENSION_QUOTECHARS[extension]
        return FileLayout(
            file_name,
            self.has_header,
            text_a=self.text_a_column,
            text_b=self.text_b_column,
            label=None if split == "test" else self.label_column,
            delimiter=self.delimiter or _EXTENSION_DELIMITERS[extension],
            quotechar=quotechar,
        )

    def input_files(self, data_dir: str, split: str) -> list[str]:
        """The split's file, and train.tsv/csv where the labels come from it."""
        files = super().input_files(data_dir, split)
        if self._given_labels is None and not self.is_regression:
            train = os.path.join(data_dir, self._file_name(data_dir, "train"))
            if train not in files:
                files.append(train)
        return files

    def get_labels(self, data_dir: str | None = None) -> list[str]:
        """Sorted labels of the training file (or those given, or [])."""
        if self.is_regression:
            return []
        if self._given_labels is not None:
            return list(self._given_labels)
        if data_dir is None:
            raise UserError(
                "The generic task reads its labels from train.tsv/csv: pass "
                "data_dir, or give labels"
            )
        if data_dir not in self._labels_by_dir:
            path = os.path.join(data_dir, self._file_name(data_dir, "train"))
            examples = self._read(path, self.layout(data_dir, "train"), "train", labels=None)
            if self.label_separator is not None:
                self._labels_by_dir[data_dir] = multi_label_set(examples, path, self.label_column)
                return list(self._labels_by_dir[data_dir])
            labels = sorted({example.label for example in examples})
            if len(labels) < 2:
                raise UserError(
                    f"{path}: column {self.label_column!r} has fewer than two "
                    f"distinct labels: {labels}"
                )
            self._labels_by_dir[data_dir] = labels
        return list(self._labels_by_dir[data_dir])


def multi_label_set(examples, path: str, column: Column) -> list[str]:
    """The sorted labels that the multi-label training examples hold; an error naming
    the file when no row holds one (an empty label column: nothing to learn)."""
    labels = sorted({label for example in examples for label in example.label})
    if not labels:
        raise UserError(
            f"{path}: column {column!r} holds no label on any row (--multi_label reads "
            f"zero or more labels per row, and at least one row needs one); check "
            f"--label_column and --label_separator"
        )
    return labels

"""Readers written for the original release's run_classifier.py, run as they are.

The original README's way to fine-tune on one's own data is a `DataProcessor` subclass
with `get_train_examples(data_dir)`, `get_dev_examples(data_dir)`,
`get_test_examples(data_dir)` and `get_labels()`, usually built on
`self._read_tsv(input_file, quotechar=None)` and
`InputExample(guid, text_a, text_b, label)`. Such a class, subclassing this project's
`DataProcessor` (which has `_read_tsv`; `run_classifier.DataProcessor` is the same
class) or the original's own, is wrapped by `OriginalStyleReader` into a reader of
this project: each split's examples come from its method, checked (texts, labels in
`get_labels()`), and the feature cache is keyed by a hash of the examples, since
which files such a class reads is its own business.

`load_class("my_module:MyProcessor")` imports a reader class from a module on the
Python path (`--task_name=my_module:MyProcessor`).
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import json

import tensorflow as tf
from absl import flags

from common.errors import MissingFileError, UserError
from data_prep.text import tokenization
from data_prep.classifier.classifier_reader import DataProcessor, InputExample, split_labels

# split -> the original's method that reads it.
ORIGINAL_METHODS = {
    "train": "get_train_examples",
    "dev": "get_dev_examples",
    "test": "get_test_examples",
}


def is_original_style(cls: type) -> bool:
    """Whether `cls` reads its splits with the original's methods: a subclass of
    another `DataProcessor` (such as the original's) with them, or a subclass of this
    project's that overrides one of them and neither describes its files (`layouts`)
    nor overrides `get_examples`."""
    if not issubclass(cls, DataProcessor):
        return hasattr(cls, "get_labels") and any(
            hasattr(cls, method) for method in ORIGINAL_METHODS.values()
        )
    return (
        any(getattr(cls, m) is not getattr(DataProcessor, m) for m in ORIGINAL_METHODS.values())
        and cls.get_examples is DataProcessor.get_examples
        and not cls.layouts
    )


def _missing_module_hint(name: str) -> str:
    if name.startswith("tensorflow.contrib") or name.startswith("bert"):
        return (
            ": a reader module needs only `from run_classifier import DataProcessor, "
            "InputExample` and `from data_prep.text import tokenization`"
        )
    return ""


def load_class(spec: str) -> type:
    """The class named by "module:Class" (a module on the Python path).

    Raises:
      UserError: naming `spec`, when the module cannot be imported (it is not on the
        path, it imports what is not installed, or it defines absl flags the runner
        defines, as the original's run_classifier.py does) or has no such class.
    """
    module_name, _, class_name = spec.partition(":")
    if not module_name or not class_name:
        raise UserError(f"--task_name={spec}: expected module:Class, e.g. my_tasks:MyProcessor")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name and (module_name + ".").startswith(e.name + "."):
            raise UserError(
                f"--task_name={spec}: no module {module_name!r} on the Python path; run from "
                f"its folder or add the folder to PYTHONPATH"
            ) from None
        raise UserError(
            f"--task_name={spec}: importing {module_name} failed: {e}{_missing_module_hint(e.name)}"
        ) from None
    except flags.DuplicateFlagError as e:
        raise UserError(
            f"--task_name={spec}: importing {module_name} defines a flag that the runner "
            f"defines too ({e}). Keep the reader class in a module that defines no flags "
            f"(the original's run_classifier.py defines its flags when imported)."
        ) from None
    cls = module
    for part in class_name.split("."):
        cls = getattr(cls, part, None)
    if not isinstance(cls, type):
        raise UserError(f"--task_name={spec}: {module.__file__} has no class {class_name!r}")
    return cls


def _text(value, what: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return tokenization.convert_to_unicode(value)
    raise UserError(f"{what} is a {type(value).__name__}, not a string")


class OriginalStyleReader(DataProcessor):
    """An original-style reader (see the module docstring) as a reader of this project.

    Splits "train", "dev" (evaluation) and "test" (prediction), each read by its
    method; the labels are `get_labels()` (or `get_labels(data_dir)`), as strings.
    Metrics: accuracy and the loss, as the original prints them (eval_accuracy,
    eval_loss), unless the reader is registered under a task name with metrics of
    its own.
    """

    eval_splits = ("dev",)
    test_splits = ("test",)

    def __init__(self, processor, name: str):
        self.processor = processor
        self.name = name
        self.source = f"{type(processor).__module__}.{type(processor).__qualname__}"
        self.layouts = {
            split: None for split, method in ORIGINAL_METHODS.items() if self._has(method)
        }
        self._labels = {}
        self._examples = {}

    def _has(self, method: str) -> bool:
        found = getattr(type(self.processor), method, None)
        return callable(found) and found is not getattr(DataProcessor, method)

    def options(self) -> dict:
        return {"processor": self.source}

    def split_name(self, split: str) -> str:
        if split not in self.layouts:
            method = ORIGINAL_METHODS.get(split)
            raise UserError(
                f"Task {self.name!r}: {self.source} has no {method}(data_dir)"
                if method
                else f"Task {self.name!r} has no split {split!r}; its splits: train, dev, test"
            )
        return split

    def input_files(self, data_dir: str, split: str) -> list[str]:
        """None that can be named: the reader opens what it likes."""
        self.split_name(split)
        return []

    def examples_key(self, data_dir: str, split: str) -> dict:
        """The labels and a hash of the examples (the reader's files are unknown)."""
        examples = self.get_examples(data_dir, split)
        rows = [[e.guid, e.text_a, e.text_b, e.label] for e in examples]
        digest = hashlib.sha256(json.dumps(rows, ensure_ascii=False).encode("utf-8"))
        return {"labels": self.get_labels(data_dir), "examples_sha256": digest.hexdigest()}

    def get_labels(self, data_dir: str | None = None) -> list[str]:
        if data_dir not in self._labels:
            method = self.processor.get_labels
            required = [
                p
                for p in inspect.signature(method).parameters.values()
                if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
            ]
            labels = method(data_dir) if required else method()
            if isinstance(labels, (str, bytes)) or not hasattr(labels, "__iter__"):
                raise UserError(f"{self.source}.get_labels() returned {labels!r}, not a list")
            labels = [str(label) for label in labels]
            if len(labels) < 2 or len(set(labels)) != len(labels):
                raise UserError(
                    f"{self.source}.get_labels() must list two or more distinct labels, "
                    f"got {labels}"
                )
            self._labels[data_dir] = labels
        return list(self._labels[data_dir])

    def get_examples(self, data_dir: str, split: str) -> list[InputExample]:
        """The split's examples from the reader's method, checked and converted."""
        split = self.split_name(split)
        if (data_dir, split) not in self._examples:
            self._examples[data_dir, split] = self._read_split(data_dir, split)
        return self._examples[data_dir, split]

    def _read_split(self, data_dir: str, split: str) -> list[InputExample]:
        call = f"{self.source}.{ORIGINAL_METHODS[split]}({data_dir!r})"
        try:
            read = getattr(self.processor, ORIGINAL_METHODS[split])(data_dir)
        except NotImplementedError:
            raise UserError(f"{call} is not implemented") from None
        except (FileNotFoundError, tf.errors.NotFoundError) as e:
            if isinstance(e, MissingFileError):
                raise
            raise MissingFileError(f"{call}: {e}") from None
        labels = None if split == "test" else self.get_labels(data_dir)
        return [
            self._example(item, i, split, labels, call, self.label_separator)
            for i, item in enumerate(read)
        ]

    @staticmethod
    def _example(
        item, position: int, split: str, labels, call: str, separator: str | None = None
    ) -> InputExample:
        try:
            guid, text_a, text_b, label = item.guid, item.text_a, item.text_b, item.label
        except AttributeError:
            raise UserError(
                f"{call}: item {position} is a {type(item).__name__}, not an "
                f"InputExample(guid, text_a, text_b, label)"
            ) from None
        where = f"{call}: example {guid!r}"
        text_a = _text(text_a, f"{where}: text_a")
        if text_a is None:
            raise UserError(f"{where}: text_a is None")
        if labels is not None and separator is not None:  # Multi-label.
            label = split_labels("" if label is None else label, separator)
            unknown = [name for name in label if name not in labels]
            if unknown:
                raise UserError(
                    f"{where}: label {unknown[0]!r} is not one of get_labels() {labels}"
                )
        elif labels is not None:  # Test examples' labels are placeholders.
            if label is None:
                raise UserError(f"{where} has no label")
            if str(label) not in labels:
                raise UserError(f"{where}: label {label!r} is not one of get_labels() {labels}")
        return InputExample(
            guid=str(guid),
            text_a=text_a,
            text_b=_text(text_b, f"{where}: text_b"),
            label=None if labels is None else label if separator is not None else str(label),
            index=str(position),
        )

"""The sentence (pair) classification tasks, by name (`get_processor`).

  GLUE (the layout of the GLUE download script): CoLA, SST-2, MRPC, STS-B (a
    regression), QQP, MNLI, QNLI, RTE, WNLI and AX (the diagnostic set);
  XNLI (the `xnli.{dev,test}.tsv` files and the machine-translated MultiNLI
    training data, as the original release reads them);
  SWAG (multiple choice, the official `{train,val,test}.csv`);
  "generic": a user's own TSV or CSV files (`classifier_generic`).

A task is a `classifier_reader.DataProcessor` whose class attributes say where each
split's file is and where its fields are; a new task of the same kind is a class
here and an entry in `PROCESSORS`. A reader written for the original release
(`get_train_examples(data_dir)`, ..., `get_labels()`) works too, as an entry of
`PROCESSORS` or by name, "my_module:MyProcessor", from a module of its own
(`classifier_compat`).

Typical use:
  processor = get_processor("mrpc")  # or get_processor("my_module:MyProcessor")
  examples = processor.get_examples(data_dir, "train")
"""

from __future__ import annotations

import inspect

from common.errors import UserError
from data_prep.classifier import classifier_compat
from data_prep.classifier.classifier_generic import GenericProcessor
from data_prep.classifier.classifier_reader import (
    Column,
    DataProcessor,
    FileLayout,
    MultipleChoiceExample,
    check_width,
    read_field,
    resolve_column,
    rows_and_header,
    tsv,
)

XNLI_LANGUAGES = (
    "ar",
    "bg",
    "de",
    "el",
    "en",
    "es",
    "fr",
    "hi",
    "ru",
    "sw",
    "th",
    "tr",
    "ur",
    "vi",
    "zh",
)


# ----------------------------------------------------------------------------
# GLUE.
# ----------------------------------------------------------------------------

# The columns of the sentence-pair files of STS-B, MNLI, AX, RTE and WNLI.
_PAIR_COLUMNS = dict(text_a="sentence1", text_b="sentence2", index="index")


def _glue_layouts(label: Column, **columns: Column) -> dict[str, FileLayout]:
    """GLUE's usual three files with a header: train.tsv and dev.tsv with the label
    column, test.tsv without."""
    return {
        "train": tsv("train.tsv", label=label, **columns),
        "dev": tsv("dev.tsv", label=label, **columns),
        "test": tsv("test.tsv", **columns),
    }


class ColaProcessor(DataProcessor):
    """CoLA: is a sentence grammatical? Labels "0" (no), "1" (yes).

    train.tsv, dev.tsv: no header; columns source, label, author's label,
      sentence.
    test.tsv: header `index  sentence`.
    """

    name = "cola"
    labels = ("0", "1")
    metrics = ("accuracy", "mcc")
    score_metrics = ("mcc",)
    glue_submission = {"test": "CoLA"}
    layouts = {
        "train": tsv("train.tsv", has_header=False, text_a=3, label=1),
        "dev": tsv("dev.tsv", has_header=False, text_a=3, label=1),
        "test": tsv("test.tsv", text_a="sentence", index="index"),
    }


class Sst2Processor(DataProcessor):
    """SST-2: sentence sentiment, "0" negative, "1" positive.

    train.tsv, dev.tsv: header `sentence  label`.
    test.tsv: header `index  sentence`.
    """

    name = "sst-2"
    labels = ("0", "1")
    glue_submission = {"test": "SST-2"}
    layouts = {
        "train": tsv("train.tsv", text_a="sentence", label="label"),
        "dev": tsv("dev.tsv", text_a="sentence", label="label"),
        "test": tsv("test.tsv", text_a="sentence", index="index"),
    }


class MrpcProcessor(DataProcessor):
    """MRPC: is sentence 2 a paraphrase of sentence 1? "0" no, "1" yes.

    train.tsv, dev.tsv (UTF-8 with a byte-order mark): header
      `Quality  #1 ID  #2 ID  #1 String  #2 String`, Quality being the label.
    test.tsv: header `index  #1 ID  #2 ID  #1 String  #2 String`.
    """

    name = "mrpc"
    labels = ("0", "1")
    metrics = ("accuracy", "f1")
    glue_submission = {"test": "MRPC"}
    layouts = {
        "train": tsv("train.tsv", text_a="#1 String", text_b="#2 String", label="Quality"),
        "dev": tsv("dev.tsv", text_a="#1 String", text_b="#2 String", label="Quality"),
        "test": tsv("test.tsv", text_a="#1 String", text_b="#2 String", index="index"),
    }


class StsbProcessor(DataProcessor):
    """STS-B: similarity of two sentences, a float score in [0, 5] (regression).

    train.tsv, dev.tsv: header `index  genre  filename  year  old_index  source1
      source2  sentence1  sentence2  score`.
    test.tsv: the same without `score`.
    """

    name = "sts-b"
    is_regression = True
    label_range = (0.0, 5.0)
    glue_submission = {"test": "STS-B"}
    layouts = _glue_layouts("score", **_PAIR_COLUMNS)


class QqpProcessor(DataProcessor):
    """QQP: are two Quora questions duplicates? "0" no, "1" yes.

    train.tsv, dev.tsv: header `id  qid1  qid2  question1  question2
      is_duplicate`.
    test.tsv: header `id  question1  question2`.
    """

    name = "qqp"
    labels = ("0", "1")
    metrics = ("accuracy", "f1")
    glue_submission = {"test": "QQP"}
    layouts = _glue_layouts("is_duplicate", text_a="question1", text_b="question2", index="id")


_NLI_LABELS = ("contradiction", "entailment", "neutral")


class MnliProcessor(DataProcessor):
    """MultiNLI: does the premise entail, contradict or not decide the hypothesis?

    All files have a header; the columns read are `index`, `sentence1`
    (premise), `sentence2` (hypothesis) and, in train.tsv and
    dev_{matched,mismatched}.tsv, `gold_label` (the last column).
    test_{matched,mismatched}.tsv have no label. Splits: train, dev_matched
    (alias dev), dev_mismatched, test_matched (alias test), test_mismatched.
    """

    name = "mnli"
    labels = _NLI_LABELS
    layouts = {
        "train": tsv("train.tsv", label="gold_label", **_PAIR_COLUMNS),
        "dev_matched": tsv("dev_matched.tsv", label="gold_label", **_PAIR_COLUMNS),
        "dev_mismatched": tsv("dev_mismatched.tsv", label="gold_label", **_PAIR_COLUMNS),
        "test_matched": tsv("test_matched.tsv", **_PAIR_COLUMNS),
        "test_mismatched": tsv("test_mismatched.tsv", **_PAIR_COLUMNS),
    }
    split_aliases = {"dev": "dev_matched", "test": "test_matched"}
    eval_splits = ("dev_matched", "dev_mismatched")
    test_splits = ("test_matched", "test_mismatched")
    glue_submission = {"test": "MNLI-m", "test_matched": "MNLI-m", "test_mismatched": "MNLI-mm"}


class AxProcessor(DataProcessor):
    """AX, GLUE's diagnostic set, predicted by an MNLI model (no labels given).

    The data directory is GLUE's `diagnostic/`; diagnostic.tsv has the header
    `index  sentence1  sentence2`. The only split is "test".
    """

    name = "ax"
    labels = _NLI_LABELS
    metrics = ("accuracy", "mcc")
    score_metrics = ("mcc",)
    glue_submission = {"test": "AX"}
    layouts = {"test": tsv("diagnostic.tsv", **_PAIR_COLUMNS)}
    eval_splits = ()


class QnliProcessor(DataProcessor):
    """QNLI: does the sentence answer the question? entailment/not_entailment.

    train.tsv, dev.tsv: header `index  question  sentence  label`.
    test.tsv: header `index  question  sentence`.
    """

    name = "qnli"
    labels = ("entailment", "not_entailment")
    glue_submission = {"test": "QNLI"}
    layouts = _glue_layouts("label", text_a="question", text_b="sentence", index="index")


class RteProcessor(DataProcessor):
    """RTE: does sentence 1 entail sentence 2? entailment/not_entailment.

    train.tsv, dev.tsv: header `index  sentence1  sentence2  label`.
    test.tsv: header `index  sentence1  sentence2`.
    """

    name = "rte"
    labels = ("entailment", "not_entailment")
    glue_submission = {"test": "RTE"}
    layouts = _glue_layouts("label", **_PAIR_COLUMNS)


class WnliProcessor(DataProcessor):
    """WNLI: does sentence 1 entail sentence 2 (Winograd)? "0" no, "1" yes.

    train.tsv, dev.tsv: header `index  sentence1  sentence2  label`.
    test.tsv: header `index  sentence1  sentence2`.
    """

    name = "wnli"
    labels = ("0", "1")
    glue_submission = {"test": "WNLI"}
    layouts = _glue_layouts("label", **_PAIR_COLUMNS)


# ----------------------------------------------------------------------------
# XNLI, SWAG and a user's own files.
# ----------------------------------------------------------------------------


class XnliProcessor(DataProcessor):
    """XNLI in one language: entailment, contradiction or neutral.

    Files under the data directory, as the original release expects them:
      multinli/multinli.train.<lang>.tsv (XNLI-MT): a header, then premise,
        hypothesis, label by position; "contradictory" means contradiction.
      xnli.dev.tsv, xnli.test.tsv (XNLI-1.0): header with columns `language`,
        `gold_label`, `sentence1`, `sentence2` (among others); only the rows of
        `xnli_language` are read.
    """

    name = "xnli"
    labels = _NLI_LABELS
    label_aliases = {"contradictory": "contradiction"}

    def __init__(self, xnli_language: str = "zh"):
        if xnli_language not in XNLI_LANGUAGES:
            raise UserError(
                f"xnli_language={xnli_language!r} is not an XNLI language; "
                f"known: {', '.join(XNLI_LANGUAGES)}"
            )
        self.language = xnli_language
        columns = dict(
            text_a="sentence1", text_b="sentence2", label="gold_label", language="language"
        )
        self.layouts = {
            "train": tsv(
                f"multinli/multinli.train.{xnli_language}.tsv", text_a=0, text_b=1, label=2
            ),
            "dev": tsv("xnli.dev.tsv", **columns),
            "test": tsv("xnli.test.tsv", **columns),
        }

    def options(self) -> dict:
        return {"xnli_language": self.language}


class SwagProcessor(DataProcessor):
    """SWAG: which of four endings continues the scene? Labels "0".."3".

    train.csv, val.csv (split "dev"), test.csv of the official release: a
    comma-separated, quoted CSV with a header; the columns read are `sent1`,
    `sent2`, `ending0`..`ending3` and `label` (test.csv has none). Other columns
    (the unnamed row number, video-id, fold-ind, startphrase, gold-source) are
    ignored.

    Each choice is encoded as its own sequence
    `[CLS] sent1 [SEP] sent2 + " " + ending_i [SEP]`, as in the BERT paper
    (section 4.4: sentence A the given sentence, sentence B a possible
    continuation) and Hugging Face's run_swag.py (first sentence `sent1`, second
    `f"{sent2} {ending}"`).
    """

    name = "swag"
    labels = ("0", "1", "2", "3")
    num_choices = 4
    layouts = {
        split: FileLayout(file_name, delimiter=",", quotechar='"')
        for split, file_name in (("train", "train.csv"), ("dev", "val.csv"), ("test", "test.csv"))
    }

    def _read(self, path, layout, split, labels):
        rows, header = rows_and_header(path, layout)
        names = ["sent1", "sent2"] + [f"ending{i}" for i in range(self.num_choices)]
        if split != "test" or "label" in header:
            names.append("label")
        at = {name: resolve_column(name, header, path) for name in names}
        width = max(at.values()) + 1
        examples = []
        for line, fields in rows:
            check_width(fields, width, layout.delimiter, path, line)
            start = read_field(fields, at["sent2"], "sent2", path, line, allow_empty=True).strip()
            endings = [
                read_field(fields, at[f"ending{i}"], f"ending{i}", path, line)
                for i in range(self.num_choices)
            ]
            label = None
            if "label" in at:
                label = self.parse_label(fields[at["label"]], labels, path, line)
            examples.append(
                MultipleChoiceExample(
                    guid=f"{split}-{line}",
                    context=read_field(fields, at["sent1"], "sent1", path, line),
                    choices=tuple(f"{start} {ending}" if start else ending for ending in endings),
                    label=label,
                    index=str(len(examples)),
                )
            )
        return examples


def set_multi_label(processor: DataProcessor, separator: str) -> DataProcessor:
    """Makes `processor` (any task's reader, a user's too) read each label field as
    zero or more labels separated by `separator` (run_classifier's --multi_label);
    returns it."""
    if processor.is_regression or processor.num_choices:
        kind = "a regression" if processor.is_regression else "multiple choice"
        raise UserError(f"--multi_label: task {processor.name!r} is {kind}, not classification")
    if not separator:
        raise UserError("--label_separator is empty: give the character between labels")
    processor.label_separator = separator
    return processor


class PawsProcessor(DataProcessor):
    """PAWS-Wiki (Labeled, Final): is sentence 2 a paraphrase of sentence 1? "0" no,
    "1" yes. Pairs made by word swapping and back translation, so that word overlap
    alone does not tell (Zhang et al., 2019).

    train.tsv, dev.tsv, test.tsv (as the release unpacks them, in `final/`): header
    `id  sentence1  sentence2  label`; every split is labelled, so --do_eval scores
    dev and test (eval_test_accuracy) and --do_predict writes test_results.tsv.
    """

    name = "paws"
    labels = ("0", "1")
    layouts = {
        split: tsv(
            f"{split}.tsv", text_a="sentence1", text_b="sentence2", label="label", index="id"
        )
        for split in ("train", "dev", "test")
    }
    eval_splits = ("dev", "test")


# ----------------------------------------------------------------------------
# By name.
# ----------------------------------------------------------------------------


# The tasks of this project: each declares its files, labels, metrics, score and GLUE
# submission file (`DataProcessor`'s class attributes). A new one is added here.
TASKS = (
    ColaProcessor,
    Sst2Processor,
    MrpcProcessor,
    StsbProcessor,
    QqpProcessor,
    MnliProcessor,
    QnliProcessor,
    RteProcessor,
    WnliProcessor,
    AxProcessor,
    PawsProcessor,
    XnliProcessor,
    SwagProcessor,
    GenericProcessor,
)

# Task name -> reader class. A reader of one's own goes here ("mytask": MyProcessor,
# as the original README says of its `processors`), or stays in a module of one's own:
# --task_name=my_module:MyProcessor.
PROCESSORS = {task.name: task for task in TASKS}


def _lookup_name(task_name: str) -> str:
    return task_name.lower().replace("-", "").replace("_", "")


def task_class(task_name: str) -> type[DataProcessor] | None:
    """The task of `TASKS` named `task_name` (any case, "SST-2" or "sst2"), whatever
    reader `PROCESSORS` now holds under that name, else None: a reader registered under
    a task's name is scored with that task's metrics."""
    wanted = _lookup_name(task_name)
    return next((task for task in TASKS if _lookup_name(task.name) == wanted), None)


def get_processor(task_name: str, **options) -> DataProcessor:
    """Returns the reader of `task_name` (any case; "sst2", "SST-2" both work).

    Args:
      task_name: a key of PROCESSORS, or "module:Class", a reader class in a module
        on the Python path. A reader written for the original release is wrapped
        (`classifier_compat.OriginalStyleReader`).
      **options: the task's own arguments (`xnli_language` for XNLI; the column
        arguments of "generic"). Options that are None are dropped, so a runner
        can pass all its flags.

    Raises:
      ValueError: an unknown task (listing the known ones), a class that cannot be
        loaded or is no reader, or an option the task does not take.
    """
    if ":" in task_name:
        name, cls = task_name, classifier_compat.load_class(task_name)
    else:
        by_lookup = {_lookup_name(name): (name, cls) for name, cls in PROCESSORS.items()}
        name, cls = by_lookup.get(_lookup_name(task_name), (task_name, None))
        if cls is None:
            raise UserError(
                f"Unknown task {task_name!r}; known tasks: {', '.join(PROCESSORS)}, or "
                f"module:Class for a reader class of one's own"
            )
    original_style = classifier_compat.is_original_style(cls)
    if not (original_style or issubclass(cls, DataProcessor)):
        raise UserError(
            f"Task {task_name!r}: {cls.__module__}.{cls.__qualname__} is not a DataProcessor "
            f"(get_train_examples(data_dir), get_dev_examples, get_test_examples, get_labels())"
        )
    options = {key: value for key, value in options.items() if value is not None}
    accepted = set(inspect.signature(cls).parameters)
    unknown = sorted(set(options) - accepted)
    if unknown:
        raise UserError(
            f"Task {name!r} does not take {', '.join(unknown)}; it takes: "
            f"{', '.join(sorted(accepted)) or 'no options'}"
        )
    processor = cls(**options)
    if original_style:
        return classifier_compat.OriginalStyleReader(processor, name)
    processor.name = processor.name or name
    return processor

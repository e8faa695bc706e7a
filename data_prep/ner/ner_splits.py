"""An NER run's files: each CoNLL file read (its tag scheme found) and cut into
windows labelled in the scheme the model learns, the training windows written as
TFRecords, and the predictions written back in the file's own scheme.

  train.tf_record (+ its metadata JSON)   the training windows (`ner_features`)
  eval_predictions.txt, test_predictions.txt
                                          word, gold tag, predicted tag per line
                                          (conlleval's input)
"""

from __future__ import annotations

import dataclasses
import os

from absl import logging

from common.progress import Progress
from data_prep.input_pipeline import RecordMetadata
from data_prep.ner import conll, ner_features, ner_records
from data_prep.text import tokenization

PREDICTION_FILES = {"eval": "eval_predictions.txt", "predict": "test_predictions.txt"}
TRAIN_RECORD = "train.tf_record"


@dataclasses.dataclass
class Split:
    """One input file, read and converted to features.

    Attributes:
        name: "train", "eval" or "predict".
        path: the CoNLL file.
        tag_scheme: its tag scheme (predictions are written in it).
        sentences: its sentences (IOB2 tags).
        features: their windows, in sentence order, labelled in the scheme learnt.
        document_context: whether the windows are cut over whole documents.
    """

    name: str
    path: str
    tag_scheme: str
    sentences: list[conll.Sentence]
    features: list[ner_features.InputFeatures]
    document_context: bool = False


def read_split(name: str, path: str, tag_scheme: str) -> tuple[str, list]:
    """(scheme, sentences) of a file; tag_scheme "auto" guesses the file's scheme."""
    if tag_scheme == "auto":
        tag_scheme = conll.detect_file_tag_scheme(path)
        logging.info("%s file %s: tag scheme %s", name, path, tag_scheme)
    return tag_scheme, conll.read_conll(path, tag_scheme=tag_scheme)


@dataclasses.dataclass(frozen=True)
class Labels:
    """What the model's outputs mean: the label list and the tag scheme it is in."""

    labels: tuple[str, ...]
    scheme: str


def to_features(
    name: str,
    path: str,
    scheme: str,
    sentences: list[conll.Sentence],
    labels: Labels,
    tokenizer: tokenization.FullTokenizer,
    max_seq_length: int,
    doc_stride: int,
    document_context: bool = False,
    progress: Progress | None = None,
) -> Split:
    """A file's sentences as features labelled in `labels.scheme`, cut by document
    with `document_context` if the file marks its documents (else by sentence, and
    `progress` says so)."""
    by_document = document_context and conll.has_documents(sentences)
    if document_context and not by_document and progress is not None:
        progress.say(
            f"{path} has no -DOCSTART- lines: each of its sentences is tagged alone "
            "(document context needs the file's documents)"
        )
    features = ner_features.convert_sentences_to_features(
        sentences,
        labels.labels,
        tokenizer,
        max_seq_length,
        doc_stride,
        label_scheme=labels.scheme,
        progress=progress,
        document_context=by_document,
    )
    logging.info(
        "%s: %d sentences, %d words, %d documents, %d windows%s",
        path,
        len(sentences),
        sum(len(s.words) for s in sentences),
        len({s.document for s in sentences}),
        len(features),
        " over whole documents" if by_document else "",
    )
    return Split(name, path, scheme, sentences, features, by_document)


def training_labels(
    sentences: list[conll.Sentence], file_scheme: str, train_tag_scheme: str
) -> Labels:
    """The labels a model learns from training sentences: in the file's own scheme
    (train_tag_scheme "file") or in the scheme asked for."""
    scheme = file_scheme if train_tag_scheme == "file" else train_tag_scheme
    logging.info("Learning the tags in %s (the training file's scheme is %s)", scheme, file_scheme)
    return Labels(tuple(conll.label_list(sentences, scheme)), scheme)


def write_training_features(
    split: Split,
    labels: Labels,
    output_dir: str,
    tokenizer: tokenization.FullTokenizer,
    max_seq_length: int,
    doc_stride: int,
) -> RecordMetadata:
    """Writes train.tf_record and its metadata JSON (with the labels and their scheme)."""
    record = os.path.join(output_dir, TRAIN_RECORD)
    ner_records.write_tfrecord(split.features, record)
    metadata = ner_records.describe(
        split.sentences,
        split.features,
        labels.labels,
        labels.scheme,
        split.tag_scheme,
        max_seq_length,
        doc_stride,
        tokenizer.do_lower_case,
        len(tokenizer.vocab),
        split.document_context,
    )
    ner_records.write_metadata(record, metadata)
    return metadata


def write_predictions(split: Split, tags: list[list[str]], output_dir: str) -> str:
    """Writes `<eval|test>_predictions.txt` in the split's tag scheme (the chunks
    conlleval reads in the predicted tags, whatever their scheme); returns its path."""
    path = os.path.join(output_dir, PREDICTION_FILES[split.name])
    conll.write_predictions(path, split.sentences, tags, tag_scheme=split.tag_scheme)
    logging.info("Wrote the predictions of %s to %s", split.path, path)
    return path

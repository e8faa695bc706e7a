"""The settings of the corpus pipeline (`corpus_pipeline`) and how it joins paths.

`PipelineSettings` holds everything the pipeline is given, checked when it is
made; `STAGES` names the stages a run may stop after; `join_path` joins a
directory and a name for local paths and for Beam's file systems.
"""

from __future__ import annotations

# First: Beam's worker processes load this module (TensorFlow's start-up lines).
import common.quiet_tensorflow  # noqa: F401

import dataclasses
import os

from apache_beam.io.filesystems import FileSystems

from common.errors import UserError
from data_prep.pretraining import corpus
from data_prep.pretraining.pretraining_records import RunOptions

STAGES = ("sentences", "vocab", "shards")


@dataclasses.dataclass(frozen=True)
class PipelineSettings:
    """Everything the pipeline needs (the command line, as values).

    Attributes:
        input_files: (path, size in bytes) of each input file.
        input_format: one of `corpus.FORMATS`.
        output_dir: receives the shards and the summary.
        sentences_dir: receives the sentences of raw-text input.
        vocab_file: the vocabulary read, or written when `learn_vocab_size`.
        learn_vocab_size: 0, or the size of the vocabulary to learn.
        max_input_words: the most frequent words the vocabulary is learned from.
        shard_bytes: size of the windows that cut files into document shards.
        bad_input: "skip" or "fail" (see `corpus.BadInputLog`).
        stop_after: the last stage run (one of `STAGES`).
        run_id: names the run in each shard's metadata (`pipeline_run`) and in the
            summary (set by `corpus_pipeline.run`).
        run: tokenization, instance and masking settings (`random_seed` is the
            run's; input and output files are set per shard).
    """

    input_files: tuple
    input_format: str
    output_dir: str
    sentences_dir: str
    vocab_file: str
    run: RunOptions
    learn_vocab_size: int = 0
    max_input_words: int = 5_000_000
    shard_bytes: int = 16_000_000
    bad_input: str = "fail"
    stop_after: str = "shards"
    run_id: str = ""

    def __post_init__(self):
        if self.input_format not in corpus.FORMATS:
            raise UserError(
                "--input_format=%s is not one of %s."
                % (self.input_format, ", ".join(corpus.FORMATS))
            )
        if self.stop_after not in STAGES:
            raise UserError(
                "--stop_after=%s is not one of %s." % (self.stop_after, ", ".join(STAGES))
            )
        if self.stop_after == "vocab" and not self.learn_vocab_size:
            raise UserError("--stop_after=vocab needs --learn_vocab_size.")
        if self.stop_after == "sentences" and self.input_format == "sentences":
            raise UserError(
                "--stop_after=sentences needs raw input (--input_format=text or jsonl)."
            )
        if self.shard_bytes < 1:
            raise UserError("The shard size must be positive.")
        if self.bad_input not in corpus.POLICIES:
            raise UserError(
                "--bad_input=%s is not one of %s." % (self.bad_input, ", ".join(corpus.POLICIES))
            )

    @property
    def raw(self) -> bool:
        return self.input_format != "sentences"

    def shard_options(
        self, shard: corpus.DocumentShard, vocab_file: str, output_file: str
    ) -> RunOptions:
        """The run of one shard: its file, its output and seed + its window."""
        return dataclasses.replace(
            self.run,
            input_files=(shard.path,),
            output_files=(output_file,),
            vocab_file=vocab_file,
            random_seed=self.run.random_seed + shard.index,
        )


def join_path(directory: str, name: str) -> str:
    """`directory`/`name`, for local paths and Beam's file systems."""
    return (
        FileSystems.join(directory, name) if "://" in directory else os.path.join(directory, name)
    )

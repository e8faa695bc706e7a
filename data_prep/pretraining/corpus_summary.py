"""Statistics of the corpus pipeline (`corpus_pipeline`) and its summary file.

Every stage emits its counts as a dict (`shard_stats`): instances, tokens,
masked predictions, the instance length histogram, bad input and its first
examples. `MergeStats` adds them up across workers; `summarize` turns the totals
into the run's summary, written last as `<output_dir>/summary.json`
(`write_summary`).
"""

from __future__ import annotations

# First: Beam's worker processes load this module (TensorFlow's start-up lines).
import common.quiet_tensorflow  # noqa: F401

import apache_beam as beam

from common.errors import UserError
from data_prep.pretraining import corpus
from common import file_io
from data_prep.pretraining.corpus_settings import PipelineSettings, join_path
from data_prep.pretraining.pretraining_instances import Stats

SUMMARY_NAME = "summary.json"
SUMMARY_FORMAT = "bert_pretraining_pipeline_summary/1"
_MAX_EXAMPLES = 100


def shard_stats(
    stats: Stats | None = None, bad: corpus.BadInputLog | None = None, **counts
) -> dict:
    """One element of the statistics that `MergeStats` adds up."""
    result = dict(counts)
    if stats is not None:
        summary = stats.summary()
        result.update(
            {
                key: summary[key]
                for key in (
                    "lines",
                    "documents",
                    "one_sentence_documents",
                    "long_lines",
                    "instances",
                    "tokens",
                    "masked",
                    "random_next",
                )
            }
        )
        result["lengths"] = dict(summary["lengths"])
    if bad is not None:
        result["bad_input"] = dict(bad.counts)
        result["bad_input_examples"] = list(bad.examples)
    return result


class MergeStats(beam.CombineFn):
    """Adds up statistics: numbers and dicts of numbers by key, lists joined
    (up to 100 entries)."""

    def create_accumulator(self):
        return {}

    def add_input(self, accumulator, element):
        for key, value in element.items():
            if isinstance(value, dict):
                merged = accumulator.setdefault(key, {})
                for name, count in value.items():
                    merged[name] = merged.get(name, 0) + count
            elif isinstance(value, list):
                accumulator[key] = (accumulator.get(key, []) + value)[:_MAX_EXAMPLES]
            else:
                accumulator[key] = accumulator.get(key, 0) + value
        return accumulator

    def merge_accumulators(self, accumulators):
        merged = self.create_accumulator()
        for accumulator in accumulators:
            self.add_input(merged, accumulator)
        return merged

    def extract_output(self, accumulator):
        return accumulator


def summarize(totals: dict, settings: PipelineSettings, vocab_file: str) -> dict:
    """The run's summary from the added-up statistics."""
    tokens, instances = totals.get("tokens", 0), totals.get("instances", 0)
    lengths = {int(length): count for length, count in totals.get("lengths", {}).items()}
    run = settings.run
    return {
        "format": SUMMARY_FORMAT,
        "input_files": len(settings.input_files),
        "input_format": settings.input_format,
        "document_shards": totals.get("document_shards", 0),
        "shards_written": totals.get("shards_written", 0),
        "raw_documents": totals.get("raw_documents", 0),
        "sentences_written": totals.get("sentences_written", 0),
        "lines": totals.get("lines", 0),
        "sentences": totals.get("sentences", 0),
        "documents": totals.get("documents", 0),
        "one_sentence_documents": totals.get("one_sentence_documents", 0),
        "long_lines": totals.get("long_lines", 0),
        "instances": instances,
        "tokens": tokens,
        "masked": totals.get("masked", 0),
        "masked_fraction": totals.get("masked", 0) / max(tokens, 1),
        "random_next_fraction": totals.get("random_next", 0) / max(instances, 1),
        "length_histogram": {str(length): lengths[length] for length in sorted(lengths)},
        "bad_input": totals.get("bad_input", {}),
        "bad_input_examples": totals.get("bad_input_examples", []),
        "vocab_file": vocab_file,
        "learned_vocab_size": settings.learn_vocab_size,
        "settings": {
            "max_seq_length": run.instance.max_seq_length,
            "max_predictions_per_seq": run.masking.max_predictions_per_seq,
            "do_lower_case": run.do_lower_case,
            "preserve_unused_tokens": run.preserve_unused_tokens,
            "do_whole_word_mask": run.masking.do_whole_word_mask,
            "next_sentence_prediction": run.instance.next_sentence_prediction,
            "random_seed": run.random_seed,
            "dupe_factor": run.dupe_factor,
            "masked_lm_prob": run.masking.masked_lm_prob,
            "short_seq_prob": run.instance.short_seq_prob,
            "shard_bytes": settings.shard_bytes,
            "bad_input": settings.bad_input,
            "stop_after": settings.stop_after,
        },
    }


def check_output(totals: dict, settings: PipelineSettings) -> None:
    """Raises `UserError` if the run made nothing: no shard (or, stopping after the
    sentences, no sentence), because the input holds no document with a token or
    all of it was skipped as bad input."""
    made, what = (
        ("sentences_written", "sentences file")
        if settings.stop_after == "sentences"
        else ("shards_written", "shard")
    )
    if settings.stop_after == "vocab" or totals.get(made, 0):
        return
    skipped = totals.get("bad_input", {})
    reason = (
        "all of it was skipped as bad input (%s; the first: %s)"
        % (
            ", ".join("%d %s" % (count, kind) for kind, count in sorted(skipped.items())),
            (totals.get("bad_input_examples") or ["?"])[0],
        )
        if skipped
        else "it holds no document with a token (%d lines read)" % totals.get("lines", 0)
    )
    count = len(settings.input_files)
    raise UserError(
        "No %s written from the %d input file%s: %s."
        % (what, count, "" if count == 1 else "s", reason)
    )


PENDING_NAME = ".summary.json.pending"


def write_summary(totals: dict, settings: PipelineSettings, vocab_file: str) -> str:
    """Writes the summary under a hidden name, `<output_dir>/.summary.json.pending`,
    returns its path. `corpus_pipeline.run` makes it summary.json once the whole
    pipeline has succeeded: a stage of the pipeline that failed after this one ran
    leaves no summary. A run that made nothing raises `UserError` instead
    (`check_output`)."""
    check_output(totals, settings)
    path = join_path(settings.output_dir, PENDING_NAME)
    summary = dict(summarize(totals, settings, vocab_file), run_id=settings.run_id)
    file_io.write_json(path, summary, sort_keys=False)
    return path

"""Every reader of user files, fuzzed with hypothesis: `READERS` and `fuzz`.

A `Reader` draws cases (the files a run reads: name -> bytes, and the options it
reads them with) from damaged copies of real files (`fuzz_damage`, seeds in
`fuzz_seeds`) and from generated input, and reads a case as a run does. The contract
(`outcome`): the input is accepted (whatever is skipped is counted), or a `UserError`
is raised whose message names the file; anything else ("other") is a bug, and so is
a read that takes more than `HANG_SECONDS`.

Profiles: "ci" (the default suite: `CI_EXAMPLES` examples per reader, fewer for the
costliest (`Reader.ci_examples`), the same ones every run), "large" (10,000 per
reader, new ones every run), chosen with the environment variable FUZZ_PROFILE or
`python -m benchmarks.robustness.fuzz_readers --examples`.
"""

from __future__ import annotations

import bz2
import collections
import contextlib
import dataclasses
import functools
import gzip
import os
import shutil
import signal
import tempfile
import traceback
from typing import Callable

import hypothesis
from hypothesis import HealthCheck, Phase
from hypothesis import strategies as st

from tests.helpers import fuzz_seeds as seeds
from common.errors import UserError
from tests.helpers.fuzz_damage import (
    JSON_VALUES,
    OPERATIONS,
    damage,
    damaged,
    damaged_json,
    generated_text,
)

HANG_SECONDS = 60
CI_EXAMPLES = 200

hypothesis.settings.register_profile(
    "ci",
    max_examples=CI_EXAMPLES,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
hypothesis.settings.register_profile(
    "large",
    max_examples=10_000,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)


@dataclasses.dataclass(frozen=True)
class Reader:
    """A reader of user files and the cases it is fuzzed with.

    Attributes:
      name: as in the fuzzing table.
      cases: () -> strategy of (files: {relative path: bytes}, options: dict).
      read: (directory holding the files, options) -> None; the reader under test.
      rejects: some damaged input is refused (not so for a feature cache: made again).
      ci_examples: examples in the "ci" profile (fewer for the readers whose every
        case costs a TensorFlow pipeline, to keep the default suite short).
    """

    name: str
    cases: Callable[[], st.SearchStrategy]
    read: Callable[[str, dict], None]
    rejects: bool = True
    ci_examples: int = CI_EXAMPLES


class Hang(Exception):
    """A read ran longer than HANG_SECONDS."""


@contextlib.contextmanager
def _hang_guard(seconds: int = HANG_SECONDS):
    def alarm(signum, frame):
        raise Hang(f"no answer in {seconds} s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def outcome(reader: Reader, case) -> tuple[str, str]:
    """("accepted" | "rejected" | "other", detail) of reading one case."""
    files, options = case
    directory = tempfile.mkdtemp(prefix="fuzz-")
    try:
        for name, data in files.items():
            path = os.path.join(directory, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(data)
        with _hang_guard():
            reader.read(directory, options)
        return "accepted", ""
    except UserError as e:
        if directory not in str(e):
            return "other", f"UserError naming no file: {e}"
        return "rejected", ""
    except Exception as e:  # pylint: disable=broad-except
        return "other", "".join(traceback.format_exception(e)[-6:])
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def fuzz(
    reader: Reader,
    max_examples: int | None = None,
    seed: int | None = None,
    raise_on_other: bool = True,
    profile: str | None = None,
) -> tuple[collections.Counter, list[str]]:
    """Reads `max_examples` cases (default: the profile's); returns the count of each
    outcome and the details of "other" ones. With `raise_on_other` the first "other"
    fails, shrunk by hypothesis to a small case."""
    profile = profile or os.environ.get("FUZZ_PROFILE", "ci")
    if max_examples is None and profile == "ci":
        max_examples = reader.ci_examples
    counts, others = collections.Counter(), []
    phases = (Phase.generate, Phase.shrink) if raise_on_other else (Phase.generate,)
    config = hypothesis.settings(
        hypothesis.settings.get_profile(profile),
        phases=phases,
        **({"max_examples": max_examples} if max_examples else {}),
    )

    @config
    @hypothesis.given(reader.cases())
    def run(case):
        kind, detail = outcome(reader, case)
        counts[kind] += 1
        if kind == "other":
            others.append(detail)
            if raise_on_other:
                raise AssertionError(f"{reader.name}: {detail}")

    if seed is not None:
        run = hypothesis.seed(seed)(run)
    run()
    return counts, others


# ----------------------------------------------------------------------------
# Cases.
# ----------------------------------------------------------------------------


def one_file(name: str, data: bytes, generated=None, options=None):
    """Cases of one file: `data` damaged (and `generated` input, if given)."""
    content = damaged(data)
    if generated is not None:
        content = st.one_of(content, content, content, generated)
    return st.tuples(st.fixed_dictionaries({name: content}), st.just(options or {}))


def json_file(name: str, value, options=None):
    """Cases of one JSON file: reshaped and damaged, or any JSON."""
    content = st.one_of(
        damaged_json(value),
        damaged_json(value),
        damaged(seeds.dump(value)),
        JSON_VALUES.map(seeds.dump),
    )
    return st.tuples(st.fixed_dictionaries({name: content}), st.just(options or {}))


def file_set(files: dict[str, bytes], damageable: list[str], json_names=()):
    """Cases of several files, one of `damageable` damaged (JSON ones reshaped too)."""

    def draw(choice):
        name = damageable[choice % len(damageable)]
        if name in json_names:
            content = damaged_json(seeds.load(files[name]))
        else:
            content = damaged(files[name])
        return content.map(lambda data: ({**files, name: data}, {}))

    return st.integers(0, len(damageable) - 1).flatmap(draw)


TSV_ROWS = st.lists(st.lists(st.text(max_size=12), max_size=6).map("\t".join), max_size=8).map(
    lambda rows: "\n".join(rows).encode()
)
CSV_ROWS = st.lists(st.lists(st.text(max_size=12), max_size=6).map(",".join), max_size=8).map(
    lambda rows: "\n".join(rows).encode()
)
CONLL_TAGS = ("O", "B-X", "I-X", "E-X", "S-X", "B-Y", "I-Y", "B-", "I-Y-Z", "X", "-X-", "[", ".")
CONLL_LINES = st.lists(
    st.one_of(
        st.just(""),
        st.tuples(st.text(max_size=6), st.sampled_from(CONLL_TAGS)).map(" ".join),
        st.text(max_size=12),
    ),
    max_size=20,
).map(lambda lines: "\n".join(lines).encode())


# ----------------------------------------------------------------------------
# Compressed corpora.
# ----------------------------------------------------------------------------

COMPRESSORS = {"": lambda data: data, ".gz": gzip.compress, ".bz2": bz2.compress}
DECOMPRESSORS = {".gz": gzip.decompress, ".bz2": bz2.decompress}


def corpus_cases(name: str, text: bytes, formats: tuple, policies=("fail", "skip")):
    """A corpus file of `text` damaged, maybe compressed, its compressed bytes maybe
    damaged too; options: input format, bad-input policy, compression, window size."""
    return st.builds(
        lambda content, suffix, after, input_format, policy, shard_bytes: (
            {name + suffix: damage(COMPRESSORS[suffix](content), after)},
            dict(
                file=name + suffix,
                input_format=input_format,
                policy=policy,
                shard_bytes=shard_bytes,
            ),
        ),
        st.one_of(damaged(text), damaged(text), generated_text(" .\n\t")),
        st.sampled_from(tuple(COMPRESSORS)),
        st.lists(OPERATIONS, max_size=2),
        st.sampled_from(formats),
        st.sampled_from(policies),
        st.sampled_from((256, 1024, 1 << 20)),
    )


def strictly_whole(path: str) -> bool:
    """Whether Python's own decompressor reads the compressed file to its end."""
    suffix = os.path.splitext(path)[1]
    if suffix not in DECOMPRESSORS:
        return True
    try:
        with open(path, "rb") as f:
            DECOMPRESSORS[suffix](f.read())
        return True
    except Exception:  # pylint: disable=broad-except
        return False


# ----------------------------------------------------------------------------
# The readers.
# ----------------------------------------------------------------------------


def _task(task: str, split: str, **options):
    def read(directory, _):
        from data_prep.classifier import classifier_tasks

        classifier_tasks.get_processor(task, **options).get_examples(directory, split)

    return read


def _squad(is_training: bool, version_2: bool):
    def read(directory, _):
        from data_prep.squad import squad_reader

        squad_reader.read_squad_file(os.path.join(directory, "data.json"), is_training, version_2)

    return read


def _conll(scheme: str):
    def read(directory, _):
        from data_prep.ner import conll

        path = os.path.join(directory, "train.txt")
        conll.detect_file_tag_scheme(path)
        conll.read_conll(path, scheme)

    return read


@functools.cache
def _tokenizer():
    from data_prep.text import tokenization

    return tokenization.FullTokenizer(seeds.VOCAB_FILE, do_lower_case=True)


@functools.cache
def _corpus_stages(input_format: str, policy: str, shard_bytes: int):
    """The pipeline's stages (Beam DoFns) for one format, policy and window size."""
    from data_prep.pretraining import corpus_settings, corpus_stages
    from data_prep.pretraining import pretraining_instances as pti, pretraining_records as ptr

    output = os.path.join(seeds.scratch(), f"corpus-{input_format}-{policy}-{shard_bytes}")
    os.makedirs(output)  # As the pipeline makes it before its stages run.
    run = ptr.RunOptions(
        input_files=(),
        output_files=(),
        vocab_file=seeds.VOCAB_FILE,
        dupe_factor=1,
        instance=pti.InstanceOptions(max_seq_length=seeds.SHARD_SEQ),
        masking=pti.MaskingOptions(max_predictions_per_seq=seeds.SHARD_PREDICTIONS),
    )
    settings = corpus_settings.PipelineSettings(
        input_files=(),
        input_format=input_format,
        output_dir=output,
        sentences_dir=os.path.join(output, "sentences"),
        vocab_file=seeds.VOCAB_FILE,
        run=run,
        shard_bytes=shard_bytes,
        bad_input=policy,
    )
    split, build = corpus_stages.SplitSentences(settings), corpus_stages.BuildShard(settings)
    split.setup()
    build.setup()
    return settings, corpus_stages.ScanWindow(settings), split, build


def _split_outputs(outputs, main: list, stats: list) -> None:
    from apache_beam.pvalue import TaggedOutput

    for output in outputs:
        if not isinstance(output, TaggedOutput):
            main.append(output)
        elif output.tag == "stats":
            stats.append(output.value)


def read_corpus(directory: str, options: dict) -> None:
    """The corpus pipeline's reading of one file: its windows scanned and planned into
    document shards, raw text split into sentences, shards built, as the Beam stages
    do it. A damaged compressed file must be rejected or counted as bad input."""
    from data_prep.pretraining import corpus, corpus_pipeline, corpus_stages

    path = os.path.join(directory, options["file"])
    size = os.path.getsize(path)
    settings, scan, split, build = _corpus_stages(
        options["input_format"], options["policy"], options["shard_bytes"]
    )
    windows = corpus_pipeline._windows(path, size, settings.shard_bytes)
    stats, shards = [], []
    if windows == 1:
        end = None if corpus.is_compressed(path) else size
        shards = [corpus.DocumentShard(path, 0, 0, end, 1, corpus.shard_name(path, 0, 1))]
    else:
        scans = []
        for index in range(windows):
            _split_outputs(scan.process((path, size, index)), scans, stats)
        shards = corpus_stages.plan_file((path, scans), {path: size})
    if settings.raw:
        sentence_shards = []
        for shard in shards:
            _split_outputs(split.process(shard), sentence_shards, stats)
        shards = sentence_shards
    for shard in shards:
        stats += build.process(shard, seeds.VOCAB_FILE)
    reported = sum(s.get("bad_input", {}).get("damaged_file", 0) for s in stats)
    assert reported or strictly_whole(path), f"{path}: damaged, read without a word"


def read_sentences(directory: str, options: dict) -> None:
    """create_pretraining_data's reading of its input (documents of token ids)."""
    from data_prep.pretraining import pretraining_instances as pti

    path = os.path.join(directory, options["file"])
    pti.read_documents([path], _tokenizer(), seeds.SHARD_SEQ - 3, pti.Stats())
    assert strictly_whole(path), f"{path}: damaged, read without a word"


def read_vocab(directory: str, _) -> None:
    from data_prep.pretraining import pretraining_instances as pti
    from data_prep.text import tokenization

    path = os.path.join(directory, "vocab.txt")
    tokenizer = tokenization.FullTokenizer(path, do_lower_case=True)
    pti.VocabIds.from_vocab(tokenizer.vocab, path)
    tokenizer.tokenize_to_ids("BERT reads damaged files, ünïcödé and all.")


def read_config(directory: str, _) -> None:
    from modeling.config import BertConfig

    BertConfig.from_json_file(os.path.join(directory, "config.json"))


def read_shard(directory: str, _) -> None:
    """run_pretraining's checks of a shard, then every batch of it."""
    from data_prep import damage
    from data_prep.pretraining import pretraining_data

    path = os.path.join(directory, "shard.tfrecord")
    pretraining_data.check_shard_runs([path])
    preserve = pretraining_data.recorded_setting([path], "preserve_unused_tokens", bool)
    metadata = pretraining_data.shards_metadata(
        [path], seeds.SHARD_SEQ, seeds.SHARD_PREDICTIONS, 30522, True, preserve
    )
    with damage.naming_damaged_records([path]):
        for _ in pretraining_data.pretraining_dataset([path], metadata, 8, is_training=False):
            pass


def read_feature_cache(directory: str, _) -> None:
    """A classifier's feature cache reused (or made again), then every batch of it."""
    from data_prep.classifier import classifier_features, classifier_tasks
    from data_prep.text import tokenization

    cache = os.path.join(directory, "train.tf_record")
    metadata = classifier_features.get_or_create_features(
        classifier_tasks.get_processor("mrpc"),
        directory,
        "train",
        cache,
        tokenization.FullTokenizer(seeds.VOCAB_FILE, True),
        32,
    )
    for _ in classifier_features.build_dataset(cache, metadata, 4, is_training=False):
        pass


def read_checkpoint(directory: str, _) -> None:
    from modeling import checkpoint_readers

    reader = checkpoint_readers.open_checkpoint(directory)
    for name in reader.shapes:
        reader.get(name)


def read_conlleval(directory: str, _) -> None:
    from evaluation import conlleval

    conlleval.evaluate_file(os.path.join(directory, "train.txt"))


def read_squad_eval(directory: str, _) -> None:
    from evaluation import squad_eval

    squad_eval.evaluate_file(
        os.path.join(directory, "data.json"),
        squad_eval.read_predictions(os.path.join(directory, "predictions.json")),
        squad_eval.read_null_odds(os.path.join(directory, "null_odds.json")),
    )


def generated_records() -> st.SearchStrategy[bytes]:
    """TFRecord files of Examples with any int features of the shards' names."""
    names = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids")
    names += ("masked_lm_weights", "next_sentence_labels")
    example = st.dictionaries(
        st.sampled_from(names), st.lists(st.integers(-3, 40000), max_size=40), max_size=7
    )
    return st.lists(example, max_size=4).map(seeds.tfrecord_bytes)


def _shard_cases(with_metadata: bool):
    files = seeds.pretraining_shard()
    if with_metadata:
        return file_set(files, list(files), json_names=("shard.tfrecord.meta.json",))
    shard = {"shard.tfrecord": files["shard.tfrecord"]}
    return st.one_of(
        file_set(shard, ["shard.tfrecord"]),
        generated_records().map(lambda data: ({"shard.tfrecord": data}, {})),
    )


def _checkpoint_cases(kind: str):
    files = seeds.checkpoints()[kind]
    return file_set(files, sorted(files), json_names=[n for n in files if n.endswith(".json")])


def _squad_eval_cases():
    predictions, odds = seeds.squad_predictions()
    files = {
        "data.json": seeds.dump(seeds.squad_v2()),
        "predictions.json": seeds.dump(predictions),
        "null_odds.json": seeds.dump(odds),
    }
    return file_set(files, list(files), json_names=list(files))


def _readers() -> list[Reader]:
    def single(name, read, file_name, seed, generated=None):
        return Reader(name, lambda: one_file(file_name, seed(), generated), read)

    def corpus_reader(name, seed, formats, read):
        return Reader(name, lambda: corpus_cases("corpus.txt", seed(), formats), read)

    return [
        single(
            "GLUE MRPC (header by name, BOM)",
            _task("mrpc", "train"),
            "train.tsv",
            seeds.mrpc,
            TSV_ROWS,
        ),
        single(
            "GLUE STS-B (regression)", _task("sts-b", "train"), "train.tsv", seeds.stsb, TSV_ROWS
        ),
        single("GLUE CoLA (no header)", _task("cola", "train"), "train.tsv", seeds.cola, TSV_ROWS),
        single(
            "XNLI dev (language column)",
            _task("xnli", "dev", xnli_language="en"),
            "xnli.dev.tsv",
            seeds.xnli,
            TSV_ROWS,
        ),
        single("SWAG (quoted CSV)", _task("swag", "dev"), "val.csv", seeds.swag, CSV_ROWS),
        single(
            "generic CSV",
            _task("generic", "train", text_a_column="text", label_column="label"),
            "train.csv",
            seeds.generic_csv,
            CSV_ROWS,
        ),
        single(
            "generic TSV (no header)",
            _task("generic", "train", text_a_column="1", label_column="0", has_header=False),
            "train.tsv",
            seeds.generic_tsv,
            TSV_ROWS,
        ),
        Reader(
            "SQuAD v1.1 (training)",
            lambda: json_file("data.json", seeds.squad_v1()),
            _squad(True, False),
        ),
        Reader(
            "SQuAD v2.0 (training)",
            lambda: json_file("data.json", seeds.squad_v2()),
            _squad(True, True),
        ),
        Reader(
            "SQuAD v2.0 (prediction)",
            lambda: json_file("data.json", seeds.squad_v2()),
            _squad(False, True),
        ),
        single("CoNLL IOB1", _conll("iob1"), "train.txt", lambda: seeds.conll("iob1"), CONLL_LINES),
        single("CoNLL IOB2", _conll("iob2"), "train.txt", lambda: seeds.conll("iob2"), CONLL_LINES),
        single(
            "CoNLL IOBES", _conll("iobes"), "train.txt", lambda: seeds.conll("iobes"), CONLL_LINES
        ),
        corpus_reader("corpus: sentences (pipeline)", seeds.sentences, ("sentences",), read_corpus),
        corpus_reader("corpus: text (pipeline)", seeds.raw_text, ("text",), read_corpus),
        corpus_reader("corpus: JSON lines (pipeline)", seeds.jsonl, ("jsonl",), read_corpus),
        corpus_reader(
            "corpus: create_pretraining_data", seeds.sentences, ("sentences",), read_sentences
        ),
        single("vocabulary", read_vocab, "vocab.txt", seeds.vocab, generated_text("[]#abc")),
        Reader(
            "bert_config.json", lambda: json_file("config.json", seeds.bert_config()), read_config
        ),
        Reader(
            "Hugging Face config.json",
            lambda: json_file("config.json", seeds.hf_config()),
            read_config,
        ),
        Reader(
            "pre-training shard + metadata",
            lambda: _shard_cases(True),
            read_shard,
            ci_examples=100,
        ),
        Reader(
            "pre-training shard, no metadata",
            lambda: _shard_cases(False),
            read_shard,
            ci_examples=100,
        ),
        Reader(
            "classifier feature cache",
            lambda: file_set(
                seeds.feature_cache(),
                ["train.tf_record", "train.tf_record.meta.json"],
                json_names=("train.tf_record.meta.json",),
            ),
            read_feature_cache,
            rejects=False,
            ci_examples=50,
        ),
        Reader("checkpoint: TF1 (.index/.data)", lambda: _checkpoint_cases("tf1"), read_checkpoint),
        Reader("checkpoint: TF2 (ours)", lambda: _checkpoint_cases("tf2"), read_checkpoint),
        Reader(
            "checkpoint: Hugging Face safetensors", lambda: _checkpoint_cases("hf"), read_checkpoint
        ),
        single("conlleval input", read_conlleval, "train.txt", seeds.conlleval_input, CONLL_LINES),
        Reader("SQuAD eval: data, predictions, null odds", _squad_eval_cases, read_squad_eval),
    ]


READERS = {reader.name: reader for reader in _readers()}

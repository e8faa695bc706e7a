"""Tests of data_prep/pretraining/corpus_pipeline.py (the Beam pipeline, with its settings, stages
and summary in corpus_settings.py, corpus_stages.py and corpus_summary.py) and its
command line, data_prep/pretraining_pipeline.py.

Most runs are in-process (the DirectRunner's in-memory mode, a few seconds
each); the slow test runs the command line of the issue with two worker
processes. Records are compared with `create_pretraining_data` run on each file
(or piece of a file) alone, which tests/data_prep/test_create_pretraining_data.py checks
against the original release, and directly with the original release.
"""

import dataclasses
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest
import tensorflow as tf
from absl import flags
from apache_beam.options.pipeline_options import PipelineOptions

from data_prep.pretraining import corpus
from data_prep.pretraining import corpus_pipeline as cp
from data_prep.pretraining import corpus_settings, corpus_summary, pretraining_data
from data_prep.pretraining import pretraining_instances as pti
from data_prep.pretraining import pretraining_records as ptr
from data_prep import pretraining_pipeline as pp
from data_prep.text import tokenization
from data_prep.text import wordpiece_vocab
from tests.helpers import pretraining_data_helpers as cpd_tests
from tests.helpers import repo_pythonpath

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
CORPUS = sorted((REPO_ROOT / "sample_data" / "corpus").glob("*.txt"))
SQUAD_JSONL = REPO_ROOT / "sample_data" / "raw" / "squad_dev_articles.jsonl"


def settings(
    tmp_path, inputs, vocab_file, input_format="sentences", dupe_factor=2, **kwargs
) -> corpus_settings.PipelineSettings:
    masking = pti.MaskingOptions(do_whole_word_mask=kwargs.pop("do_whole_word_mask", False))
    run = ptr.RunOptions(
        input_files=(),
        output_files=(),
        vocab_file=vocab_file,
        dupe_factor=dupe_factor,
        masking=masking,
        random_seed=kwargs.pop("random_seed", 12345),
    )
    return corpus_settings.PipelineSettings(
        input_files=tuple(cp.match_input_files(",".join(map(str, inputs)))),
        input_format=input_format,
        output_dir=str(tmp_path / "shards"),
        sentences_dir=str(tmp_path / "shards" / "sentences"),
        vocab_file=vocab_file,
        run=run,
        **kwargs,
    )


def run_in_process(pipeline_settings) -> dict:
    return cp.run(pipeline_settings, PipelineOptions(["--runner=DirectRunner"]))


def alone(tmp_path, text_file, vocab_file, seed, name, **kwargs) -> list:
    """Records of create_pretraining_data run on one file alone."""
    out = tmp_path / "alone" / (name + ".tfrecord")
    ptr.run(
        cpd_tests.options([text_file], [out], vocab_file, random_seed=seed, dupe_factor=2, **kwargs)
    )
    return cpd_tests.read_records(out)


@pytest.fixture(scope="module")
def originals(tmp_path_factory, vocab_file):
    """The original release's runs (dupe_factor 2) that the tests below compare ours
    with, all in one process (TensorFlow starts once): {"plain": its shard of the second
    corpus file, "whole_word": {file stem: its shard of the file with whole-word
    masking}}."""
    d = tmp_path_factory.mktemp("originals")
    made = {
        "plain": d / "original.tfrecord",
        "whole_word": {path.stem: d / ("original_%s.tfrecord" % path.stem) for path in CORPUS},
    }
    runs = [(cpd_tests.flag_args(CORPUS[1], made["plain"], vocab_file, dupe_factor=2), False)]
    for path in CORPUS:
        output = made["whole_word"][path.stem]
        runs.append((cpd_tests.flag_args(path, output, vocab_file, dupe_factor=2), True))
    cpd_tests.run_originals(runs, d)
    return made


def test_each_file_equals_the_original_and_num_workers(tmp_path, vocab_file, originals):
    """Two files below the shard size: one shard each, named after the file,
    equal to --num_workers' shards and to the original's run on each file."""
    summary = run_in_process(settings(tmp_path, CORPUS, vocab_file))
    workers = tmp_path / "workers"
    ptr.run(
        cpd_tests.options(
            CORPUS,
            [workers / "bert_paper_v1.tfrecord", workers / "bert_paper_v2.tfrecord"],
            vocab_file,
            dupe_factor=2,
            per_input_file=True,
        )
    )
    shards = tmp_path / "shards"
    assert sorted(p.name for p in shards.glob("*.tfrecord")) == [
        "bert_paper_v1.tfrecord",
        "bert_paper_v2.tfrecord",
    ]
    counted = 0
    for path in CORPUS:
        ours = cpd_tests.read_records(shards / (path.stem + ".tfrecord"))
        assert len(ours) > 100
        assert ours == cpd_tests.read_records(workers / (path.stem + ".tfrecord"))
        metadata = pretraining_data.read_metadata(str(shards / (path.stem + ".tfrecord")))
        assert metadata["num_instances"] == len(ours)
        assert metadata["random_seed"] == 12345
        assert metadata["document_shard"]["first_byte"] == 0
        assert metadata["document_shard"]["end_byte"] == path.stat().st_size
        counted += len(ours)
    assert cpd_tests.read_records(shards / "bert_paper_v2.tfrecord") == cpd_tests.canonical(
        cpd_tests.read_records(originals["plain"])
    )
    assert summary["instances"] == counted
    non_blank = sum(
        1
        for path in CORPUS
        for line in path.read_text(encoding="utf-8").split("\n")
        if line.strip()
    )
    assert summary["sentences"] == non_blank and summary["documents"] == 41
    assert summary["shards_written"] == summary["document_shards"] == 2
    assert sum(summary["length_histogram"].values()) == counted
    assert 0.14 < summary["masked_fraction"] < 0.16
    assert summary["bad_input"] == {}


def test_cut_file_pieces_equal_runs_on_each_piece(tmp_path, vocab_file):
    """A file larger than the shard size: each document shard k is the original
    run on its bytes alone with the seed + k (whole-word masking here)."""
    big = tmp_path / "in" / "paper.txt"
    big.parent.mkdir()
    data = b"\n\n".join(path.read_bytes() for path in CORPUS)
    big.write_bytes(data)
    run_in_process(
        settings(
            tmp_path, [big], vocab_file, shard_bytes=20_000, do_whole_word_mask=True, random_seed=7
        )
    )
    outputs = sorted((tmp_path / "shards").glob("*.tfrecord"))
    assert [p.name for p in outputs] == ["paper-%05d.tfrecord" % k for k in range(4)]
    starts = []
    for k, output in enumerate(outputs):
        described = pretraining_data.read_metadata(str(output))["document_shard"]
        assert described["window"] == k
        piece = tmp_path / ("piece_%d.txt" % k)
        piece.write_bytes(data[described["first_byte"] : described["end_byte"]])
        assert described["first_line"] == data[: described["first_byte"]].count(b"\n") + 1
        assert cpd_tests.read_records(output) == alone(
            tmp_path, piece, vocab_file, 7 + k, "piece_%d" % k, do_whole_word_mask=True
        )
        starts.append((described["first_byte"], described["end_byte"]))
    assert starts[0][0] == 0 and starts[-1][1] == len(data)
    assert all(a[1] == b[0] for a, b in zip(starts, starts[1:]))


def test_compressed_file_is_one_shard_read_through_its_decompressor(tmp_path, vocab_file):
    import gzip

    compressed = tmp_path / "in" / "paper.txt.gz"
    compressed.parent.mkdir()
    data = b"\n\n".join(path.read_bytes() for path in CORPUS)
    compressed.write_bytes(gzip.compress(data))
    plain = tmp_path / "paper.txt"
    plain.write_bytes(data)
    # Below the compressed size: an uncompressed file would be cut.
    summary = run_in_process(settings(tmp_path, [compressed], vocab_file, shard_bytes=10_000))
    assert sorted(p.name for p in (tmp_path / "shards").glob("*.tfrecord")) == ["paper.tfrecord"]
    assert cpd_tests.read_records(tmp_path / "shards" / "paper.tfrecord") == alone(
        tmp_path, plain, vocab_file, 12345, "paper"
    )
    metadata = pretraining_data.read_metadata(str(tmp_path / "shards" / "paper.tfrecord"))
    assert metadata["document_shard"]["end_byte"] is None
    assert summary["shards_written"] == 1


def test_raw_documents_to_sentences_vocab_and_shards(tmp_path):
    """JSON lines, cut into document shards -> sentence files (the original
    format) -> a learned vocabulary -> shards equal to the original run on each
    sentence file with the seed + its window."""
    size = 2000
    pipeline_settings = settings(
        tmp_path,
        [SQUAD_JSONL],
        str(tmp_path / "vocab.txt"),
        input_format="jsonl",
        learn_vocab_size=size,
        max_input_words=400,
        shard_bytes=30_000,
    )
    summary = run_in_process(pipeline_settings)
    # 5 articles of 15-27 KB: windows 0, 1 and 2 hold 2, 1 and 2 of them.
    names = ["squad_dev_articles-%05d" % k for k in range(3)]
    sentence_files = [tmp_path / "shards" / "sentences" / (name + ".txt") for name in names]
    texts = [path.read_text(encoding="utf-8") for path in sentence_files]
    assert [len(text.split("\n\n")) for text in texts] == [2, 1, 2]
    assert summary["raw_documents"] == 5 and summary["shards_written"] == 3
    assert texts[0].startswith(
        "The Normans (Norman: Nourmands; French: Normands; Latin: Normanni) were "
        "the people who in the 10th and 11th centuries gave their name to "
        "Normandy, a region in France.\nThey were descended from Norse"
    )
    lines = [line for text in texts for line in text.split("\n") if line]
    assert all(line.strip() == line for line in lines)
    # The vocabulary: that of the word counts of all sentences, in the layout.
    expected = wordpiece_vocab.learn_vocab(
        wordpiece_vocab.count_words(lines, do_lower_case=True), size, max_input_words=400
    )
    vocab = (tmp_path / "vocab.txt").read_text(encoding="utf-8").split("\n")[:-1]
    assert vocab == expected and len(vocab) == size
    # Each shard: the original run on its sentence file, learned vocabulary, seed + k.
    for k, (name, path) in enumerate(zip(names, sentence_files)):
        assert cpd_tests.read_records(tmp_path / "shards" / (name + ".tfrecord")) == alone(
            tmp_path, path, str(tmp_path / "vocab.txt"), 12345 + k, name
        )
    assert summary["instances"] > 300


def test_raw_text_documents_keep_their_words(tmp_path, vocab_file):
    """Raw text (lines wrapped anywhere, a blank line between documents): the
    sentences of each document hold exactly its text, in order (whitespace
    aside: a boundary may fall between a period and a quote)."""
    import textwrap

    documents = [
        " ".join(block.split("\n"))
        for block in CORPUS[1].read_text(encoding="utf-8").split("\n\n")
        if block.strip()
    ]
    raw = tmp_path / "paper.txt"
    raw.write_text(
        "\n\n".join(
            textwrap.fill(d, 70, break_on_hyphens=False, break_long_words=False) for d in documents
        )
        + "\n"
    )
    summary = run_in_process(settings(tmp_path, [raw], vocab_file, input_format="text"))
    sentences_file = tmp_path / "shards" / "sentences" / "paper.txt"
    written = sentences_file.read_text(encoding="utf-8").rstrip("\n").split("\n\n")
    assert len(written) == len(documents) == summary["raw_documents"]
    for document, sentences in zip(documents, written):
        assert "".join(sentences.split()) == "".join(document.split())
    assert summary["sentences_written"] > len(documents) * 5
    assert cpd_tests.read_records(tmp_path / "shards" / "paper.tfrecord") == alone(
        tmp_path, sentences_file, vocab_file, 12345, "paper"
    )


def test_bad_input_is_named_counted_and_skipped(tmp_path, vocab_file):
    inputs = tmp_path / "in"
    inputs.mkdir()
    (inputs / "good.txt").write_text(CORPUS[1].read_text(encoding="utf-8"))
    (inputs / "latin1.txt").write_bytes(
        b"A fine sentence.\nAnother one.\ncaf\xe9 au lait.\n\nNext document.\n"
    )
    (inputs / "empty.txt").write_text("\x00\n\x01 \x02\n\nReal text here.\n")
    pipeline_settings = settings(tmp_path, [inputs / "*.txt"], vocab_file, bad_input="skip")
    missing = str(inputs / "vanished.txt")
    pipeline_settings = dataclasses.replace(
        pipeline_settings, input_files=pipeline_settings.input_files + ((missing, 100),)
    )
    summary = run_in_process(pipeline_settings)
    assert summary["bad_input"] == {"non_utf8_line": 1, "empty_document": 1, "unreadable_file": 1}
    examples = "\n".join(summary["bad_input_examples"])
    assert "latin1.txt:3: not valid UTF-8" in examples
    assert "empty.txt:1: an empty document" in examples
    assert "vanished.txt: cannot be read" in examples
    assert sorted(p.name for p in (tmp_path / "shards").glob("*.tfrecord")) == [
        "empty.tfrecord",
        "good.tfrecord",
        "latin1.tfrecord",
    ]
    assert summary["shards_written"] == 3

    jsonl = tmp_path / "docs.jsonl"
    jsonl.write_text(
        '{"text": "One doc. Two sentences."}\n{"title": "x"}\n'
        '{"text": "  "}\n{"text": "Second doc."}\n'
    )
    summary = run_in_process(
        settings(tmp_path / "j", [jsonl], vocab_file, input_format="jsonl", bad_input="skip")
    )
    assert summary["bad_input"] == {"json_line_without_text": 1, "empty_document": 1}
    assert any(
        "docs.jsonl:2: a JSON line without" in example for example in summary["bad_input_examples"]
    )
    assert (
        tmp_path / "j" / "shards" / "sentences" / "docs.txt"
    ).read_text() == "One doc.\nTwo sentences.\n\nSecond doc.\n"


def test_failed_run_stops_naming_file_and_line_and_leaves_nothing_complete(tmp_path, vocab_file):
    inputs = tmp_path / "in"
    inputs.mkdir()
    (inputs / "a_good.txt").write_text(CORPUS[1].read_text(encoding="utf-8"))
    (inputs / "b_bad.txt").write_bytes(CORPUS[1].read_bytes()[:5000] + b"\nbad \xff byte\n")
    shards = tmp_path / "shards"
    shards.mkdir()
    (shards / corpus_summary.SUMMARY_NAME).write_text("{}")  # From an earlier run.
    with pytest.raises(corpus.BadInputError, match=r"b_bad.txt:\d+: not valid UTF-8"):
        run_in_process(settings(tmp_path, [inputs / "*.txt"], vocab_file))
    names = sorted(p.name for p in shards.iterdir())
    # No summary, no trace of the failed file's shard, no temporary file; the
    # other file's shard, if it was written, is whole, with its metadata.
    assert set(names) <= {"a_good.tfrecord", "a_good.tfrecord.meta.json"}
    if "a_good.tfrecord" in names:
        assert (
            len(cpd_tests.read_records(shards / "a_good.tfrecord"))
            == pretraining_data.read_metadata(str(shards / "a_good.tfrecord"))["num_instances"]
        )


def test_learned_vocab_reads_in_both_tokenizers(tmp_path):
    """Learned by the pipeline (vocabulary only) from the bundled corpus; on
    held-out MRPC sentences our Python and in-graph tokenizers give the same
    ids on every line."""
    from data_prep.text import tf_tokenization

    path = tmp_path / "vocab.txt"
    run_in_process(settings(tmp_path, CORPUS, str(path), learn_vocab_size=3000, stop_after="vocab"))
    assert not list((tmp_path / "shards").glob("*.tfrecord"))
    vocab = path.read_text(encoding="utf-8").split("\n")[:-1]
    assert len(vocab) == 3000 and len(set(vocab)) == 3000
    assert vocab[:5] == ["[PAD]", "[unused0]", "[unused1]", "[unused2]", "[unused3]"]
    assert vocab[100:104] == ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert vocab[998] == "[unused993]"
    characters = [token for token in vocab[999:] if len(token) == 1]
    assert characters == sorted(characters) == vocab[999 : 999 + len(characters)]
    assert all("##" + c in vocab for c in characters)
    held_out = []
    with open(REPO_ROOT / "sample_data" / "glue" / "MRPC" / "dev.tsv", encoding="utf-8-sig") as f:
        for row in f.read().split("\n")[1:]:
            held_out += row.split("\t")[3:5]
    python_tokenizer = tokenization.FullTokenizer(str(path), do_lower_case=True)
    graph_tokenizer = tf_tokenization.TFBertTokenizer(str(path), do_lower_case=True)
    expected = [
        python_tokenizer.convert_tokens_to_ids(python_tokenizer.tokenize(line)) for line in held_out
    ]
    ids = graph_tokenizer.tokenize(tf.constant(held_out))
    assert ids.to_list() == expected
    pieces = sum(map(len, expected))
    unknown = sum(line.count(100) for line in expected)
    assert pieces > 20_000 and 0 < unknown < pieces / 100


def test_flags_give_settings_and_leave_beam_its_options(tmp_path, vocab_file):
    flag_values = flags.FlagValues()
    pp.define_flags(flag_values)
    rest = flag_values(
        [
            "prog",
            "--input_file=%s" % ",".join(map(str, CORPUS)),
            "--output_dir=%s" % tmp_path,
            "--vocab_file=%s" % vocab_file,
            "--do_lower_case",
            "--max_seq_length=64",
            "--max_predictions_per_seq=10",
            "--masked_lm_prob=0.2",
            "--random_seed=3",
            "--dupe_factor=2",
            "--do_whole_word_mask",
            "--shard_size_mb=0.5",
            "--runner=DirectRunner",
            "--direct_num_workers=2",
            "--direct_running_mode=multi_processing",
        ],
        known_only=True,
    )
    assert rest == [
        "prog",
        "--runner=DirectRunner",
        "--direct_num_workers=2",
        "--direct_running_mode=multi_processing",
    ]
    s = pp.settings_from_flags(flag_values)
    assert [path for path, _ in s.input_files] == list(map(str, CORPUS))
    assert s.shard_bytes == 500_000 and s.input_format == "sentences"
    assert s.sentences_dir == os.path.join(str(tmp_path), "sentences")
    assert s.run.instance.max_seq_length == 64 and s.run.random_seed == 3
    assert s.run.masking.do_whole_word_mask and s.run.masking.masked_lm_prob == 0.2
    with pytest.raises(ValueError, match="needs --learn_vocab_size"):
        dataclasses.replace(s, stop_after="vocab")
    with pytest.raises(ValueError, match="would both write shards named x"):
        cp.check_output_names([("a/x.txt", 10), ("b/x.json", 10)], 100)
    with pytest.raises(ValueError, match="matches no file"):
        cp.match_input_files(str(tmp_path / "nothing*.txt"))


def check_killed_run_leaves_only_complete_shards(tmp_path, command, env, stop=signal.SIGKILL):
    """The pipeline on three files of 0.02, 1 and 2 MB, killed (`stop`: SIGKILL, or
    SIGINT as a terminal's Ctrl-C sends it; to every process of the job) as soon as
    one shard is there, while at least one other is still being built: no summary,
    and every shard that is there is whole, with its metadata; nothing else but
    hidden temporary files. Returns the run's stderr."""
    inputs = tmp_path / "kill_corpus"
    inputs.mkdir(exist_ok=True)
    for name, copies in (("small", 0), ("medium", 18), ("large", 36)):
        (inputs / (name + ".txt")).write_bytes(
            b"\n\n".join([CORPUS[1].read_bytes()] + [CORPUS[0].read_bytes()] * copies)
        )
    out = tmp_path / ("killed_%s" % signal.Signals(stop).name)
    command = [arg for arg in command if not arg.startswith(("--input_file=", "--output_dir="))]
    process = subprocess.Popen(
        command + ["--input_file=%s/*.txt" % inputs, "--output_dir=%s" % out],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + 300
    try:
        while not (out.is_dir() and list(out.glob("*.tfrecord"))):
            assert process.poll() is None and time.monotonic() < deadline
            time.sleep(0.005)
    finally:
        os.killpg(process.pid, stop)
        _, stderr = process.communicate(timeout=120)
    if stop == signal.SIGINT:  # The program's own exit code for Ctrl-C.
        assert process.returncode == 130, stderr[-3000:]
    # Nothing of the job is left running (Beam's worker processes included).
    left = time.monotonic() + 10
    with pytest.raises(ProcessLookupError):
        while time.monotonic() < left:
            os.killpg(process.pid, 0)
            time.sleep(0.1)
    visible = sorted(path.name for path in out.iterdir() if not path.name.startswith("."))
    shards = [name for name in visible if name.endswith(".tfrecord")]
    assert 1 <= len(shards) < 3
    # A shard is renamed into place whole, then its metadata is written: a kill between
    # the two leaves a whole shard without metadata (which `run_shards` shows as
    # unfinished beside its siblings), never metadata without its shard.
    assert set(visible) - set(shards) <= {name + ".meta.json" for name in shards}
    for name in shards:
        records = cpd_tests.read_records(out / name)  # a cut file fails to read
        if name + ".meta.json" in visible:
            assert len(records) == pretraining_data.read_metadata(str(out / name))["num_instances"]
    return stderr


@pytest.mark.slow
def test_command_line_with_two_worker_processes(tmp_path, vocab_file, originals):
    """The issue's command line (DirectRunner, 2 processes, whole-word masking):
    each file's shard equals --num_workers' and the original's on that file.
    Killed midway, the same command leaves only complete shards."""
    corpus_dir = tmp_path / "corpus"
    corpus_dir.mkdir()
    for path in CORPUS:
        (corpus_dir / path.name).write_bytes(path.read_bytes())
    command = [
        sys.executable,
        "-m",
        "data_prep.pretraining_pipeline",
        "--input_file=corpus/*.txt",
        "--output_dir=shards",
        "--vocab_file=%s" % vocab_file,
        "--do_lower_case",
        "--max_seq_length=128",
        "--max_predictions_per_seq=20",
        "--masked_lm_prob=0.15",
        "--random_seed=12345",
        "--dupe_factor=2",
        "--do_whole_word_mask",
        "--runner=DirectRunner",
        "--direct_num_workers=2",
        "--direct_running_mode=multi_processing",
    ]
    env = dict(cpd_tests.ENV, PYTHONPATH=repo_pythonpath())
    check_killed_run_leaves_only_complete_shards(tmp_path, command, env)
    # Ctrl-C: the program's one line, and no worker's KeyboardInterrupt traceback;
    # no worker process is left running.
    stderr = check_killed_run_leaves_only_complete_shards(tmp_path, command, env, signal.SIGINT)
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr[-3000:]
    assert stderr.splitlines()[-1].startswith(
        "pretraining_pipeline: stopped by Ctrl-C (SIGINT); the shards written so far in "
    ), stderr[-3000:]
    result = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    workers = tmp_path / "workers"
    ptr.run(
        cpd_tests.options(
            [corpus_dir / p.name for p in CORPUS],
            [workers / (p.stem + ".tfrecord") for p in CORPUS],
            vocab_file,
            dupe_factor=2,
            do_whole_word_mask=True,
            per_input_file=True,
        )
    )
    assert sorted(os.listdir(tmp_path / "shards")) == sorted(
        [corpus_summary.SUMMARY_NAME]
        + [p.stem + suffix for p in CORPUS for suffix in (".tfrecord", ".tfrecord.meta.json")]
    )
    for path in CORPUS:
        ours = cpd_tests.read_records(tmp_path / "shards" / (path.stem + ".tfrecord"))
        assert len(ours) > 100
        assert ours == cpd_tests.read_records(workers / (path.stem + ".tfrecord"))
        assert ours == cpd_tests.canonical(
            cpd_tests.read_records(originals["whole_word"][path.stem])
        )
    summary = json.loads((tmp_path / "shards" / corpus_summary.SUMMARY_NAME).read_text())
    assert summary["shards_written"] == 2 and summary["settings"]["do_whole_word_mask"]
    assert " instances in 2 shards, in " in result.stderr  # The summary line.


@pytest.mark.slow
def test_a_rerun_never_mixes_two_runs_shards(tmp_path, vocab_file):
    """A rerun with another shard size would leave the first run's shards beside its
    own: refused, naming them; with overwrite they are removed first, and summary.json
    lists the run's shards. `run_pretraining --input_file='shards/*'` then reads this
    run's shards only, and refuses one of the earlier run put back."""
    small = tmp_path / "paper.txt"
    small.write_bytes(CORPUS[1].read_bytes())
    first = run_in_process(settings(tmp_path, [small], vocab_file, dupe_factor=1))
    assert first["shards"] == ["paper.tfrecord"]
    out = tmp_path / "shards"
    old_metadata = (out / "paper.tfrecord.meta.json").read_bytes()
    rerun = settings(tmp_path, [small], vocab_file, dupe_factor=1, shard_bytes=20_000)
    with pytest.raises(
        FileExistsError, match=r"holds 1 shards of an earlier run .*paper\.tfrecord"
    ):
        run_in_process(rerun)
    assert (out / "summary.json").exists()  # A refused run leaves the earlier one whole.
    second = cp.run(rerun, PipelineOptions(["--runner=DirectRunner"]), overwrite=True)
    shards = sorted(path.name for path in out.glob("*.tfrecord"))
    assert shards == second["shards"] and shards[0].startswith("paper-0000")
    assert second["run_id"] != first["run_id"]
    pretraining_data.check_shard_runs(pretraining_data.expand_input_files(str(out / "*")))
    (out / "paper.tfrecord").write_bytes(b"")
    (out / "paper.tfrecord.meta.json").write_bytes(old_metadata)
    with pytest.raises(ValueError, match="paper.tfrecord was left by an earlier pipeline run"):
        pretraining_data.check_shard_runs(pretraining_data.expand_input_files(str(out / "*")))


def test_a_failed_run_writes_no_summary(tmp_path):
    """A vocabulary too small for the text fails the LearnVocab stage after the stage
    that adds up the statistics ran: no summary.json, the mark of a finished run."""
    pipeline_settings = settings(
        tmp_path,
        [SQUAD_JSONL],
        str(tmp_path / "shards" / "vocab.txt"),
        input_format="jsonl",
        learn_vocab_size=50,
        stop_after="vocab",
    )
    with pytest.raises(Exception, match="vocab_size=50 cannot hold"):
        run_in_process(pipeline_settings)
    visible = [p.name for p in (tmp_path / "shards").iterdir() if not p.name.startswith(".")]
    assert visible == ["sentences"]


def test_create_pretraining_data_refuses_an_earlier_runs_shards(tmp_path, vocab_file):
    """One shard per input file into a directory: shards of an earlier run that this
    run would not replace are refused (or removed with overwrite)."""
    out = tmp_path / "out"
    out.mkdir()
    for name in ("a", "b"):
        ptr.run(cpd_tests.options([CORPUS[1]], [out / f"{name}.tfrecord"], vocab_file))
    both = [str(out / "a.tfrecord"), str(out / "b.tfrecord")]
    ptr.check_no_earlier_shards(str(out), both, False, "--overwrite")
    keep = both[1:]
    with pytest.raises(FileExistsError, match=r"holds 1 shards of an earlier run .*a\.tfrecord"):
        ptr.check_no_earlier_shards(str(out), keep, False, "--overwrite")
    ptr.check_no_earlier_shards(str(out), keep, True, "--overwrite")
    assert sorted(p.name for p in out.iterdir()) == ["b.tfrecord", "b.tfrecord.meta.json"]


def test_worker_start_lines_are_hidden_and_everything_else_shown(capfd, monkeypatch):
    """Each of Beam's worker processes printed `apitools not found` and `Logging handler
    created` on the shared stderr as it started: twice each with two workers."""
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    monkeypatch.setattr(sys, "argv", ["pretraining_pipeline.py"])
    worker = (
        "WARNING:root:apitools not found, and bigquery client libraries are not available "
        "despite the import not raising an ImportError.\n"
        "INFO:__main__:Logging handler created.\n"
        "Traceback of a real failure\n"
    )
    with pp.worker_start_lines_hidden():
        for text in (worker, worker, "the last words, without a newline"):
            subprocess.run([sys.executable, "-c", f"import sys; sys.stderr.write({text!r})"])
        print("this process's own line", file=sys.stderr)
    err = capfd.readouterr().err
    assert "apitools" not in err and "Logging handler created" not in err, err
    assert err.count("Traceback of a real failure\n") == 2
    assert "the last words, without a newline" in err
    assert "this process's own line\n" in err
    # The user asked for everything: nothing hidden.
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "0")
    with pp.worker_start_lines_hidden():
        subprocess.run([sys.executable, "-c", f"import sys; sys.stderr.write({worker!r})"])
    assert "apitools not found" in capfd.readouterr().err


def test_once_stopping_the_workers_ending_says_nothing(capfd, monkeypatch):
    """After Ctrl-C (`STOPPING`, set by the signal's handler) the worker processes that
    end with the program printed C++ abort lines, and Beam's threads talking to them
    tracebacks ("Worker subprocess exited with return code -6", gRPC errors): not
    shown then; before it, both show."""
    import threading

    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    monkeypatch.setattr(sys, "argv", ["pretraining_pipeline.py"])
    monkeypatch.setattr(pp, "STOPPING", threading.Event())
    shown = []  # What the thread-error hook in place (Python's prints them) was given.
    monkeypatch.setattr(threading, "excepthook", lambda args: shown.append(args.exc_value))
    hook = threading.excepthook

    def worker_exit():
        raise RuntimeError("Worker subprocess exited with return code -6")

    def worker_and_thread():
        subprocess.run([sys.executable, "-c", "import sys; sys.stderr.write('abort line\\n')"])
        thread = threading.Thread(target=worker_exit, name="run_worker")
        thread.start()
        thread.join()

    with pp.worker_start_lines_hidden(), pp.workers_ignore_ctrl_c():
        worker_and_thread()
    assert "abort line" in capfd.readouterr().err
    assert [str(e) for e in shown] == ["Worker subprocess exited with return code -6"]
    assert threading.excepthook is hook  # Given back.
    with pp.worker_start_lines_hidden(), pp.workers_ignore_ctrl_c():
        pp.STOPPING.set()
        worker_and_thread()
        print("this process's own line", file=sys.stderr)
    err = capfd.readouterr().err
    assert "abort line" not in err and "this process's own line" in err, err
    assert len(shown) == 1  # The second worker's end was not shown.

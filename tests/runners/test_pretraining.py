"""run_pretraining.py end to end: learning, distribution, fault tolerance, bad input.

The multi-process tests run the runner in subprocesses (logical CPU devices and
TF_CONFIG must be set before TensorFlow starts) and are marked slow.
"""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from data_prep import input_pipeline, records
from data_prep.pretraining import pretraining_data
from tests.conftest import REPO_ROOT, SAMPLE_DATA, write_tiny_config
from tests.helpers.pretraining_data_helpers import make_shard, run_pretraining_in_one_process

VOCAB = str(SAMPLE_DATA / "vocab" / "uncased_vocab.txt")
SEQ, PREDS = 64, 10


def tiny_config(path, dropout=0.1):
    return write_tiny_config(
        path, dropout, hidden_size=64, intermediate_size=128, max_position_embeddings=SEQ
    )


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    d = tmp_path_factory.mktemp("shards")
    corpus = SAMPLE_DATA / "corpus"
    train = make_shard(
        corpus / "bert_paper_v1.txt", d / "train.tfrecord", VOCAB, SEQ, PREDS, dupe_factor=5
    )
    return {"train": train}


def pretraining_args(output_dir, config_file, train_file, *extra, steps=6, batch=8, warmup=2):
    """The flags of a run_pretraining.py run of these tests."""
    return [
        f"--input_file={train_file}",
        f"--output_dir={output_dir}",
        f"--bert_config_file={config_file}",
        f"--max_seq_length={SEQ}",
        f"--max_predictions_per_seq={PREDS}",
        f"--train_batch_size={batch}",
        f"--num_train_steps={steps}",
        f"--num_warmup_steps={warmup}",
        "--learning_rate=1e-3",
        "--steps_per_loop=2",
        "--do_train",
        "--alsologtostderr",
        *extra,
    ]


def run_pretraining(output_dir, config_file, train_file, *extra, env=None, wait=True, **kwargs):
    """Runs run_pretraining.py in a process of its own: waits for it (and asserts it
    succeeded), or returns the Popen with its stderr in `<output_dir>.log`."""
    args = [
        sys.executable,
        str(REPO_ROOT / "run_pretraining.py"),
        *pretraining_args(output_dir, config_file, train_file, *extra, **kwargs),
    ]
    full_env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **(env or {}))
    if not wait:
        log = open(f"{output_dir}.log", "w")
        return subprocess.Popen(
            args, env=full_env, stdout=subprocess.DEVNULL, stderr=log, text=True
        )
    result = subprocess.run(args, env=full_env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def model_weights(prefix):
    reader = tf.train.load_checkpoint(prefix)
    return {
        name: reader.get_tensor(name)
        for name, _ in tf.train.list_variables(prefix)
        if name.startswith("model/")
    }


def assert_close_weights(a, b, atol):
    assert a.keys() == b.keys()
    worst = max(float(np.max(np.abs(a[k] - b[k]))) for k in a)
    assert worst <= atol, f"max weight difference {worst}"
    return worst


# ----------------------------------------------------------------- fast checks


def write_records(path, seq, preds, count=2):
    with tf.io.TFRecordWriter(str(path)) as writer:
        for _ in range(count):
            feature = {
                "input_ids": tf.train.Feature(int64_list=tf.train.Int64List(value=[1] * seq)),
                "masked_lm_positions": tf.train.Feature(
                    int64_list=tf.train.Int64List(value=[1] * preds)
                ),
            }
            writer.write(
                tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()
            )


def test_shards_of_another_length_are_a_clear_error(tmp_path):
    path = tmp_path / "shard.tfrecord"
    write_records(path, 128, 20)
    with pytest.raises(ValueError, match=r"input_ids has length 128 but --max_seq_length=64"):
        pretraining_data.check_shard_shapes([str(path)], 64, 20)
    with pytest.raises(
        ValueError,
        match=r"masked_lm_positions has length 20 but "
        r"--max_predictions_per_seq=10",
    ):
        pretraining_data.check_shard_shapes([str(path)], 128, 10)
    pretraining_data.check_shard_shapes([str(path)], 128, 20)
    empty = tmp_path / "empty.tfrecord"
    empty.write_bytes(b"")
    with pytest.raises(ValueError, match="empty"):
        pretraining_data.check_shard_shapes([str(empty)], 128, 20)
    with pytest.raises(FileNotFoundError, match="matches no file"):
        records.expand_globs(str(tmp_path / "missing-*.tfrecord"))


def test_pipeline_slices_global_batches_across_workers(shards):
    """Two input pipelines over one file read exactly the single pipeline's batches
    (each cut to its own longest sequence)."""
    files = [shards["train"]]
    metadata = pretraining_data.shards_metadata(files, SEQ, PREDS)
    single = next(iter(pretraining_data.pretraining_dataset(files, metadata, 8, is_training=True)))
    halves = []
    for pipeline_id in range(2):
        context = tf.distribute.InputContext(
            num_input_pipelines=2, input_pipeline_id=pipeline_id, num_replicas_in_sync=2
        )
        halves.append(
            next(
                iter(
                    pretraining_data.pretraining_dataset(
                        files, metadata, 8, is_training=True, input_context=context
                    )
                )
            )
        )
    for key in single:
        width = single[key].shape[1:]
        got = [
            input_pipeline.pad_to_length(h[key].numpy(), width[0]) if width else h[key]
            for h in halves
        ]
        np.testing.assert_array_equal(np.concatenate(got), single[key])
    assert single["input_word_ids"].dtype == tf.int32
    assert single["masked_lm_weights"].dtype == tf.float32


# ----------------------------------------------------------------- slow, multi-process


# The learning runs (1,500 steps in float32 and in bfloat16: held-out masked-LM accuracy
# far above the most-frequent-token baseline, bfloat16 within noise of float32) take
# about 20 minutes on 2 cores: they are `python -m benchmarks.study.quality --runs=pretraining`.


# --do_eval on one shard: each worker of a multi-worker run evaluates its part of every batch.
EVALUATION = ("--do_eval", "--max_eval_steps=3", "--eval_batch_size=8")


# The one-device reference of every distributed run: 24 steps without dropout, a
# checkpoint every 8 (a lost worker's restart resumes from one).
STEPS = 24
REFERENCE = ("--steps_per_loop=1", "--save_checkpoints_steps=8")
# The uninterrupted run a killed run must resume to: dropout on, op determinism.
KILLED = ("--deterministic", "--steps_per_loop=1", "--save_checkpoints_steps=2")


@pytest.fixture(scope="module")
def references(shards, tmp_path_factory):
    """The run_pretraining.py runs that need no process of their own, all in one process
    (TensorFlow starts once): {"config": dropout-free config, "one": output_dir of the
    one-device reference of the distributed runs (with evaluation after training, which
    comes after the last checkpoint, so ckpt-24 is the same as without it),
    "straight_config" and "straight": the uninterrupted run of the kill test, "errors":
    {name: [error type, message]} of the runs with bad input}. The deterministic run goes
    first, as in a process of its own."""
    directory = tmp_path_factory.mktemp("references")
    config = tiny_config(directory / "config.json", dropout=0.0)
    straight_config = tiny_config(directory / "straight_config.json", dropout=0.1)
    train = shards["train"]
    bad = [
        f"--input_file={train}",
        f"--output_dir={directory / 'bad'}",
        f"--bert_config_file={config}",
        "--do_train",
        "--num_train_steps=1",
    ]
    runs = {
        "straight": pretraining_args(
            directory / "straight", straight_config, train, *KILLED, steps=10
        ),
        "one": pretraining_args(
            directory / "one", config, train, *REFERENCE, *EVALUATION, steps=STEPS
        ),
        "longer_than_the_config": [*bad, "--max_seq_length=128"],
        "more_predictions_than_the_shards": [
            *bad,
            f"--max_seq_length={SEQ}",
            "--max_predictions_per_seq=20",
        ],
    }
    errors = run_pretraining_in_one_process(runs)
    for name in ("straight", "one"):
        assert errors.pop(name) == ["no error", ""]
    return {
        "config": config,
        "one": directory / "one",
        "straight_config": straight_config,
        "straight": directory / "straight",
        "errors": errors,
    }


@pytest.mark.slow
def test_mirrored_on_two_devices_equals_one_device(shards, references, tmp_path):
    run_pretraining(
        tmp_path / "mirrored",
        references["config"],
        shards["train"],
        "--distribution_strategy=mirrored",
        "--num_cpu_devices=2",
        *REFERENCE,
        steps=STEPS,
    )
    summary = json.loads((tmp_path / "mirrored" / "train_summary.json").read_text())
    assert summary["num_replicas"] == 2 and summary["replica_max_diff"] == 0.0
    assert_close_weights(
        model_weights(str(references["one"] / f"ckpt-{STEPS}")),
        model_weights(str(tmp_path / "mirrored" / f"ckpt-{STEPS}")),
        atol=1e-4,
    )


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_killed_run_resumes_to_the_same_weights(shards, references, tmp_path):
    """SIGKILL midway, restart: the same final weights as an uninterrupted run
    (op determinism on; dropout active, so its seed state must be restored too)."""
    config = references["straight_config"]
    proc = run_pretraining(
        tmp_path / "killed", config, shards["train"], *KILLED, steps=10, wait=False
    )
    deadline = time.time() + 300
    while not (tmp_path / "killed" / "ckpt-4.index").exists():
        assert proc.poll() is None, open(f"{tmp_path / 'killed'}.log").read()[-3000:]
        assert time.time() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    latest = tf.train.latest_checkpoint(str(tmp_path / "killed"))
    assert latest is not None and not latest.endswith("ckpt-10")
    result = run_pretraining(tmp_path / "killed", config, shards["train"], *KILLED, steps=10)
    assert "Resumed from" in result.stderr
    assert_close_weights(
        model_weights(str(references["straight"] / "ckpt-10")),
        model_weights(str(tmp_path / "killed" / "ckpt-10")),
        atol=0.0,
    )


@pytest.mark.slow
def test_one_run_per_output_dir_and_sigterm_stops_with_143(shards, tmp_path):
    """While a run lives, a second run on its output_dir stops at once naming it. SIGTERM
    saves a checkpoint and exits 143 with one line saying how to resume, said once on
    the terminal (not also as a warning) and kept in the log file; nothing looks
    finished (train_summary.json says "complete": false, no evaluation)."""
    config = tiny_config(tmp_path / "config.json")
    out = tmp_path / "out"
    # The terminal as a user sees it: absl's log in the log file only.
    args = ("--steps_per_loop=1", "--save_checkpoints_steps=1000", "--do_eval")
    args += ("--noalsologtostderr",)
    proc = run_pretraining(out, config, shards["train"], *args, steps=100000, wait=False)
    deadline = time.time() + 300
    while not list((out / "train").glob("events*")):
        assert proc.poll() is None, open(f"{out}.log").read()[-3000:]
        assert time.time() < deadline
        time.sleep(0.1)
    second = subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "run_pretraining.py"),
            f"--input_file={shards['train']}",
            f"--output_dir={out}",
            f"--bert_config_file={config}",
            "--do_train",
        ],
        capture_output=True,
        text=True,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"),
    )
    assert second.returncode != 0
    assert f"--output_dir={out} is in use by another run: pid {proc.pid} on host" in second.stderr
    # SIGTERM once a step is done (its line in the log file), not at a fixed time.
    while not any(
        re.search(r"step \d+/100000 ", path.read_text())
        for path in out.glob("run_pretraining.*.INFO.*")
    ):
        assert proc.poll() is None, open(f"{out}.log").read()[-3000:]
        assert time.time() < deadline
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=120)
    assert proc.returncode == 143
    terminal = open(f"{out}.log").read().strip().splitlines()
    summary = json.loads((out / "train_summary.json").read_text())
    step = summary["global_step"]
    said = (
        f"Stopped by SIGTERM at step {step} of 100000, checkpoint saved in {out}: run the "
        f"same command again to resume."
    )
    assert terminal[-1] == said
    assert [line for line in terminal if "sigterm" in line.lower()] == [said], terminal
    (log_file,) = out.glob("run_pretraining.*.INFO.*")
    assert log_file.read_text().count(said) == 1
    assert summary["complete"] is False and summary["stopped_by"] == "SIGTERM"
    assert tf.train.latest_checkpoint(str(out)).endswith(f"ckpt-{step}") and step > 0
    assert not (out / "eval_results.txt").exists() and not (out / ".run.lock").exists()


@pytest.mark.slow
def test_a_lost_worker_is_named_and_a_restart_resumes(shards, references, tmp_path):
    """Two MultiWorkerMirrored workers on loopback share one output_dir (the chief alone
    takes its lock). Worker 1 killed: worker 0 stops with exit code 75 and one message
    naming worker 1 and saying to restart every worker. Restarted with the same
    command, they resume from the last checkpoint to the weights and the evaluation of
    the one-device run; the chief alone writes the run's files, worker 1 only its
    summary (to compare the weights' checksums) and its log."""
    config, steps, common = references["config"], STEPS, REFERENCE
    workers = [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]
    out = tmp_path / "shared"

    def start_workers(tag):
        procs = []
        for index in range(2):
            tf_config = json.dumps(
                {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
            )
            procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        str(REPO_ROOT / "run_pretraining.py"),
                        f"--input_file={shards['train']}",
                        f"--output_dir={out}",
                        f"--bert_config_file={config}",
                        f"--max_seq_length={SEQ}",
                        f"--max_predictions_per_seq={PREDS}",
                        "--train_batch_size=8",
                        f"--num_train_steps={steps}",
                        "--num_warmup_steps=2",
                        "--learning_rate=1e-3",
                        "--do_train",
                        "--distribution_strategy=multi_worker_mirrored",
                        *common,
                        *EVALUATION,
                    ],
                    env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", TF_CONFIG=tf_config),
                    stdout=subprocess.DEVNULL,
                    stderr=open(tmp_path / f"{tag}{index}.log", "w"),
                )
            )
        return procs

    procs = start_workers("first")
    deadline = time.time() + 600
    while not (out / "ckpt-8.index").exists():
        for index, proc in enumerate(procs):
            assert proc.poll() is None, (tmp_path / f"first{index}.log").read_text()[-3000:]
        assert time.time() < deadline
        time.sleep(0.05)
    procs[1].send_signal(signal.SIGKILL)
    procs[1].wait()
    procs[0].wait(timeout=300)  # A guard against a hang, not a speed figure.
    assert procs[0].returncode == 75, (tmp_path / "first0.log").read_text()[-3000:]
    log = (tmp_path / "first0.log").read_text()
    (message,) = [line for line in log.splitlines() if line.startswith("Lost ")]
    assert message.startswith(f"Lost worker 1 ({workers[1]}) of the multi-worker run after step")
    assert "Traceback" not in log
    assert "Restart every worker with the same command and TF_CONFIG" in message
    latest = tf.train.latest_checkpoint(str(out))
    assert latest is not None and not latest.endswith(f"ckpt-{steps}")
    for index, proc in enumerate(start_workers("again")):
        proc.wait(timeout=600)
        assert proc.returncode == 0, (tmp_path / f"again{index}.log").read_text()[-3000:]
    logs = [path.read_text() for path in out.glob("run_pretraining.*.INFO.*")]
    assert sum(f"Resumed from {latest}" in log for log in logs) == 2  # Both workers.
    assert json.loads((out / "train_summary.json").read_text())["complete"] is True
    # One writer of the shared output_dir: one TensorBoard file per run (worker 0's),
    # no worker's folder left.
    assert len(list((out / "train").glob("events*"))) == 2
    assert not list(out.glob(".worker_*"))
    chief = json.loads((out / "train_summary.json").read_text())
    other = json.loads((out / "train_summary_worker_1.json").read_text())
    assert chief["num_replicas"] == 2
    assert chief["weights_checksum"] == other["weights_checksum"]
    files = {name for name in os.listdir(out) if not name.startswith("run_pretraining.")}
    checkpoints = {name for name in files if name.startswith("ckpt-")}
    assert files - checkpoints == {
        "bert_config.json",
        "model_info.json",
        "run_config.json",
        "train_summary.json",
        "train_summary_worker_1.json",
        "eval_results.txt",
        "checkpoint",
        "train",
        "eval",
    }, files
    assert json.loads((out / "model_info.json").read_text())["model_kind"]
    one = references["one"]
    assert_close_weights(
        model_weights(str(one / f"ckpt-{steps}")),
        model_weights(str(out / f"ckpt-{steps}")),
        atol=1e-4,
    )
    one_results, results = (
        dict(line.split(" = ") for line in (folder / "eval_results.txt").read_text().splitlines())
        for folder in (one, out)
    )
    assert one_results.keys() == results.keys() and "masked_lm_loss" in one_results
    for key, value in one_results.items():
        assert float(results[key]) == pytest.approx(float(value), rel=1e-4, abs=1e-6), key


@pytest.mark.slow
def test_bad_input_to_the_runner(references):
    errors = references["errors"]
    error, message = errors["longer_than_the_config"]
    assert error != "no error" and "max_position_embeddings=64" in message
    error, message = errors["more_predictions_than_the_shards"]
    assert error != "no error" and "max_predictions_per_seq=20" in message


def test_shard_metadata_is_checked_against_the_run(shards):
    """The `.meta.json` create_pretraining_data writes beside a shard says what it was
    made with; a run that does not fit it fails before any work, naming both."""
    files = [shards["train"]]
    assert pretraining_data.check_shard_metadata(files, SEQ, PREDS, 30522, True) == 1
    with pytest.raises(
        ValueError,
        match=r"made with max_predictions_per_seq=10 .* but "
        r"--max_predictions_per_seq=20",
    ):
        pretraining_data.check_shard_metadata(files, SEQ, 20, 30522)
    with pytest.raises(
        ValueError,
        match=r"vocabulary of 30522 entries .* vocab_size is "
        r"1000",
    ):
        pretraining_data.check_shard_metadata(files, SEQ, PREDS, 1000)
    with pytest.raises(ValueError, match="made with do_lower_case=True"):
        pretraining_data.check_shard_metadata(files, SEQ, PREDS, 30522, False)

"""Kill -9 anywhere, then the same command again: the long jobs and the harness that
kills them (test_kill_resume.py runs a few kill points, `python -m
benchmarks.robustness.kill_resume` many).

A job is a command line of a tiny model on small real data. `reference` runs it once
uninterrupted in `<work>/run` and moves the result to `<work>/reference`. A trial runs
the same command in a fresh `<work>/run` (the same path, so the outputs that name
paths compare too), kills it with SIGKILL (its whole process group) after a seeded
delay, and then checks:

  1. nothing half-written looks complete: every visible file that the job's outputs
     include (hidden names are the temporary files of unfinished writes, skipped by
     every glob of the project) is already identical to the reference's, but the
     record of the evaluations so far (eval_history.json), which holds the reference's
     first entries;
  2. the same command run again finishes (exit 0), and its outputs are identical to
     the reference's, byte for byte (`--deterministic`, sorted record keys); of a
     SavedModel, every file but saved_model.pb and fingerprint.pb, whose graph
     holds names drawn per process.

The signal may also be SIGINT (Ctrl-C) or SIGTERM, which stop a run with one line and a
checkpoint (`interrupt` sends one once training has started): then the run's
train_summary.json says "complete": false, and the final checkpoint compares by its
variables (one save more changes its `save_counter`).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import io
import json
import os
import pathlib
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from typing import Callable

from tests.helpers import repo_pythonpath

REPO = pathlib.Path(__file__).resolve().parent.parent.parent
SAMPLE = REPO / "sample_data"
VOCAB = SAMPLE / "vocab" / "uncased_vocab.txt"
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=repo_pythonpath())

# Files that change from run to run by design: logs, TensorBoard events, the
# checkpoint state files (their timestamps), locks and the graphs of SavedModels.
VARYING = (
    "*.INFO",
    "*.log.*",
    "*events.out.tfevents*",
    "checkpoint",
    "*/checkpoint",
    "*.lock",
    "*saved_model.pb",
    "*fingerprint.pb",
    "*/train/*",
    "*/eval/*",
)


def _varying(relative: str) -> bool:
    return any(fnmatch.fnmatch(relative, p) or fnmatch.fnmatch("x/" + relative, p) for p in VARYING)


def visible_files(root: pathlib.Path) -> dict[str, pathlib.Path]:
    """relative path -> file, for every file whose name and folders are not hidden."""
    found = {}
    if not root.exists():
        return found
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if path.is_file() and not any(part.startswith(".") for part in relative.parts):
            found[str(relative)] = path
    return found


@dataclasses.dataclass
class Job:
    """A long job: its command in `run`, the files prepared in `work` that it reads."""

    name: str
    prepare: Callable[[pathlib.Path], None]
    command: Callable[[pathlib.Path, pathlib.Path], list[str]]  # (work, run) -> argv
    # Checkpoints other than the final one differ in which were kept (and a kill
    # during a save leaves a whole checkpoint that the `checkpoint` state file does
    # not name, never used): compare only the final one's files (default: the one
    # the reference's state file names).
    final_checkpoint: str | None = None
    ignore: tuple = ()

    def compared(self, relative: str, final: str | None = None) -> bool:
        if _varying(relative) or any(fnmatch.fnmatch(relative, p) for p in self.ignore):
            return False
        name = os.path.basename(relative)
        final = self.final_checkpoint or final
        if name.startswith("ckpt-") and final:
            return name.startswith(final + ".")
        return True


def _spawn(job: Job, work: pathlib.Path, run: pathlib.Path, log) -> subprocess.Popen:
    return subprocess.Popen(
        job.command(work, run),
        cwd=work,
        env=ENV,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # Its own process group: killed with its workers.
    )


def run_to_end(job: Job, work: pathlib.Path, run: pathlib.Path, log_name: str) -> float:
    """Runs the job's command to its end; its wall time. Fails with its log."""
    log_path = work / log_name
    with open(log_path, "w") as log:
        process = _spawn(job, work, run, log)
        # Timed from its start, as `trial` times its kill: the first command a test
        # worker starts from a prewarmed interpreter waits for that interpreter to
        # import TensorFlow before it starts (tests/helpers/prewarmed.py).
        start = time.monotonic()
        code = process.wait(timeout=900)
    if code != 0:
        raise AssertionError(f"{job.name} exited {code}:\n{log_path.read_text()[-4000:]}")
    return time.monotonic() - start


def reference(job: Job, work: pathlib.Path) -> tuple[pathlib.Path, float]:
    """The uninterrupted run's folder and wall time."""
    job.prepare(work)
    run, ref = work / "run", work / "reference"
    shutil.rmtree(run, ignore_errors=True)
    shutil.rmtree(ref, ignore_errors=True)
    seconds = run_to_end(job, work, run, "reference.log")
    run.rename(ref)
    return ref, seconds


def compare(job: Job, ref: pathlib.Path, run: pathlib.Path, only_present: bool) -> list[str]:
    """How `run`'s compared files differ from `ref`'s (all of them, or with
    `only_present` those `run` already shows)."""
    state = ref / "checkpoint"
    final = None
    if state.exists():  # model_checkpoint_path: "ckpt-12"
        final = state.read_text().split("\n", 1)[0].split('"')[1]
    theirs = {k: v for k, v in visible_files(ref).items() if job.compared(k, final)}
    ours = {k: v for k, v in visible_files(run).items() if job.compared(k, final)}
    problems = [f"{name}: not in the reference" for name in sorted(set(ours) - set(theirs))]
    if not only_present:
        problems += [f"{name}: missing" for name in sorted(set(theirs) - set(ours))]
    for name in sorted(set(ours) & set(theirs)):
        if ours[name].read_bytes() != theirs[name].read_bytes():
            problems.append(f"{name}: differs from the reference")
    return problems


def trial(
    job: Job, work: pathlib.Path, ref: pathlib.Path, delay: float, signum: int = signal.SIGKILL
) -> dict:
    """Kills the job after `delay` seconds (with `signum`, to its process group), checks
    what it left, runs it again and compares. Returns {"delay", "killed", "code",
    "said" (its last line on stderr), "left", "rerun"}: killed is False when the job had
    ended before the signal; left and rerun are lists of problems."""
    run = work / "run"
    shutil.rmtree(run, ignore_errors=True)
    with open(work / "killed.log", "w") as log:
        process = _spawn(job, work, run, log)
        try:
            process.wait(timeout=delay)
            killed = False
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signum)
            process.wait(timeout=600)
            killed = True
    lines = (work / "killed.log").read_text().strip().splitlines()
    left = _left(job, ref, run)
    rerun = _rerun(job, work, ref, run)
    if left or rerun:  # Kept for a look: the run and both logs.
        kept = work / f"failed-{delay:.1f}s"
        shutil.rmtree(kept, ignore_errors=True)
        shutil.copytree(run, kept / "run", symlinks=True)
        for name in ("killed.log", "rerun.log"):
            shutil.copy(work / name, kept / name)
    return {
        "delay": round(delay, 2),
        "killed": killed,
        "code": process.returncode,
        "said": lines[-1] if lines else "",
        "traceback": any(line.startswith("Traceback") for line in lines),
        "left": left,
        "rerun": rerun,
    }


def interrupt(
    job: Job, work: pathlib.Path, ref: pathlib.Path, started: str, signum: int = signal.SIGINT
) -> dict:
    """Runs the job until `started` (a path in its run folder, e.g. its first
    checkpoint) exists, sends `signum` to its process group (as a terminal does on
    Ctrl-C), checks what it left, runs the same command again and compares. Returns
    {"code", "lines" (its stderr), "summary" (its train_summary.json or None),
    "latest" (the checkpoint the state file names), "left", "rerun"}."""
    run = work / "run"
    shutil.rmtree(run, ignore_errors=True)
    with open(work / "interrupted.log", "w") as log:
        process = _spawn(job, work, run, log)
        deadline = time.monotonic() + 600
        while not (run / started).exists():
            if process.poll() is not None or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        if process.poll() is None:
            os.killpg(process.pid, signum)
        code = process.wait(timeout=600)
    summary_file, state = run / "train_summary.json", run / "checkpoint"
    return {
        "code": code,
        "lines": (work / "interrupted.log").read_text().strip().splitlines(),
        "summary": json.loads(summary_file.read_text()) if summary_file.exists() else None,
        "latest": state.read_text().split("\n", 1)[0].split('"')[1] if state.exists() else None,
        "left": _left(job, ref, run),
        "rerun": _rerun(job, work, ref, run),
    }


def check_ctrl_c(result: dict, run: pathlib.Path, steps: int) -> None:
    """Asserts what `interrupt` found of a run Ctrl-C stopped after its first
    checkpoint, of `steps` steps: exit status 130, a checkpoint of the step it stopped
    at and one line saying so, no traceback; nothing it left but its train_summary.json
    (which says "complete": false) differs from the uninterrupted run's, and the same
    command run again ends with the uninterrupted run's outputs."""
    assert result["code"] == 130, result["lines"][-20:]
    summary = result["summary"]
    step = summary["global_step"]
    assert summary["complete"] is False and summary["stopped_by"] == "SIGINT"
    assert 2 <= step < steps and result["latest"] == f"ckpt-{step}"
    assert result["lines"][-1] == (
        f"Stopped by Ctrl-C (SIGINT) at step {step} of {steps}, checkpoint saved in {run}: "
        "run the same command again to resume."
    )
    assert not any("Traceback" in line for line in result["lines"])
    assert result["left"] in ([], ["train_summary.json: differs from the reference"]), result
    assert result["rerun"] == [], result  # The final checkpoint, results and export equal.


def _left(job: Job, ref: pathlib.Path, run: pathlib.Path) -> list[str]:
    """What a stopped run left that differs from the reference, but, of a run whose
    train_summary.json says it is not complete (a stop signal's), that summary; an
    eval_history.json that holds the reference's first entries (the record of the
    evaluations so far of a run stopped between two epochs' ends); and the files of a
    save killed midway, in TensorFlow's temporary folder (`ckpt-4_temp/`, never read;
    the rerun removes it, which `_rerun` checks)."""
    summary = run / "train_summary.json"
    unfinished = summary.exists() and json.loads(summary.read_text())["complete"] is False
    return [
        problem
        for problem in compare(job, ref, run, only_present=True)
        if not (unfinished and problem.startswith("train_summary.json:"))
        and not _history_so_far(problem, ref, run)
        and not _killed_save(problem)
    ]


def _killed_save(problem: str) -> bool:
    """Whether `problem` is a file in the temporary folder of a checkpoint save."""
    folders = pathlib.PurePath(problem.split(":", 1)[0]).parts[:-1]
    return any(re.fullmatch(r"(ckpt|best)-\d+_temp", folder) for folder in folders)


def _history_so_far(problem: str, ref: pathlib.Path, run: pathlib.Path) -> bool:
    """Whether `problem` is an eval_history.json whose entries are the reference's
    first ones, each equal to the reference's."""
    name = problem.split(":", 1)[0]
    if os.path.basename(name) != "eval_history.json":
        return False
    ours = json.loads((run / name).read_text())
    theirs = json.loads((ref / name).read_text())
    return len(ours) < len(theirs) and ours == theirs[: len(ours)]


def _rerun(job: Job, work: pathlib.Path, ref: pathlib.Path, run: pathlib.Path) -> list[str]:
    """Runs the job's command again in `run`; how its outputs differ from the
    reference's. The final checkpoint compares by its variables: a run stopped by a
    signal saved once more, so its `save_counter` differs."""
    try:
        run_to_end(job, work, run, "rerun.log")
    except AssertionError as e:
        return [f"the rerun failed: {str(e).strip().splitlines()[-1]}"]
    final = job.final_checkpoint
    problems = [
        problem
        for problem in compare(job, ref, run, only_present=False)
        if not (final and problem.startswith(final + "."))
    ]
    if final:
        problems += checkpoint_differences(ref / final, run / final)
    return problems


def checkpoint_differences(a: pathlib.Path, b: pathlib.Path) -> list[str]:
    """The variables of checkpoint `b` that are not those of `a`, bit for bit, but
    `save_counter` (how many saves the run made: a stop signal adds one)."""
    import numpy as np  # pylint: disable=g-import-not-at-top
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    if not tf.io.gfile.exists(f"{b}.index"):
        return [f"{b.name}: missing"]
    names = {name for name, _ in tf.train.list_variables(str(a))}
    if names != {name for name, _ in tf.train.list_variables(str(b))}:
        return [f"{b.name}: not the variables of the reference"]
    ra, rb = tf.train.load_checkpoint(str(a)), tf.train.load_checkpoint(str(b))
    return [
        f"{b.name}: {name} differs from the reference"
        for name in sorted(names)
        if not name.startswith("save_counter")
        and not np.array_equal(ra.get_tensor(name), rb.get_tensor(name))
    ]


def kill_delays(seconds: float, count: int, seed: int) -> list[float]:
    """`count` seeded kill times spread over a run of `seconds` (stratified, so a few
    points still cover start-up, the middle and the end)."""
    rng = random.Random(seed)
    return [0.9 * seconds * (i + rng.random()) / count for i in range(count)]


# ----------------------------------------------------------------------------
# The jobs.
# ----------------------------------------------------------------------------


def _tiny_config(path: pathlib.Path, **overrides) -> pathlib.Path:
    config = dict(
        vocab_size=30522,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=37,
        hidden_act="gelu",
        hidden_dropout_prob=0.1,
        attention_probs_dropout_prob=0.1,
        max_position_embeddings=128,
        type_vocab_size=2,
        initializer_range=0.02,
    )
    config.update(overrides)
    path.write_text(json.dumps(config), encoding="utf-8")
    return path


def _head(source: pathlib.Path, target: pathlib.Path, lines: int) -> None:
    target.write_bytes(b"\n".join(source.read_bytes().split(b"\n")[:lines]) + b"\n")


def _prepare_common(work: pathlib.Path) -> None:
    work.mkdir(parents=True, exist_ok=True)
    _tiny_config(work / "bert_config.json")
    corpus = work / "corpus"
    corpus.mkdir(exist_ok=True)
    for path in (SAMPLE / "corpus").glob("*.txt"):
        shutil.copy(path, corpus / path.name)
    mrpc = work / "mrpc"
    mrpc.mkdir(exist_ok=True)
    for split in ("train", "dev", "test"):
        _head(SAMPLE / "glue" / "MRPC" / f"{split}.tsv", mrpc / f"{split}.tsv", 33)
    squad = json.loads((SAMPLE / "squad" / "dev-v2.0-first5articles.json").read_text("utf-8"))
    article = dict(squad["data"][0], paragraphs=squad["data"][0]["paragraphs"][:2])
    (work / "squad.json").write_text(json.dumps(dict(squad, data=[article])), encoding="utf-8")
    sentences = (SAMPLE / "sciner" / "train.txt").read_text("utf-8").split("\n\n")
    (work / "ner_train.txt").write_text("\n\n".join(sentences[:40]) + "\n\n", encoding="utf-8")
    (work / "ner_dev.txt").write_text("\n\n".join(sentences[40:52]) + "\n\n", encoding="utf-8")


def _model(work: pathlib.Path) -> list[str]:
    return [f"--bert_config_file={work / 'bert_config.json'}", f"--vocab_file={VOCAB}"]


def _trained(work: pathlib.Path) -> pathlib.Path:
    """A fine-tuned classifier (output_dir) to evaluate, predict, export and convert."""
    out = work / "trained"
    if not (out / "model_info.json").exists():
        subprocess.run(
            [sys.executable, str(REPO / "run_classifier.py"), *_classifier_flags(work, out)],
            cwd=work,
            env=ENV,
            check=True,
            capture_output=True,
        )
    return out


def _classifier_flags(work: pathlib.Path, out: pathlib.Path) -> list[str]:
    return [
        "--task_name=MRPC",
        f"--data_dir={work / 'mrpc'}",
        *_model(work),
        f"--output_dir={out}",
        "--do_train",
        "--do_eval",
        "--do_predict",
        "--max_seq_length=32",
        "--train_batch_size=8",
        "--num_train_epochs=2",
        "--save_checkpoints_steps=2",
        "--steps_per_loop=1",
        "--deterministic",
    ]


def _python(*args) -> list[str]:
    return [sys.executable, *[str(a) for a in args]]


JOBS = {
    "create_pretraining_data": Job(
        "create_pretraining_data",
        _prepare_common,
        lambda work, run: _python(
            "-m",
            "data_prep.create_pretraining_data",
            f"--input_file={work / 'corpus' / 'bert_paper_v2.txt'}",
            f"--output_file={run / 'a.tfrecord'},{run / 'b.tfrecord'}",
            f"--vocab_file={VOCAB}",
            "--max_seq_length=64",
            "--max_predictions_per_seq=10",
            "--dupe_factor=2",
        ),
    ),
    "pretraining_pipeline": Job(
        "pretraining_pipeline",
        _prepare_common,
        lambda work, run: _python(
            "-m",
            "data_prep.pretraining_pipeline",
            f"--input_file={work / 'corpus' / '*.txt'}",
            "--input_format=text",
            f"--output_dir={run}",
            f"--vocab_file={VOCAB}",
            "--shard_size_mb=0.02",
            "--max_seq_length=64",
            "--max_predictions_per_seq=10",
            "--dupe_factor=2",
        ),
    ),
    "run_pretraining": Job(
        "run_pretraining",
        _prepare_common,
        lambda work, run: _python(
            REPO / "run_pretraining.py",
            f"--input_file={work / 'shards' / '*.tfrecord'}",
            f"--output_dir={run}",
            f"--bert_config_file={work / 'bert_config.json'}",
            "--max_seq_length=64",
            "--max_predictions_per_seq=10",
            "--train_batch_size=8",
            "--num_train_steps=12",
            "--num_warmup_steps=2",
            "--learning_rate=1e-3",
            "--steps_per_loop=1",
            "--save_checkpoints_steps=3",
            "--do_train",
            "--do_eval",
            "--max_eval_steps=3",
            "--deterministic",
        ),
        final_checkpoint="ckpt-12",
    ),
    "run_classifier": Job(
        "run_classifier",
        _prepare_common,
        lambda work, run: _python(
            REPO / "run_classifier.py",
            *_classifier_flags(work, run),
            f"--export_dir={run / 'export'}",
        ),
        final_checkpoint="ckpt-8",
    ),
    # Its dev score stops improving after the first epoch: it stops at the third of six.
    "run_classifier_early_stopping": Job(
        "run_classifier_early_stopping",
        _prepare_common,
        lambda work, run: _python(
            REPO / "run_classifier.py",
            *_classifier_flags(work, run),
            "--num_train_epochs=6",
            "--early_stopping_patience=2",
        ),
    ),
    "run_squad": Job(
        "run_squad",
        _prepare_common,
        lambda work, run: _python(
            REPO / "run_squad.py",
            *_model(work),
            f"--train_file={work / 'squad.json'}",
            f"--predict_file={work / 'squad.json'}",
            "--version_2_with_negative",
            "--do_train",
            "--do_eval",
            "--do_predict",
            "--max_seq_length=96",
            "--max_query_length=24",
            "--doc_stride=40",
            "--train_batch_size=16",
            "--predict_batch_size=7",
            "--num_train_epochs=2",
            "--learning_rate=1e-3",
            "--steps_per_loop=1",
            "--save_checkpoints_steps=2",
            "--deterministic",
            f"--output_dir={run}",
        ),
        final_checkpoint=None,
    ),
    "run_ner": Job(
        "run_ner",
        _prepare_common,
        lambda work, run: _python(
            REPO / "run_ner.py",
            *_model(work),
            f"--train_file={work / 'ner_train.txt'}",
            f"--eval_file={work / 'ner_dev.txt'}",
            f"--predict_file={work / 'ner_dev.txt'}",
            "--do_train",
            "--do_eval",
            "--do_predict",
            "--max_seq_length=64",
            "--train_batch_size=8",
            "--num_train_epochs=2",
            "--steps_per_loop=1",
            "--save_checkpoints_steps=2",
            "--deterministic",
            f"--output_dir={run}",
        ),
    ),
    "evaluate_and_predict": Job(
        "evaluate_and_predict",
        lambda work: (_prepare_common(work), _trained(work)),
        lambda work, run: _python(
            REPO / "run_classifier.py",
            "--task_name=MRPC",
            f"--data_dir={work / 'mrpc'}",
            f"--init_checkpoint={work / 'trained'}",
            f"--output_dir={run}",
            "--do_eval",
            "--do_predict",
            "--max_seq_length=32",
            "--deterministic",
        ),
    ),
    "export_tfhub": Job(
        "export_tfhub",
        lambda work: (_prepare_common(work), _trained(work)),
        lambda work, run: _python(
            REPO / "export_tfhub.py",
            "--export_type=encoder",
            f"--init_checkpoint={work / 'trained'}",
            f"--export_path={run / 'encoder'}",
            "--overwrite",  # A kill after the export but before the exit leaves it whole.
        ),
    ),
    "convert_checkpoint": Job(
        "convert_checkpoint",
        lambda work: (_prepare_common(work), _trained(work)),
        lambda work, run: _python(
            REPO / "convert_checkpoint.py",
            f"--init_checkpoint={work / 'trained'}",
            f"--output_dir={run / 'hf'}",
            "--output_format=hf",
            "--overwrite",
        ),
    ),
}


def _prepare_shards(work: pathlib.Path) -> None:
    """The common files and the shards run_pretraining reads: create_pretraining_data's
    command made in this process, by its own functions (no TensorFlow start-up of a
    process of its own)."""
    from absl import flags  # pylint: disable=g-import-not-at-top

    from common.progress import TerminalProgress  # pylint: disable=g-import-not-at-top
    from data_prep import create_pretraining_data  # pylint: disable=g-import-not-at-top

    _prepare_common(work)
    shards = work / "shards"
    if not (shards / "a.tfrecord").exists():
        shards.mkdir(exist_ok=True)
        values = flags.FlagValues()
        create_pretraining_data.define_flags(values)
        argv = JOBS["create_pretraining_data"].command(work, shards)[3:]  # After -m module.
        values(["create_pretraining_data", *argv])
        options = create_pretraining_data.options_from_flags(values)
        create_pretraining_data.run(options, TerminalProgress(stream=io.StringIO()))


JOBS["run_pretraining"].prepare = _prepare_shards

"""What a person sees on a command line's stderr (common/cli.py, common/progress.py,
common/quiet_tensorflow.py): a short message for an input or usage error, no
TensorFlow start-up lines, progress lines while a runner trains.

The subprocess tests run run_classifier.py as a user does, with stderr in a file (not
a terminal) and without TF_CPP_MIN_LOG_LEVEL, on a tiny random BERT and 64 real MRPC
training pairs.
"""

import io
import os
import re
import signal
import subprocess
import sys

import pytest

from common import progress, quiet_tensorflow
from tests.conftest import write_tiny_config
from tests.helpers.run_classifier_helpers import REPO, SCRIPT

# The start-up lines TensorFlow 2.21 printed on a CPU machine (measured), and a real
# error between them.
STARTUP = """\
WARNING: All log messages before absl::InitializeLog() is called are written to STDERR
I0000 00:00:1795724360.716979   24431 port.cc:153] oneDNN custom operations are on. \
You may see slightly different numerical results due to floating-point round-off errors \
from different computation orders. To turn them off, set the environment variable \
`TF_ENABLE_ONEDNN_OPTS=0`.
I0000 00:00:1795724360.717254   24431 cudart_stub.cc:31] Could not find cuda drivers on \
your machine, GPU will not be used.
I0000 00:00:1795724360.754914   24431 cpu_feature_guard.cc:227] This TensorFlow binary \
is optimized to use available CPU instructions in performance-critical operations.
To enable the following instructions: AVX2 AVX512F AVX512_VNNI AVX512_BF16 AVX_VNNI FMA, \
in other operations, rebuild TensorFlow with the appropriate compiler flags.
E0000 00:00:1795724361.100000   24431 some_kernel.cc:12] a real error: out of memory
E0000 00:00:1795724364.210119   24431 cuda_platform.cc:52] failed call to cuInit: \
INTERNAL: CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)
E0000 00:00:1795727071.319458   28789 util.cc:131] oneDNN supports DT_INT64 only on \
platforms with AVX-512. Falling back to the default Eigen-based implementation if present.
Traceback (most recent call last):
"""
TF_STARTUP_WORDS = ("cuInit", "cudart", "CUDA", "oneDNN", "absl::InitializeLog", "cpu_feature")


def test_known_startup_lines_are_dropped_and_a_real_error_kept():
    assert quiet_tensorflow.unknown_lines(STARTUP) == (
        "E0000 00:00:1795724361.100000   24431 some_kernel.cc:12] a real error: out of memory\n"
        "Traceback (most recent call last):\n"
    )


def test_user_settings_keep_tensorflow_lines():
    assert quiet_tensorflow.wants_tensorflow_lines(["x.py"], {"TF_CPP_MIN_LOG_LEVEL": "0"})
    assert quiet_tensorflow.wants_tensorflow_lines(["x.py", "--verbose_logging"], {})
    assert not quiet_tensorflow.wants_tensorflow_lines(["x.py", "--noverbose_logging"], {})
    # The level this project sets (also seen by the processes it starts) is not a request.
    ours = {"TF_CPP_MIN_LOG_LEVEL": "2", quiet_tensorflow.OURS: "1"}
    assert not quiet_tensorflow.wants_tensorflow_lines(["x.py"], ours)


def test_plain_lines_every_interval_with_eta():
    stream, now = io.StringIO(), [0.0]
    task = progress.LineTask(stream, "train", 100, "step", 0, 10.0, True, clock=lambda: now[0])
    for step, t in ((10, 5.0), (20, 10.0), (30, 12.0), (40, 20.0)):
        now[0] = t
        task.update(step, loss=0.5)
    now[0] = 21.0
    task.close()
    assert stream.getvalue().splitlines() == [
        "train: step 20/100 (20%)  loss 0.5  elapsed 0:10  ETA 0:40",
        "train: step 40/100 (40%)  loss 0.5  elapsed 0:20  ETA 0:30",
    ]


def test_a_transient_job_shows_only_lines_it_needed():
    stream, now = io.StringIO(), [0.0]
    quick = progress.LineTask(stream, "evaluate", 4, "batch", 0, 10.0, False, lambda: now[0])
    for batch in range(1, 5):
        now[0] = batch
        quick.update(batch)
    quick.close()
    assert stream.getvalue() == ""


def _run(args, tmp_path):
    """run_classifier.py with stderr in a file; returns (exit code, stderr text)."""
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    stderr_path = tmp_path / "stderr.txt"
    with open(stderr_path, "w") as stderr:
        code = subprocess.run(
            [sys.executable, str(SCRIPT), *args],
            cwd=REPO,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            timeout=600,
        ).returncode
    return code, stderr_path.read_text()


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory, vocab_file):
    root = tmp_path_factory.mktemp("tiny")
    config = write_tiny_config(root / "bert_config.json")
    return [f"--bert_config_file={config}", f"--vocab_file={vocab_file}"]


@pytest.mark.slow
def test_short_row_is_one_message(tiny_model, mrpc_dir, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    lines = (mrpc_dir / "train.tsv").read_text(encoding="utf-8-sig").splitlines()
    lines[2] = lines[2].rsplit("\t", 1)[0]  # One column missing on line 3.
    (data / "train.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    output_dir = tmp_path / "out"
    code, stderr = _run(
        ["--task_name=MRPC", f"--data_dir={data}", "--do_train", "--max_seq_length=32"]
        + [f"--output_dir={output_dir}"]
        + tiny_model,
        tmp_path,
    )
    assert code == 2, stderr
    lines = stderr.splitlines()
    assert len(lines) <= 5 and "Traceback" not in stderr, stderr
    error = [line for line in lines if "error:" in line]
    assert error == [
        f"run_classifier.py: error: {data}/train.tsv:3: expected at least 5 columns "
        "separated by '\\t', got 4"
    ]
    assert not any(word in stderr for word in TF_STARTUP_WORDS), stderr
    # The traceback is in the log file of output_dir, which the message names.
    log = re.search(r"\(traceback in (.+)\)", stderr).group(1)
    assert "Traceback (most recent call last)" in open(log).read()


@pytest.mark.slow
def test_missing_flag_is_one_message(tmp_path):
    code, stderr = _run(["--task_name=MRPC", f"--output_dir={tmp_path}"], tmp_path)
    assert code == 2, stderr
    assert stderr.splitlines() == [
        "run_classifier.py: error: flag --data_dir=None: Flag --data_dir must have a value "
        "other than None.",
        f"`python {SCRIPT} --helpshort` lists its flags.",
    ]


@pytest.mark.slow
def test_a_stray_word_is_one_message(tmp_path):
    """A word that is not a flag (an optional flag copied with its brackets) stops the
    run before it starts, instead of being dropped."""
    output_dir = tmp_path / "out"
    code, stderr = _run(
        ["--task_name=MRPC", "--data_dir=x", f"--output_dir={output_dir}", "[--do_train]"],
        tmp_path,
    )
    assert code == 2, stderr
    assert stderr.splitlines() == [
        "run_classifier.py: error: unexpected argument '[--do_train]': this command takes "
        "flags only (--name=value, --name or --noname).",
        f"`python {SCRIPT} --helpshort` lists its flags.",
    ]
    assert not output_dir.exists()


@pytest.mark.slow
def test_training_shows_progress_lines_and_no_tensorflow_startup(tiny_model, mrpc_dir, tmp_path):
    output_dir = tmp_path / "out"
    code, stderr = _run(
        [
            "--task_name=MRPC",
            f"--data_dir={mrpc_dir}",
            "--do_train",
            "--do_eval",
            "--max_seq_length=32",
            "--train_batch_size=8",
            "--num_train_epochs=1",
            "--steps_per_loop=2",
            "--progress_interval_s=0",
            f"--output_dir={output_dir}",
        ]
        + tiny_model,
        tmp_path,
    )
    assert code == 0, stderr
    assert not any(word in stderr for word in TF_STARTUP_WORDS), stderr
    lines = stderr.splitlines()
    assert lines[0].startswith("Running on CPU") and "kernels" in lines[0]
    steps = [line for line in lines if line.startswith("train: step ")]
    # 64 examples at batch 8: 8 steps in loops of 2, one line each (ETA 0:00 at the end).
    assert [line.split()[2] for line in steps] == ["2/8", "4/8", "6/8", "8/8"], stderr
    for line in steps:
        assert re.search(
            r"  loss \d+\.\d+  examples/s [\d.,]+  elapsed \d+:\d\d  ETA \d+:\d\d$", line
        )
    # The dev data read once: the final evaluation, of the model the epoch's evaluation
    # scored, is that evaluation's results, pointed at instead of shown again.
    passes = [line.split(":")[0] for line in lines if re.match(r"\w+: batch 1\b", line)]
    assert passes == ["evaluate"], stderr
    shown = [line for line in lines if line.startswith("Evaluation at step")]
    assert len(shown) == 2 and shown[0].startswith("Evaluation at step 8: eval_accuracy "), stderr
    assert shown[1] == f"Evaluation at step 8: as above ({output_dir}/eval_results.txt)"
    # The score that picked the best model is named: MRPC's is not a printed metric.
    assert any(
        re.fullmatch(
            r"The best model is that of step 8 \(score [\d.]+ = mean of eval_accuracy and "
            rf"eval_f1\): {output_dir}/best",
            line,
        )
        for line in lines
    ), stderr
    # TensorBoard summaries are kept.
    assert any(name.startswith("events.") for name in os.listdir(output_dir / "train"))


def test_the_end_is_shown_once():
    """A watcher that keeps reporting a finished job (the Beam driver's) adds no line."""
    stream, now = io.StringIO(), [0.0]
    task = progress.LineTask(stream, "shards", 2, "shard", 0, 1.0, True, clock=lambda: now[0])
    for t, done in ((2.0, 1), (4.0, 2), (6.0, 2), (8.0, 2)):
        now[0] = t
        task.update(done)
    task.close()
    assert [line.split("  ")[0] for line in stream.getvalue().splitlines()] == [
        "shards: shard 1/2 (50%)",
        "shards: shard 2/2 (100%)",
    ]


@pytest.mark.parametrize("columns, lines", [(0, 0), (80, 0), (0, 24), (100, 30)])
def test_a_bar_is_drawn_whatever_size_the_terminal_reports(columns, lines):
    """tqdm draws nothing, not even its last line, on a terminal that reports 0 lines
    (a container's terminal before it is sized reports 0 x 0); such a bar is drawn
    for 80 x 24."""
    import fcntl
    import struct
    import termios

    main, side = os.openpty()
    fcntl.ioctl(side, termios.TIOCSWINSZ, struct.pack("HHHH", lines, columns, 0, 0))
    with open(side, "w", encoding="utf-8", closefd=True) as terminal:
        shown = progress.TerminalProgress(stream=terminal)
        assert shown.live
        with shown.task("train", total=5, unit="step") as bar:
            bar.update(5, loss=0.5)
        shown.say("done")
    text = b""
    while not text.endswith(b"done\r\n"):
        text += os.read(main, 4096)
    os.close(main)
    last = text.decode().split("\r")[-3]  # The bar's final state, then "\n", "done".
    assert last.startswith("train: 100%|") and last.endswith(
        "5/5 step [elapsed 00:00, ETA 00:00, loss 0.5]"
    )
    assert len(last) == (columns - 1 if columns and lines else 80)


def test_ctrl_c_while_starting_is_one_line():
    """Ctrl-C while TensorFlow is imported (before main) ends the program with one
    line and exit status 130, not a traceback through the import machinery; once
    main begins (common/cli.py) Ctrl-C is Python's KeyboardInterrupt again, for the
    program's own handling."""
    program = (
        "import os, signal, sys, time\n"
        "import common.quiet_tensorflow\n"
        "from absl import app\n"
        "from common import cli\n"
        "def main(argv):\n"
        "    print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)\n"
        "    if argv[1:] == ['during_start']:\n"
        "        return\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "    time.sleep(5)\n"
        "if sys.argv[1:] == ['before_main']:\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "    time.sleep(5)\n"
        "cli.run(main)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}

    def as_from_a_terminal():
        # A test worker may ignore SIGINT (pytest-xdist's do), and an ignored signal
        # stays ignored in the processes it starts: the program must get it.
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    before = subprocess.run(
        [sys.executable, "-c", program, "before_main"],
        cwd=REPO,
        preexec_fn=as_from_a_terminal,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert before.returncode == 130, before.stderr
    assert before.stderr.splitlines() == [
        "-c: stopped by Ctrl-C while starting; nothing was done."
    ], before.stderr
    during = subprocess.run(
        [sys.executable, "-c", program],
        cwd=REPO,
        preexec_fn=as_from_a_terminal,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert during.stdout.splitlines() == ["True"], during.stderr
    assert "KeyboardInterrupt" in during.stderr

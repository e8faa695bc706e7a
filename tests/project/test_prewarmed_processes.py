"""The processes tests start from a prewarmed interpreter (tests/helpers/prewarmed.py)
behave as `python` started afresh: each probe below runs both ways (the fresh way with
BERT_TESTS_FRESH_PROCESSES=1) and must give the same exit code, stdout and stderr."""

import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from tests.conftest import REPO_ROOT
from tests.helpers import prewarmed

pytestmark = pytest.mark.skipif(
    not prewarmed._real, reason="not installed here (Linux's pidfd_open needed, or turned off)"
)

# What a program sees of its start: argv, __main__, sys.path[0], the working
# directory and environment, and whether TensorFlow works.
_SEEN = textwrap.dedent("""
    import os, sys
    import tensorflow as tf
    main = sys.modules["__main__"]
    print(sys.argv[1:], main.__name__, os.path.basename(getattr(main, "__file__", "-")))
    print(sys.path[0] in ("", os.getcwd(), os.path.dirname(os.path.realpath(sys.argv[0]))))
    print(os.getcwd() == os.environ["WANT_CWD"], os.environ.get("PROBE"))
    print(int(tf.reduce_sum(tf.range(5)).numpy()), "torch" in sys.modules)
    sys.stderr.write("to stderr\\n")
    sys.exit(int(os.environ.get("CODE", "0")))
""")

PROBES = {
    "exit code": ["-c", "import sys; print('out'); sys.exit(3)"],
    "exception": ["-c", "raise ValueError('boom')"],
    "exit message": ["-c", "import sys; sys.exit('a message')"],
    "ctrl-c": ["-c", "raise KeyboardInterrupt"],
    "threads and atexit": [
        "-c",
        "import atexit, threading, time\n"
        "atexit.register(print, 'atexit')\n"
        "threading.Thread(target=lambda: (time.sleep(0.3), print('thread'))).start()\n"
        "print('main')",
    ],
    "module": ["-m", "probe_module", "--sort-keys"],
    "stdin": ["-c", "import sys; print(sys.stdin.read().upper())"],
}


# A program is prewarmed when it imports TensorFlow: a probe that does not names it.
NAMED = "# tensorflow\n"


def _run(args, fresh, tmp_path, **kwargs):
    env = dict(os.environ, WANT_CWD=str(tmp_path), PROBE="x", CODE="4")
    if fresh:
        env[prewarmed.OFF] = "1"
    return subprocess.run(
        [sys.executable, *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        **kwargs,
    )


_TENSORFLOW_LINE = re.compile(r"^([IEW]\d{4} |WARNING: All log messages before absl)")


def _tail(text: str) -> list[str]:
    """The lines of stderr but a traceback's frames (the prewarmed one has more) and
    TensorFlow's own lines (of its start-up and first device)."""
    return [
        line
        for line in text.splitlines()
        if not line.startswith("  ") and not _TENSORFLOW_LINE.match(line)
    ]


@pytest.mark.parametrize("name", list(PROBES) + ["script", "-c with arguments"])
def test_a_prewarmed_process_runs_as_a_fresh_one(name, tmp_path):
    (tmp_path / "probe_module.py").write_text(
        NAMED + "import json, sys\nprint(json.dumps(json.load(sys.stdin), sort_keys=True))\n"
    )
    if name == "script":
        (tmp_path / "probe.py").write_text(_SEEN)
        args = ["probe.py", "--flag", "word"]
    elif name == "-c with arguments":
        args = ["-c", _SEEN, "--flag", "word"]
    else:
        args = PROBES[name]
        if args[0] == "-c":
            args = ["-c", NAMED + args[1], *args[2:]]
    stdin = '{"b": 1, "a": 2}' if name in ("module", "stdin") else ""
    got = [_run(args, fresh, tmp_path, input=stdin) for fresh in (False, True)]
    prewarmed_run, fresh_run = got
    assert prewarmed_run.returncode == fresh_run.returncode, got
    assert prewarmed_run.stdout == fresh_run.stdout, got
    assert _tail(prewarmed_run.stderr) == _tail(fresh_run.stderr), got


def test_a_prewarmed_process_is_one_to_signal_kill_and_wait_for(tmp_path):
    """Started from the prewarmed interpreter (its parent is not this process), it is
    killed with its process group as any process is, a timeout stops waiting for it,
    and its exit status says how it ended."""
    code = NAMED + "import os, time; print(os.getppid(), flush=True); time.sleep(60)"
    process = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    parent = int(process.stdout.readline())
    assert parent != os.getpid()
    assert "prewarmed.py" in open(f"/proc/{parent}/cmdline").read()
    with pytest.raises(subprocess.TimeoutExpired):
        process.wait(timeout=0.2)
    assert process.poll() is None
    os.killpg(process.pid, signal.SIGKILL)
    assert process.wait(timeout=60) == -signal.SIGKILL
    process.stdout.close()
    start = time.monotonic()
    sigterm = subprocess.Popen([sys.executable, "-c", NAMED + "import time; time.sleep(60)"])
    time.sleep(0.2)
    sigterm.terminate()
    assert sigterm.wait(timeout=60) == -signal.SIGTERM
    assert time.monotonic() - start < 30


def test_a_running_child_dropped_in_a_reference_cycle_is_reaped_later():
    """A Popen dropped while its child runs is kept by subprocess and polled when the
    next Popen starts (`subprocess._cleanup`). Collected in a reference cycle, its
    status channel must outlive the collection (a socket object's finalizer closed it:
    "Bad file descriptor" in the next test's Popen)."""
    import gc

    # The child runs until its stdin closes (not for a set time: a loaded machine
    # let a one-second child end before the collection, and then nothing is kept).
    process = subprocess.Popen(
        [sys.executable, "-c", NAMED + "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    pid, stdin = process.pid, process.stdin
    process.cycle = process
    del process
    gc.collect()
    (kept,) = [p for p in subprocess._active if p.pid == pid]
    assert kept.returncode is None
    stdin.close()
    assert kept.wait(timeout=60) == 0  # The channel still answers.
    # And one polled by the next Popen's cleanup:
    process = subprocess.Popen([sys.executable, "-c", NAMED + "pass"])
    process.cycle, pid = process, process.pid
    del process
    gc.collect()
    time.sleep(3)
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    assert not [p for p in subprocess._active if p.pid == pid]


def test_what_a_fresh_interpreter_must_run_is_not_prewarmed():
    """A command whose environment leaves TF_CPP_MIN_LOG_LEVEL unset (what the user's
    terminal shows at start-up is under test), a program that does not import
    TensorFlow, another executable, or interpreter options: a fresh process."""
    env = dict(os.environ)
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)
    parent = "import os; print(os.getppid())"
    for args, kwargs in (
        ([sys.executable, "-c", NAMED + parent], {"env": env}),
        ([sys.executable, "-c", parent], {}),
        ([sys.executable, "-I", "-c", NAMED + parent], {}),
        (["sh", "-c", "echo $PPID"], {}),
    ):
        out = subprocess.run(args, capture_output=True, text=True, cwd=REPO_ROOT, **kwargs)
        assert int(out.stdout) == os.getpid(), (args, out)

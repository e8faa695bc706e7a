"""TensorFlow imported without its start-up lines. A command line imports this module
first, before anything that imports TensorFlow (importing it is what does the work).

On import TensorFlow's C++ libraries print lines that read like failures on a machine
without a GPU ("Could not find cuda drivers", "failed call to cuInit: ... CUDA error")
and notes for its developers (oneDNN custom operations, CPU instructions), some of
them twice and before its logging is initialised: measured with TensorFlow 2.21,
TF_CPP_MIN_LOG_LEVEL=3 hides the cuInit line but not the others. So TensorFlow is
imported, and its devices listed (which is when CUDA is initialised), with the
process's stderr file descriptor sent to a temporary file; afterwards every line of it
that is not one of `KNOWN_LINES` is written back to stderr, so a real error stays
visible (`known_lines_hidden` does the same around any block, e.g. loading an export).
For the rest of the run TF_CPP_MIN_LOG_LEVEL=2 hides TensorFlow's C++ info
and warning lines (e.g. "Input of GeneratorDatasetOp::Dataset will not be optimized",
once per dataset) and keeps its errors.

Nothing is hidden or set when the user set TF_CPP_MIN_LOG_LEVEL or gave
--verbose_logging.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import sys
import tempfile

# The start-up lines TensorFlow prints on every run, matched exactly enough that no
# other message can match.
KNOWN_LINES = tuple(
    re.compile(pattern)
    for pattern in (
        r"^WARNING: All log messages before absl::InitializeLog\(\) is called are written "
        r"to STDERR$",
        r"^I\d{4} [\d:.]+ +\d+ port\.cc:\d+\] oneDNN custom operations are on\. ",
        r"^I\d{4} [\d:.]+ +\d+ cudart_stub\.cc:\d+\] Could not find cuda drivers on your "
        r"machine, GPU will not be used\.$",
        r"^I\d{4} [\d:.]+ +\d+ cpu_feature_guard\.cc:\d+\] This TensorFlow binary is "
        r"optimized to use available CPU instructions in performance-critical operations\.$",
        r"^To enable the following instructions: [A-Z0-9_ ]+, in other operations, rebuild "
        r"TensorFlow with the appropriate compiler flags\.$",
        r"^E\d{4} [\d:.]+ +\d+ cuda_platform\.cc:\d+\] failed call to cuInit: ",
        r"^E\d{4} [\d:.]+ +\d+ cuda_(dnn|fft|blas)\.cc:\d+\] Unable to register "
        r"cu(DNN|FFT|BLAS) factory: ",
        # Loading a SavedModel that tokenizes in-graph; logged as an error, a note.
        r"^E\d{4} [\d:.]+ +\d+ util\.cc:\d+\] oneDNN supports DT_INT64 only on platforms "
        r"with AVX-512\. Falling back to the default Eigen-based implementation if present\.$",
    )
)


# Set with TF_CPP_MIN_LOG_LEVEL by `import_quietly`: the level is ours, not the user's
# (also in the processes this one starts, e.g. Beam's workers).
OURS = "BERT_TF_CPP_MIN_LOG_LEVEL_SET"


def wants_tensorflow_lines(argv: list[str], environ) -> bool:
    """Whether the user asked for TensorFlow's own start-up output."""
    if "TF_CPP_MIN_LOG_LEVEL" in environ and OURS not in environ:
        return True
    return any(
        arg in ("--verbose_logging", "--verbose_logging=true", "--verbose_logging=True")
        for arg in argv[1:]
    )


def unknown_lines(text: str) -> str:
    """The lines of `text` that are not known start-up lines."""
    kept = [
        line
        for line in text.splitlines(keepends=True)
        if not any(p.search(line.rstrip("\n")) for p in KNOWN_LINES)
    ]
    return "".join(kept)


@contextlib.contextmanager
def known_lines_hidden():
    """Within: what is written to stderr's file descriptor is held in a temporary
    file; at the end, every line of it but the `KNOWN_LINES` goes to stderr. Nothing
    is held when the user asked for TensorFlow's lines (`wants_tensorflow_lines`)."""
    if wants_tensorflow_lines(sys.argv, os.environ):
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            rest = unknown_lines(captured.read().decode("utf-8", errors="replace"))
            if rest:
                sys.stderr.write(rest)
                sys.stderr.flush()


def import_quietly() -> None:
    """Imports TensorFlow and initialises its devices with the known lines hidden."""
    if not wants_tensorflow_lines(sys.argv, os.environ):
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
        os.environ[OURS] = "1"
    with known_lines_hidden():
        import tensorflow as tf

        tf.config.list_physical_devices()


# Logged through the root logger when apache_beam is imported without Google Cloud's
# client libraries, which no local run needs (the pipeline on Dataflow has them).
BEAM_IMPORT_NOTE = "apitools not found, and bigquery client libraries are not available"


def not_beam_import_note(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith(BEAM_IMPORT_NOTE)


# The exit status of a program stopped by Ctrl-C (128 + SIGINT), as the shell's.
EXIT_INTERRUPTED = 130


def stopped_while_starting(signum, frame) -> None:
    """Ctrl-C before the program's main began (importing TensorFlow takes seconds):
    one line and exit status 130, not a traceback through the import machinery.
    `common.cli.run` puts Python's own handler back when main begins."""
    del signum, frame
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # Ctrl-C again: at once.
    program = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "bert"
    sys.stderr.write(f"{program}: stopped by Ctrl-C while starting; nothing was done.\n")
    sys.stderr.flush()
    raise SystemExit(EXIT_INTERRUPTED)


def _handle_ctrl_c_while_starting() -> None:
    if "_pytest" in sys.modules:  # Imported by a test: Ctrl-C stays the test runner's.
        return
    try:
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, stopped_while_starting)
    except ValueError:  # Imported outside the main thread: leave it as it is.
        pass


_handle_ctrl_c_while_starting()
import_quietly()
logging.getLogger().addFilter(not_beam_import_note)

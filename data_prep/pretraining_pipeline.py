"""Pre-training data at corpus scale on Apache Beam: the command line.

Runs `corpus_pipeline` (raw text -> sentences -> vocabulary -> TFRecord shards;
see there) with this module's flags; the rest of the command line is Beam's
pipeline options (`--runner` and that runner's own). Flags that mean the same as
`create_pretraining_data`'s have its names and defaults.

Usage (the corpus in the original format, 2 local worker processes):

    python -m data_prep.pretraining_pipeline --input_file='corpus/*.txt' \
        --output_dir=shards --vocab_file=vocab.txt --do_lower_case \
        --max_seq_length=128 --max_predictions_per_seq=20 --masked_lm_prob=0.15 \
        --random_seed=12345 --dupe_factor=2 \
        --runner=DirectRunner --direct_num_workers=2 \
        --direct_running_mode=multi_processing
"""

import common.quiet_tensorflow  # noqa: F401  (first: TensorFlow's start-up lines hidden)

import contextlib
import logging as std_logging
import os
import pathlib
import re
import subprocess
import sys
import threading

from absl import flags
from absl import logging
from apache_beam.options.pipeline_options import PipelineOptions

from common import cli, quiet_tensorflow
from common.errors import UserError
from common.progress import TerminalProgress

from data_prep.pretraining import corpus
from data_prep.pretraining import corpus_pipeline
from data_prep.pretraining import corpus_settings
from data_prep import create_pretraining_data as cpd
from common import run_control


# ----------------------------------------------------------------------------
# Command line.
# ----------------------------------------------------------------------------


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """This pipeline's flags; the rest of the command line goes to Beam."""
    define = dict(flag_values=flag_values)
    flags.DEFINE_string(
        "input_file",
        None,
        "Input files (comma-separated files and globs, any file system Beam reads).",
        **define,
    )
    flags.DEFINE_enum(
        "input_format",
        "sentences",
        corpus.FORMATS,
        "sentences: one sentence per line, a blank line between documents (the "
        "original's). text: raw text, a blank line between documents, lines "
        "wrapped anywhere. jsonl: one JSON object per line, its text under "
        '"text".',
        **define,
    )
    flags.DEFINE_string(
        "output_dir",
        None,
        "Receives <name>.tfrecord shards, their .meta.json and summary.json.",
        **define,
    )
    flags.DEFINE_string(
        "sentences_dir",
        None,
        "Receives the sentences of raw input as <name>.txt (default: <output_dir>/sentences).",
        **define,
    )
    flags.DEFINE_string(
        "vocab_file",
        None,
        "The vocabulary file; with --learn_vocab_size, where the learned one is written.",
        **define,
    )
    flags.DEFINE_integer(
        "learn_vocab_size",
        0,
        "If positive: learn a WordPiece vocabulary of this many entries from "
        "the input (original layout: [PAD], [unused], [UNK], [CLS], [SEP], "
        "[MASK] at the original ids).",
        **define,
    )
    flags.DEFINE_integer(
        "max_input_words",
        5_000_000,
        "The vocabulary is learned from this many of the most frequent words.",
        **define,
    )
    flags.DEFINE_float(
        "shard_size_mb",
        16.0,
        "Files are cut at document boundaries into document shards of about "
        "this size (MB, 10^6 bytes); smaller files are one shard each.",
        **define,
    )
    flags.DEFINE_enum(
        "bad_input",
        "fail",
        corpus.POLICIES,
        "An unreadable file, a non-UTF-8 line, an empty document, a JSON line "
        "without text: fail (stop with the file and line) or skip (log, count "
        "and go on).",
        **define,
    )
    flags.DEFINE_enum(
        "stop_after", "shards", corpus_settings.STAGES, "The last stage to run.", **define
    )
    flags.DEFINE_bool(
        "overwrite",
        False,
        "Remove the shards an earlier run left in --output_dir that this run would "
        "not replace (another shard size, other inputs); by default such an "
        "--output_dir is refused, since a glob over it would read both runs' shards.",
        **define,
    )
    cpd.define_instance_flags(flag_values)
    for name in ("input_file", "output_dir", "vocab_file"):
        flags.mark_flag_as_required(name, flag_values=flag_values)


def settings_from_flags(flag_values: flags.FlagValues) -> corpus_settings.PipelineSettings:
    """`PipelineSettings` from parsed flags (the only place that reads them)."""
    fv = flag_values
    return corpus_settings.PipelineSettings(
        input_files=tuple(corpus_pipeline.match_input_files(fv.input_file)),
        input_format=fv.input_format,
        output_dir=fv.output_dir,
        sentences_dir=fv.sentences_dir or corpus_settings.join_path(fv.output_dir, "sentences"),
        vocab_file=fv.vocab_file,
        learn_vocab_size=fv.learn_vocab_size,
        max_input_words=fv.max_input_words,
        shard_bytes=int(fv.shard_size_mb * 1e6),
        bad_input=fv.bad_input,
        stop_after=fv.stop_after,
        run=cpd.run_options_from_flags(
            fv, input_files=(), output_files=(), vocab_file=fv.vocab_file
        ),
    )


def _parse_flags(argv):
    """Our flags; everything else is returned for Beam's options."""
    return flags.FLAGS(argv, known_only=True)


def main(argv):
    logging.set_verbosity(logging.INFO)
    # Beam logs a step's exception, traceback and all, before raising it again; the
    # run's error reports it (one line on the terminal, the traceback in the log file).
    std_logging.getLogger("apache_beam.runners.common").setLevel(std_logging.CRITICAL)
    # Local worker processes import this package from the repository root.
    root = str(pathlib.Path(__file__).resolve().parent.parent)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    )
    try:
        settings = settings_from_flags(flags.FLAGS)
        if "://" not in settings.output_dir and not os.path.isfile(settings.output_dir):
            run_control.hold_directory(settings.output_dir, "--output_dir=%s" % settings.output_dir)
        run_control.exit_on_sigterm(
            "pretraining_pipeline",
            f"the shards written so far in {settings.output_dir} are whole, but "
            f"run_pretraining refuses them until a finished run writes summary.json",
            on_stop=stop_workers,
        )
        with worker_start_lines_hidden(), workers_ignore_ctrl_c():
            progress = TerminalProgress(interval=flags.FLAGS.progress_interval_s)
            corpus_pipeline.run(
                settings,
                PipelineOptions(beam_args(argv[1:])),
                overwrite=flags.FLAGS.overwrite,
                progress=progress,
            )
    except Exception as e:  # pylint: disable=broad-except
        if STOPPING.is_set():
            # Beam's clean-up meeting the workers stopped: the program was stopped.
            logging.info("While stopping: %r", e)
            raise SystemExit(_STOP_CODE[0]) from None
        message = _input_error_message(e)
        if message is None:
            raise
        # Bad input or flags, also from a worker process: the message says what and
        # where (cli prints it alone).
        raise UserError(message) from e


# Set when Ctrl-C or SIGTERM stops the program: the local worker processes end with it,
# and what they or Beam's threads watching them say of that is not shown.
STOPPING = threading.Event()
# The local worker processes started (`workers_ignore_ctrl_c`), and the exit code of
# the signal that stopped the program.
_WORKERS: list[subprocess.Popen] = []
_STOP_CODE: list[int] = []


def stop_workers(code: int) -> None:
    """Ctrl-C or SIGTERM (exit `code`): `STOPPING`, and the local workers stopped now
    (they ignore Ctrl-C, and would go on with their shards while the program ends)."""
    _STOP_CODE.append(code)
    STOPPING.set()
    # Beam's clean-up then meets workers that are gone, and logs each as an error.
    std_logging.getLogger("apache_beam").setLevel(std_logging.CRITICAL)
    for process in _WORKERS:
        if process.poll() is None:
            process.kill()


@contextlib.contextmanager
def workers_ignore_ctrl_c():
    """Within: the worker processes Beam's DirectRunner starts
    (--direct_running_mode=multi_processing) ignore Ctrl-C, from their first
    instruction on. A terminal sends Ctrl-C to every process of the job; it is this
    process's to handle (it ends the run with one line, `run_control.exit_on_sigterm`),
    and a worker that took it would print its own KeyboardInterrupt traceback. Beam
    starts them through a shell (`subprocess.Popen(command, shell=True)` in
    `local_job_service`); the shell ignores the signal, then becomes the worker (an
    ignored signal stays ignored across exec). Ctrl-C or SIGTERM stops them at once
    (`stop_workers`); when the program ends, those still running are stopped.

    Workers that end because the program stops (`STOPPING`) are not an error: Beam's
    threads that talk to them would print tracebacks ("Worker subprocess exited with
    return code ...", a gRPC error), which are not shown then; before, they are."""
    try:
        from apache_beam.runners.portability import local_job_service
    except ImportError:  # Another Beam layout: its workers keep the default.
        yield
        return
    if getattr(local_job_service, "subprocess", None) is not subprocess:
        yield
        return

    class Popen(subprocess.Popen):
        def __init__(self, args, *rest, **kwargs):
            if kwargs.get("shell") and isinstance(args, str):
                args = f"trap '' INT; exec {args}"
            super().__init__(args, *rest, **kwargs)
            _WORKERS.append(self)

    class WorkerSubprocess:
        def __getattr__(self, name):
            return getattr(subprocess, name)

    wrapped = WorkerSubprocess()
    wrapped.Popen = Popen
    local_job_service.subprocess = wrapped
    show_thread_error = threading.excepthook

    def unless_stopping(args):
        if not STOPPING.is_set():
            show_thread_error(args)

    threading.excepthook = unless_stopping
    try:
        yield
    finally:
        local_job_service.subprocess = subprocess
        for process in _WORKERS:
            if process.poll() is None:
                process.kill()
        if not STOPPING.is_set():  # Else Beam's threads may still report the workers.
            threading.excepthook = show_thread_error


def beam_args(args: list[str]) -> list[str]:
    """Beam's options, with its local worker processes' log at errors only unless
    --default_sdk_harness_log_level says otherwise: at INFO they print a dozen lines
    each as they start."""
    if any(a.startswith("--default_sdk_harness_log_level") for a in args):
        return args
    return args + ["--default_sdk_harness_log_level=ERROR"]


# What each of Beam's local worker processes prints as it starts, on the stderr it
# shares with this process (its log goes to this process's log afterwards): a note
# on Google Cloud's libraries, which no local run needs, and one for Beam's developers.
WORKER_START_LINES = tuple(
    re.compile(pattern)
    for pattern in (
        r"^WARNING:root:" + re.escape(quiet_tensorflow.BEAM_IMPORT_NOTE),
        r"^INFO:__main__:Logging handler created\.$",
    )
)


@contextlib.contextmanager
def worker_start_lines_hidden():
    """Within: the worker processes Beam starts write their stderr into a pipe whose
    lines reach the terminal as they come, all but `WORKER_START_LINES` (and none once
    the program stops: `STOPPING`, the workers end with it); this process's
    own `sys.stderr` writes to the terminal directly (its progress bar stays live).
    Nothing is hidden where TensorFlow's start-up lines are not either (the user set
    TF_CPP_MIN_LOG_LEVEL or gave --verbose_logging)."""
    if quiet_tensorflow.wants_tensorflow_lines(sys.argv, os.environ):
        yield
        return
    sys.stderr.flush()
    terminal = os.dup(2)
    read_end, write_end = os.pipe()
    os.dup2(write_end, 2)  # What child processes inherit.
    os.close(write_end)
    saved_stderr = sys.stderr
    sys.stderr = open(os.dup(terminal), "w", buffering=1, errors="backslashreplace")

    def forward():
        pending = b""
        while data := os.read(read_end, 65536):
            *lines, pending = (pending + data).split(b"\n")
            if STOPPING.is_set():  # The workers end with the program: its line says it.
                lines, pending = [], b""
            for line in lines:
                text = line.decode("utf-8", errors="replace").rstrip("\r")
                if not any(p.search(text) for p in WORKER_START_LINES):
                    os.write(terminal, line + b"\n")
        if pending:
            os.write(terminal, pending)
        os.close(read_end)

    thread = threading.Thread(target=forward, name="worker-stderr", daemon=True)
    thread.start()
    try:
        yield
    finally:
        sys.stderr.flush()
        sys.stderr.close()
        sys.stderr = saved_stderr
        os.dup2(terminal, 2)  # Closes this process's write end of the pipe.
        thread.join(timeout=5.0)  # The pipe ends when every worker has exited.
        if not thread.is_alive():
            os.close(terminal)


def _input_error_message(error: Exception) -> str | None:
    """The message of bad input or flags, also when a worker process raised it
    (runners then wrap it, traceback included, in an error of their own)."""
    if isinstance(error, UserError):
        return str(error)
    marker = corpus.BadInputError.__name__ + ": "
    text = str(error)
    if marker not in text:
        return None
    return text.rsplit(marker, 1)[1].split("\n", 1)[0]


if __name__ == "__main__":
    define_flags()
    cli.run(main, _parse_flags)

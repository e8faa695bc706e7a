"""What every command line of the project shares: errors for people and a quiet log.

`run(main)` is absl's `app.run(main)` with:
- an input or usage error (a `UserError`, absl's own flag errors: a missing required
  flag, a bad or unknown flag value, and `app.UsageError`) printed as one short message
  on stderr that names the file and line or the flag, exit status 2 (`EXIT_USER_ERROR`);
  when the run has a log file in output_dir, the traceback is written there, and only
  there;
- any other exception (a bug) left alone: Python prints its traceback, exit status 1;
- absl's log kept off the terminal (it goes to the log file in output_dir where the
  command has one); warnings and errors show as one short line each
  (`warning: <message>`). --verbose_logging (or --alsologtostderr, ...) shows absl's
  own output instead.

Entry points import `common.quiet_tensorflow` first (TensorFlow's start-up lines).
"""

from __future__ import annotations

import logging as pylogging
import os
import signal
import sys
from typing import Callable, NoReturn

from absl import app, flags, logging

from common.errors import UserError

EXIT_USER_ERROR = 2


def program_name() -> str:
    return os.path.basename(sys.argv[0]) if sys.argv else "bert"


def command() -> str:
    """How the user started this program: `python x.py` or `python -m package.x`."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is not None and spec.name and "." in spec.name:
        return f"python -m {spec.name}"
    return f"python {sys.argv[0]}" if sys.argv else "python"


def log_file_path() -> str | None:
    """The absl log file of this run (in output_dir), or None while logs go to stderr.
    absl's `<program>.INFO` link to it when there is one (a shorter name)."""
    stream = logging.get_absl_handler().python_handler.stream
    if stream is None or stream is sys.stderr or stream is sys.__stderr__:
        return None
    path = getattr(stream, "name", None)
    if path is None:
        return None
    link = os.path.join(os.path.dirname(path), os.path.basename(path).split(".")[0] + ".INFO")
    if os.path.islink(link) and os.path.realpath(link) == os.path.realpath(path):
        return link
    return path


def exit_for_person(message: str, hint: str | None = None) -> NoReturn:
    """Prints `message` (and `hint`) on stderr and exits with EXIT_USER_ERROR."""
    lines = [f"{program_name()}: error: {message}"]
    if hint:
        lines.append(hint)
    sys.stderr.flush()
    sys.stderr.write("\n".join(lines) + "\n")
    sys.stderr.flush()
    sys.exit(EXIT_USER_ERROR)


def _help_hint() -> str:
    return f"`{command()} --helpshort` lists its flags."


class _FileOnly(pylogging.Filter):
    """absl's handler writes to the log file only; `_Terminal` shows the warnings."""

    def filter(self, record: pylogging.LogRecord) -> bool:
        return log_file_path() is not None


class _Terminal(pylogging.Handler):
    """Warnings and errors on stderr as `warning: <message>` (the log file has the
    rest: time, thread, file and line), above any progress bar."""

    def __init__(self):
        super().__init__(pylogging.WARNING)
        self.setFormatter(pylogging.Formatter("%(message)s"))

    def emit(self, record: pylogging.LogRecord) -> None:
        try:
            text = f"{record.levelname.lower()}: {self.format(record)}"
            if sys.stderr.isatty():
                from tqdm import tqdm  # pylint: disable=g-import-not-at-top

                tqdm.write(text, file=sys.stderr)
            else:
                sys.stderr.write(text + "\n")
                sys.stderr.flush()
        except Exception:  # pylint: disable=broad-except
            self.handleError(record)


def quiet_logging(flag_values=flags.FLAGS) -> None:
    """After flag parsing: absl writes to the log file in output_dir only, warnings
    and errors also show on stderr as one short line each; unless the user asked for
    absl's own output (--verbose_logging, --alsologtostderr, --logtostderr,
    --stderrthreshold, --verbosity)."""
    fv = flag_values
    if (
        ("verbose_logging" in fv and fv.verbose_logging)
        or fv.alsologtostderr
        or fv.logtostderr
        or fv["stderrthreshold"].present
        or fv["verbosity"].present
    ):
        return
    handler = logging.get_absl_handler()
    if not any(isinstance(f, _FileOnly) for f in handler.filters):
        handler.addFilter(_FileOnly())
    root = pylogging.getLogger()
    for other in list(root.handlers):
        # logging.basicConfig's handler (a library's import-time logging.warning, e.g.
        # Beam's, installs one): it would print every record again.
        if type(other) is pylogging.StreamHandler:
            root.removeHandler(other)
    if not any(isinstance(h, _Terminal) for h in root.handlers):
        root.addHandler(_Terminal())
    # TensorFlow gives its Python logger a stderr handler of its own when it is
    # imported before absl's handler is installed; its records reach the handlers
    # above through the root logger anyway.
    tf_logger = pylogging.getLogger("tensorflow")
    for tf_handler in list(tf_logger.handlers):
        if isinstance(tf_handler, pylogging.StreamHandler):
            tf_logger.removeHandler(tf_handler)


def flags_parser(parse: Callable[[list[str]], list[str]] | None = None):
    """absl's flags_parser that reports a flag error in two lines. With absl's own
    parsing (no `parse`), a word that is not a flag is an error too: the commands take
    flags only, and a stray word (`[--overwrite]` copied with its brackets, a value
    after a space) would otherwise be dropped without a word."""

    def parser(argv: list[str]) -> list[str]:
        try:
            rest = parse(argv) if parse is not None else flags.FLAGS(argv)
        except flags.Error as e:
            exit_for_person(str(e), _help_hint())
        if parse is None and len(rest) > 1:
            exit_for_person(
                f"unexpected argument {rest[1]!r}: this command takes flags only "
                "(--name=value, --name or --noname).",
                _help_hint(),
            )
        quiet_logging()
        return rest

    return parser


def guarded(main: Callable):
    """`main` with input and usage errors reported for people."""

    def run_main(argv):
        # From here on, Ctrl-C is the program's to handle (training saves a
        # checkpoint, data preparation removes what it had half written).
        quiet = sys.modules.get("common.quiet_tensorflow")
        if quiet and signal.getsignal(signal.SIGINT) is quiet.stopped_while_starting:
            signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            return main(argv)
        except (UserError, app.UsageError, flags.Error) as e:
            log_file = log_file_path()
            hint = None if isinstance(e, UserError) else _help_hint()
            if log_file:
                logging.info("The error below stopped the run.", exc_info=True)
                hint = f"(traceback in {log_file})" if hint is None else hint
            exit_for_person(str(e), hint)

    return run_main


def run(main: Callable, parse: Callable[[list[str]], list[str]] | None = None) -> None:
    """absl's app.run(main) with errors for people; `parse` replaces flag parsing."""
    app.run(guarded(main), flags_parser=flags_parser(parse))

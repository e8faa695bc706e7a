"""The project's error for people: an input or usage error.

A `UserError` says what is wrong with something the person running the command gave:
a file (its path and, where it has lines or records, which one), a flag value, a
mismatch between a checkpoint and the flags, a refused output path. Its message names
the file and line or the flag, and what to do. The command lines print that message
alone (the traceback goes to the log file) and exit non-zero; any other exception is a
bug and keeps its traceback.

`UserError` is a `ValueError`, `MissingFileError` also a `FileNotFoundError`,
`OutputExistsError` a `FileExistsError` and `DamagedFileError` (a file's bytes cut short
or corrupted, found by `data_prep.damage` and the checkpoint readers) an `OSError`, so
code that caught those before still does.
"""

from __future__ import annotations


class UserError(ValueError):
    """An input or usage error; the message is for the person who ran the command."""


class MissingFileError(UserError, FileNotFoundError):
    """A file or folder the user named (or one that must sit beside it) does not exist."""


class OutputExistsError(UserError, FileExistsError):
    """An output path is taken and may not be replaced."""


class CannotWriteError(UserError):
    """An output cannot be written: no space left, no permission, a read-only file
    system. Nothing unfinished is left under the output's name."""


class DamagedFileError(UserError, OSError):
    """A file's bytes are damaged (cut short, corrupted); the message names the file
    and the line or record where it shows.

    An `OSError` too, so that the readers that treat an unreadable file as bad input
    (the corpus pipeline's "skip" policy) treat a damaged one the same way.

    Attributes:
      path: the file.
      where: the line or record ("line 12", "record 3"), or None.
      reason: what is wrong, without the file's name.
    """

    def __init__(self, path: str, where: str | None, reason: str):
        self.path, self.where, self.reason = path, where, reason
        location = f"{path}: {where}" if where else path
        super().__init__(f"{location}: {reason}")

    def __str__(self) -> str:
        return self.args[0]

    def __reduce__(self):  # Pickled whole across worker processes.
        return type(self), (self.path, self.where, self.reason)


class LostWorkerError(RuntimeError):
    """A worker of a multi-worker run was lost; the message says which and what to do."""


# Exit codes of a run that ended before its end for a reason outside it. What it had
# done is kept (a checkpoint, complete files) and the same command goes on from there.
#
# 143 = 128 + SIGTERM: what the shell, Kubernetes and batch schedulers already report
# for a process ended by SIGTERM, so a scheduler that requeues preempted jobs treats
# a run that checkpointed on SIGTERM like one the signal ended; non-zero, so `&&`
# chains and `set -e` scripts do not go on as if the run had finished.
EXIT_STOPPED = 143
# 130 = 128 + SIGINT: what the shell reports for a program stopped by Ctrl-C. A run
# stopped by Ctrl-C keeps what it had done (a checkpoint) as one stopped by SIGTERM.
EXIT_INTERRUPTED = 130
# 75 = EX_TEMPFAIL (sysexits.h), "try again later": a worker of a multi-worker run was
# lost; restarting every worker with the same command resumes from the last checkpoint.
EXIT_LOST_WORKER = 75

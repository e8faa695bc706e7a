"""Files that never look complete before they are, and text and JSON read with errors
that name the file: the bottom floor's file I/O, which every package may import
(modeling's config and checkpoints without importing data preparation).

A file (or folder) is written under a hidden temporary name beside its destination,
`.NAME.tmp-<pid>-<random>`, and renamed onto it once complete: a killed or failed run
leaves no file with the destination's name, and no output glob (`shards/*`,
`*.tfrecord`) matches the leftover, because `data_prep.records.expand_globs` skips
hidden names. The next run that writes the same destination removes the leftovers of
earlier runs (`clear_stale_temps`).

Paths go through `tf.io.gfile`, so `gs://` and the other file systems TensorFlow reads
work too (rename is a copy there, but the destination still appears only when complete).
Record files (TFRecords, their metadata, input fingerprints and globs) are
`data_prep/records.py`'s.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import posixpath
import sys
import uuid
from typing import Iterator, Mapping

from common.errors import CannotWriteError, MissingFileError, UserError


class _TensorFlowOnFirstUse:
    """`tf`, imported by the first helper that uses it: a process that only splits
    paths or names temporaries (a run's lock, a stop signal's handler) starts without
    TensorFlow."""

    def __getattr__(self, name):
        import tensorflow  # pylint: disable=g-import-not-at-top

        globals()["tf"] = tensorflow
        return getattr(tensorflow, name)


tf = _TensorFlowOnFirstUse()

_TEMP_MARK = ".tmp-"


def split_path(path: str) -> tuple[str, str]:
    """(folder, name) of a local or `scheme://` path."""
    directory, name = posixpath.split(path) if "://" in path else os.path.split(path)
    return directory, name


def join_path(directory: str, name: str) -> str:
    """`name` in `directory` (none: `name` alone), local or `scheme://`."""
    if not directory:
        return name
    return posixpath.join(directory, name) if "://" in directory else os.path.join(directory, name)


def temp_path(path: str) -> str:
    """A fresh hidden temporary name beside `path`: `.NAME.tmp-<pid>-<random>`."""
    directory, name = split_path(path)
    return join_path(directory, f".{name}{_TEMP_MARK}{os.getpid()}-{uuid.uuid4().hex[:8]}")


def is_temp_name(name: str) -> bool:
    return name.startswith(".") and _TEMP_MARK in name


def _writer_alive(leftover: str) -> bool:
    """Whether another process that a local temporary name names (`temp_path`) still
    runs: it may be writing that file now (another worker of the same run, on this
    machine). This process's own leftovers are those of writes that ended."""
    if "://" in leftover:
        return False
    try:
        pid = int(os.path.basename(leftover).rsplit(_TEMP_MARK, 1)[1].split("-", 1)[0])
    except (IndexError, ValueError):
        return False
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clear_stale_temps(path: str) -> list[str]:
    """Removes the temporary files and folders earlier runs left for `path` (those of
    a process that still runs are its writes in progress, and stay)."""
    directory, name = split_path(path)
    if directory and not tf.io.gfile.isdir(directory):
        return []
    removed = []
    for leftover in tf.io.gfile.glob(join_path(directory, f".{glob_escape(name)}{_TEMP_MARK}*")):
        if _writer_alive(leftover):
            continue
        try:
            if tf.io.gfile.isdir(leftover):
                tf.io.gfile.rmtree(leftover)
            else:
                tf.io.gfile.remove(leftover)
        except tf.errors.NotFoundError:
            continue  # Renamed or removed meanwhile by the process that wrote it.
        removed.append(leftover)
    return removed


def glob_escape(name: str) -> str:
    """`name` with glob metacharacters escaped (for tf.io.gfile.glob)."""
    return "".join(f"[{c}]" if c in "*?[" else c for c in name)


# Why a write fails for a reason outside the program: errno values and the words
# TensorFlow's file systems put in their messages.
_WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EACCES, errno.EPERM, errno.EROFS)
_WRITE_REASONS = (
    "No space left on device",
    "Disk quota exceeded",
    "File too large",
    "Permission denied",
    "Operation not permitted",
    "Read-only file system",
)
_NO_SPACE = ("No space left on device", "Disk quota exceeded", "File too large")


def _op_error() -> tuple:
    """TensorFlow's error class, when TensorFlow is loaded (else none can be raised)."""
    tensorflow = sys.modules.get("tensorflow")
    return (tensorflow.errors.OpError,) if tensorflow is not None else ()


def cannot_write(path: str, error: BaseException) -> CannotWriteError | None:
    """A CannotWriteError for people when `error` says that `path` cannot be written
    (no space, no permission, a read-only file system); None for any other error."""
    if isinstance(error, OSError) and error.errno in _WRITE_ERRNOS:
        reason = error.strerror or str(error)
    elif isinstance(error, (OSError, _op_error())):
        text = error.message if isinstance(error, _op_error()) else str(error)
        reason = next((r for r in _WRITE_REASONS if r.lower() in text.lower()), None)
        if reason is None:
            return None
    else:
        return None
    if reason in _NO_SPACE:
        advice = "free some space (or give an output on another disk)"
    else:
        advice = (
            "the folder is not writable by this user: give another output folder, or make "
            "this one writable"
        )
    return CannotWriteError(
        f"cannot write {path}: {reason}. Nothing unfinished was left under that name; "
        f"{advice}, and run the same command again."
    )


def _make_parent(path: str) -> None:
    directory, _ = split_path(path)
    if directory:
        try:
            tf.io.gfile.makedirs(directory)
        except (OSError, tf.errors.OpError) as e:
            raise (cannot_write(directory, e) or e) from e


@contextlib.contextmanager
def _temporary(path: str) -> Iterator[str]:
    """Yields the temporary name to write `path` under (its folder made, the stale
    temporaries of earlier writes cleared); when the block raises, removes what stands
    at that name and raises `cannot_write`'s error for `path`, if it has one, else the
    exception itself."""
    _make_parent(path)
    clear_stale_temps(path)
    temp = temp_path(path)
    try:
        yield temp
    except BaseException as e:
        _remove(temp)
        error = cannot_write(path, e)
        if error is not None:
            raise error from e
        raise


@contextlib.contextmanager
def atomic_path(path: str) -> Iterator[str]:
    """Yields a temporary path to write `path`'s content to (a file, or a folder the
    caller creates); renames it onto `path` when the block ends without an exception,
    removes it otherwise.

    An existing file at `path` is replaced. For folders, see `atomic_directory`.
    """
    with _temporary(path) as temp:
        yield temp
        tf.io.gfile.rename(temp, path, overwrite=True)


@contextlib.contextmanager
def atomic_open(path: str, mode: str = "w") -> Iterator:
    """`open(path, mode)` whose content appears at `path` only once the block ends
    without an exception. Text modes read and write UTF-8."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open writes whole files: mode {mode!r} is not 'w' or 'wb'")
    with atomic_path(path) as temp:
        with tf.io.gfile.GFile(temp, mode) as f:
            yield f


def write_text(path: str, text: str) -> None:
    with atomic_open(path) as f:
        f.write(text)


def copy_file(source: str, path: str) -> None:
    """`source`'s bytes written atomically to `path` (an existing file is replaced)."""
    with atomic_path(path) as temp:
        tf.io.gfile.copy(source, temp, overwrite=True)


def write_json(path: str, value, **kwargs) -> None:
    """JSON (indent 2, sorted keys unless given) written atomically."""
    kwargs.setdefault("indent", 2)
    kwargs.setdefault("sort_keys", True)
    write_text(path, json.dumps(value, **kwargs) + "\n")


@contextlib.contextmanager
def atomic_directory(path: str) -> Iterator[str]:
    """Yields a new empty temporary folder; it replaces `path` when the block ends
    without an exception (an existing `path` is moved aside first and removed after),
    and is removed otherwise. The caller decides whether replacing `path` is allowed."""
    with _temporary(path) as temp:
        tf.io.gfile.makedirs(temp)
        yield temp
    if not tf.io.gfile.exists(path):
        tf.io.gfile.rename(temp, path)
        return
    backup = temp_path(path)
    tf.io.gfile.rename(path, backup)
    try:
        tf.io.gfile.rename(temp, path)
    except BaseException:
        tf.io.gfile.rename(backup, path)
        _remove(temp)
        raise
    _remove(backup)


def _remove(path: str) -> None:
    try:
        if tf.io.gfile.isdir(path):
            tf.io.gfile.rmtree(path)
        elif tf.io.gfile.exists(path):
            tf.io.gfile.remove(path)
    except tf.errors.OpError:
        pass


class NotUtf8Error(UserError):
    """A file holds bytes that are not UTF-8; the message names the file and line."""


def decode_line(raw: bytes, path: str, line_number: int) -> str:
    """One line of a UTF-8 file as text; NotUtf8Error naming file and line if not."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise NotUtf8Error(
            f"{path}:{line_number}: not UTF-8 text ({e.reason}: byte "
            f"{raw[e.start : e.start + 1]!r} at column {e.start + 1})"
        ) from None


def check_readable(path: str) -> None:
    if not tf.io.gfile.exists(path):
        raise MissingFileError(f"{path} does not exist")
    if tf.io.gfile.isdir(path):
        raise UserError(f"{path} is a directory, not a file")


def read_text(path: str) -> str:
    """The text of a UTF-8 file (a byte-order mark dropped); NotUtf8Error naming the
    line of the first undecodable byte."""
    check_readable(path)
    with tf.io.gfile.GFile(path, "rb") as f:
        data = f.read()
    return decode_text(data, path)


def decode_text(data: bytes, path: str) -> str:
    """`read_text` of the bytes of `path`, read already."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line_number = data.count(b"\n", 0, e.start) + 1
        line_start = data.rfind(b"\n", 0, e.start) + 1
        raise NotUtf8Error(
            f"{path}:{line_number}: not UTF-8 text ({e.reason}: byte "
            f"{data[e.start : e.start + 1]!r} at column "
            f"{e.start - line_start + 1})"
        ) from None


def read_json(path: str):
    """The JSON value of `path`.

    Raises:
      FileNotFoundError: `path` does not exist (naming it).
      ValueError: the file is not UTF-8 or not valid JSON (naming it and the position).
    """
    text = read_text(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise UserError(f"{path} is not valid JSON: {e}") from e
    except RecursionError:
        raise UserError(f"{path}: its JSON is nested too deeply to read") from None


def read_json_object(path: str, what: str = "a JSON object") -> dict:
    """The JSON object (dict) of `path`; as `read_json`, and a `UserError` naming the
    file and `what` it should hold if its value is not an object."""
    value = read_json(path)
    if not isinstance(value, dict):
        raise UserError(f"{path}: expected {what}, got a JSON {type(value).__name__}")
    return value


def format_results(results: Mapping[str, object]) -> str:
    """`key = value` lines, keys sorted, values by `str`: the original release's
    eval_results.txt."""
    return "".join(f"{key} = {results[key]}\n" for key in sorted(results))


# The file of an evaluation's results (`key = value` lines), as the original release names it.
EVAL_RESULTS = "eval_results.txt"


def write_results(path: str, results: Mapping[str, object]) -> None:
    """Writes `format_results(results)` atomically (eval_results.txt and the like)."""
    write_text(path, format_results(results))

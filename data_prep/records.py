"""Files that never look complete before they are: atomic writes, TFRecord files and
their metadata, input fingerprints, input globs; shared by every writer and reader of
the project.

A file (or folder) is written under a hidden temporary name beside its destination,
`.NAME.tmp-<pid>-<random>`, and renamed onto it once complete: a killed or failed run
leaves no file with the destination's name, and no output glob (`shards/*`,
`*.tfrecord`) matches the leftover, because `expand_globs` skips hidden names. The next
run that writes the same destination removes the leftovers of earlier runs.

Paths go through `tf.io.gfile`, so `gs://` and the other file systems TensorFlow reads
work too (rename is a copy there, but the destination still appears only when complete).

Record files. `write_tfrecord` writes one; `write_metadata` writes the JSON that
describes it, `<file>.meta.json`, with the record format ("<kind>/<version>", e.g.
"bert_classifier_tfrecord/2": a reader expecting another refuses it), the record
file's size and a fingerprint of every input file; `read_metadata` reads it back and
`reusable_metadata` says whether the records still match their inputs and settings,
so that a feature cache is rebuilt exactly when something that made it changed.
Writing a record file removes its old metadata first: metadata never describes
records other than those it was written for.

Shape legend: B batch.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import posixpath
import uuid
from typing import Iterable, Iterator, Mapping, Sequence

from absl import logging
import tensorflow as tf

from common.errors import CannotWriteError, MissingFileError, UserError
from data_prep import damage

_TEMP_MARK = ".tmp-"

METADATA_SUFFIX = ".meta.json"
# The keys `write_metadata` adds to those of a task.
METADATA_KEYS = ("format", "input_files", "record_bytes")

# Names of the encoder inputs in the original release's records -> the encoder's.
ENCODER_INPUT_NAMES = {
    "input_ids": "input_word_ids",
    "input_mask": "input_mask",
    "segment_ids": "input_type_ids",
}


def _split(path: str) -> tuple[str, str]:
    directory, name = posixpath.split(path) if "://" in path else os.path.split(path)
    return directory, name


def _join(directory: str, name: str) -> str:
    if not directory:
        return name
    return posixpath.join(directory, name) if "://" in directory else os.path.join(directory, name)


def temp_path(path: str) -> str:
    """A fresh hidden temporary name beside `path`: `.NAME.tmp-<pid>-<random>`."""
    directory, name = _split(path)
    return _join(directory, f".{name}{_TEMP_MARK}{os.getpid()}-{uuid.uuid4().hex[:8]}")


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
    directory, name = _split(path)
    if directory and not tf.io.gfile.isdir(directory):
        return []
    removed = []
    for leftover in tf.io.gfile.glob(_join(directory, f".{glob_escape(name)}{_TEMP_MARK}*")):
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


def cannot_write(path: str, error: BaseException) -> CannotWriteError | None:
    """A CannotWriteError for people when `error` says that `path` cannot be written
    (no space, no permission, a read-only file system); None for any other error."""
    if isinstance(error, OSError) and error.errno in _WRITE_ERRNOS:
        reason = error.strerror or str(error)
    elif isinstance(error, (OSError, tf.errors.OpError)):
        text = error.message if isinstance(error, tf.errors.OpError) else str(error)
        reason = next((r for r in _WRITE_REASONS if r.lower() in text.lower()), None)
        if reason is None:
            return None
    else:
        return None
    return CannotWriteError(
        f"cannot write {path}: {reason}. Nothing unfinished was left under that name; "
        f"free some space, or give an output where this user may write, and run the same "
        f"command again."
    )


def _make_parent(path: str) -> None:
    directory, _ = _split(path)
    if directory:
        try:
            tf.io.gfile.makedirs(directory)
        except (OSError, tf.errors.OpError) as e:
            raise (cannot_write(directory, e) or e) from e


@contextlib.contextmanager
def atomic_path(path: str) -> Iterator[str]:
    """Yields a temporary path to write `path`'s content to (a file, or a folder the
    caller creates); renames it onto `path` when the block ends without an exception,
    removes it otherwise.

    An existing file at `path` is replaced. For folders, see `atomic_directory`.
    """
    _make_parent(path)
    clear_stale_temps(path)
    temp = temp_path(path)
    try:
        yield temp
        tf.io.gfile.rename(temp, path, overwrite=True)
    except BaseException as e:
        _remove(temp)
        error = cannot_write(path, e)
        if error is not None:
            raise error from e
        raise


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


def write_json(path: str, value, **kwargs) -> None:
    """JSON (indent 2, sorted keys unless given) written atomically."""
    kwargs.setdefault("indent", 2)
    kwargs.setdefault("sort_keys", True)
    write_text(path, json.dumps(value, **kwargs) + "\n")


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


def _check_readable(path: str) -> None:
    if not tf.io.gfile.exists(path):
        raise MissingFileError(f"{path} does not exist")
    if tf.io.gfile.isdir(path):
        raise UserError(f"{path} is a directory, not a file")


def read_lines(path: str) -> Iterator[tuple[int, str]]:
    """(line number, text) of each line of a UTF-8 file, ends included, split on "\n"
    only; streamed (local or any `tf.io.gfile` file system). A compressed file (.gz,
    .bz2, ...) is decompressed, and `damage.DamagedFileError` names a damaged one."""
    _check_readable(path)
    with damage.open_decompressed(tf.io.gfile.GFile(path, "rb"), path) as f:
        line_number = 0
        while raw := f.readline():
            line_number += 1
            yield line_number, decode_line(raw, path, line_number)


def read_text(path: str) -> str:
    """The text of a UTF-8 file (a byte-order mark dropped); NotUtf8Error naming the
    line of the first undecodable byte."""
    _check_readable(path)
    with tf.io.gfile.GFile(path, "rb") as f:
        data = f.read()
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


def write_results(path: str, results: Mapping[str, object]) -> None:
    """Writes `format_results(results)` atomically (eval_results.txt and the like)."""
    write_text(path, format_results(results))


@contextlib.contextmanager
def atomic_tfrecord_writer(path: str, options: str | None = None) -> Iterator:
    """A `tf.io.TFRecordWriter` whose file appears at `path` only when complete."""
    with atomic_path(path) as temp:
        writer = tf.io.TFRecordWriter(temp, options)
        try:
            yield writer
        finally:
            writer.close()


def write_tfrecord(path: str, serialized: Iterable[bytes]) -> int:
    """Writes serialized records to `path` atomically; returns how many.

    The metadata of an earlier file at `path` is removed before anything is written,
    so a failed or interrupted write leaves no metadata that claims the records.
    """
    remove_metadata(path)
    count = 0
    with atomic_tfrecord_writer(path) as writer:
        for record in serialized:
            writer.write(record)
            count += 1
    return count


@contextlib.contextmanager
def atomic_directory(path: str) -> Iterator[str]:
    """Yields a new empty temporary folder; it replaces `path` when the block ends
    without an exception (an existing `path` is moved aside first and removed after),
    and is removed otherwise. The caller decides whether replacing `path` is allowed."""
    _make_parent(path)
    clear_stale_temps(path)
    temp = temp_path(path)
    try:
        tf.io.gfile.makedirs(temp)
        yield temp
    except BaseException as e:
        _remove(temp)
        error = cannot_write(path, e)
        if error is not None:
            raise error from e
        raise
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


def expand_globs(
    patterns: str | Iterable[str], what: str = "--input_file", original_order: bool = False
) -> list[str]:
    """Comma-separated (or listed) file names and globs -> files.

    Each pattern's matches are sorted; patterns keep their order; a file named twice is
    read once. With `original_order`, matches keep `tf.io.gfile.glob`'s order and
    repeats, as the original release's scripts read them (their output depends on it).
    Hidden names (temporary files of unfinished writes among them) and folders are
    skipped. A pattern that matches no file is an error naming it and `what` (a
    `UserError` naming the folder when it matches only folders).
    """
    if isinstance(patterns, str):
        patterns = patterns.split(",")
    files, seen = [], set()
    for pattern in patterns:
        pattern = pattern.strip()
        if not pattern:
            continue
        visible = [m for m in tf.io.gfile.glob(pattern) if not _split(m)[1].startswith(".")]
        matches = [m for m in visible if not tf.io.gfile.isdir(m)]
        if not matches and visible:
            raise UserError(
                f"{what} {pattern!r}: {visible[0]} is a directory, not a file: give its "
                f"files (e.g. '{_join(visible[0], '*')}')"
            )
        if not matches:
            raise MissingFileError(f"{what} pattern {pattern!r} matches no file")
        if original_order:
            files.extend(matches)
            continue
        for match in sorted(matches):
            if match not in seen:
                seen.add(match)
                files.append(match)
    if not files:
        raise UserError(f"{what} is empty")
    return files


# ----------------------------------------------------------------------------
# Record metadata and input fingerprints.
# ----------------------------------------------------------------------------


def metadata_path(record_file: str) -> str:
    """Where the metadata of a record file lives: `<record_file>.meta.json`."""
    return record_file + METADATA_SUFFIX


def file_sha256(path: str) -> str:
    """Hex SHA-256 of a file's content, read in 4 MiB chunks."""
    digest = hashlib.sha256()
    with tf.io.gfile.GFile(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _size_and_mtime(path: str) -> tuple[int, int]:
    """(bytes, mtime in ns); local mtimes at the file system's own resolution
    (`tf.io.gfile.stat` rounds them to seconds)."""
    if "://" not in path:
        stat = os.stat(path)
        return stat.st_size, stat.st_mtime_ns
    stat = tf.io.gfile.stat(path)
    return stat.length, stat.mtime_nsec


def file_fingerprint(path: str) -> dict:
    """{"name", "path", "size", "mtime_ns", "sha256"} of a file, for `same_file`."""
    size, mtime_ns = _size_and_mtime(path)
    return {
        "name": _split(path)[1],
        "path": path,
        "size": size,
        "mtime_ns": mtime_ns,
        "sha256": file_sha256(path),
    }


def same_file(recorded: Mapping, path: str) -> bool:
    """Whether `path` is the file `recorded` (a `file_fingerprint`) describes.

    Same name and size, and then the same path and mtime, or else the same content
    hash. The mtime alone does not vouch for a file at another path: files written
    within one tick of the file system's clock, or unpacked from archives, share
    mtimes and sizes.
    """
    size, mtime_ns = _size_and_mtime(path)
    if (recorded.get("name"), recorded.get("size")) != (_split(path)[1], size):
        return False
    if recorded.get("path") == path and recorded.get("mtime_ns") == mtime_ns:
        return True
    return recorded.get("sha256") == file_sha256(path)


def write_metadata(
    record_file: str, record_format: str, values: Mapping, input_files: Sequence[str] = ()
) -> dict:
    """Writes `<record_file>.meta.json` atomically; returns what it wrote.

    Args:
      record_file: the (complete) record file described.
      record_format: "<kind>/<version>", e.g. "bert_squad_tfrecord/2". Raise the
        version whenever the records written for the same inputs change.
      values: the task's own entries (settings, counts, labels...), JSON-serializable.
      input_files: the files the records were made from; each one's
        `file_fingerprint` is stored, for `reusable_metadata`.

    Returns:
      `values` with `format`, `record_bytes` (the record file's size) and, with
      input files, `input_files`, as read back by `read_metadata`.
    """
    clash = sorted(set(values) & set(METADATA_KEYS))
    if clash:
        raise ValueError(
            f"{metadata_path(record_file)}: {clash} are written by write_metadata itself"
        )
    metadata = dict(values, format=record_format, record_bytes=tf.io.gfile.stat(record_file).length)
    if input_files:
        metadata["input_files"] = [file_fingerprint(path) for path in input_files]
    metadata = json.loads(json.dumps(metadata))  # As read back: tuples become lists.
    write_json(metadata_path(record_file), metadata, ensure_ascii=False)
    return metadata


def read_metadata(record_file: str, record_format: str | None = None) -> dict:
    """The metadata written by `write_metadata` beside `record_file`.

    Raises:
      FileNotFoundError: there is none (naming the file).
      ValueError: it is not a JSON object, or (when `record_format` is given) its
        format is another: records of another kind or version, to be rebuilt.
    """
    path = metadata_path(record_file)
    metadata = read_json_object(path, "record metadata (a JSON object)")
    if record_format is not None and metadata.get("format") != record_format:
        raise UserError(
            f"{path}: the records have format {metadata.get('format')!r}, not "
            f"{record_format!r} (written by another version: write them again)"
        )
    return metadata


def remove_metadata(record_file: str) -> None:
    """Removes the metadata of `record_file`, if there is any."""
    path = metadata_path(record_file)
    if tf.io.gfile.exists(path):
        tf.io.gfile.remove(path)


def reusable_metadata(
    record_file: str,
    record_format: str,
    settings: Mapping,
    input_files: Sequence[str],
    counts: Sequence[str] = (),
) -> dict | None:
    """The metadata of `record_file` if its records can be reused, else None.

    Reusable: the record file and its metadata exist, the metadata has
    `record_format`, holds every entry of `settings` with the same (JSON) value and
    each key of `counts` with a count (an int >= 0), was
    written from the same `input_files` (`same_file`, in order), and the record file
    has the size recorded and every record's checksum holds. A damaged metadata file
    or record file counts as not reusable.
    """
    if not (tf.io.gfile.exists(record_file) and tf.io.gfile.exists(metadata_path(record_file))):
        return None
    try:
        metadata = read_metadata(record_file, record_format)
    except ValueError:
        return None
    settings = json.loads(json.dumps(settings))  # Compared as JSON gives them back.
    if any(metadata.get(key) != value for key, value in settings.items()):
        return None
    if not all(isinstance(metadata.get(key), int) and metadata[key] >= 0 for key in counts):
        return None
    recorded = metadata.get("input_files", [])
    if (
        not isinstance(recorded, list)
        or len(recorded) != len(input_files)
        or not all(isinstance(entry, dict) for entry in recorded)
    ):
        return None
    if not all(same_file(entry, path) for entry, path in zip(recorded, input_files)):
        return None
    if metadata.get("record_bytes") != tf.io.gfile.stat(record_file).length:
        return None
    try:
        damage.verify_tfrecord_file(record_file)
    except damage.DamagedFileError as e:
        logging.warning("Making %s again: %s", record_file, e)
        return None
    return metadata


# ----------------------------------------------------------------------------
# Record features.
# ----------------------------------------------------------------------------


def int64_feature(values: Iterable[int]) -> tf.train.Feature:
    """A `tf.train.Feature` of int64 values."""
    return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))

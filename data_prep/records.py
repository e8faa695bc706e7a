"""Record files: TFRecord files and their metadata, input fingerprints, input globs,
and the UTF-8 lines of (possibly compressed) input files; shared by every writer and
reader of data. Files are written atomically through `common.file_io` (a temporary
name, then a rename; see there), so no record file looks complete before it is, and
`expand_globs` skips the hidden temporary names of unfinished writes.

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
import hashlib
import json
import os
from typing import Iterable, Iterator, Mapping, Sequence

from absl import logging
import tensorflow as tf

from common import file_io
from common.errors import DamagedFileError, MissingFileError, UserError
from data_prep import damage

METADATA_SUFFIX = ".meta.json"
# The keys `write_metadata` adds to those of a task.
METADATA_KEYS = ("format", "input_files", "record_bytes")

# Names of the encoder inputs in the original release's records -> the encoder's.
ENCODER_INPUT_NAMES = {
    "input_ids": "input_word_ids",
    "input_mask": "input_mask",
    "segment_ids": "input_type_ids",
}


def read_lines(path: str) -> Iterator[tuple[int, str]]:
    """(line number, text) of each line of a UTF-8 file, ends included, split on "\n"
    only; streamed (local or any `tf.io.gfile` file system). A compressed file (.gz,
    .bz2, ...) is decompressed, and `DamagedFileError` names a damaged one."""
    file_io.check_readable(path)
    with damage.open_decompressed(tf.io.gfile.GFile(path, "rb"), path) as f:
        line_number = 0
        while raw := f.readline():
            line_number += 1
            yield line_number, file_io.decode_line(raw, path, line_number)


@contextlib.contextmanager
def atomic_tfrecord_writer(path: str, options: str | None = None) -> Iterator:
    """A `tf.io.TFRecordWriter` whose file appears at `path` only when complete."""
    with file_io.atomic_path(path) as temp:
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
        visible = [
            m for m in tf.io.gfile.glob(pattern) if not file_io.split_path(m)[1].startswith(".")
        ]
        matches = [m for m in visible if not tf.io.gfile.isdir(m)]
        if not matches and visible:
            raise UserError(
                f"{what} {pattern!r}: {visible[0]} is a directory, not a file: give its "
                f"files (e.g. '{file_io.join_path(visible[0], '*')}')"
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
        "name": file_io.split_path(path)[1],
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
    if (recorded.get("name"), recorded.get("size")) != (file_io.split_path(path)[1], size):
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
    file_io.write_json(metadata_path(record_file), metadata, ensure_ascii=False)
    return metadata


def read_metadata(record_file: str, record_format: str | None = None) -> dict:
    """The metadata written by `write_metadata` beside `record_file`.

    Raises:
      FileNotFoundError: there is none (naming the file).
      ValueError: it is not a JSON object, or (when `record_format` is given) its
        format is another: records of another kind or version, to be rebuilt.
    """
    path = metadata_path(record_file)
    metadata = file_io.read_json_object(path, "record metadata (a JSON object)")
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
    except DamagedFileError as e:
        logging.warning("Making %s again: %s", record_file, e)
        return None
    return metadata


# ----------------------------------------------------------------------------
# Record features.
# ----------------------------------------------------------------------------


def int64_feature(values: Iterable[int]) -> tf.train.Feature:
    """A `tf.train.Feature` of int64 values."""
    return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))


def parse_features(serialized: tf.Tensor, spec: Mapping) -> dict[str, tf.Tensor]:
    """A batch of serialized examples (string [B]) parsed by `spec`, in the order
    `tf.io.parse_example` returns them, the encoder inputs under the encoder's names
    (`ENCODER_INPUT_NAMES`) and int64 features as int32 (others as they are)."""
    parsed = tf.io.parse_example(serialized, spec)
    return {
        ENCODER_INPUT_NAMES.get(name, name): tf.cast(value, tf.int32)
        if value.dtype == tf.int64
        else value
        for name, value in parsed.items()
    }

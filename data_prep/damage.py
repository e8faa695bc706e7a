"""Damaged input files, named: compressed text cut short or corrupted, TFRecord files
cut short or corrupted.

Compressed text (`open_decompressed`). A file whose name ends in .gz, .bz2, .xz,
.lzma, .zst, .zstd or .deflate is read through its decompressor, checked to the end:
a stream that stops before its end marker (a truncated download or copy), data that
fails to decompress or fails its checksum (a flipped bit), raise `DamagedFileError`
(`common.errors`) naming the file and the line of text where the damage shows, instead of giving the
text read so far as if it were the whole file (which a decompressor fed to its end
silently does for a truncated stream) or a bare `zlib.error`. Concatenated streams
(`cat a.gz b.gz`, pbzip2, bgzip) are read one after the other.

TFRecord files. `check_tfrecord_file` walks the record framing (each record is an
8-byte length, its 4-byte checksum, the data and the data's 4-byte checksum) and says
which record a truncated file ends inside; it reads 12 bytes per record, so it costs
little beside what a run then reads. `verify_tfrecord_file` also checks every
checksum (TensorFlow reads the file once). `naming_damaged_records` turns the
`DataLossError` TensorFlow raises deep inside a tf.data pipeline ("corrupted record
at 296864", no file named) into a `DamagedFileError` naming the file and the record.
"""

from __future__ import annotations

import bz2
import contextlib
import io
import lzma
import re
import struct
import zlib
from typing import BinaryIO, Iterator, Sequence

from common.errors import DamagedFileError

# Compressed bytes decompressed at a time (the line named in an error is at most one
# such piece's text away from the damage).
_CHUNK_BYTES = 1 << 14


# ----------------------------------------------------------------------------
# Compressed text.
# ----------------------------------------------------------------------------


def _zstd_decompressor():
    import zstandard  # Beam's own dependency for .zst files.

    return zstandard.ZstdDecompressor(max_window_size=1 << 31).decompressobj()


# Name suffix -> (format name, a new decompressor object: decompress(), eof,
# unused_data).
_FORMATS = {
    ".gz": ("gzip", lambda: zlib.decompressobj(16 + zlib.MAX_WBITS)),
    ".bz2": ("bzip2", bz2.BZ2Decompressor),
    ".xz": ("xz", lzma.LZMADecompressor),
    ".lzma": ("lzma", lzma.LZMADecompressor),
    ".zst": ("zstd", _zstd_decompressor),
    ".zstd": ("zstd", _zstd_decompressor),
    ".deflate": ("deflate", zlib.decompressobj),
}
COMPRESSION_SUFFIXES = tuple(_FORMATS)


def compression_of(path: str) -> str | None:
    """The compression suffix of `path` (".gz", ...), or None for plain files."""
    lower = path.lower()
    return next((suffix for suffix in _FORMATS if lower.endswith(suffix)), None)


class _Decompressed(io.RawIOBase):
    """The decompressed bytes of a compressed file object, checked to the end."""

    def __init__(self, raw: BinaryIO, path: str, suffix: str):
        super().__init__()
        self._raw, self._path = raw, path
        self._format, self._new_decompressor = _FORMATS[suffix]
        self._rewind()

    def _rewind(self) -> None:
        self._raw.seek(0)
        self._decompressor = self._new_decompressor()
        self._input_bytes = 0  # Compressed bytes given to the decompressor.
        self._pending = memoryview(b"")
        self._position = 0  # Decompressed bytes produced before `_pending`.
        self._line_breaks = 0  # In everything decompressed so far.
        self._finished = False

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        """Decompressed position `offset` (from the start only): a step back reads
        again from the start, a step forward reads and drops."""
        if whence != io.SEEK_SET:
            raise io.UnsupportedOperation("only seeks from the start")
        if offset < self._position:
            self._rewind()
        while self._position < offset and self.read(min(_CHUNK_BYTES, offset - self._position)):
            pass
        return self._position

    def readinto(self, buffer) -> int:
        while not self._pending and not self._finished:
            self._pending = memoryview(self._decompress_more())
        count = min(len(buffer), len(self._pending))
        buffer[:count] = self._pending[:count]
        self._pending = self._pending[count:]
        self._position += count
        return count

    def _damaged(self, reason: str) -> DamagedFileError:
        return DamagedFileError(
            self._path,
            f"line {self._line_breaks + 1}",
            f"{reason}; the file is damaged or was cut short (it cannot be read "
            f"past here): get or make it again",
        )

    def _decompress_more(self) -> bytes:
        data = self._raw.read(_CHUNK_BYTES)
        if not data:
            self._finished = True
            if self._input_bytes == 0:
                raise self._damaged(f"the file is empty (0 bytes): not {self._format} data")
            if not self._decompressor.eof:
                raise self._damaged(
                    f"the {self._format} data ends before its end marker (after "
                    f"{self._input_bytes:,} compressed bytes)"
                )
            return b""
        output = []
        while data:
            if self._decompressor.eof:
                # Another stream follows (concatenated files), or zero padding.
                if not data.strip(b"\0"):
                    break
                self._decompressor = self._new_decompressor()
            self._input_bytes += len(data)
            try:
                output.append(self._decompressor.decompress(data))
            except Exception as e:  # zlib.error, OSError, LZMAError, ZstdError...
                raise self._damaged(f"not valid {self._format} data ({e})") from None
            data = self._decompressor.unused_data if self._decompressor.eof else b""
        text = b"".join(output)
        self._line_breaks += text.count(b"\n")
        return text

    def close(self) -> None:
        if not self.closed:
            self._raw.close()
        super().close()


def open_decompressed(raw: BinaryIO, path: str) -> BinaryIO:
    """`raw` (a seekable binary file object of `path`), decompressed if the name says
    so, as a buffered binary file (read, readline, seek, tell).

    Reading raises `DamagedFileError` naming `path` and the line where the damage
    shows; closing the result closes `raw`.
    """
    suffix = compression_of(path)
    if suffix is None:
        return raw
    return io.BufferedReader(_Decompressed(raw, path, suffix), buffer_size=_CHUNK_BYTES)


# ----------------------------------------------------------------------------
# TFRecord files.
# ----------------------------------------------------------------------------

_RECORD_AT = re.compile(r"(corrupted|truncated) record at (\d+)")
_HEADER_BYTES = 12  # uint64 length, uint32 masked CRC of the length.
_FOOTER_BYTES = 4  # uint32 masked CRC of the data.


def _open(path: str) -> BinaryIO:
    import tensorflow as tf  # Only the TFRecord checks need it.

    return tf.io.gfile.GFile(path, "rb")


def _file_size(path: str) -> int:
    import tensorflow as tf

    return tf.io.gfile.stat(path).length


def _walk(path: str, stop: int | None = None) -> Iterator[tuple[int, bool]]:
    """(offset, whole) of each record starting before `stop` (default: the end), from
    the length fields alone; the last is not whole if the file ends inside it."""
    size = _file_size(path)
    stop = size if stop is None else min(stop, size)
    with _open(path) as f:
        offset = 0
        while offset < stop:
            f.seek(offset)
            header = f.read(_HEADER_BYTES)
            if len(header) < _HEADER_BYTES:
                yield offset, False
                return
            end = offset + _HEADER_BYTES + struct.unpack("<Q", header[:8])[0] + _FOOTER_BYTES
            yield offset, end <= size
            if end > size:
                return
            offset = end


def record_offsets(path: str, stop: int | None = None) -> Iterator[int]:
    """The byte offset of each record of a TFRecord file (of each one starting before
    `stop`), read from the length fields alone; `DamagedFileError` if the file ends
    inside a record."""
    size = _file_size(path)
    for index, (offset, whole) in enumerate(_walk(path, stop)):
        if not whole:
            raise DamagedFileError(
                path,
                f"record {index + 1} (byte {offset:,})",
                f"the file ends inside this record ({size:,} bytes; {index} whole "
                f"records before it): it was cut short, or the record's length "
                f"field is damaged: make the file again",
            )
        yield offset


def check_tfrecord_file(path: str) -> int:
    """The number of records of a TFRecord file, from its framing; `DamagedFileError`
    (naming the record) if the file does not end where its last record does."""
    try:
        return sum(1 for _ in record_offsets(path))
    except DamagedFileError:
        # TensorFlow's own reader tells a truncated record from a corrupted one.
        verify_tfrecord_file(path)
        raise


def _record_at(path: str, offset: int) -> tuple[int, int] | None:
    """(0-based index, start) of the record holding byte `offset`, by the framing."""
    found = None
    for index, (start, _) in enumerate(_walk(path, stop=offset + 1)):
        found = index, start
    return found


def verify_tfrecord_file(path: str) -> int:
    """The number of records of a TFRecord file, every checksum checked (the file is
    read once, by TensorFlow); `DamagedFileError` naming the first damaged record."""
    import tensorflow as tf

    count = 0
    try:
        for batch in tf.data.TFRecordDataset(path, buffer_size=1 << 20).batch(1024):
            count += int(batch.shape[0])
    except tf.errors.DataLossError as e:
        raise _record_error(path, e.message, count) from None
    return count


def _record_error(path: str, message: str, records_read: int) -> DamagedFileError:
    match = _RECORD_AT.search(message)
    if not match:
        return DamagedFileError(
            path, f"after record {records_read}", f"not a readable TFRecord file ({message})"
        )
    # TensorFlow names the offset of the part that failed: a record's length field,
    # or its data 12 bytes further.
    kind, offset = match.group(1), int(match.group(2))
    record = _record_at(path, offset)
    if record is None:
        where = f"byte {offset:,}"
    else:
        where = f"record {record[0] + 1} (byte {record[1]:,})"
        offset = record[1]
    if kind == "truncated":
        reason = "the file ends inside this record: it was cut short: make it again"
    elif offset == 0:
        reason = "not a TFRecord file, or its first record is damaged (checksum mismatch)"
    else:
        reason = "the record is damaged (checksum mismatch): make the file again"
    return DamagedFileError(path, where, reason)


def find_damaged_record(files: Sequence[str]) -> DamagedFileError | None:
    """The error of the first damaged file of `files` (every checksum checked), or
    None if all are whole."""
    for path in files:
        try:
            verify_tfrecord_file(path)
        except DamagedFileError as e:
            return e
    return None


@contextlib.contextmanager
def naming_damaged_records(files: Sequence[str]) -> Iterator[None]:
    """Turns a `DataLossError` raised by reading `files` (in a tf.data pipeline, a
    training or evaluation loop) into the `DamagedFileError` of the damaged file."""
    import tensorflow as tf

    try:
        yield
    except tf.errors.DataLossError as e:
        error = find_damaged_record(files)
        if error is None:
            raise
        raise error from e

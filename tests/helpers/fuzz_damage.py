"""Hypothesis strategies that damage a file as files get damaged in the wild.

`damaged(data)` draws a copy of `data` with up to three of these, in order: bytes
flipped, the file cut anywhere, bytes deleted, stray bytes inserted (tab, quote, NUL,
CR, LF, a lone UTF-8 lead byte, 0xFF, a space, or random bytes), lines duplicated,
dropped or swapped, a field (tab) added or removed in a line, the text re-encoded
(latin-1, cp1252, UTF-16 with its byte-order mark, a UTF-8 byte-order mark, CRLF line
ends). `damaged_json(value)` first replaces one node of a JSON document with another
JSON value (JSON of the wrong shape), then damages the bytes. `damaged_or_generated`
also draws wholly generated input of the same kind.
"""

from __future__ import annotations

import json

from hypothesis import strategies as st

STRAY_BYTES = (b"\t", b'"', b"\0", b"\r", b"\n", b"\xc3", b"\xff", b" ", b"\xef\xbb\xbf")
ENCODINGS = ("latin-1", "cp1252", "utf-16", "utf-8-sig", "crlf")


# ----------------------------------------------------------------------------
# Operations on bytes.
# ----------------------------------------------------------------------------


def _lines(data: bytes) -> list[bytes]:
    return data.split(b"\n")


def _flip(data: bytes, at: int, mask: int) -> bytes:
    if not data:
        return data
    at %= len(data)
    return data[:at] + bytes([data[at] ^ mask]) + data[at + 1 :]


def _cut(data: bytes, at: int) -> bytes:
    return data[: at % (len(data) + 1)]


def _delete(data: bytes, at: int, length: int) -> bytes:
    at %= len(data) + 1
    return data[:at] + data[at + length :]


def _insert(data: bytes, at: int, stray: bytes) -> bytes:
    at %= len(data) + 1
    return data[:at] + stray + data[at:]


def _line_op(data: bytes, kind: str, i: int, j: int) -> bytes:
    lines = _lines(data)
    i %= len(lines)
    j %= len(lines)
    if kind == "duplicate":
        lines.insert(i, lines[i])
    elif kind == "drop":
        del lines[i]
    elif kind == "swap":
        lines[i], lines[j] = lines[j], lines[i]
    elif kind == "add_field":
        lines[i] = lines[i] + b"\textra"
    elif kind == "remove_field":
        fields = lines[i].split(b"\t")
        lines[i] = b"\t".join(fields[:-1] if len(fields) > 1 else [])
    return b"\n".join(lines)


def _encode(data: bytes, encoding: str) -> bytes:
    text = data.decode("utf-8", "replace")
    if encoding == "crlf":
        return text.replace("\n", "\r\n").encode("utf-8")
    return text.encode(encoding, "replace")


def _apply(data: bytes, operation: tuple) -> bytes:
    name, *args = operation
    return {
        "flip": _flip,
        "cut": _cut,
        "delete": _delete,
        "insert": _insert,
        "line": _line_op,
        "encode": _encode,
    }[name](data, *args)


_POSITION = st.integers(0, 1 << 20)

OPERATIONS = st.one_of(
    st.tuples(st.just("flip"), _POSITION, st.integers(1, 255)),
    st.tuples(st.just("cut"), _POSITION),
    st.tuples(st.just("delete"), _POSITION, st.integers(1, 64)),
    st.tuples(
        st.just("insert"),
        _POSITION,
        st.one_of(st.sampled_from(STRAY_BYTES), st.binary(min_size=1, max_size=16)),
    ),
    st.tuples(
        st.just("line"),
        st.sampled_from(("duplicate", "drop", "swap", "add_field", "remove_field")),
        _POSITION,
        _POSITION,
    ),
    st.tuples(st.just("encode"), st.sampled_from(ENCODINGS)),
)


def damage(data: bytes, operations) -> bytes:
    for operation in operations:
        data = _apply(data, operation)
    return data


def damaged(data: bytes, max_operations: int = 3) -> st.SearchStrategy[bytes]:
    """`data` with 0 to `max_operations` damages (0: the file as it is)."""
    return st.lists(OPERATIONS, max_size=max_operations).map(lambda ops: damage(data, ops))


# ----------------------------------------------------------------------------
# JSON of the wrong shape.
# ----------------------------------------------------------------------------

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(1 << 40), 1 << 40)
    | st.floats(allow_nan=False)
    | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=8,
)


def _nodes(value, path=()):
    """Paths to every node of a JSON value, the root first."""
    yield path
    if isinstance(value, dict):
        for key, child in value.items():
            yield from _nodes(child, path + (key,))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from _nodes(child, path + (index,))


def _replaced(value, path, new):
    if not path:
        return new
    value = dict(value) if isinstance(value, dict) else list(value)
    value[path[0]] = _replaced(value[path[0]], path[1:], new)
    return value


def _reshape(value, choice: int, new, drop: bool):
    """`value` with the node `choice` picks replaced by `new`, or dropped from its
    parent (`drop`)."""
    paths = list(_nodes(value))
    path = paths[choice % len(paths)]
    if drop and path:
        parent = value
        for key in path[:-1]:
            parent = parent[key]
        return _replaced(value, path[:-1], _without(parent, path[-1]))
    return _replaced(value, path, new)


def _without(container, key):
    if isinstance(container, dict):
        return {k: v for k, v in container.items() if k != key}
    return [v for i, v in enumerate(container) if i != key]


def damaged_json(value, max_operations: int = 2) -> st.SearchStrategy[bytes]:
    """A JSON document with up to two nodes replaced by other JSON or dropped, then
    its bytes damaged (at most one byte operation, so that most stay JSON)."""
    reshape = st.tuples(_POSITION, JSON_VALUES, st.booleans())
    return st.tuples(
        st.lists(reshape, max_size=max_operations), st.lists(OPERATIONS, max_size=1)
    ).map(lambda ops: damage(_dump(_reshape_all(value, ops[0])), ops[1]))


def _reshape_all(value, reshapes):
    for choice, new, drop in reshapes:
        value = _reshape(value, choice, new, drop)
    return value


def _dump(value) -> bytes:
    return json.dumps(value, ensure_ascii=False).encode("utf-8")


def generated_text(alphabet: str, max_lines: int = 12) -> st.SearchStrategy[bytes]:
    """Lines of text drawn from `alphabet` (plus any character), joined by LF."""
    line = st.text(st.sampled_from(alphabet) | st.characters(codec="utf-8"), max_size=40)
    return st.lists(line, max_size=max_lines).map(lambda lines: "\n".join(lines).encode())


def damaged_or_generated(data: bytes, generated: st.SearchStrategy[bytes]):
    """Mostly damaged copies of a real file, sometimes generated input."""
    return st.one_of(damaged(data), damaged(data), damaged(data), generated)

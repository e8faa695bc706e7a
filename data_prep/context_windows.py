"""Windows over a long sequence of word pieces, and the window that gives a piece the
most context: the one formula behind SQuAD's document spans
(`squad_features.doc_spans`, `squad_features.is_max_context`), NER's sentence windows
(`ner_features.make_windows`, `ner_features.max_context_windows`) and the in-graph
windows of the task exports (`serving.windows`), so that the three cut and choose
identically.

Windows hold at most `max_pieces` pieces and start every step = min(max_pieces,
doc_stride) pieces, until one reaches the sequence's end: window k starts at k * step
and holds min(n - k * step, max_pieces) of the n pieces. (The original release walks
this loop one window at a time; every window but the last is full, so its stride is the
step above.) A piece's score in a window holding it is min(pieces to its left, pieces to
its right) + 0.01 x the window's length, in float64; the first window with the highest
score gives it the most context.

The functions below are plain arithmetic on their arguments, with `min`, `max` and the
float conversion taken from `ops`: Python numbers by default (the feature writers),
int64 tensors with `serving.windows.TENSOR_OPS` (in-graph, every row of a batch at once).
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Sequence


class Ops(NamedTuple):
    """The element-wise operations the window formula needs."""

    minimum: Callable
    maximum: Callable
    to_float64: Callable


PYTHON_OPS = Ops(min, max, float)


def window_count(num_pieces, max_pieces, doc_stride, ops: Ops = PYTHON_OPS):
    """Windows covering `num_pieces` pieces: 1 + ceil((n - max_pieces) / step), at least
    1 (an empty sequence gets one empty window)."""
    step = ops.minimum(max_pieces, doc_stride)
    return ops.maximum(1 - (max_pieces - num_pieces) // step, 1)


def window_start(index, max_pieces, doc_stride, ops: Ops = PYTHON_OPS):
    """The first piece of window `index`."""
    return index * ops.minimum(max_pieces, doc_stride)


def window_length(start, num_pieces, max_pieces, ops: Ops = PYTHON_OPS):
    """The pieces of the window starting at `start`."""
    return ops.minimum(num_pieces - start, max_pieces)


def context_score(position, start, length, ops: Ops = PYTHON_OPS):
    """The score of the piece at `position` in the window (`start`, `length`) holding
    it: min(left context, right context) + 0.01 x length, float64."""
    context = ops.minimum(position - start, start + length - 1 - position)
    return ops.to_float64(context) + 0.01 * ops.to_float64(length)


def windows(num_pieces: int, max_pieces: int, doc_stride: int) -> list[tuple[int, int]]:
    """(start, length) of every window over `num_pieces` pieces, in order."""
    starts = [
        window_start(k, max_pieces, doc_stride)
        for k in range(window_count(num_pieces, max_pieces, doc_stride))
    ]
    return [(start, window_length(start, num_pieces, max_pieces)) for start in starts]


def max_context_window(position: int, spans: Sequence[tuple[int, int]]) -> int | None:
    """Index of the first of the (start, length) `spans` that gives the piece at
    `position` the highest `context_score`; None if no span holds it."""
    best_index, best_score = None, None
    for index, (start, length) in enumerate(spans):
        if start <= position < start + length:
            score = context_score(position, start, length)
            if best_score is None or score > best_score:
                best_index, best_score = index, score
    return best_index

"""Windows over long inputs (SQuAD contexts, NER sentences) and the window that gives
each piece the most context, in-graph for every row of a batch at once.

The arithmetic is `data_prep.context_windows`, the formula the Python feature writers
use (`squad_features.doc_spans` / `is_max_context`, `ner_features.make_windows` /
`max_context_windows`), evaluated here on int64 tensors with `TENSOR_OPS`.

Shape legend: B batch, N windows (of every row of the batch together).
"""

from __future__ import annotations

from typing import NamedTuple

import tensorflow as tf

from data_prep import context_windows

TENSOR_OPS = context_windows.Ops(tf.minimum, tf.maximum, lambda x: tf.cast(x, tf.float64))


class Windows(NamedTuple):
    """Windows over the word pieces of every row of a batch, flattened over the batch.

    Attributes:
      row: int64 [N], the batch row of each window.
      row_splits: int64 [B + 1]; the windows of row b are row_splits[b]:row_splits[b+1].
      start: int64 [N], index of the window's first piece among its row's pieces.
      length: int64 [N], pieces in the window.
    """

    row: tf.Tensor
    row_splits: tf.Tensor
    start: tf.Tensor
    length: tf.Tensor


def make_windows(num_pieces: tf.Tensor, max_pieces: tf.Tensor, doc_stride: int) -> Windows:
    """The windows of `context_windows.windows` for every row at once.

    A row without pieces gets one empty window (where `squad_features.doc_spans` has none), so
    that every row has a model input.

    Args:
      num_pieces: int64 [B], pieces of each row.
      max_pieces: int64 [B], the window size of each row (>= 1).
      doc_stride: int >= 1.
    """
    count = context_windows.window_count(num_pieces, max_pieces, doc_stride, TENSOR_OPS)
    index = tf.ragged.range(count)  # [B, (windows)]: k, the window's index in its row
    row = index.value_rowids()
    start = context_windows.window_start(
        index.flat_values, tf.gather(max_pieces, row), doc_stride, TENSOR_OPS
    )
    length = context_windows.window_length(
        start, tf.gather(num_pieces, row), tf.gather(max_pieces, row), TENSOR_OPS
    )
    return Windows(row, index.row_splits, start, length)


def window_pieces(windows: Windows, pieces: tf.RaggedTensor) -> tf.RaggedTensor:
    """int64 RaggedTensor [N, (length)]: the index in `pieces.flat_values` of every
    piece of every window (`pieces`: [B, (D)])."""
    first = tf.gather(pieces.row_splits, windows.row) + windows.start
    return tf.ragged.range(first, first + windows.length)


def max_context(
    windows: Windows, pieces_of_windows: tf.RaggedTensor, num_pieces: tf.Tensor
) -> tuple[tf.RaggedTensor, tf.Tensor]:
    """The window that gives each piece the most context, as
    `context_windows.max_context_window` chooses it: the first window with the highest
    `context_score` (float64, so equal to the Python score).

    Args:
      windows: from `make_windows`.
      pieces_of_windows: from `window_pieces`.
      num_pieces: scalar, the number of pieces of the whole batch.

    Returns:
      (is_max: bool RaggedTensor [N, (length)], whether the window is its piece's best;
       best: int64 [num_pieces], the best window of every piece of the batch).
    """
    window = pieces_of_windows.value_rowids()
    position = tf.range(tf.size(window, out_type=tf.int64)) - tf.gather(
        pieces_of_windows.row_splits, window
    )  # in its window
    score = context_windows.context_score(
        position, 0, tf.gather(windows.length, window), TENSOR_OPS
    )
    piece = pieces_of_windows.flat_values
    best_score = tf.math.unsorted_segment_max(score, piece, num_pieces)
    never = tf.shape(windows.row, out_type=tf.int64)[0]
    best = tf.math.unsorted_segment_min(
        tf.where(tf.equal(score, tf.gather(best_score, piece)), window, never), piece, num_pieces
    )
    return pieces_of_windows.with_flat_values(tf.equal(window, tf.gather(best, piece))), best

"""The one window / max-context formula (`data_prep.context_windows`), evaluated in Python
(the feature writers) and in-graph (`serving.windows`), against the original release's
loops, written out here as the reference."""

import numpy as np
import tensorflow as tf

from data_prep import context_windows
from data_prep.ner import ner_features
from data_prep.squad import squad_features
from serving import windows as serving_windows

SIZES = range(0, 31)  # pieces
MAX_PIECES = range(1, 10)
STRIDES = range(1, 12)


def reference_spans(num_pieces, max_pieces, doc_stride):
    """The original run_squad.py's doc_spans loop."""
    spans, start = [], 0
    while start < num_pieces:
        length = min(num_pieces - start, max_pieces)
        spans.append((start, length))
        if start + length == num_pieces:
            break
        start += min(length, doc_stride)
    return spans


def reference_max_context(spans, position):
    """The original `_check_is_max_context`: the best span of a position, or None."""
    best_score, best_index = None, None
    for index, (start, length) in enumerate(spans):
        end = start + length - 1
        if start <= position <= end:
            score = min(position - start, end - position) + 0.01 * length
            if best_score is None or score > best_score:
                best_score, best_index = score, index
    return best_index


def test_python_windows_equal_the_original_loops():
    for n in SIZES:
        for max_pieces in MAX_PIECES:
            for stride in STRIDES:
                want = reference_spans(n, max_pieces, stride)
                assert squad_features.doc_spans(n, max_pieces, stride) == want
                assert ner_features.make_windows(n, max_pieces, stride) == (want or [(0, 0)])
                for position in range(n):
                    best = reference_max_context(want, position)
                    assert context_windows.max_context_window(position, want) == best
                    assert [
                        squad_features.is_max_context(want, i, position) for i in range(len(want))
                    ] == [i == best for i in range(len(want))]
    assert context_windows.max_context_window(5, [(0, 3)]) is None


def test_in_graph_windows_equal_the_python_windows():
    """Every (pieces, window size) pair as one row of a batch, per stride."""
    rows = [(n, m) for n in SIZES for m in MAX_PIECES]
    num_pieces = tf.constant([n for n, _ in rows], tf.int64)
    max_pieces = tf.constant([m for _, m in rows], tf.int64)
    pieces = tf.RaggedTensor.from_row_lengths(tf.range(tf.reduce_sum(num_pieces)), num_pieces)
    for stride in STRIDES:
        windows = serving_windows.make_windows(num_pieces, max_pieces, stride)
        of_windows = serving_windows.window_pieces(windows, pieces)
        is_max, best = serving_windows.max_context(windows, of_windows, tf.reduce_sum(num_pieces))
        splits = windows.row_splits.numpy()
        starts, lengths = windows.start.numpy(), windows.length.numpy()
        best_of_piece = np.split(best.numpy(), pieces.row_splits.numpy()[1:-1])
        for row, (n, m) in enumerate(rows):
            want = ner_features.make_windows(n, m, stride)
            got = slice(splits[row], splits[row + 1])
            assert list(zip(starts[got], lengths[got])) == want, (n, m, stride)
            assert list(best_of_piece[row] - splits[row]) == [
                context_windows.max_context_window(p, want) for p in range(n)
            ]
        flat = is_max.flat_values.numpy()
        np.testing.assert_array_equal(
            flat, best.numpy()[of_windows.flat_values.numpy()] == of_windows.value_rowids().numpy()
        )

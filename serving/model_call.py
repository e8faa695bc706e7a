"""How a task export runs its model on a request's packed inputs: the cut of the
batch to its longest input, and, with the option `xla_single_requests`, an
XLA-compiled call for a request of one example.

XLA (`tf.function(jit_compile=True)`) takes about a third off the model call of one
short sequence on CPU, where TensorFlow's per-operation cost dominates, but is about
twice as slow on batches of 32, where TensorFlow's own CPU kernels (oneDNN) win, and it
compiles one program per input shape (docs/serving.md, "Latency"). So an export built
with `xla_single_requests=True` holds both calls in each signature and picks one per
request (`tf.cond`):

  the model's batch is one example (classifier: a one-text request; multiple choice:
  one example, its C choices as C sequences; SQuAD, NER: one window, i.e. one
  question on a context that fits one window, one short text): the XLA-compiled
  call, on inputs cut to `input_pipeline.cut_length` of the longest (one of a few
  sizes: 16, 32, ..., seq_length), so that it compiles at most one program per size
  (8 at seq_length 128) and per number of choices;
  any other batch (several examples or windows, or none): the standard graph call on
  inputs cut to their longest, as without the option.

The function of the XLA call keeps TensorFlow's `_XlaMustCompile` attribute in the
SavedModel; TensorFlow Serving's model server runs it only when started with
`--xla_cpu_compilation_enabled`. The answers of both calls are the same to float
tolerance (the padding a rounded cut adds is masked).
"""

from __future__ import annotations

import tensorflow as tf

from data_prep import input_pipeline
from serving import inputs as text_inputs

# The function attribute that makes TensorFlow compile a function with XLA (set by
# `tf.function(jit_compile=True)`, kept in a SavedModel's function library).
XLA_MUST_COMPILE = "_XlaMustCompile"


class ModelCall:
    """The model call of a task export's signatures.

    Args:
      model: the task model (called with `training=False`).
      seq_length: the length the inputs are packed to.
      pad_to_max_seq_length: keep every input at seq_length (no cut).
      xla_single_requests: call the model through XLA when its batch is one example
        (see the module's docstring).
    """

    def __init__(
        self,
        model,
        seq_length: int,
        *,
        pad_to_max_seq_length: bool = False,
        xla_single_requests: bool = False,
    ):
        self._model = model
        self._seq_length = seq_length
        self._pad = pad_to_max_seq_length
        # One function for the model's graph call, traced once per input signature:
        # an export's signatures (a classifier's pair and single text) call it
        # instead of each tracing, and saving, the whole model again.
        self._traced = tf.function(self._graph_call, autograph=False)
        self._compiled = (
            tf.function(self._graph_call, jit_compile=True, autograph=False)
            if xla_single_requests
            else None
        )

    def _graph_call(self, inputs: dict) -> dict:
        return self._model(inputs, training=False)

    def _takes_xla(self, inputs: dict) -> tf.Tensor:
        """bool scalar: whether the model batch of `inputs` ([B, S] or [B, C, S]) is
        one example."""
        return tf.equal(tf.shape(inputs["input_word_ids"])[0], 1)

    def cut(self, inputs: dict, examples: tf.Tensor | None = None) -> dict:
        """Packed inputs ([..., S], S the export's seq_length) cut to the length the
        model computes: the longest input, rounded up to a cut size when the XLA call
        will take them; unchanged with pad_to_max_seq_length. The outputs at the
        positions kept are those of the padded inputs (the attention mask hides
        padding): what a request gets does not change, only its cost.

        Args:
          inputs: int32 [N, S] each.
          examples: the model batch the inputs will make (multiple choice: B, of
            inputs [B * C, S] reshaped to [B, C, S]); default N.
        """
        if self._pad:
            return inputs
        longest = text_inputs.longest_input(inputs)
        if self._compiled is not None:
            rows = tf.shape(inputs["input_word_ids"])[0] if examples is None else examples
            longest = tf.where(
                tf.equal(tf.cast(rows, tf.int32), 1),
                input_pipeline.cut_length(longest, self._seq_length),
                longest,
            )
        return text_inputs.cut_to_length(inputs, longest)

    def __call__(self, inputs: dict) -> dict:
        """The model's outputs on `inputs` (from `cut`), through XLA or not."""
        if self._compiled is None:
            return self._traced(inputs)
        return tf.cond(
            self._takes_xla(inputs),
            lambda: self._compiled(inputs),
            lambda: self._traced(inputs),
        )

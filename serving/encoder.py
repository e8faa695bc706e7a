"""The TF Hub encoder SavedModel: a TF2 reusable SavedModel laid out as the official TF
Hub BERT encoders.

  obj(inputs, training=False): `inputs` a dict of int32 [B, S] `input_word_ids`,
    `input_mask`, `input_type_ids` (any B, S <= max_position_embeddings). Returns a dict
    of float32 `sequence_output` [B, S, H], `pooled_output` [B, H], `default` (=
    pooled_output) and `encoder_outputs` (L tensors [B, S, H]). Traced for training=True
    (dropout on) and training=False.
  obj.variables, obj.trainable_variables, obj.regularization_losses: what
    `hub.KerasLayer(..., trainable=True)` fine-tunes.
  obj.vocab_file (tf.saved_model.Asset), obj.do_lower_case (bool tf.Variable),
    obj.bert_config_file (Asset, this project's addition: the exact config),
    obj.causal_attention (bool tf.Variable, only on a left-to-right encoder: its calls
    apply the left-only attention and pool the last real token; see BertEncoder).
  obj.mlm (with the masked-LM head only): the same call with an extra int32 [B, P]
    `masked_lm_positions`; adds float32 `mlm_logits` [B, P, V].
  Signatures `serving_default` (and `mlm`), for `saved_model_cli` and TF Serving; their
    outputs are flat: `encoder_outputs` becomes `encoder_outputs_0` ... `_{L-1}`.

Shape legend: B batch, S sequence, H hidden, L layers, P predictions, V vocab.
"""

from __future__ import annotations

import os
import tempfile
from typing import Callable, Sequence

import tensorflow as tf

from common.errors import MissingFileError
from modeling.encoder import INPUT_KEYS
from serving import savedmodel

# Outputs of the encoder's __call__: the names of the official TF Hub BERT encoders.
ENCODER_OUTPUT_KEYS = ("sequence_output", "pooled_output", "encoder_outputs", "default")
MLM_POSITIONS_KEY = "masked_lm_positions"


def id_specs(keys: Sequence[str] = INPUT_KEYS) -> dict[str, tf.TensorSpec]:
    """int32 [B, S] TensorSpecs keyed (and named) by `keys`."""
    return {k: tf.TensorSpec([None, None], tf.int32, name=k) for k in keys}


class ReusableModule(tf.Module):
    """A tf.Module saved with the attributes of a TF2 reusable SavedModel.

    `variables`, `trainable_variables` and `regularization_losses` are plain lists
    saved with the object (tf.Module computes the first two, and they would not be
    saved); `__call__` is a tf.function traced for training=True and training=False.
    """

    # Class attributes shadow tf.Module's computed properties, so that __init__ can
    # store the lists as ordinary (saved) attributes.
    variables = None
    trainable_variables = None
    regularization_losses = None

    def __init__(self, keras_layers: Sequence, call_fn: Callable, input_specs: dict, name: str):
        """Args:
        keras_layers: the Keras layers whose variables the calls use.
        call_fn: (inputs dict, training bool) -> outputs dict.
        input_specs: TensorSpecs of the inputs dict.
        name: module name.
        """
        super().__init__(name=name)
        self.variables, self.trainable_variables = savedmodel.collect_variables(keras_layers)
        self.regularization_losses = []

        @tf.function(autograph=False)
        def call(inputs, training=False):
            return call_fn(inputs, training)

        for training in (False, True):
            call.get_concrete_function(input_specs, training=training)
        self.__call__ = call


def encoder_outputs(encoder, inputs: dict, training: bool) -> dict:
    """The TF Hub output dict of `encoder` on `inputs`, in float32.

    Returns:
      sequence_output [B, S, H], pooled_output [B, H], default [B, H] (a copy of
      pooled_output), encoder_outputs: list of L [B, S, H].
    """
    # A loaded function is specialised to each call's shapes; hiding the static shape
    # lets the encoder's own check name a too-long input (max_position_embeddings)
    # instead of failing shape inference deep inside the embeddings.
    inputs = {k: tf.compat.v1.placeholder_with_default(inputs[k], [None, None]) for k in INPUT_KEYS}
    outputs = encoder(inputs, training=training)
    pooled = tf.cast(outputs["pooled_output"], tf.float32)
    return {
        "sequence_output": tf.cast(outputs["sequence_output"], tf.float32),
        "pooled_output": pooled,
        "default": tf.identity(pooled, name="default"),
        "encoder_outputs": [tf.cast(x, tf.float32) for x in outputs["encoder_outputs"]],
    }


def masked_lm_outputs(encoder, masked_lm, inputs: dict, training: bool) -> dict:
    """encoder_outputs plus float32 `mlm_logits` [B, P, V] at `masked_lm_positions`."""
    outputs = encoder_outputs(encoder, inputs, training)
    outputs["mlm_logits"] = masked_lm(
        outputs["sequence_output"], inputs[MLM_POSITIONS_KEY], encoder.word_embeddings
    )
    return outputs


def flatten_outputs(outputs: dict) -> dict:
    """Signature outputs must be flat: encoder_outputs -> encoder_outputs_{i}."""
    flat = {k: v for k, v in outputs.items() if k != "encoder_outputs"}
    for i, x in enumerate(outputs["encoder_outputs"]):
        flat[f"encoder_outputs_{i}"] = x
    return flat


class EncoderModule(ReusableModule):
    """The TF Hub encoder SavedModel object (see the module docstring).

    Attributes:
      vocab_file: tf.saved_model.Asset of the WordPiece vocabulary.
      do_lower_case: bool tf.Variable (not trainable).
      bert_config_file: tf.saved_model.Asset of the `bert_config.json`, or absent.
      mlm: a ReusableModule with the masked-LM head, or absent.
    """

    def __init__(
        self,
        encoder,
        vocab_file: str,
        do_lower_case: bool,
        bert_config_file: str | None = None,
        masked_lm=None,
    ):
        """Args:
        encoder: a `BertEncoder` (float32 outputs are exported whatever its policy).
        vocab_file: path of the vocabulary the encoder was trained with.
        do_lower_case: whether that vocabulary is uncased.
        bert_config_file: path of the encoder's `bert_config.json`, saved as an asset.
        masked_lm: the pre-trainer's `MaskedLMHead`, exported as `mlm`.
        """
        if not tf.io.gfile.exists(vocab_file):
            raise MissingFileError(f"vocab file not found: {vocab_file}")
        super().__init__(
            [encoder], lambda x, t: encoder_outputs(encoder, x, t), id_specs(), name="bert_encoder"
        )
        self.vocab_file = tf.saved_model.Asset(vocab_file)
        self.do_lower_case = tf.Variable(bool(do_lower_case), trainable=False, name="do_lower_case")
        if bert_config_file:
            self.bert_config_file = tf.saved_model.Asset(bert_config_file)
        if getattr(encoder, "causal_attention", False):
            self.causal_attention = tf.Variable(True, trainable=False, name="causal_attention")
        if masked_lm is not None:
            self.mlm = ReusableModule(
                [encoder, masked_lm],
                lambda x, t: masked_lm_outputs(encoder, masked_lm, x, t),
                id_specs(INPUT_KEYS + (MLM_POSITIONS_KEY,)),
                name="mlm",
            )


def _signature(call, keys: Sequence[str]):
    """A signature function: keyword int32 [B, S] inputs, `call(..., training=False)`
    with flat outputs (a call op on the traced function, not a second trace)."""
    inference = call.get_concrete_function(id_specs(keys), training=False)

    @tf.function(input_signature=list(id_specs(keys).values()), autograph=False)
    def serve(*tensors):
        return flatten_outputs(inference(dict(zip(keys, tensors)), training=False))

    return serve


def encoder_signatures(module: EncoderModule) -> dict:
    """`serving_default` (and `mlm`), for saved_model_cli and TF Serving."""
    signatures = {"serving_default": _signature(module.__call__, INPUT_KEYS)}
    if hasattr(module, "mlm"):
        signatures["mlm"] = _signature(module.mlm.__call__, INPUT_KEYS + (MLM_POSITIONS_KEY,))
    return signatures


@savedmodel.standard_ops
def export_encoder(
    encoder,
    export_path: str,
    vocab_file: str,
    do_lower_case: bool,
    masked_lm=None,
    overwrite: bool = False,
) -> str:
    """Exports `encoder` (and optionally its masked-LM head) as a TF Hub SavedModel.

    Args:
      encoder: a built `BertEncoder` holding the weights to export.
      export_path: destination folder (`savedmodel.check_export_path`; written only
        when the export is complete).
      vocab_file: vocabulary to bundle as the `vocab_file` asset.
      do_lower_case: stored as the `do_lower_case` variable.
      masked_lm: a `MaskedLMHead` (e.g. `BertPretrainer.masked_lm`) for `mlm`.
      overwrite: whether a previous export at `export_path` may be replaced.

    Returns:
      the absolute export path.
    """
    savedmodel.check_export_path(export_path, overwrite)
    with tempfile.TemporaryDirectory() as staging:
        config_file = os.path.join(staging, "bert_config.json")
        encoder.config.to_json_file(config_file)
        module = EncoderModule(encoder, vocab_file, do_lower_case, config_file, masked_lm)
        kind = "encoder" if masked_lm is None else "encoder_with_mlm"
        return savedmodel.save_atomically(
            module, export_path, encoder_signatures(module), kind=kind, overwrite=overwrite
        )

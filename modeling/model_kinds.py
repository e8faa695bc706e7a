"""Every kind of model this project builds, declared once (`ModelKind`).

A kind is what a model_info.json calls "model_kind" and what a checkpoint's heads tell:
  encoder                         a bare encoder (`BertEncoder`, or a TF Hub one);
  pretrainer                      masked-LM (or left-to-right LM) and next-sentence heads;
  classifier                      sentence (pair) classification, or regression with
                                  one output (run_classifier.py, GLUE);
  multiple_choice                 one score per choice (run_classifier.py, SWAG);
  span                            SQuAD start and end logits (run_squad.py);
  token_classifier                one label per token (run_ner.py);
  feature_based_token_classifier  the frozen-encoder BiLSTM tagger (run_ner.py
                                  --feature_based).
A left-to-right model is not a kind of its own: it is any of these on an encoder with
`causal_attention` (model_info.json says so beside the kind).

Each declaration holds the model class (whose `MODEL_KIND` is the kind's name, the one
place that string is written), the names of its heads in every checkpoint format, how
it is evaluated and which metric picks the best model, and the serving export that
answers raw text with the export's options and their defaults (the runner flags'
defaults read them here). checkpoint_names, checkpoints, convert_checkpoint.py,
serving/exports.py and the runners read these declarations instead of tables of their
own. Every name here is written into users' files (model_info.json, checkpoints,
exports): never rename one.

Adding a kind of head: its model class (with `MODEL_KIND`) in a module of its own or
models.py, a `ModelKind` here added to `KINDS`, and, if it has a raw-text export, its
signature builder in serving/exports.py (ARCHITECTURE.md, "Adding a task").
"""

from __future__ import annotations

import dataclasses
import types
from typing import Mapping

from modeling import feature_based, models


@dataclasses.dataclass(frozen=True, eq=False)
class ModelKind:
    """One kind of model.

    Attributes:
      model_class: the Keras model class, None for the encoder (any encoder layer).
      head: the model's attribute that holds a head of original (TF1) and Hugging
        Face names (see original_prefix), None for a kind without one.
      tf2_markers: TF2 checkpoint parts whose presence says a checkpoint holds this
        kind (a part several kinds share fits each of them).
      original_markers: original (TF1) variable names that say so.
      original_prefix: for a head that is one dense layer, the prefix of its original
        names `<prefix>output_weights` [outputs, H] and `<prefix>output_bias`; None for
        a head without such names (the pre-trainer's have a table of their own in
        checkpoint_names; the feature-based tagger's exist only in TF2).
      hf_head: Hugging Face's name of that layer (`<hf_head>.weight`, `.bias`).
      hf_architectures: Hugging Face architectures read as this kind; the first is
        the one written.
      hf_causal_architecture: the one written for a left-to-right model; None when
        Hugging Face has no class that computes what ours does.
      labelled: built with `num_labels`; its labels are kept in model_info.json.
      one_output: its head has a single output (multiple choice: the score of a
        choice), which tells it apart from a head on the same names with more.
      bilstm: takes `bilstm_units` (the paper's Table 5 "+ BiLSTM").
      multi_label: takes `multi_label` (zero or more labels per example, a sigmoid
        each); model_info.json keeps it.
      uses_pooler: its outputs depend on the encoder's pooler.
      evaluation: how a fine-tuning run evaluates it.
      score: the metric (a key of its evaluation results) the best model is chosen
        by; None: the task's own (a classification task's GLUE score, see
        data_prep.classifier.classifier_reader.DataProcessor.score_metrics).
      export_kind: the kind of its raw-text serving export (serving/exports.py), as the
        export's marker and `TaskModule` name it; None: no such export.
      export_options: that export's own options and their defaults, which are those of
        the runner's flags of the same names.
    """

    model_class: type | None
    head: str | None = None
    tf2_markers: tuple[str, ...] = ()
    original_markers: tuple[str, ...] = ()
    original_prefix: str | None = None
    hf_head: str | None = None
    hf_architectures: tuple[str, ...] = ()
    hf_causal_architecture: str | None = None
    labelled: bool = False
    one_output: bool = False
    bilstm: bool = False
    multi_label: bool = False
    uses_pooler: bool = False
    evaluation: str = ""
    score: str | None = None
    export_kind: str | None = None
    export_options: Mapping = dataclasses.field(default_factory=lambda: types.MappingProxyType({}))

    @property
    def name(self) -> str:
        """The kind's name: its model class's `MODEL_KIND`, "encoder" for the encoder."""
        return self.model_class.MODEL_KIND if self.model_class is not None else "encoder"

    def build(
        self,
        encoder,
        config,
        num_labels: int | None = None,
        *,
        bilstm_units: int = 0,
        head_initializer: str = "truncated_normal",
        objective: str = "mlm",
        multi_label: bool = False,
    ):
        """A model of this kind on `encoder` (the encoder itself for ENCODER).

        `num_labels` for a labelled kind, `bilstm_units` for one with a BiLSTM option,
        `multi_label` for one with that option,
        `objective` ("mlm" or "ltr") for the pre-trainer. The feature-based tagger
        takes options of its own: build it with its class.
        """
        if self.model_class is None:
            return encoder
        if self is PRETRAINER:
            return self.model_class(encoder, config, objective)
        kwargs = dict(head_initializer=head_initializer)
        if self.bilstm:
            kwargs["bilstm_units"] = bilstm_units
        if self.multi_label:
            kwargs["multi_label"] = multi_label
        elif multi_label:
            raise ValueError(f"a {self.name} model has no multi-label option")
        if self.labelled:
            return self.model_class(encoder, config, num_labels, **kwargs)
        return self.model_class(encoder, config, **kwargs)


def _options(**defaults) -> Mapping:
    return types.MappingProxyType(defaults)


ENCODER = ModelKind(
    model_class=None,
    hf_architectures=("BertModel",),
    hf_causal_architecture="BertModel",
)
PRETRAINER = ModelKind(
    model_class=models.BertPretrainer,
    tf2_markers=("masked_lm", "next_sentence"),
    original_markers=("cls/predictions/output_bias", "cls/seq_relationship/output_weights"),
    hf_architectures=(
        "BertForPreTraining",
        "BertForMaskedLM",
        "BertLMHeadModel",
        "BertForNextSentencePrediction",
    ),
    hf_causal_architecture="BertLMHeadModel",
    uses_pooler=True,
    evaluation="masked-LM and next-sentence loss and accuracy (in-graph)",
)
CLASSIFIER = ModelKind(
    model_class=models.BertClassifier,
    head="classifier",
    tf2_markers=("classifier",),
    original_markers=("output_weights",),
    original_prefix="",
    hf_head="classifier",
    hf_architectures=("BertForSequenceClassification",),
    labelled=True,
    bilstm=True,
    multi_label=True,
    uses_pooler=True,
    evaluation="the task's GLUE metrics (evaluation.glue_metrics) and the loss",
    export_kind="classifier",
    # run_classifier.py --long_input=windows: a text's windows, joined (its model_info);
    # --multi_label: the threshold and the separator of the label set it answers.
    export_options=_options(
        long_input="truncate",
        doc_stride=0,
        window_pooling="mean",
        max_windows_per_text=16,
        multi_label_threshold=0.5,
        label_separator=",",
    ),
)
MULTIPLE_CHOICE = ModelKind(
    model_class=models.BertMultipleChoice,
    head="scorer",
    tf2_markers=("scorer",),
    original_markers=("output_weights",),
    original_prefix="",
    hf_head="classifier",
    hf_architectures=("BertForMultipleChoice",),
    one_output=True,
    uses_pooler=True,
    evaluation="accuracy over the choices and the loss",
    export_kind="multiple_choice",
)
SPAN = ModelKind(
    model_class=models.BertSpanLabeler,
    head="span",
    tf2_markers=("span",),
    original_markers=("cls/squad/output_weights",),
    original_prefix="cls/squad/",
    hf_head="qa_outputs",
    hf_architectures=("BertForQuestionAnswering",),
    hf_causal_architecture="BertForQuestionAnswering",
    bilstm=True,
    evaluation="the official SQuAD script's exact match and F1 (evaluation.squad_eval)",
    score="f1",
    export_kind="squad",
    export_options=_options(
        max_query_length=64, max_answer_length=30, n_best_size=20, doc_stride=128
    ),
)
TOKEN_CLASSIFIER = ModelKind(
    model_class=models.BertTokenClassifier,
    head="classifier",
    tf2_markers=("classifier",),
    original_markers=("output_weights",),
    original_prefix="",
    hf_head="classifier",
    hf_architectures=("BertForTokenClassification",),
    hf_causal_architecture="BertForTokenClassification",
    labelled=True,
    bilstm=True,
    evaluation="conlleval's entity precision, recall and F1 (evaluation.conlleval)",
    score="eval_f1",
    export_kind="ner",
    export_options=_options(doc_stride=64, tag_scheme="iob2", document_context=False),
)
FEATURE_BASED = ModelKind(
    model_class=feature_based.BertFeatureBasedTagger,
    tf2_markers=("bilstm_0",),
    labelled=True,
    evaluation=TOKEN_CLASSIFIER.evaluation,
    score=TOKEN_CLASSIFIER.score,
    export_kind=TOKEN_CLASSIFIER.export_kind,
    export_options=TOKEN_CLASSIFIER.export_options,
)

# Every kind, in the order listed to users (convert_checkpoint.py --model_kind).
KINDS = (ENCODER, PRETRAINER, CLASSIFIER, MULTIPLE_CHOICE, SPAN, TOKEN_CLASSIFIER, FEATURE_BASED)
BY_NAME = types.MappingProxyType({kind.name: kind for kind in KINDS})


def get(name: str) -> ModelKind:
    """The kind named `name` (a model_info.json "model_kind")."""
    return BY_NAME[name]


def of_model(model) -> ModelKind:
    """The kind of `model`: a model of a declared class, or an encoder (a layer with
    `embeddings` and `encoder_layers`)."""
    for kind in KINDS:
        if kind.model_class is not None and isinstance(model, kind.model_class):
            return kind
    if hasattr(model, "embeddings") and hasattr(model, "encoder_layers"):
        return ENCODER
    raise TypeError(
        f"{type(model).__name__} is not a BERT model of this project (not a class of "
        f"modeling.model_kinds.KINDS and not an encoder)"
    )

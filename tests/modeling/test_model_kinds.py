"""The model-kind declarations (modeling/model_kinds.py) and what reads them.

The names below are written into users' files (model_info.json "model_kind", checkpoint
variable names, the marker and signatures of task exports) and the runner flags'
defaults are the original release's: they are spelled out here, not read from the
declarations, so that a change to a declaration that would strand existing files fails.
"""

import json
import subprocess
import sys
import textwrap

import pytest

from data_prep.classifier import classifier_tasks
from evaluation import glue_metrics
from modeling import checkpoint_names as names
from modeling import checkpoints, model_kinds
from modeling.config import BertConfig
from modeling.encoder import BertEncoder
from serving import exports as serving_exports
from tests.conftest import REPO_ROOT, tiny_config

# kind name -> export kind, as users' model_info.json files and exports spell them.
USERS_NAMES = {
    "encoder": None,
    "pretrainer": None,
    "classifier": "classifier",
    "multiple_choice": "multiple_choice",
    "span": "squad",
    "token_classifier": "ner",
    "feature_based_token_classifier": "ner",
}


def test_names_are_those_of_users_files():
    # New kinds may come; these stay, spelled as they are.
    assert {name: model_kinds.get(name).export_kind for name in USERS_NAMES} == USERS_NAMES
    assert names.MODEL_KINDS[: len(USERS_NAMES)] == tuple(USERS_NAMES)
    assert len(set(names.MODEL_KINDS)) == len(model_kinds.KINDS)
    for kind in model_kinds.KINDS:
        assert model_kinds.get(kind.name) is kind
        if kind.model_class is not None:
            assert kind.model_class.MODEL_KIND == kind.name


def test_export_options_are_the_original_flag_defaults():
    assert serving_exports.check_options("squad", {}) == {
        "pad_to_max_seq_length": False,
        "xla_single_requests": False,
        "max_query_length": 64,
        "max_answer_length": 30,
        "n_best_size": 20,
        "doc_stride": 128,
    }
    assert serving_exports.check_options("ner", {"doc_stride": 32}) == {
        "pad_to_max_seq_length": False,
        "xla_single_requests": False,
        "doc_stride": 32,
        "tag_scheme": "iob2",
        "document_context": False,
    }
    assert set(serving_exports.TASK_SIGNATURE_BUILDERS) >= {k for k in USERS_NAMES.values() if k}


def test_checkpoint_names_derived_from_the_declarations():
    tf2 = [name for name, _ in checkpoints._TF2_MARKERS]
    # A part of one kind is looked for before one that several kinds share.
    assert tf2.index("bilstm_0") < tf2.index("classifier")
    assert set(checkpoints._TF2_MARKERS) >= {
        ("masked_lm", ("pretrainer",)),
        ("next_sentence", ("pretrainer",)),
        ("scorer", ("multiple_choice",)),
        ("span", ("span",)),
        ("bilstm_0", ("feature_based_token_classifier",)),
        ("classifier", ("classifier", "token_classifier")),
    }
    assert set(checkpoints._ORIGINAL_MARKERS) >= {
        ("cls/predictions/output_bias", ("pretrainer",)),
        ("cls/seq_relationship/output_weights", ("pretrainer",)),
        ("cls/squad/output_weights", ("span",)),
        ("output_weights", ("classifier", "multiple_choice", "token_classifier")),
    }
    assert names.hf_name("cls/squad/output_weights", "bert.") == ("qa_outputs.weight", False)
    assert names.hf_name("output_bias", "bert.") == ("classifier.bias", False)
    assert names.HF_ARCHITECTURES["BertLMHeadModel"] == "pretrainer"
    assert (
        names.HF_ARCHITECTURE_OF.items()
        >= {
            "encoder": "BertModel",
            "pretrainer": "BertForPreTraining",
            "classifier": "BertForSequenceClassification",
            "multiple_choice": "BertForMultipleChoice",
            "span": "BertForQuestionAnswering",
            "token_classifier": "BertForTokenClassification",
        }.items()
    )


@pytest.mark.parametrize(
    "kind,heads",
    [
        (model_kinds.ENCODER, {}),
        (model_kinds.PRETRAINER, {"masked_lm": 5, "next_sentence": 2}),
        (model_kinds.CLASSIFIER, {"classifier": 2}),
        (model_kinds.MULTIPLE_CHOICE, {"scorer": 2}),
        (model_kinds.SPAN, {"span": 2}),
        (model_kinds.TOKEN_CLASSIFIER, {"classifier": 2}),
    ],
    ids=lambda value: value.name if isinstance(value, model_kinds.ModelKind) else "",
)
def test_build_makes_a_model_of_its_kind(kind, heads):
    config = BertConfig.from_dict(tiny_config())
    encoder = BertEncoder(config, dtype="float32")
    model = kind.build(encoder, config, 3)
    assert model_kinds.of_model(model) is kind
    assert names.model_kind(model) == kind.name
    tables = names.head_tables(model)
    assert {part: len(entries) for part, entries in tables.items()} == heads
    if kind.original_prefix is not None:
        (entries,) = tables.values()
        assert entries[0][0] == f"{kind.original_prefix}output_weights"
        outputs = 1 if kind.one_output else 3 if kind.labelled else 2
        assert entries[0][1].shape[-1] == outputs


def test_of_model_rejects_other_models():
    with pytest.raises(TypeError, match="not a BERT model"):
        model_kinds.of_model(object())


def test_glue_facts_come_from_the_task_readers():
    # STS-B is a regression once: its reader says so, and the metrics follow.
    assert [t.name for t in classifier_tasks.TASKS if t.is_regression] == ["sts-b"]
    task = classifier_tasks.task_class
    generic = classifier_tasks.get_processor(
        "generic", text_a_column="a", label_column="l", is_regression=True
    )
    assert glue_metrics.is_regression_task(task("STS-B"))
    assert glue_metrics.metric_names(task("stsb")) == (True, ("pearson", "spearman"))
    assert glue_metrics.metric_names(generic)[0]
    assert glue_metrics.metric_names(classifier_tasks.DataProcessor()) == (False, ("accuracy",))
    assert glue_metrics.glue_score(task("cola"), {"eval_accuracy": 0.9, "eval_mcc": 0.5}) == 0.5
    assert glue_metrics.glue_score(generic, {"eval_pearson": 0.2, "eval_spearman": 0.4})
    assert glue_metrics.submission_file_name(task("MNLI"), "test_mismatched") == "MNLI-mm.tsv"


# Each runner's flag defaults and its task's score against the declaration; one process
# per runner (both define --doc_stride).
_RUNNER_DRIVER = textwrap.dedent("""
    import json, sys
    runner = __import__(sys.argv[1])
    runner.FLAGS(["x"], known_only=True)
    task = getattr(runner, sys.argv[2])
    flags = {name: runner.FLAGS[name].default for name in json.loads(sys.argv[3])}
    print(json.dumps({"flags": flags, "score": task.score(None, {"f1": 0.25, "eval_f1": 0.5})}))
""")


@pytest.mark.slow
@pytest.mark.parametrize(
    "runner,task_class,kind,flag_defaults",
    [
        (
            "run_squad",
            "SquadTask",
            model_kinds.SPAN,
            {"doc_stride": 128, "max_query_length": 64, "n_best_size": 20, "max_answer_length": 30},
        ),
        ("run_ner", "NerTask", model_kinds.TOKEN_CLASSIFIER, {"doc_stride": 64}),
    ],
)
def test_runners_agree_with_the_declaration(runner, task_class, kind, flag_defaults):
    done = subprocess.run(
        [sys.executable, "-c", _RUNNER_DRIVER, runner, task_class, json.dumps(list(flag_defaults))],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["flags"] == flag_defaults
    assert found["score"] == {"f1": 0.25, "eval_f1": 0.5}[kind.score]

"""Tests of data_prep/classifier/classifier_reader.py and classifier_tasks.py: the task readers
on hand-made files in the GLUE layout, the bundled real MRPC, generic tsv/csv files.

The original release's `run_classifier` readers and `convert_single_example`
serve as an oracle where it has the task (CoLA, MNLI, MRPC, XNLI).
"""

import os
import types

import pytest
import tensorflow as tf

from data_prep.classifier import classifier_features as cf
from data_prep.classifier import classifier_tasks as ct
from tests.helpers.classifier_helpers import MRPC_HEADER, _write


MNLI_COLUMNS = (
    "index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\t"
    "sentence2_binary_parse\tsentence1_parse\tsentence2_parse\t"
    "sentence1\tsentence2"
)


XNLI_HEADER = (
    "language\tgold_label\tsentence1_binary_parse\t"
    "sentence2_binary_parse\tsentence1_parse\tsentence2_parse\t"
    "sentence1\tsentence2\tpromptID\tpairID\tgenre\tlabel1\tlabel2\t"
    "label3\tlabel4\tlabel5"
)


def _fields(examples):
    return [(e.text_a, e.text_b, e.label, e.index) for e in examples]


# What the tests take from the original run_classifier.py.
_ORIGINAL_NAMES = (
    "InputExample",
    "PaddingInputExample",
    "InputFeatures",
    "DataProcessor",
    "XnliProcessor",
    "MnliProcessor",
    "MrpcProcessor",
    "ColaProcessor",
    "convert_single_example",
    "_truncate_seq_pair",
)


@pytest.fixture(scope="module")
def original():
    """The original release's readers and `convert_single_example`.

    Importing `bert.run_classifier` would define its absl flags (vocab_file,
    output_dir, ...), which clash with those of `bert.run_squad` when another
    test imports that in the same process, and would need a stand-in for
    `tensorflow.contrib`. So only the definitions the tests use are taken from
    the installed file, and run against `tensorflow.compat.v1` and the original
    `bert.tokenization`.
    """
    import ast
    import collections
    import csv
    import importlib.util
    from absl import flags
    from bert import tokenization as original_tokenization

    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()  # FullTokenizer reads a flag.
    package_dir = importlib.util.find_spec("bert").submodule_search_locations[0]
    with open(os.path.join(package_dir, "run_classifier.py"), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    tree.body = [node for node in tree.body if getattr(node, "name", None) in _ORIGINAL_NAMES]
    namespace = {
        "tf": tf.compat.v1,
        "tokenization": original_tokenization,
        "csv": csv,
        "os": os,
        "collections": collections,
    }
    exec(compile(tree, "bert/run_classifier.py", "exec"), namespace)
    return types.SimpleNamespace(
        run_classifier=types.SimpleNamespace(**namespace), tokenization=original_tokenization
    )


# ----------------------------------------------------------------------------
# GLUE readers on hand-made files in the GLUE layout.
# ----------------------------------------------------------------------------


def test_cola_no_header_train_and_header_test(tmp_path, original):
    _write(
        tmp_path,
        "train.tsv",
        [
            "gj04\t1\t\tThe sailors rode the breeze clear of the rocks.",
            'gj04\t0\t*\tThe more "we study verbs, the crazier they get.',
        ],
    )
    _write(tmp_path, "dev.tsv", ["clc95\t1\t\tHarry coughed himself into a fit."])
    _write(tmp_path, "test.tsv", ["index\tsentence", "0\tBill whistled past the house."])
    processor = ct.get_processor("CoLA")
    train = processor.get_train_examples(str(tmp_path))
    assert _fields(train) == [
        ("The sailors rode the breeze clear of the rocks.", None, "1", "0"),
        ('The more "we study verbs, the crazier they get.', None, "0", "1"),
    ]
    assert _fields(processor.get_test_examples(str(tmp_path))) == [
        ("Bill whistled past the house.", None, None, "0")
    ]
    theirs = original.run_classifier.ColaProcessor()
    for split in ("train", "dev"):
        ours = processor.get_examples(str(tmp_path), split)
        expected = getattr(theirs, f"get_{split}_examples")(str(tmp_path))
        assert [(e.text_a, e.label) for e in ours] == [(e.text_a, e.label) for e in expected]


def test_sst2(tmp_path):
    _write(
        tmp_path,
        "train.tsv",
        ["sentence\tlabel", "hide new secretions from the parental units \t0"],
    )
    _write(tmp_path, "test.tsv", ["index\tsentence", "0\tuneasy mishmash of styles"])
    processor = ct.get_processor("sst2")
    assert _fields(processor.get_train_examples(str(tmp_path))) == [
        ("hide new secretions from the parental units ", None, "0", "0")
    ]
    assert _fields(processor.get_test_examples(str(tmp_path))) == [
        ("uneasy mishmash of styles", None, None, "0")
    ]


def test_mrpc_bom_header_and_quotes(tmp_path, original):
    _write(
        tmp_path,
        "train.tsv",
        [
            MRPC_HEADER,
            '1\t702876\t702977\tHe said "the witness" lied.\t"The witness lied, he said.',
        ],
        bom=True,
    )
    _write(
        tmp_path,
        "test.tsv",
        [
            "index\t#1 ID\t#2 ID\t#1 String\t#2 String",
            "17\t1089874\t1089925\tPCCW's chief.\tThe chief.",
        ],
    )
    processor = ct.get_processor("mrpc")
    train = processor.get_train_examples(str(tmp_path))
    assert _fields(train) == [
        ('He said "the witness" lied.', '"The witness lied, he said.', "1", "0")
    ]
    expected = original.run_classifier.MrpcProcessor().get_train_examples(str(tmp_path))
    assert [(e.text_a, e.text_b, e.label) for e in expected] == [
        (e.text_a, e.text_b, e.label) for e in train
    ]
    test = processor.get_test_examples(str(tmp_path))
    assert _fields(test) == [("PCCW's chief.", "The chief.", None, "17")]
    assert test[0].guid == "test-2"


def test_stsb_float_labels(tmp_path):
    header = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2"
    _write(
        tmp_path,
        "train.tsv",
        [
            header + "\tscore",
            "0\tmain-captions\tMSRvid\t2012test\t0001\tnone\tnone\tA plane is taking "
            "off.\tAn air plane is taking off.\t5.000",
            "1\tmain-captions\tMSRvid\t2012test\t0004\tnone\tnone\tA man is playing a "
            "flute.\tA man is playing a bamboo flute.\t3.800",
        ],
    )
    _write(
        tmp_path,
        "test.tsv",
        [
            header,
            "0\tmain-captions\tMSRvid\t2012test\t0024\tnone\tnone\tA girl is "
            "styling her hair.\tA girl is brushing her hair.",
        ],
    )
    processor = ct.get_processor("STS-B")
    assert processor.is_regression and processor.get_labels() == []
    assert _fields(processor.get_train_examples(str(tmp_path))) == [
        ("A plane is taking off.", "An air plane is taking off.", 5.0, "0"),
        ("A man is playing a flute.", "A man is playing a bamboo flute.", 3.8, "1"),
    ]
    assert _fields(processor.get_test_examples(str(tmp_path))) == [
        ("A girl is styling her hair.", "A girl is brushing her hair.", None, "0")
    ]


def test_qqp(tmp_path):
    _write(
        tmp_path,
        "train.tsv",
        [
            "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate",
            "133273\t213221\t213222\tHow is the life of a math student?\t"
            "Which level of prepration is enough?\t0",
        ],
    )
    _write(
        tmp_path,
        "test.tsv",
        ["id\tquestion1\tquestion2", "5\tWhy do rockets look white?\tWhy are rockets white?"],
    )
    processor = ct.get_processor("qqp")
    assert _fields(processor.get_train_examples(str(tmp_path))) == [
        (
            "How is the life of a math student?",
            "Which level of prepration is enough?",
            "0",
            "133273",
        )
    ]
    assert _fields(processor.get_test_examples(str(tmp_path))) == [
        ("Why do rockets look white?", "Why are rockets white?", None, "5")
    ]


def test_mnli_splits_and_original(tmp_path, original):
    parses = "\t".join(["(x)"] * 4)
    _write(
        tmp_path,
        "train.tsv",
        [
            MNLI_COLUMNS + "\tlabel1\tgold_label",
            f"0\t31193\t31193n\tgovernment\t{parses}\tConceptually cream skimming."
            "\tProduct and geography.\tneutral\tneutral",
        ],
    )
    dev_row = "\t".join(["neutral", "entailment", "neutral", "neutral", "neutral"])
    _write(
        tmp_path,
        "dev_matched.tsv",
        [
            MNLI_COLUMNS + "\tlabel1\tlabel2\tlabel3\tlabel4\tlabel5\tgold_label",
            f"0\t63735\t63735n\tslate\t{parses}\tThe new rights.\tEveryone loves."
            f"\t{dev_row}\tneutral",
        ],
    )
    _write(
        tmp_path,
        "dev_mismatched.tsv",
        [
            MNLI_COLUMNS + "\tlabel1\tlabel2\tlabel3\tlabel4\tlabel5\tgold_label",
            f"3\t75290\t75290c\tletters\t{parses}\tYour gift.\tNo gift.\t{dev_row}\tcontradiction",
        ],
    )
    _write(
        tmp_path,
        "test_mismatched.tsv",
        [MNLI_COLUMNS, f"9\t1\t1n\tletters\t{parses}\tA premise.\tA hypothesis."],
    )
    processor = ct.get_processor("mnli")
    assert processor.eval_splits == ("dev_matched", "dev_mismatched")
    assert _fields(processor.get_dev_examples(str(tmp_path))) == [
        ("The new rights.", "Everyone loves.", "neutral", "0")
    ]
    assert _fields(processor.get_examples(str(tmp_path), "dev_mismatched")) == [
        ("Your gift.", "No gift.", "contradiction", "3")
    ]
    assert _fields(processor.get_examples(str(tmp_path), "test_mismatched")) == [
        ("A premise.", "A hypothesis.", None, "9")
    ]
    theirs = original.run_classifier.MnliProcessor()
    for split in ("train", "dev"):
        ours = processor.get_examples(str(tmp_path), split)
        expected = getattr(theirs, f"get_{split}_examples")(str(tmp_path))
        assert [(e.text_a, e.text_b, e.label) for e in ours] == [
            (e.text_a, e.text_b, e.label) for e in expected
        ]
    with pytest.raises(ValueError, match="dev_matched, dev_mismatched"):
        processor.get_examples(str(tmp_path), "validation")


@pytest.mark.parametrize(
    "task,question_column,labels",
    [
        ("qnli", "question\tsentence", ("entailment", "not_entailment")),
        ("rte", "sentence1\tsentence2", ("entailment", "not_entailment")),
        ("wnli", "sentence1\tsentence2", ("0", "1")),
    ],
)
def test_index_pair_label_tasks(tmp_path, task, question_column, labels):
    _write(
        tmp_path,
        "train.tsv",
        [
            f"index\t{question_column}\tlabel",
            f"0\tFirst text.\tSecond text.\t{labels[1]}",
            f"1\tThird text.\tFourth text.\t{labels[0]}",
        ],
    )
    _write(tmp_path, "test.tsv", [f"index\t{question_column}", "4\tA.\tB."])
    processor = ct.get_processor(task)
    assert processor.get_labels() == list(labels)
    assert _fields(processor.get_train_examples(str(tmp_path))) == [
        ("First text.", "Second text.", labels[1], "0"),
        ("Third text.", "Fourth text.", labels[0], "1"),
    ]
    assert _fields(processor.get_test_examples(str(tmp_path))) == [("A.", "B.", None, "4")]


def test_ax_diagnostic(tmp_path):
    _write(
        tmp_path,
        "diagnostic.tsv",
        ["index\tsentence1\tsentence2", "0\tThe cat sat.\tThe cat did not sit."],
    )
    processor = ct.get_processor("AX")
    assert processor.get_labels() == ["contradiction", "entailment", "neutral"]
    assert _fields(processor.get_test_examples(str(tmp_path))) == [
        ("The cat sat.", "The cat did not sit.", None, "0")
    ]


def test_xnli_language_filter_and_train(tmp_path, original):
    parses = "\t".join(["(x)"] * 4)
    annotations = "\t".join(["1", "1n", "fiction"] + ["neutral"] * 5)
    _write(
        tmp_path,
        "xnli.dev.tsv",
        [
            XNLI_HEADER,
            f"de\tneutral\t{parses}\tEr sagte.\tEr ging.\t{annotations}",
            f"zh\tentailment\t{parses}\t他说。\t他走了。\t{annotations}",
            f"de\tcontradiction\t{parses}\tJa.\tNein.\t{annotations}",
        ],
    )
    _write(
        tmp_path,
        "multinli/multinli.train.de.tsv",
        [
            "premise\thypo\tlabel",
            "Ein Satz .\tZwei Sätze .\tcontradictory",
            "Drei .\tVier .\tentailment",
        ],
    )
    processor = ct.get_processor("xnli", xnli_language="de")
    assert _fields(processor.get_dev_examples(str(tmp_path))) == [
        ("Er sagte.", "Er ging.", "neutral", "0"),
        ("Ja.", "Nein.", "contradiction", "1"),
    ]
    train = processor.get_train_examples(str(tmp_path))
    assert [e.label for e in train] == ["contradiction", "entailment"]
    theirs = original.run_classifier.XnliProcessor()
    theirs.language = "de"
    for split in ("train", "dev"):
        ours = processor.get_examples(str(tmp_path), split)
        expected = getattr(theirs, f"get_{split}_examples")(str(tmp_path))
        assert [(e.text_a, e.text_b, e.label) for e in ours] == [
            (e.text_a, e.text_b, e.label) for e in expected
        ]
    with pytest.raises(ValueError, match="xnli_language='xx'.*zh"):
        ct.get_processor("xnli", xnli_language="xx")


# ----------------------------------------------------------------------------
# The bundled real MRPC.
# ----------------------------------------------------------------------------


def test_real_mrpc_counts_labels_and_original(sample_data, original):
    data_dir = str(sample_data / "glue" / "MRPC")
    processor = ct.get_processor("MRPC")
    assert processor.get_labels() == ["0", "1"]
    examples = {
        split: processor.get_examples(data_dir, split) for split in ("train", "dev", "test")
    }
    assert {split: len(e) for split, e in examples.items()} == {
        "train": 3668,
        "dev": 408,
        "test": 1725,
    }
    assert {e.label for e in examples["train"]} == {"0", "1"}
    assert [e.index for e in examples["test"][:3]] == ["0", "1", "2"]
    theirs = original.run_classifier.MrpcProcessor()
    for split in ("train", "dev", "test"):
        expected = getattr(theirs, f"get_{split}_examples")(data_dir)
        assert [(e.text_a, e.text_b) for e in examples[split]] == [
            (e.text_a, e.text_b) for e in expected
        ]
        if split != "test":
            assert [e.label for e in examples[split]] == [e.label for e in expected]


def test_real_mrpc_features_match_original(sample_data, original, tokenizer, vocab_file):
    data_dir = str(sample_data / "glue" / "MRPC")
    examples = ct.get_processor("mrpc").get_dev_examples(data_dir)[:120]
    theirs = original.run_classifier.MrpcProcessor().get_dev_examples(data_dir)
    their_tokenizer = original.tokenization.FullTokenizer(vocab_file, True)
    num_truncated = 0
    for ours, expected_example in zip(examples, theirs):
        features = cf.convert_example(ours, ["0", "1"], 40, tokenizer)
        expected = original.run_classifier.convert_single_example(
            10, expected_example, ["0", "1"], 40, their_tokenizer
        )
        assert features.input_ids == expected.input_ids
        assert features.input_mask == expected.input_mask
        assert features.segment_ids == expected.segment_ids
        assert features.label_id == expected.label_id
        num_truncated += features.truncated
    assert num_truncated > 10  # max_seq_length 40 does cut pairs here


# ----------------------------------------------------------------------------
# Generic files.
# ----------------------------------------------------------------------------


def test_generic_tsv_with_header(tmp_path):
    _write(
        tmp_path,
        "train.tsv",
        [
            "id\tquestion\tanswer\tlabel",
            '1\tIs it "so"?\tYes.\tyes',
            "2\tIs it?\tNo.\tno",
            "3\tMaybe?\tPerhaps.\tmaybe",
        ],
    )
    _write(tmp_path, "dev.tsv", ["id\tquestion\tanswer\tlabel", "4\tQ?\tA.\tno"])
    processor = ct.get_processor(
        "generic", text_a_column="question", text_b_column="answer", label_column="label"
    )
    assert processor.get_labels(str(tmp_path)) == ["maybe", "no", "yes"]
    assert _fields(processor.get_train_examples(str(tmp_path)))[0] == (
        'Is it "so"?',
        "Yes.",
        "yes",
        "0",
    )
    assert _fields(processor.get_dev_examples(str(tmp_path))) == [("Q?", "A.", "no", "0")]
    assert processor.input_files(str(tmp_path), "dev") == [
        str(tmp_path / "dev.tsv"),
        str(tmp_path / "train.tsv"),
    ]


def test_generic_csv_with_quotes_no_header(tmp_path):
    _write(tmp_path, "train.csv", ['pos,"Great, really great."', 'neg,"Bad ""very"" bad."'])
    _write(tmp_path, "test.csv", ['?,"Fine, I guess."'])
    processor = ct.get_processor("generic", text_a_column="1", label_column="0", has_header=False)
    assert processor.get_labels(str(tmp_path)) == ["neg", "pos"]
    assert _fields(processor.get_train_examples(str(tmp_path))) == [
        ("Great, really great.", None, "pos", "0"),
        ('Bad "very" bad.', None, "neg", "1"),
    ]
    assert _fields(processor.get_test_examples(str(tmp_path))) == [
        ("Fine, I guess.", None, None, "0")
    ]


def test_generic_regression_tsv_no_header(tmp_path):
    _write(tmp_path, "train.tsv", ["0.5\tOne.\tTwo.", "4\tThree.\tFour."])
    processor = ct.get_processor(
        "generic",
        text_a_column=1,
        text_b_column=2,
        label_column=0,
        has_header=False,
        is_regression=True,
    )
    assert processor.get_labels(str(tmp_path)) == []
    assert [e.label for e in processor.get_train_examples(str(tmp_path))] == [0.5, 4.0]


def test_generic_errors(tmp_path):
    _write(tmp_path, "train.tsv", ["text\tlabel", "a\tx", "b\ty"])
    _write(tmp_path, "train.csv", ["text,label", "a,x"])
    processor = ct.get_processor("generic", text_a_column="text", label_column="label")
    with pytest.raises(ValueError, match="Both train.tsv and train.csv"):
        processor.get_train_examples(str(tmp_path))
    os.remove(tmp_path / "train.csv")
    processor = ct.get_processor("generic", text_a_column="sentence", label_column="label")
    with pytest.raises(
        ValueError,
        match=r"train.tsv:1: the header has no column "
        r"'sentence'",
    ):
        processor.get_train_examples(str(tmp_path))
    with pytest.raises(ValueError, match="needs text_a_column and label_column"):
        ct.get_processor("generic", text_a_column="text", label_column=None)
    with pytest.raises(ValueError, match="0-based positions"):
        ct.get_processor("generic", text_a_column="text", label_column=0, has_header=False)
    with pytest.raises(FileNotFoundError, match="dev.tsv or .*dev.csv"):
        ct.get_processor("generic", text_a_column="text", label_column="label").get_dev_examples(
            str(tmp_path)
        )


def test_generic_multi_label_reads_label_sets_and_records_them(tmp_path, tokenizer):
    header = "text\ttags"
    _write(tmp_path, "train.tsv", [header, "a b\tx; z", "c\t", "d\tz;y ;z"])
    _write(tmp_path, "dev.tsv", [header, "e\ty", "f\tw"])
    processor = ct.set_multi_label(
        ct.get_processor("generic", text_a_column="text", label_column="tags"), ";"
    )
    data_dir = str(tmp_path)
    assert processor.get_labels(data_dir) == ["x", "y", "z"]
    assert [e.label for e in processor.get_train_examples(data_dir)] == [
        ("x", "z"),
        (),
        ("z", "y"),
    ]
    with pytest.raises(ValueError, match=r"dev.tsv:3: label 'w' is not one of \['x', 'y', 'z'\]"):
        processor.get_dev_examples(data_dir)
    # Records: label_ids [L], multi-hot; the metadata says multi-label.
    output = str(tmp_path / "train.tf_record")
    metadata = cf.create_features(processor, data_dir, "train", output, tokenizer, 8)
    assert metadata["multi_label"] and metadata["label_separator"] == ";"
    batch = next(iter(cf.build_dataset(output, metadata, 3, is_training=False)))
    assert batch["label_ids"].numpy().tolist() == [[1, 0, 1], [0, 0, 0], [0, 1, 1]]
    assert cf.label_counts(output, metadata) == [1, 1, 2]
    # A single-label run of the same files keeps its records as they were.
    single = ct.get_processor("generic", text_a_column="text", label_column="tags")
    assert cf.multi_label_settings(single) == {}


def test_multi_label_column_empty_everywhere_is_named(tmp_path):
    _write(tmp_path, "train.tsv", ["text\ttags", "a\t", "b\t , "])
    processor = ct.set_multi_label(
        ct.get_processor("generic", text_a_column="text", label_column="tags"), ","
    )
    with pytest.raises(ValueError, match=r"train.tsv: column 'tags' holds no label on any row"):
        processor.get_labels(str(tmp_path))
    regression = ct.get_processor("sts-b")
    with pytest.raises(ValueError, match="--multi_label: task 'sts-b' is a regression"):
        ct.set_multi_label(regression, ",")


def test_original_style_reader_gives_label_sets(tmp_path):
    from data_prep.classifier.classifier_reader import DataProcessor, InputExample

    class TagReader(DataProcessor):  # As written for the original release.
        def get_train_examples(self, data_dir):
            return [
                InputExample("t-0", "one", None, "news|sport"),
                InputExample("t-1", "two", None, ["sport"]),
                InputExample("t-2", "three", None, ""),
            ]

        def get_labels(self):
            return ["news", "sport", "weather"]

    module = types.ModuleType("tag_reader_module")
    module.TagReader = TagReader
    import sys

    sys.modules["tag_reader_module"] = module
    try:
        processor = ct.set_multi_label(ct.get_processor("tag_reader_module:TagReader"), "|")
        labels = [e.label for e in processor.get_examples(str(tmp_path), "train")]
    finally:
        del sys.modules["tag_reader_module"]
    assert labels == [("news", "sport"), ("sport",), ()]

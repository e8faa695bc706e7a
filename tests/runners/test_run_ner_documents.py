"""run_ner.py with the document context (--document_context), end to end, on slices of
the bundled WikiGold (CoNLL documents, IO tags) with a tiny random BERT.

The training slice keeps CoNLL-2003's layout (-DOCSTART- before each document), the
prediction slice WikiGold's upstream one (the marker after each document). A run
trains, predicts and exports; later runs predict from its output_dir with the setting
it was trained with, with --nodocument_context, and on a file without markers. All of
them run one after the other in one process (one TensorFlow start-up).
"""

import json

import pytest
import tensorflow as tf

from data_prep.ner import conll, ner_features, ner_records, tag_schemes
from data_prep.text import tokenization
from tests.helpers.ner_helpers import REPO_ROOT, TINY_CONFIG, run_driver

VOCAB_FILE = str(REPO_ROOT / "sample_data" / "vocab" / "uncased_vocab.txt")
SEQ, STRIDE = 32, 8
pytestmark = pytest.mark.slow


def _documents(path, count):
    """The first `count` documents of a WikiGold file, as lists of CoNLL lines."""
    documents = []
    for block in path.read_text(encoding="utf-8").split("-DOCSTART- O\n")[1:]:
        documents.append(block.strip("\n") + "\n")
    return documents[:count]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, sample_data):
    """The training run (train, eval, predict, export) and the later prediction runs."""
    import keras

    from modeling import checkpoint_writers
    from modeling.config import BertConfig
    from modeling.encoder import BertEncoder

    root = tmp_path_factory.mktemp("ner_documents")
    config_file = root / "bert_config.json"
    config_file.write_text(json.dumps(TINY_CONFIG))
    keras.utils.set_random_seed(3)
    encoder = BertEncoder(BertConfig.from_json_file(str(config_file)))
    init_checkpoint = checkpoint_writers.write_original_checkpoint(
        str(root / "bert_model.ckpt"), encoder
    )
    wikigold = sample_data / "wikigold"
    train = "".join("-DOCSTART- O\n\n" + d + "\n" for d in _documents(wikigold / "train.txt", 6))
    (root / "train.txt").write_text(train, encoding="utf-8")
    # Upstream layout: the marker after each document.
    test = "".join(d + "\n-DOCSTART- O\n\n" for d in _documents(wikigold / "dev.txt", 3))
    (root / "test.txt").write_text(test, encoding="utf-8")
    (root / "nomarkers.txt").write_text(
        "\n".join(_documents(wikigold / "dev.txt", 1)), encoding="utf-8"
    )
    model = [
        f"--bert_config_file={config_file}",
        f"--vocab_file={VOCAB_FILE}",
        f"--max_seq_length={SEQ}",
        f"--doc_stride={STRIDE}",
        "--predict_batch_size=16",
        "--dtype=float32",  # The export tags as predicted (bfloat16 may flip a near tie).
    ]
    trained = root / "trained"
    runs = {
        "trained": [
            *model,
            f"--init_checkpoint={init_checkpoint}",
            f"--train_file={root / 'train.txt'}",
            f"--eval_file={root / 'test.txt'}",
            f"--predict_file={root / 'test.txt'}",
            "--do_train",
            "--do_eval",
            "--do_predict",
            "--document_context",
            "--num_train_epochs=0.2",
            "--train_batch_size=8",
            "--learning_rate=1e-4",
            f"--output_dir={trained}",
            f"--export_dir={root / 'export'}",
        ]
    }
    # Later runs, on the trained run's model.
    for name, flags in {
        "inherited": [f"--predict_file={root / 'test.txt'}"],
        "sentences": [f"--predict_file={root / 'test.txt'}", "--nodocument_context"],
        "nomarkers": [f"--predict_file={root / 'nomarkers.txt'}", "--document_context"],
    }.items():
        runs[name] = [
            *model,
            f"--init_checkpoint={trained}",
            "--do_predict",
            *flags,
            f"--output_dir={root / name}",
        ]
    errors, printed = run_driver(runs)
    assert errors == {name: None for name in runs}, (errors, printed)
    later_output = "".join(printed[name] for name in runs if name != "trained")
    return dict(root=root, trained=trained, output=printed["trained"], later_output=later_output)


def _first_fields(path):
    return [line.split()[:1] for line in path.read_text(encoding="utf-8").split("\n")]


def test_document_context_predictions_keep_the_file(runs):
    """Every word of every sentence tagged once, in order, the markers where the input
    had them (after each document); the model and run_config say how it was trained."""
    root, trained = runs["root"], runs["trained"]
    for name in ("test_predictions.txt", "eval_predictions.txt"):
        assert _first_fields(trained / name) == _first_fields(root / "test.txt"), name
    lines = (trained / "test_predictions.txt").read_text(encoding="utf-8").split("\n")
    gold = (root / "test.txt").read_text(encoding="utf-8").split("\n")
    assert [line.split()[:2] for line in lines] == [line.split()[:2] for line in gold]
    assert all(len(line.split()) == 3 for line in lines if line)
    assert json.loads((trained / "model_info.json").read_text())["document_context"] is True
    assert json.loads((trained / "run_config.json").read_text())["document_context"] is True
    # The training records: windows over whole documents, as the features of the file.
    metadata = ner_records.read_metadata(str(trained / "train.tf_record"))
    sentences = conll.read_conll(str(root / "train.txt"), tag_scheme="iob1")
    features = ner_features.convert_sentences_to_features(
        sentences,
        metadata.entries["labels"],
        tokenization.FullTokenizer(VOCAB_FILE, do_lower_case=True),
        SEQ,
        STRIDE,
        label_scheme="iob1",
        document_context=True,
    )
    assert metadata.entries["document_context"] is True
    assert metadata.num_records == len(features)
    assert sum(len(set(f.token_to_sentence) - {-1}) > 1 for f in features) > 10


def test_prediction_from_the_output_dir_keeps_the_trained_setting(runs):
    """--do_predict from the trained output_dir cuts as training did, unless told not to;
    a file without -DOCSTART- lines is tagged sentence by sentence, and the terminal
    says so."""
    root, trained = runs["root"], runs["trained"]
    predicted = (trained / "test_predictions.txt").read_text(encoding="utf-8")
    assert len({line.split()[2] for line in predicted.split("\n") if line}) > 1
    assert (root / "inherited" / "test_predictions.txt").read_text(encoding="utf-8") == predicted
    config = json.loads((root / "inherited" / "run_config.json").read_text())
    assert config["document_context"] is True
    sentences = (root / "sentences" / "test_predictions.txt").read_text(encoding="utf-8")
    assert _first_fields(root / "sentences" / "test_predictions.txt") == _first_fields(
        root / "test.txt"
    )
    assert sentences != predicted  # other windows, other logits
    assert (
        json.loads((root / "sentences" / "run_config.json").read_text())["document_context"]
        is False
    )
    assert (
        "nomarkers.txt has no -DOCSTART- lines: each of its sentences is tagged alone"
        in (runs["later_output"])
    )
    assert "has no -DOCSTART-" not in runs["output"]


def test_export_tags_a_document_as_trained(runs):
    """The export tags a text of a whole document (its sentences' words together) as
    --do_predict did with the document context."""
    import tensorflow_text  # noqa: F401  (registers the tokenizer ops)

    root, trained = runs["root"], runs["trained"]
    model = tf.saved_model.load(str(root / "export"))
    assert model.document_context.numpy()  # Clients can tell: send whole documents.
    sentences = conll.read_conll(str(root / "test.txt"), tag_scheme="iob1")
    documents = {}
    for sentence in sentences:
        documents.setdefault(sentence.document, []).append(sentence)
    texts = ["\n".join(" ".join(s.words) for s in doc) for doc in documents.values()]
    got = model.signatures["serving_default"](text=tf.constant(texts))
    tags = [[t.decode() for t in row if t] for row in got["tags"].numpy()]
    written = [
        line.split()[2]
        for line in (trained / "test_predictions.txt").read_text(encoding="utf-8").split("\n")
        if line and not line.startswith(conll.DOCSTART)
    ]
    expected, start = [], 0
    for doc in documents.values():
        count = sum(len(s.words) for s in doc)
        expected.append(written[start : start + count])
        start += count
    assert [tag_schemes.from_iob2(row, "iob1") for row in tags] == expected

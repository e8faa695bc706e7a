"""Helpers of test_create_pretraining_data.py, test_pretraining_instances.py and
test_pretraining_pipeline.py: the bundled corpus, the original release run as a
subprocess (with a whole-word-masking oracle grafted on), our runs, reading records.
Also of the run_pretraining.py tests: shards made in-process, several run_pretraining.py
command lines run in one process.
"""

import json
import os
import pathlib
import subprocess
import sys

import tensorflow as tf

from data_prep.pretraining import pretraining_instances as pti
from data_prep.pretraining import pretraining_records as ptr
from data_prep.pretraining import pretraining_data
from data_prep import records
from tests.conftest import run_results_driver

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
CORPUS_GLOB = str(REPO_ROOT / "sample_data" / "corpus" / "*.txt")
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")


# The original's masking with whole words. bert-tensorflow 1.0.4 predates the
# --do_whole_word_mask flag of the GitHub release; this oracle grafts that
# masking step (written here from its description: a "##" piece joins the word
# before it, a word that would exceed the budget is skipped, then the 80/10/10
# draws per piece) onto the released pipeline, which does everything else.
_WHOLE_WORD_MASKING = """
from absl import flags
from bert import create_pretraining_data as original


def whole_word_predictions(tokens, masked_lm_prob, max_predictions_per_seq,
                           vocab_words, rng):
    words = []
    for index, token in enumerate(tokens):
        if token == "[CLS]" or token == "[SEP]":
            continue
        if words and token.startswith("##"):
            words[-1].append(index)
        else:
            words.append([index])
    rng.shuffle(words)
    budget = min(max_predictions_per_seq,
                 max(1, int(round(len(tokens) * masked_lm_prob))))
    output = list(tokens)
    chosen = []
    for word in words:
        if len(chosen) >= budget:
            break
        if len(chosen) + len(word) > budget:
            continue
        for index in word:
            if rng.random() < 0.8:
                output[index] = "[MASK]"
            elif rng.random() < 0.5:
                output[index] = tokens[index]
            else:
                output[index] = vocab_words[rng.randint(0, len(vocab_words) - 1)]
            chosen.append(index)
    chosen.sort()
    return output, chosen, [tokens[index] for index in chosen]
"""

# Several runs of the original in one process, in order (TensorFlow starts once): a
# JSON list of [flag arguments, whole-word masking or not]. Each run seeds its own
# random.Random from --random_seed, as in a process of its own.
ORIGINALS_DRIVER = (
    _WHOLE_WORD_MASKING
    + """
import json, sys
plain = original.create_masked_lm_predictions
for args, whole_word in json.loads(sys.argv[1]):
    original.FLAGS.unparse_flags()
    original.FLAGS(["create_pretraining_data.py", *args])
    original.create_masked_lm_predictions = whole_word_predictions if whole_word else plain
    original.main(None)
"""
)


# ----------------------------------------------------------------------------
# Helpers.
# ----------------------------------------------------------------------------


def read_records(path):
    return [bytes(r) for r in tf.data.TFRecordDataset(str(path)).as_numpy_iterator()]


def canonical(records):
    return [ptr.canonical_record(r) for r in records]


def parse(record, max_seq_length=128, max_predictions=20):
    features = tf.io.parse_single_example(
        record, pretraining_data.feature_spec(max_seq_length, max_predictions)
    )
    return {name: value.numpy().tolist() for name, value in features.items()}


def flag_args(input_file, output_file, vocab_file, **extra):
    args = [
        "--input_file=%s" % input_file,
        "--output_file=%s" % output_file,
        "--vocab_file=%s" % vocab_file,
    ]
    return args + ["--%s=%s" % item for item in extra.items()]


def run_originals(runs, cwd):
    """Runs the original release once per (flag arguments, whole_word) of `runs`, one
    after the other in one new process."""
    process = subprocess.run(
        [sys.executable, "-c", ORIGINALS_DRIVER, json.dumps([[a, w] for a, w in runs])],
        cwd=cwd,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=900,
    )
    assert process.returncode == 0, process.stdout[-3000:]


def start_ours(args, as_script=False):
    if as_script:
        script = REPO_ROOT / "data_prep" / "create_pretraining_data.py"
        command = [sys.executable, str(script)]
    else:
        command = [sys.executable, "-m", "data_prep.create_pretraining_data"]
    return subprocess.Popen(
        command + args,
        cwd=REPO_ROOT,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finish(process):
    output, _ = process.communicate(timeout=600)
    assert process.returncode == 0, output[-3000:]
    return output


def options(input_files, output_files, vocab_file, **kwargs):
    instance = pti.InstanceOptions(
        max_seq_length=kwargs.pop("max_seq_length", 128),
        short_seq_prob=kwargs.pop("short_seq_prob", 0.1),
        next_sentence_prediction=kwargs.pop("next_sentence_prediction", True),
    )
    masking = pti.MaskingOptions(
        masked_lm_prob=kwargs.pop("masked_lm_prob", 0.15),
        max_predictions_per_seq=kwargs.pop("max_predictions_per_seq", 20),
        mask_token_prob=kwargs.pop("mask_token_prob", 0.8),
        random_token_prob=kwargs.pop("random_token_prob", 0.1),
        do_whole_word_mask=kwargs.pop("do_whole_word_mask", False),
    )
    return ptr.RunOptions(
        input_files=tuple(map(str, input_files)),
        output_files=tuple(map(str, output_files)),
        vocab_file=vocab_file,
        instance=instance,
        masking=masking,
        **kwargs,
    )


def make_shard(corpus_file, path, vocab_file, seq, preds, seed=12345, dupe_factor=1) -> str:
    """One shard (and its `.meta.json`) of `corpus_file`, made in this process as
    `python -m data_prep.create_pretraining_data` would make it; returns its path."""
    ptr.run(
        options(
            [corpus_file],
            [path],
            vocab_file,
            max_seq_length=seq,
            max_predictions_per_seq=preds,
            dupe_factor=dupe_factor,
            random_seed=seed,
        )
    )
    return str(path)


# Runs several run_pretraining.py command lines in one process, in order.
PRETRAINING_DRIVER = r"""
import json, sys
import run_pretraining
results = {}
for name, argv in json.loads(sys.argv[1]).items():
    run_pretraining.FLAGS.unparse_flags()
    run_pretraining.FLAGS(["run_pretraining.py", *argv])
    try:
        run_pretraining.main([])
        results[name] = ["no error", ""]
    except Exception as e:
        results[name] = [type(e).__name__, str(e)]
print("RESULTS" + json.dumps(results))
"""


def run_pretraining_in_one_process(runs: dict) -> dict:
    """Runs run_pretraining.main once per {name: argv}, in order, in one new process
    (TensorFlow starts once); {name: [error type or "no error", message]}."""
    return run_results_driver(PRETRAINING_DRIVER, runs, timeout=900)


def corpus_files():
    return records.expand_globs(CORPUS_GLOB, original_order=True)

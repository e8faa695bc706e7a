"""The tokenizers on every Unicode code point: ours against the original release, and
the in-graph tokenizer (data_prep.text.tf_tokenization, ICU underneath) against ours.

  python -m benchmarks.robustness.tokenizer_code_points
  python -m benchmarks.robustness.tokenizer_code_points --cases=uncased --checks=tf

Each of the 1,112,064 code points (surrogates excluded) is tokenized in one text of a
few contexts (tests/helpers/code_points.py), with the bundled uncased vocabulary
lower-casing (`uncased`) and not (`cased`). The suite checks a deterministic sample of
about 7,500 of them (both sides of every boundary between character kinds); this sweep
is for a new TensorFlow, tensorflow-text (ICU) or Python (its Unicode database), whose
tables can differ on a single code point inside a run. Prints per check the texts
compared, the mismatches and the seconds, then the first mismatches; exits 1 if any.
"""

from __future__ import annotations

import common.quiet_tensorflow  # noqa: F401  (first: TensorFlow's start-up lines hidden)

import argparse
import datetime
import os
import pathlib
import sys
import time

from modeling.kernels import cpu_model_name
from tests.helpers import code_points

REPO = pathlib.Path(__file__).resolve().parent.parent.parent
VOCAB = str(REPO / "sample_data" / "vocab" / "uncased_vocab.txt")
BATCH = 100_000


def original_release(vocab_file: str, do_lower_case: bool):
    from absl import flags
    from bert import tokenization as original  # Defines --preserve_unused_tokens.

    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()
    return original.FullTokenizer(vocab_file, do_lower_case=do_lower_case).tokenize


def mismatches_with_original(texts: list[str], do_lower_case: bool) -> list[str]:
    from data_prep.text import tokenization

    ours = tokenization.FullTokenizer(VOCAB, do_lower_case=do_lower_case).tokenize
    theirs = original_release(VOCAB, do_lower_case)
    return [text for text in texts if ours(text) != theirs(text)]


def mismatches_in_graph(texts: list[str], do_lower_case: bool) -> list[str]:
    import tensorflow as tf

    from data_prep.text import tf_tokenization, tokenization

    python = tokenization.FullTokenizer(VOCAB, do_lower_case=do_lower_case)
    in_graph = tf_tokenization.TFBertTokenizer(VOCAB, do_lower_case)
    found = []
    for start in range(0, len(texts), BATCH):
        batch = texts[start : start + BATCH]
        got = in_graph.tokenize(tf.constant(batch)).to_list()
        for text, ids in zip(batch, got):
            if ids != python.convert_tokens_to_ids(python.tokenize(text)):
                found.append(text)
    return found


CHECKS = {"original": mismatches_with_original, "tf": mismatches_in_graph}
CASES = {"uncased": True, "cased": False}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checks", default="original,tf", help="Of: original, tf.")
    parser.add_argument("--cases", default="uncased,cased", help="Of: uncased, cased.")
    parser.add_argument("--show", type=int, default=5, help="Mismatches shown per check.")
    args = parser.parse_args()
    checks = [name for name in args.checks.split(",") if name]
    cases = [name for name in args.cases.split(",") if name]
    unknown = sorted(set(checks) - set(CHECKS)) + sorted(set(cases) - set(CASES))
    if unknown:
        parser.error(f"unknown --checks or --cases: {unknown}")
    texts = code_points.texts(code_points.every_code_point())
    print(
        f"# {datetime.date.today()}, {cpu_model_name()}, {len(texts)} code points, "
        f"load {os.getloadavg()[0]:.1f}"
    )
    print(f"{'check':<10} {'case':<8} {'texts':>9} {'mismatches':>10} {'seconds':>8}")
    failed = []
    for check in checks:
        for case in cases:
            start = time.monotonic()
            found = CHECKS[check](texts, CASES[case])
            seconds = time.monotonic() - start
            print(f"{check:<10} {case:<8} {len(texts):>9} {len(found):>10} {seconds:>8.0f}")
            failed += [(check, case, text) for text in found[: args.show]]
    for check, case, text in failed:
        print(f"{check} {case}: {text!r}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

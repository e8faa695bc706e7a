"""The original release's own unit tests, run against this project (conformance).

`bert/tokenization_test.py` of the installed bert-tensorflow 1.0.4 is read from the
package and run unchanged against `data_prep.text.tokenization`, through a small adapter:
its `from bert import tokenization` gets a module that is ours plus the original's
private names (`_is_whitespace`, `_is_control`, `_is_punctuation`, aliases of ours)
and a `FullTokenizer` that passes the absl flag `--preserve_unused_tokens` (which the
original's tokenizer reads itself) to ours as its argument.

The original's other tests are not run: `modeling_test.py` builds the TF1 graph model
(`modeling.BertModel(config, is_training, input_ids, ...)` in a `tf.Session`), and
`optimization_test.py` applies `AdamWeightDecayOptimizer` to TF1 graph variables in a
session; this project keeps neither API (its encoder is a Keras model, its optimizer a
`tf.Module`). The one non-graph test, `test_config_to_json_string`, makes
`BertConfig(vocab_size=99, hidden_size=37)` with the default 12 heads, a config that
this project's BertConfig refuses (37 is not a multiple of 12; tests/modeling/test_config.py).
"""

import ast
import builtins
import importlib.util
import os
import types
import unittest

import pytest
from absl import flags

from data_prep.text import tokenization

# The original's private names -> ours.
_PRIVATE_NAMES = {
    "_is_whitespace": tokenization.is_whitespace,
    "_is_control": tokenization.is_control,
    "_is_punctuation": tokenization.is_punctuation,
}


def _original_file(name: str) -> str:
    """The path of a file of the installed bert-tensorflow package."""
    spec = importlib.util.find_spec("bert")
    assert spec is not None, "bert-tensorflow (requirements-test.txt) is not installed"
    return os.path.join(spec.submodule_search_locations[0], name)


def _test_names(file_name: str, class_name: str) -> list[str]:
    """The test methods of a class of an original test file, read without importing it."""
    with open(_original_file(file_name), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    (test_class,) = [
        node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == class_name
    ]
    return [
        node.name
        for node in test_class.body
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test")
    ]


def _tokenization_adapter() -> types.ModuleType:
    """`data_prep.tokenization` as the original test file sees its `tokenization`."""
    if "preserve_unused_tokens" not in flags.FLAGS:
        flags.DEFINE_bool("preserve_unused_tokens", False, "As the original tokenizer's.")
    adapter = types.ModuleType("tokenization")
    adapter.__dict__.update(
        (name, value) for name, value in vars(tokenization).items() if not name.startswith("__")
    )
    adapter.__dict__.update(_PRIVATE_NAMES)

    def full_tokenizer(vocab_file, do_lower_case=True):
        preserve = flags.FLAGS["preserve_unused_tokens"].value
        return tokenization.FullTokenizer(
            vocab_file, do_lower_case, preserve_unused_tokens=preserve
        )

    adapter.FullTokenizer = full_tokenizer
    return adapter


def _load_original_test(file_name: str, **bert_modules) -> dict:
    """Executes an original test file; its `from bert import X` gets `bert_modules[X]`."""

    def import_(name, globals=None, locals=None, fromlist=(), level=0):
        if name == "bert":
            return types.SimpleNamespace(**bert_modules)
        return builtins.__import__(name, globals, locals, fromlist, level)

    path = _original_file(file_name)
    with open(path, encoding="utf-8") as f:
        code = compile(f.read(), path, "exec")
    namespace = {
        "__name__": f"original_{file_name[:-3]}",
        "__builtins__": dict(vars(builtins), __import__=import_),
    }
    exec(code, namespace)
    return namespace


TOKENIZATION_TESTS = _test_names("tokenization_test.py", "TokenizationTest")


def test_every_original_tokenization_test_is_collected():
    assert len(TOKENIZATION_TESTS) == 10
    assert "test_full_tokenizer_preserve_unused" in TOKENIZATION_TESTS


@pytest.mark.parametrize("name", TOKENIZATION_TESTS)
def test_original_tokenization_test(name):
    namespace = _load_original_test("tokenization_test.py", tokenization=_tokenization_adapter())
    result = unittest.TestResult()
    namespace["TokenizationTest"](name).run(result)
    problems = [text for _, text in result.failures + result.errors]
    assert not problems, "\n".join(problems)
    assert result.testsRun == 1 and not result.skipped


def test_the_original_tokenization_api_is_ours():
    """Every public function and class of the original `tokenization.py` is in
    `data_prep.tokenization` (the import path users' code has, whatever the layout of
    data_prep), but `preserve_token`, which reads the flag: ours is an argument."""
    with open(_original_file("tokenization.py"), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    public = {
        node.name
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_")
    }
    assert len(public) > 10
    assert sorted(public - {"preserve_token"} - set(vars(tokenization))) == []

"""Run at the start-up of every Python process a test starts (conftest.py puts this
directory first on the PYTHONPATH those processes inherit).

A user's install has the packages of requirements.txt; the test environment adds the
Hugging Face and scoring oracles of requirements-test.txt. Hiding those from the
processes tests start keeps the tests honest (a runner that came to import one would
fail here, not on a user's machine) and keeps their start-up what a user's is: Keras
imports scikit-learn at start-up when it is installed, about 0.7 s of CPU in every
process. The original release (`bert`) and hypothesis stay visible: the tests run
scripts that use them.

Python's cyclic garbage collector runs less often in them (gc_settings.py).
"""

import sys

import gc_settings

gc_settings.collect_less_often()

TEST_ONLY = frozenset(
    {
        "scipy",
        "sentence_transformers",
        "seqeval",
        "sklearn",
        "torch",
        "torchmetrics",
        "transformers",
    }
)


class _HideTestOnlyPackages:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name.partition(".")[0] in TEST_ONLY:
            raise ModuleNotFoundError(
                f"No module named {name!r} (a test-only package, hidden from the "
                "processes tests start: see tests/helpers/runtime_only/sitecustomize.py)",
                name=name,
            )
        return None


sys.meta_path.insert(0, _HideTestOnlyPackages)

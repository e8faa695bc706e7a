"""What test_run_ner.py and test_feature_based.py share: how to run run_ner.py, the
tiny BERT's config.
"""

import os
import pathlib

from tests.conftest import tiny_config

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
RUN_NER = str(REPO_ROOT / "run_ner.py")
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(REPO_ROOT))

TINY_CONFIG = tiny_config()

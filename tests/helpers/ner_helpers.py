"""What test_run_ner.py, test_run_ner_documents.py and test_feature_based.py share: how
to run run_ner.py (as a command, or several runs in one process, `DRIVER`), the tiny
BERT's config.
"""

import json
import os
import pathlib
import subprocess
import sys
import textwrap

from tests.conftest import tiny_config
from tests.helpers import repo_pythonpath

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
RUN_NER = str(REPO_ROOT / "run_ner.py")
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=repo_pythonpath())

TINY_CONFIG = tiny_config()

# Runs run_ner.main once per {name: argv} of its argument, one after the other in one
# process (one TensorFlow start-up). Before each run it prints "RUN <name>" on stderr, so
# that each run's lines (stdout and stderr in one pipe) follow its own marker; at the end,
# name -> "ErrorType: message" (None if no error) as JSON on its last line.
DRIVER = textwrap.dedent("""
    import json, sys
    import run_ner
    results = {}
    for name, argv in json.loads(sys.argv[1]).items():
        sys.stdout.flush()
        print("RUN " + name, file=sys.stderr, flush=True)
        run_ner.FLAGS.unparse_flags()
        run_ner.FLAGS(["run_ner.py", *argv])
        try:
            run_ner.main([])
            results[name] = None
        except Exception as error:
            results[name] = f"{type(error).__name__}: {error}"
    sys.stderr.flush()
    print(json.dumps(results), flush=True)
""")


def start_driver(runs: dict) -> subprocess.Popen:
    """Starts `DRIVER` on the runs {name: argv}; its output (stdout and stderr) in one
    pipe, for `driver_results`."""
    return subprocess.Popen(
        [
            sys.executable,
            "-c",
            DRIVER,
            json.dumps({n: [str(a) for a in v] for n, v in runs.items()}),
        ],
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def driver_results(output: str) -> tuple[dict, dict]:
    """`DRIVER`'s output -> (name -> the error of that run or None, name -> the lines
    that run printed)."""
    lines = output.strip().splitlines()
    errors = json.loads(lines[-1])
    printed, current = {}, None
    for line in lines[:-1]:
        if line.startswith("RUN ") and line[4:] in errors:
            current = line[4:]
            printed[current] = ""
        elif current is not None:
            printed[current] += line + "\n"
    return errors, printed


def run_driver(runs: dict, timeout: int = 600) -> tuple[dict, dict]:
    """Runs `DRIVER` on the runs {name: argv}; `driver_results` of its output."""
    process = start_driver(runs)
    output = process.communicate(timeout=timeout)[0]
    assert process.returncode == 0, output[-5000:]
    return driver_results(output)

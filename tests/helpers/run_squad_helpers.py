"""What test_run_squad.py and test_run_squad_slow.py share: running run_squad.py
(several runs in one subprocess, `_DRIVER`), its flags, the tiny config, JSON files.
"""

import json
import pathlib
import shutil
import textwrap

from tests.conftest import run_results_driver, write_tiny_config

REPO = pathlib.Path(__file__).resolve().parent.parent.parent

# Short windows, so that the two paragraphs make many overlapping windows.
SEQ, QUERY, STRIDE = 96, 24, 40
TRAIN_BATCH = 16

# Before the run of a name in `stopped` ({name: [done, out, step]}, the second argument),
# `copy_as_stopped(done, out, step)` makes its output_dir.
_DRIVER = textwrap.dedent("""
    import json, sys, traceback
    from absl import logging
    import run_squad
    from tests.helpers.run_squad_helpers import copy_as_stopped
    stopped = json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
    results = {}
    for name, argv in json.loads(sys.argv[1]).items():
        if name in stopped:
            copy_as_stopped(*stopped[name])
        run_squad.FLAGS.unparse_flags()
        run_squad.FLAGS(["run_squad.py", *argv])
        logging.use_absl_handler()  # As app.run does: the log file in output_dir.
        logging.set_verbosity(logging.INFO)
        try:
            run_squad.main([])
            results[name] = ["no error", ""]
        except Exception as e:
            traceback.print_exc()
            results[name] = [type(e).__name__, str(e)]
    print("RESULTS" + json.dumps(results))
""")


def run_driver(runs: dict, stopped: dict | None = None) -> dict:
    """Runs run_squad.main once per {name: argv}, in order; {name: [error type, message]}.
    `stopped` {name: (done, out, step)}: before that run, `copy_as_stopped` (so a run
    can resume from the output of an earlier run of the same process)."""
    stopped = {name: [str(a) for a in args] for name, args in (stopped or {}).items()}
    return run_results_driver(_DRIVER, runs, json.dumps(stopped), timeout=900)


def copy_as_stopped(done, out, step) -> None:
    """Copies the output_dir `done` of a finished run to `out` as a run stopped after
    checkpoint `step` left it: the later checkpoints and the result files gone, the
    training records kept (file times too)."""
    out, step = pathlib.Path(out), int(step)
    shutil.copytree(done, out)
    for path in out.iterdir():
        name = path.name.split(".")[0]
        if (path.name.startswith("ckpt-") and int(name.removeprefix("ckpt-")) > step) or (
            path.suffix in (".json", ".txt") and not path.name.startswith("train.tf_record")
        ):
            path.unlink()
    (out / "checkpoint").write_text(
        f'model_checkpoint_path: "ckpt-{step}"\nall_model_checkpoint_paths: "ckpt-{step}"\n'
    )


def tiny_config(path: pathlib.Path, dropout: float = 0.1) -> str:
    return write_tiny_config(path, dropout, max_position_embeddings=128)


def read_json(path):
    return json.loads(pathlib.Path(path).read_text(encoding="utf-8"))


def write_json(path: pathlib.Path, value) -> str:
    path.write_text(json.dumps(value), encoding="utf-8")
    return str(path)


def question_ids(squad_file) -> list:
    return [
        qa["id"]
        for article in read_json(squad_file)["data"]
        for paragraph in article["paragraphs"]
        for qa in paragraph["qas"]
    ]


def squad_flags(root, output_dir, version_2=True, *extra):
    data = root / ("v2.json" if version_2 else "v1.json")
    return [
        f"--bert_config_file={root / 'bert_config.json'}",
        f"--vocab_file={REPO / 'sample_data' / 'vocab' / 'uncased_vocab.txt'}",
        f"--train_file={data}",
        f"--predict_file={data}",
        "--do_train",
        "--do_predict",
        "--do_eval",
        *(["--version_2_with_negative"] if version_2 else []),
        f"--max_seq_length={SEQ}",
        f"--max_query_length={QUERY}",
        f"--doc_stride={STRIDE}",
        f"--train_batch_size={TRAIN_BATCH}",
        "--predict_batch_size=7",
        "--num_train_epochs=2",
        "--learning_rate=1e-3",
        "--steps_per_loop=2",
        "--save_checkpoints_steps=2",
        "--deterministic",
        "--seed=7",
        f"--output_dir={output_dir}",
        *extra,
    ]

"""The paper's fine-tuning procedure (hparam_search.py) on run_classifier.py: a grid of
learning rates times random restarts on real MRPC sentence pairs, the best trial on
dev as output_dir's model, the report's statistics, a kill during the third trial and
the same command again; and the grid flags' checks. run_ner.py and run_squad.py:
test_search_tasks.py.
"""

import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from absl import app, flags

import hparam_search
import runner_flags
from tests.conftest import REPO_ROOT, read_results, run_results_driver, write_tiny_config
from tests.helpers import repo_pythonpath
from tests.helpers.run_classifier_helpers import _copy_head, _read_tsv

ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=repo_pythonpath())
RUN_CLASSIFIER = str(REPO_ROOT / "run_classifier.py")
TRIAL_NAMES = ["lr0.001_bs8_ep2_r1", "lr0.001_bs8_ep2_r2", "lr0.0001_bs8_ep2_r1"]
TRIAL_NAMES.append("lr0.0001_bs8_ep2_r2")


def _command(inputs, output_dir, *extra):
    return [
        sys.executable,
        RUN_CLASSIFIER,
        "--task_name=MRPC",
        f"--data_dir={inputs['mrpc']}",
        f"--bert_config_file={inputs['config']}",
        f"--vocab_file={inputs['vocab']}",
        f"--output_dir={output_dir}",
        "--do_train",
        "--do_eval",
        "--max_seq_length=32",
        "--train_batch_size=8",
        "--num_train_epochs=2",
        "--save_checkpoints_steps=2",
        "--steps_per_loop=1",
        "--deterministic",
        "--dtype=float32",  # The export answers as predicted to 1e-5 (bfloat16: not).
        *extra,
    ]


def _search_command(inputs, output_dir, *extra):
    return _command(
        inputs, output_dir, "--learning_rate=1e-3,1e-4", "--restarts=2", "--do_predict", *extra
    )


# A runner's main (module sys.argv[2], or <module> of a name "<module>:<name>") once per
# {name: [stderr file, *argv]}, one run after the other in one process (one TensorFlow
# start-up), each run's terminal output in its own file; in an argument, "{chosen}" is
# the folder of the trial chosen by the search in sys.argv[3].
_DRIVER = textwrap.dedent("""
    import json, os, pathlib, sys, traceback
    from tests.helpers.runner_switch import switch_runner
    results, runner = {}, None
    for key, (stderr_file, *argv) in json.loads(sys.argv[1]).items():
        module, _, name = key.rpartition(":")
        runner = switch_runner(runner, module or sys.argv[2])
        if any("{chosen}" in a for a in argv):
            search = pathlib.Path(sys.argv[3])
            best = json.loads((search / "search_results.json").read_text())["best"]
            argv = [a.replace("{chosen}", str(search / best["output_dir"])) for a in argv]
        sys.stderr.flush()
        saved = os.dup(2)
        with open(stderr_file, "w") as stderr:
            os.dup2(stderr.fileno(), 2)
            try:
                runner.FLAGS.unparse_flags()
                runner.FLAGS([runner.__name__ + ".py", *argv])
                runner.main([])
                results[name] = ["no error", ""]
            except Exception as e:
                traceback.print_exc()
                results[name] = [type(e).__name__, str(e)]
            finally:
                sys.stderr.flush()
                os.dup2(saved, 2)
                os.close(saved)
    print("RESULTS" + json.dumps(results))
""")


def run_in_one_process(runner: str, runs: dict, work, *search_dir) -> dict:
    """Runs `runner`.main once per {name: argv} in one new process (another runner's for
    a name "<module>:<name>", its runs together); {name: [error type or "no error",
    message]}. A run's terminal output is in work/<name>.stderr."""
    runs = {key: [work / f"{key.rpartition(':')[2]}.stderr", *argv] for key, argv in runs.items()}
    return run_results_driver(_DRIVER, runs, runner, *search_dir, timeout=900)


def _run(command, timeout=900):
    process = subprocess.run(
        command, capture_output=True, text=True, cwd=REPO_ROOT, env=ENV, timeout=timeout
    )
    assert process.returncode == 0, process.stderr[-5000:]
    return process


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, mrpc_dir, vocab_file):
    """The MRPC slice with half its training rows (8 steps a trial: the trials'
    checkpoints, evaluations and choice need no more), the tiny config."""
    root = tmp_path_factory.mktemp("search")
    mrpc = root / "MRPC"
    mrpc.mkdir()
    _copy_head(mrpc_dir / "train.tsv", mrpc / "train.tsv", 32)
    for name in ("dev.tsv", "test.tsv"):
        shutil.copy(mrpc_dir / name, mrpc / name)
    return {
        "root": root,
        "mrpc": mrpc,
        "vocab": vocab_file,
        "config": write_tiny_config(root / "bert_config.json"),
    }


@pytest.fixture(scope="module")
def search(inputs):
    """The search run to its end (with --do_predict and --export_dir) and, in the same
    process (one TensorFlow start-up), the runs that
    test_restart_one_is_the_single_run_and_output_dir_predicts_as_the_chosen_trial reads:
    before the search "single", the single run of the third trial's values (the search
    then builds its trials after another run, as it always builds its later trials);
    after it "later", the chosen trial as --init_checkpoint, evaluating and predicting,
    and "again", output_dir itself as --init_checkpoint, predicting. Returns
    (output_dir, the search's terminal output, {run name: [error type or "no error",
    message]})."""
    root = inputs["root"]
    output_dir = root / "search"
    single, later, again = (root / name for name in ("single", "later", "again"))
    predict = [
        "--task_name=MRPC",
        f"--data_dir={inputs['mrpc']}",
        "--max_seq_length=32",
        "--dtype=float32",  # As the search.
    ]
    runs = {
        "single": _command(inputs, single, "--learning_rate=1e-4", "--seed=12345")[2:],
        "search": _search_command(inputs, output_dir, f"--export_dir={output_dir}_export")[2:],
        "later": [
            *predict,
            "--init_checkpoint={chosen}",  # The chosen trial's folder.
            f"--output_dir={later}",
            "--do_predict",
            "--do_eval",
        ],
        # output_dir as --init_checkpoint: the same model.
        "again": [
            *predict,
            f"--init_checkpoint={output_dir}",
            f"--output_dir={again}",
            "--do_predict",
        ],
    }
    errors = run_in_one_process("run_classifier", runs, root, output_dir)
    return output_dir, (root / "search.stderr").read_text(), errors


def _without_times(results: dict) -> dict:
    return dict(
        results, trials=[{k: v for k, v in t.items() if k != "wall_s"} for t in results["trials"]]
    )


@pytest.mark.slow
def test_search_of_two_rates_and_two_restarts(search):
    output_dir, terminal, errors = search
    assert errors["search"] == ["no error", ""], errors
    results = json.loads((output_dir / "search_results.json").read_text())
    assert results["metric"] == "mean of eval_accuracy and eval_f1"
    assert results["select"] == "best_trial"
    trials = results["trials"]
    assert [t["output_dir"] for t in trials] == [f"trials/{name}" for name in TRIAL_NAMES]
    assert [(t["learning_rate"], t["restart"], t["seed"]) for t in trials] == [
        (1e-3, 1, 12345),
        (1e-3, 2, 12346),
        (1e-4, 1, 12345),
        (1e-4, 2, 12346),
    ]
    for t in trials:
        assert (t["train_batch_size"], t["num_train_epochs"]) == (8, 2.0)
        assert t["wall_s"] > 0
        # The score is the trial's own evaluation of its best epoch by the task's score.
        trial_results = read_results(output_dir / t["output_dir"] / "eval_results.txt")
        assert t["score"] == pytest.approx(
            (trial_results["eval_accuracy"] + trial_results["eval_f1"]) / 2, abs=1e-6
        )
        history = json.loads((output_dir / t["output_dir"] / "eval_history.json").read_text())
        assert t["score"] == max(h["score"] for h in history)
    for config, rate in zip(results["configurations"], (1e-3, 1e-4)):
        scores = [t["score"] for t in trials if t["learning_rate"] == rate]
        assert config["learning_rate"] == rate and config["n"] == 2
        assert config["mean"] == pytest.approx(statistics.fmean(scores), abs=1e-12)
        assert config["std"] == pytest.approx(statistics.stdev(scores), abs=1e-12)
        assert (config["min"], config["max"]) == (min(scores), max(scores))
    best = max(trials, key=lambda t: t["score"])  # The first of equal scores.
    assert results["best"]["output_dir"] == best["output_dir"]
    assert results["best"]["score"] == best["score"]
    chosen = output_dir / best["output_dir"]
    assert (output_dir / "eval_results.txt").read_bytes() == (
        chosen / "eval_results.txt"
    ).read_bytes()
    assert sorted(os.listdir(output_dir / "best")) == sorted(os.listdir(chosen / "best"))
    markdown = (output_dir / "search_results.md").read_text()
    assert f"`{best['output_dir']}`" in markdown and "| mean | std |" in markdown
    # One line per finished trial: which of how many, its values, score, best so far.
    for number, t in enumerate(trials, 1):
        assert (
            f"Trial {number}/4: learning_rate={t['learning_rate']:g} train_batch_size=8 "
            f"num_train_epochs=2 restart={t['restart']} (seed {t['seed']}): score "
            f"{t['score']:.4f}"
        ) in terminal
    assert "(best so far" in terminal


@pytest.mark.slow
def test_restart_one_is_the_single_run_and_output_dir_predicts_as_the_chosen_trial(search, inputs):
    """A trial is the runner's single run with its values and seed (same weights,
    same results); output_dir's predictions and export are those of the chosen trial,
    and output_dir works as --init_checkpoint."""
    output_dir, _, errors = search
    single, later, again = (inputs["root"] / name for name in ("single", "later", "again"))
    assert errors == {name: ["no error", ""] for name in ("single", "search", "later", "again")}, (
        errors
    )
    trial = output_dir / "trials" / TRIAL_NAMES[2]
    for name in ("eval_results.txt", "eval_history.json", "train_summary.json"):
        assert (single / name).read_bytes() == (trial / name).read_bytes(), name
    assert (later / "test_results.tsv").read_bytes() == (
        output_dir / "test_results.tsv"
    ).read_bytes()
    got = read_results(later / "eval_results.txt")
    want = read_results(output_dir / "eval_results.txt")
    assert got.pop("global_step") == 0 and want.pop("global_step") > 0  # Not trained here.
    assert got == want
    assert (again / "test_results.tsv").read_bytes() == (
        output_dir / "test_results.tsv"
    ).read_bytes()

    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the tokenizer ops)

    export = tf.saved_model.load(f"{output_dir}_export")
    rows = (inputs["mrpc"] / "test.tsv").read_text(encoding="utf-8-sig").splitlines()[1:]
    pairs = [row.split("\t")[3:5] for row in rows]
    outputs = export.signatures["serving_default"](
        text_a=tf.constant([a for a, _ in pairs]), text_b=tf.constant([b for _, b in pairs])
    )
    want = _read_tsv(output_dir / "test_results.tsv")
    np.testing.assert_allclose(outputs["probabilities"].numpy(), want, atol=1e-5)


@pytest.mark.slow
def test_killed_in_the_third_trial_the_same_command_finishes_the_same(search, inputs):
    reference = search[0]
    output_dir = inputs["root"] / "killed"
    command = _search_command(inputs, output_dir)
    third = output_dir / "trials" / TRIAL_NAMES[2]
    with open(inputs["root"] / "killed.log", "w") as log:
        process = subprocess.Popen(
            command,
            cwd=REPO_ROOT,
            env=ENV,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 900
        while not (third / "checkpoint").exists():  # The third trial has saved a step.
            assert process.poll() is None, (inputs["root"] / "killed.log").read_text()[-3000:]
            assert time.monotonic() < deadline
            time.sleep(0.2)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    assert not (third / hparam_search.TRIAL_FILE).exists()
    assert not (output_dir / "search_results.json").exists()
    finished = {
        path: path.stat().st_mtime_ns
        for name in TRIAL_NAMES[:2]
        for path in (output_dir / "trials" / name).rglob("*")
    }
    assert any(path.name == hparam_search.TRIAL_FILE for path in finished)
    terminal = _run(command).stderr
    for number in (1, 2, 3, 4):
        lines = [line for line in terminal.splitlines() if line.startswith(f"Trial {number}/4:")]
        if number <= 2:  # Only the line of its result, read from its folder.
            assert len(lines) == 1 and "(finished earlier)" in lines[0], lines
        else:  # Its start and its result.
            assert len(lines) == 2 and "(finished earlier)" not in lines[1], lines
    # The first two trials were not trained again: none of their files changed.
    assert {path: path.stat().st_mtime_ns for path in finished} == finished
    log = (output_dir / "run_classifier.INFO").read_text()
    assert f"Resumed from {third}/ckpt-" in log
    ours = json.loads((output_dir / "search_results.json").read_text())
    theirs = json.loads((reference / "search_results.json").read_text())
    assert _without_times(ours) == _without_times(theirs)
    for name in ("eval_results.txt", "test_results.tsv"):
        assert (output_dir / name).read_bytes() == (reference / name).read_bytes(), name


# ---------------------------------------------------------------------------------
# The flags.


def _flag_values(*argv):
    values = flags.FlagValues()
    runner_flags.define_common_flags(max_seq_length=128, flag_values=values)
    runner_flags.define_training_flags(values, value_lists=True)
    runner_flags.define_finetuning_flags(values)
    values(["prog", *argv])
    return values


def test_one_value_each_is_the_single_run_with_its_types():
    values = _flag_values("--learning_rate=2e-5", "--train_batch_size=16", "--output_dir=o")
    assert values.learning_rate == 2e-5 and isinstance(values.learning_rate, float)
    assert values.train_batch_size == 16 and isinstance(values.train_batch_size, int)
    assert values.num_train_epochs == 3.0
    grid = hparam_search.Grid.from_flags(values)
    assert not grid.is_search
    assert hparam_search.check(values) == grid


def test_the_trials_of_a_grid():
    values = _flag_values(
        "--learning_rate=5e-5,3e-5",
        "--train_batch_size=16,32",
        "--num_train_epochs=2,3.5",
        "--restarts=2",
        "--seed=7",
        "--output_dir=o",
    )
    assert values.learning_rate == (5e-5, 3e-5)
    trials = hparam_search.Grid.from_flags(values).trials()
    assert len(trials) == 16
    assert trials[0].name == "lr5e-05_bs16_ep2_r1" and trials[0].seed == 7
    assert trials[1].name == "lr5e-05_bs16_ep2_r2" and trials[1].seed == 8
    assert trials[-1].name == "lr3e-05_bs32_ep3.5_r2"
    assert {t.seed for t in trials if t.restart == 1} == {7}


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--learning_rate=5e-5,x"], "--learning_rate=5e-5,x: 'x' is not a number"),
        (["--learning_rate=5e-5,,3e-5"], "an empty value in the list"),
        (["--learning_rate=-1e-5"], "-1e-5 is not non-negative"),
        (["--train_batch_size=16,0"], "--train_batch_size=16,0: 0 is not positive"),
        (["--train_batch_size=16.5"], "'16.5' is not an integer"),
        (["--num_train_epochs=2,2"], "a value given twice"),
        (["--restarts=0"], "--restarts"),
    ],
)
def test_malformed_values_name_the_flag(argv, message):
    with pytest.raises(flags.IllegalFlagValueError, match=message.replace("(", r"\(")):
        _flag_values(*argv)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--restarts=3"], "--restarts=3 is a search: it needs --do_train"),
        (["--learning_rate=5e-5,3e-5", "--do_train"], "it needs --do_eval"),
        (
            ["--num_train_epochs=2,3", "--do_train", "--do_eval", "--noevaluate_every_epoch"],
            "it needs --evaluate_every_epoch",
        ),
    ],
)
def test_a_search_needs_training_and_evaluation(argv, message, tmp_path):
    values = _flag_values(*argv, f"--output_dir={tmp_path}")
    with pytest.raises(app.UsageError, match=message):
        hparam_search.check(values)


def test_another_grid_in_the_same_output_dir_is_refused(tmp_path):
    search = ["--learning_rate=5e-5,3e-5", "--do_train", "--do_eval", f"--output_dir={tmp_path}"]
    grid = hparam_search.check(_flag_values(*search))
    (tmp_path / hparam_search.SEARCH_FILE).write_text(json.dumps(grid.record()))
    assert hparam_search.check(_flag_values(*search)) == grid  # The same command resumes.
    with pytest.raises(Exception, match="holds a search of another grid"):
        hparam_search.check(_flag_values(*search, "--restarts=2"))
    with pytest.raises(Exception, match="this command trains one model"):
        hparam_search.check(_flag_values("--do_train", f"--output_dir={tmp_path}"))
    single = tmp_path / "single"
    single.mkdir()
    (single / "checkpoint").write_text('model_checkpoint_path: "ckpt-2"\n')
    with pytest.raises(Exception, match="holds a single run's training"):
        hparam_search.check(_flag_values(*search[:-1], f"--output_dir={single}"))


def test_bad_grid_on_the_command_line_is_one_line_and_exit_2(tmp_path):
    process = subprocess.run(
        [
            sys.executable,
            RUN_CLASSIFIER,
            "--task_name=MRPC",
            f"--data_dir={tmp_path}",
            f"--output_dir={tmp_path / 'out'}",
            "--do_eval",
            "--learning_rate=5e-5,4e-5",
        ],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env=ENV,
        timeout=300,
    )
    assert process.returncode == 2
    errors = [line for line in process.stderr.splitlines() if "py: error:" in line]
    assert errors == [
        (
            "run_classifier.py: error: --learning_rate=5e-05,4e-05 is a search: it needs "
            "--do_train (it trains a model per trial)"
        )
    ]
    assert not (tmp_path / "out").exists()


def test_selection_and_statistics():
    def trial(number, lr, restart, score):
        return dict(
            trial=number,
            learning_rate=lr,
            train_batch_size=32,
            num_train_epochs=3.0,
            restart=restart,
            score=score,
            output_dir=f"t{number}",
        )

    trials = [
        trial(1, 5e-5, 1, 0.70),
        trial(2, 5e-5, 2, 0.90),  # The best trial, of the worse configuration.
        trial(3, 3e-5, 1, 0.85),
        trial(4, 3e-5, 2, 0.86),
    ]
    assert hparam_search.select(trials, "best_trial")["trial"] == 2
    assert hparam_search.select(trials, "best_mean")["trial"] == 4
    results = hparam_search.report("m", "best_mean", trials, trials[3])
    first, second = results["configurations"]
    assert first["mean"] == pytest.approx(0.80) and second["mean"] == pytest.approx(0.855)
    assert first["std"] == pytest.approx(statistics.stdev([0.70, 0.90]))
    assert (second["min"], second["max"], second["n"]) == (0.85, 0.86, 2)
    assert results["best"] == {"output_dir": "t4", "score": 0.86, "trial": 4}
    one = hparam_search.summarize([0.5])
    assert one == {"mean": 0.5, "std": None, "min": 0.5, "max": 0.5, "n": 1}

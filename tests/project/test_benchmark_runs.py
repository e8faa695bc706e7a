"""The comparison benchmarks (benchmarks/compare/) run our runners in subprocesses: a
runner that fails has said why in one line, and the benchmark then ends with one line of
its own that names the runner and its exit code, without a traceback, recording nothing."""

import os
import sys

import numpy as np
import pytest

from benchmarks import stamped_runs
from benchmarks.compare import finetune_compare


def test_a_failing_runner_ends_the_benchmark_with_one_line(tmp_path, capfd):
    runner = tmp_path / "run_ner.py"
    runner.write_text(
        "import sys\nsys.exit('run_ner.py: error: train file x/train.txt does not exist')\n"
    )
    done = tmp_path / "done"
    with pytest.raises(SystemExit) as ended:
        finetune_compare.run_runner([sys.executable, str(runner)], str(done))
    assert str(ended.value.code) == (
        "run_ner.py ended with exit code 1 (its message is above); "
        "this run's result was not recorded."
    )
    assert "train file x/train.txt does not exist" in capfd.readouterr().err
    assert not done.exists()


def test_mrpc_as_a_regression_is_read_by_the_generic_task_and_scored_by_correlations(
    tmp_path, monkeypatch
):
    from benchmarks.compare import compare_mrpc_hf
    from data_prep.classifier.classifier_generic import GenericProcessor
    from evaluation import glue_metrics

    args = compare_mrpc_hf.parse_args(["--output_dir", str(tmp_path), "--regression"])
    folder = compare_mrpc_hf.regression_pairs(args)
    processor = GenericProcessor(
        text_a_column="sentence1",
        text_b_column="sentence2",
        label_column="score",
        is_regression=True,
    )
    dev = processor.get_dev_examples(folder)
    a, b, labels = compare_mrpc_hf.read_mrpc(os.path.join(args.data_dir, "dev.tsv"))
    assert len(dev) == len(labels) == 408
    assert [(e.text_a, e.text_b, e.label) for e in dev[:3]] == [
        (a[i], b[i], float(labels[i])) for i in range(3)
    ]
    # Hand-computed: ranks of the predictions 1, 4, 2, 3; of the tied labels 1.5, 3.5.
    predictions, gold = [0.1, 0.9, 0.4, 0.8], [0.0, 1.0, 0.0, 1.0]
    scores = compare_mrpc_hf.regression_scores(predictions, gold)
    assert scores["spearman"] == pytest.approx(100 * 2 / 5**0.5)
    assert scores["loss"] == pytest.approx((0.01 + 0.01 + 0.16 + 0.04) / 4)
    assert scores["pearson"] / 100 == pytest.approx(
        glue_metrics.pearson_correlation(predictions, gold)
    )
    assert scores["spearman"] / 100 == pytest.approx(
        glue_metrics.spearman_correlation(predictions, gold)
    )
    # keras_hub's `predict` gives one output per example, [n, 1]: the same scores.
    column = np.array(predictions)[:, None]
    assert compare_mrpc_hf.keras_hub_scores(args, column, gold) == scores
    # The table's first line names the recipe each system ran (the regression gap with
    # Hugging Face moves with its schedule and head).
    swapped = compare_mrpc_hf.parse_args(
        ["--output_dir", str(tmp_path), "--regression", "--hf_schedule=original"]
    )
    line = compare_mrpc_hf.recipe_line(swapped, " as a regression of the 0/1 label")
    assert line.startswith("MRPC dev as a regression of the 0/1 label, 3 epochs")
    assert "head normal, schedule original, padding max_length." in line
    # keras_hub runs the regression too (here as if this Python could import it).
    monkeypatch.setattr(finetune_compare, "missing_packages", lambda chosen: {})
    with_keras_hub = compare_mrpc_hf.parse_args(
        ["--output_dir", str(tmp_path), "--regression", "--systems=ours,keras_hub"]
    )
    assert with_keras_hub.regression and with_keras_hub.systems == "ours,keras_hub"
    with pytest.raises(SystemExit):
        compare_mrpc_hf.parse_args(["--output_dir", str(tmp_path), f"--data_dir={tmp_path}"])


def test_a_peer_this_python_cannot_import_is_said_before_any_run(tmp_path, monkeypatch, capsys):
    from benchmarks.compare import compare_mrpc_hf, finetune_compare

    present = finetune_compare.importlib.util.find_spec
    monkeypatch.setattr(
        finetune_compare.importlib.util,
        "find_spec",
        lambda name: None if name == "keras_hub" else present(name),
    )
    assert finetune_compare.missing_packages(["ours", "hf"]) == {}
    with pytest.raises(SystemExit) as exit:
        compare_mrpc_hf.parse_args(["--output_dir", str(tmp_path), "--systems=ours,keras_hub"])
    assert exit.value.code == 2
    (line,) = [x for x in capsys.readouterr().err.splitlines() if "error:" in x]
    assert "--systems=ours,keras_hub: keras_hub needs keras_hub" in line, line
    assert "benchmarks/setup_bench_env.sh" in line and ".venv-bench/bin/python" in line, line
    assert not any(tmp_path.iterdir())  # nothing run, nothing written


def test_a_runner_run_records_its_time_to_first_step_and_peak_memory(tmp_path, capfd):
    # Stopped by SIGTERM (exit 143) after two steps and resumed: the first step is timed
    # on the first attempt (0.5 s of start-up before it), the peak is the larger of the
    # two attempts' (the first holds 200 MB).
    runner = tmp_path / "run_fake.py"
    runner.write_text(
        "import os, sys, time\n"
        "done, stopped = sys.argv[1], sys.argv[1] + '.stopped'\n"
        "resumed = os.path.exists(stopped)\n"
        "ballast = bytearray(b'1') * ((1 if resumed else 200) << 20)\n"
        "print('building the model', flush=True)\n"
        "time.sleep(0 if resumed else 0.5)\n"
        "for step in (3, 4) if resumed else (1, 2):\n"
        "    time.sleep(0.1)\n"
        "    print(f'I1129 12:00:00.000000 1 training_summary.py:151] step {step}/4  '\n"
        "          'loss 0.5  lr 5e-05', file=sys.stderr, flush=True)\n"
        "if not resumed:\n"
        "    open(stopped, 'w').close()\n"
        "    sys.exit(143)\n"
        "open(done, 'w').close()\n"
    )
    done = tmp_path / "done"
    run = finetune_compare.run_runner([sys.executable, str(runner), str(done)], str(done))
    assert done.exists()
    assert 0.5 <= run["first_step_s"] < run["wall_s"]
    assert run["peak_mb"] >= 200
    err = capfd.readouterr().err  # the runner's lines, stdout's and stderr's, as they came
    assert "building the model" in err and "step 4/4  loss 0.5" in err


def test_time_to_first_step_takes_the_steps_before_the_first_line_at_the_steady_rate():
    assert stamped_runs.first_step_seconds([(20, 10.0), (40, 12.0), (60, 14.0)]) == (
        pytest.approx(10.0 - 19 * 0.1)
    )
    assert stamped_runs.first_step_seconds([(20, 10.0)]) is None
    assert stamped_runs.first_step_seconds([]) is None
    # The lines stamped: the runners' on stderr, the Hugging Face and keras-hub loops'.
    for line in (
        "train: step 20/62 (32%)  loss 0.6931  examples/s 30.1  elapsed 0:12  ETA 0:18",
        "hf seed 1 step 20/343 loss 0.6931 12 s",
        "keras_hub seed 1 step 20/343 mean loss 0.6931 12 s",
    ):
        assert stamped_runs.STEP_LINE.search(line).group(1) == "20"
    assert not stamped_runs.STEP_LINE.search("hf seed 1 step 40: {'accuracy': 80.0}")


def test_the_tables_show_first_step_and_peak_memory_empty_for_results_saved_before():
    from benchmarks.compare import compare_mrpc_hf

    epochs = [{"accuracy": 80.0, "f1": 85.0, "loss": 0.4, "step": 343}]
    now = {"system": "ours", "seed": 1, "epochs": epochs, "wall_s": 100.0, "cpu_s": 300.0}
    results = [
        {**now, "first_step_s": 12.34, "peak_mb": 1536.4},
        {**now, "seed": 2, "first_step_s": 14.34, "peak_mb": 1600.0},
        {**now, "system": "hf"},  # saved before the two were recorded
    ]
    text = finetune_compare.table(
        results,
        {"final accuracy": lambda r: r["epochs"][-1]["accuracy"]},
        compare_mrpc_hf.RUN_COLUMNS,
    )
    header, _, ours, hf = text.splitlines()
    assert header.endswith("| wall (s) | CPU (s) | first step (s) | peak (MB) |")
    assert ours.endswith("| 100 | 300 | 13.3 | 1568 |")
    assert hf.endswith("| 100 | 300 |  |  |")


def test_mrpc_hf_same_batches_follows_ours_and_says_in_one_line_when_ours_has_not_run(
    tmp_path, capfd
):
    from benchmarks.compare import compare_mrpc_hf

    args = compare_mrpc_hf.parse_args(
        ["--output_dir", str(tmp_path), "--regression", "--systems=ours,hf_same_batches"]
    )
    assert args.systems == "ours,hf_same_batches"
    assert finetune_compare.PEER_PACKAGES["hf_same_batches"] == ("torch", "transformers")
    # Its turn without ours' run of the seed: one line naming the flag to use, before
    # any process of its own starts.
    alone = compare_mrpc_hf.parse_args(
        ["--output_dir", str(tmp_path), "--regression", "--systems=hf_same_batches", "--seeds=2"]
    )
    with pytest.raises(SystemExit) as ended:
        compare_mrpc_hf.main(
            [
                "--output_dir",
                str(tmp_path),
                "--regression",
                "--systems=hf_same_batches",
                "--seeds=2",
            ]
        )
    message = str(ended.value.code)
    assert "\n" not in message
    assert message == (
        f"hf_same_batches follows ours' batches, but {tmp_path / 'ours_seed2'} has no "
        "finished run of ours: run --systems=ours,hf_same_batches"
    )
    assert "$ " not in capfd.readouterr().out  # no peer process started
    assert not (tmp_path / "hf_same_batches_seed2.json").exists()
    # Ours' finished run (its eval_results.txt and train.tf_record) is what it follows.
    ours_dir = tmp_path / "ours_seed2"
    ours_dir.mkdir()
    (ours_dir / "eval_results.txt").write_text("eval_loss = 0.2\n")
    (ours_dir / "train.tf_record").write_bytes(b"")
    assert compare_mrpc_hf.require_ours_run(alone, 2) == str(ours_dir)


def test_mrpc_regression_table_compares_ours_with_hf_on_the_same_batches(tmp_path):
    from benchmarks.compare import compare_mrpc_hf

    args = compare_mrpc_hf.parse_args(["--output_dir", str(tmp_path), "--regression"])
    args.no_dropout = True  # (as --no_dropout, without copying the checkpoint)
    epochs = [{"pearson": 40.0, "spearman": 38.0, "loss": 0.2, "step": 6}]
    run = {"epochs": epochs, "wall_s": 10.0, "cpu_s": 20.0, "seed": 1}
    results = [
        {**run, "system": "ours", "losses": [[4, 0.25], [6, 0.125]]},
        {
            **run,
            "system": "hf_same_batches",
            "epochs": [{**epochs[0], "pearson": 41.5}],
            "losses": [0.2, 0.3, 0.2, 0.3, 0.1, 0.15],
        },
    ]
    text = compare_mrpc_hf.regression_table(args, results)
    assert ", no dropout." in text.splitlines()[0]
    assert "ours - hf_same_batches (final Pearson, mean over seeds [1]): -1.50 points" in text
    # Ours' loops (of OURS_STEPS_PER_LOOP steps: >= 10 points over an epoch of 114).
    losses = finetune_compare.loss_comparison(results)
    assert "| 1 | 1-4 | 0.2500 | 0.2500 |" in losses
    assert "| 1 | 5-6 | 0.1250 | 0.1250 |" in losses
    assert 114 // compare_mrpc_hf.OURS_STEPS_PER_LOOP >= 10

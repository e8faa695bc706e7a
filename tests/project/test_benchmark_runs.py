"""The comparison benchmarks (benchmarks/compare/) run our runners in subprocesses: a
runner that fails has said why in one line, and the benchmark then ends with one line of
its own that names the runner and its exit code, without a traceback, recording nothing."""

import sys

import pytest

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

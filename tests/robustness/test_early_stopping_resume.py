"""--early_stopping_patience: where a run stops, and the same stop after a kill -9.

The stop is a function of eval_history.json alone (`finetuning.early_stop`), which a
resumed run reads back, so a run killed anywhere and run again stops at the step an
uninterrupted one stops at, with the same files.
"""

import json
import types

import pytest
from absl import app

import runner_settings
from modeling import finetuning
from tests.helpers import kill_helpers


def _history(*scores):
    return [{"global_step": 10 * (i + 1), "score": s} for i, s in enumerate(scores)]


def test_stops_after_patience_evaluations_without_a_better_score():
    # A tie does not improve; a later better score restarts the count.
    history = _history(0.5, 0.6, 0.6, 0.7, 0.65, 0.7, 0.69)
    stop = finetuning.early_stop(history, 3)
    assert (stop["global_step"], stop["best_step"], stop["best_score"]) == (70, 40, 0.7)
    assert "steps 50, 60, 70" in stop["reason"]
    stop = finetuning.early_stop(history, 2)
    assert (stop["global_step"], stop["best_step"]) == (60, 40)  # Not 30: 0.6 -> 0.7 at 40.
    assert finetuning.early_stop(history, 4) is None
    assert finetuning.early_stop(history, 0) is None
    assert finetuning.early_stop(_history(0.1, 0.2, 0.3), 1) is None


@pytest.mark.slow
def test_a_run_that_stops_early_killed_anywhere_ends_the_same(tmp_path):
    job = kill_helpers.JOBS["run_classifier_early_stopping"]
    ref, seconds = kill_helpers.reference(job, tmp_path)
    summary = json.loads((ref / "train_summary.json").read_text())
    assert summary["stopped_by"] == "early_stopping" and summary["complete"] is True
    # 32 examples at batch 8: epochs end every 4 steps; the score stays that of step 4.
    assert (summary["global_step"], summary["num_train_steps"]) == (12, 24)
    assert summary["early_stopping"]["best_step"] == 4
    history = json.loads((ref / "eval_history.json").read_text())
    assert [h["global_step"] for h in history] == [4, 8, 12]
    assert (ref / "test_results.tsv").exists()
    assert "Stopped early at step 12 of 24" in (tmp_path / "reference.log").read_text()
    results = [
        kill_helpers.trial(job, tmp_path, ref, delay)
        for delay in kill_helpers.kill_delays(seconds, 2, seed=7)
    ]
    assert any(result["killed"] for result in results), results
    for result in results:
        assert result["left"] == [], result
        assert result["rerun"] == [], result


@pytest.mark.parametrize(
    "patience,do_eval,every_epoch,message",
    [
        (-1, True, True, "--early_stopping_patience=-1: give a number of evaluations >= 1"),
        (2, False, True, "it needs --do_train, --do_eval and --evaluate_every_epoch"),
        (2, True, False, "it needs --do_train, --do_eval and --evaluate_every_epoch"),
    ],
)
def test_bad_patience_is_a_usage_error(patience, do_eval, every_epoch, message):
    given = types.SimpleNamespace(
        early_stopping_patience=patience,
        do_train=True,
        do_eval=do_eval,
        evaluate_every_epoch=every_epoch,
    )
    with pytest.raises(app.UsageError, match=message):
        runner_settings.check_early_stopping_flags(given)

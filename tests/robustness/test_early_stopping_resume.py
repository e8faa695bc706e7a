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


JOB = kill_helpers.JOBS["run_classifier_early_stopping"]
POINTS = 2


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """(work folder, the uninterrupted run's folder, its wall time), made once for the
    tests below."""
    work = tmp_path_factory.mktemp("early_stopping")
    ref, seconds = kill_helpers.reference(JOB, work)
    return work, ref, seconds


@pytest.mark.slow
def test_a_run_stops_where_its_history_says(reference):
    work, ref, _ = reference
    summary = json.loads((ref / "train_summary.json").read_text())
    assert summary["stopped_by"] == "early_stopping" and summary["complete"] is True
    # 32 examples at batch 8: epochs end every 4 steps; the score stays that of step 4.
    assert (summary["global_step"], summary["num_train_steps"]) == (12, 24)
    assert summary["early_stopping"]["best_step"] == 4
    history = json.loads((ref / "eval_history.json").read_text())
    assert [h["global_step"] for h in history] == [4, 8, 12]
    assert (ref / "test_results.tsv").exists()
    assert "Stopped early at step 12 of 24" in (work / "reference.log").read_text()


@pytest.mark.slow
@pytest.mark.parametrize("point", range(POINTS))
def test_a_run_that_stops_early_killed_anywhere_ends_the_same(reference, point):
    """Each kill point a test of its own, on the one uninterrupted run."""
    work, ref, seconds = reference
    delay = kill_helpers.kill_delays(seconds, POINTS, seed=7)[point]
    result = kill_helpers.trial(JOB, work, ref, delay)
    if point == 0:  # The first point falls within the first 45% of the run.
        assert result["killed"], result
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

"""Kill -9 anywhere, then the same command again (the harness: kill_helpers.py).

Two jobs at seeded kill points: create_pretraining_data writing two shards (a point in
the first 45% of the run, one between 45% and 90%), and run_classifier through all its
phases (feature caches, training with per-epoch evaluation and the best model,
evaluation, prediction, export) at a point between 45% and 90%, where those phases lie;
its training is killed by the Ctrl-C and after-the-last-checkpoint tests below, and at
random points by test_early_stopping_resume.py. After each kill no visible file differs
from the uninterrupted run's, and the same command finishes with outputs identical to it
byte for byte. Each kill point is a test of its own; a job's uninterrupted run is made
once, for all of its tests. The other long jobs (the Beam pipeline, pre-training,
run_squad, run_ner, evaluation and prediction alone, the TF Hub export, conversion) and
many more kill points are `python -m benchmarks.robustness.kill_resume`; pre-training,
the pipeline and the export also have kill tests of their own (test_pretraining.py,
test_pretraining_pipeline.py, test_atomic_export.py).
"""

import signal

import pytest

from tests.helpers import kill_helpers

POINTS = 2


@pytest.fixture(scope="module")
def references(tmp_path_factory):
    """name -> (work folder, the uninterrupted run's folder, its kill delays), made on
    first use."""
    made = {}

    def reference(name):
        if name not in made:
            job = kill_helpers.JOBS[name]
            work = tmp_path_factory.mktemp(name)
            ref, seconds = kill_helpers.reference(job, work)
            made[name] = (work, ref, kill_helpers.kill_delays(seconds, POINTS, seed=5))
        return made[name]

    return reference


@pytest.mark.slow
@pytest.mark.parametrize(
    "name,point",
    [("create_pretraining_data", 0), ("create_pretraining_data", 1), ("run_classifier", 1)],
)
def test_killed_anywhere_the_same_command_finishes_the_same(name, point, references):
    work, ref, delays = references(name)
    result = kill_helpers.trial(kill_helpers.JOBS[name], work, ref, delays[point])
    if point == 0:  # The first point falls within the first 45% of the run.
        assert result["killed"], result
    assert result["left"] == [], result  # Nothing half-written looked complete.
    assert result["rerun"] == [], result  # The rerun's outputs equal the reference's.


@pytest.mark.slow
def test_killed_between_the_last_checkpoint_and_its_evaluation_the_same_command_evaluates_it(
    references,
):
    """SIGKILL as soon as the last step's checkpoint is whole, before the last epoch's
    evaluation is recorded: what it left holds the first epoch's evaluation only (the
    reference's first entry), and the same command evaluates the last epoch before
    anything else and ends with the reference's outputs."""
    work, ref, _ = references("run_classifier")
    job = kill_helpers.JOBS["run_classifier"]
    result = kill_helpers.interrupt(job, work, ref, "ckpt-8.index", signal.SIGKILL)
    assert result["code"] == -signal.SIGKILL, result["lines"][-5:]
    assert result["left"] == [], result
    assert result["rerun"] == [], result


@pytest.mark.slow
def test_ctrl_c_while_fine_tuning_saves_a_checkpoint_and_the_same_command_resumes(references):
    """Ctrl-C once the first checkpoint is saved (the checks: test_ctrl_c.py's), on the
    uninterrupted run of the kill points above."""
    work, ref, _ = references("run_classifier")
    job = kill_helpers.JOBS["run_classifier"]
    result = kill_helpers.interrupt(job, work, ref, "ckpt-2.index")
    kill_helpers.check_ctrl_c(result, work / "run", 8)

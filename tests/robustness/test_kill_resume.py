"""Kill -9 anywhere, then the same command again (the harness: kill_helpers.py).

Two jobs at two seeded kill points each: create_pretraining_data writing two shards,
and run_classifier through all its phases (feature caches, training with per-epoch
evaluation and the best model, evaluation, prediction, export). After each kill no
visible file differs from the uninterrupted run's, and the same command finishes with
outputs identical to it byte for byte. The other long jobs (the Beam pipeline,
pre-training, run_squad, run_ner, evaluation and prediction alone, the TF Hub export,
conversion) and many more kill points are `benchmarks/robustness/kill_resume.py`; pre-training,
the pipeline and the export also have kill tests of their own (test_pretraining.py,
test_pretraining_pipeline.py, test_atomic_export.py).
"""

import pytest

from tests.helpers import kill_helpers


@pytest.mark.slow
@pytest.mark.parametrize("name", ["create_pretraining_data", "run_classifier"])
def test_killed_anywhere_the_same_command_finishes_the_same(name, tmp_path):
    job = kill_helpers.JOBS[name]
    ref, seconds = kill_helpers.reference(job, tmp_path)
    results = [
        kill_helpers.trial(job, tmp_path, ref, delay)
        for delay in kill_helpers.kill_delays(seconds, 2, seed=5)
    ]
    assert any(result["killed"] for result in results), results
    for result in results:
        assert result["left"] == [], result  # Nothing half-written looked complete.
        assert result["rerun"] == [], result  # The rerun's outputs equal the reference's.

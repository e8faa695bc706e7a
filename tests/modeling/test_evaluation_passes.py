"""One pass over the dev data per model evaluated: the final evaluation of a model
that an epoch's evaluation scored already in this process is that evaluation's files
(`EpochEvaluator.reuse`), and NER's tags and loss come from one prediction pass
(`training_eval.with_eval_sums`), with the loss of an evaluation pass bit for bit."""

import types

import keras
import numpy as np
import pytest
import tensorflow as tf

from common import file_io
from common.progress import Progress
from modeling import finetuning, models, training_eval
from modeling.config import BertConfig
from modeling.encoder import BertEncoder
from modeling.epoch_evaluation import BestCheckpoint, EpochEvaluator
from modeling.objectives import TokenClassificationObjective
from tests.conftest import tiny_config


class CountingTask:
    """A task whose evaluation at each step scores `scores[step]` and writes
    eval_results.txt and a predictions file; every call is recorded."""

    score_name = "eval_f1"

    def __init__(self, scores: dict[int, float]):
        self.scores, self.calls = scores, []

    def evaluate(self, trainer, output_dir, global_step):
        self.calls.append((output_dir, global_step))
        metrics = {"eval_f1": self.scores[global_step], "global_step": global_step}
        file_io.write_text(f"{output_dir}/eval_predictions.txt", f"of {global_step}\n")
        file_io.write_text(f"{output_dir}/eval_results.txt", f"{metrics}\n")
        trainer.progress.say(f"Evaluation at step {global_step}: {metrics}")
        return metrics

    def score(self, metrics):
        return metrics["eval_f1"]

    def predict(self, trainer, output_dir, global_step):
        pass


class Said:
    def __init__(self):
        self.lines = []

    def say(self, line):
        self.lines.append(line)


def _finish(tmp_path, monkeypatch, scores, every_epoch=True):
    """Trains (a stand-in that only steps and calls the epoch's evaluation) through
    the epochs of `scores` and finishes as `finetuning.run` does; (task, lines said)."""
    out = str(tmp_path / "out")
    task = CountingTask(scores)
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    trainer = types.SimpleNamespace(
        global_step=tf.Variable(0, dtype=tf.int64), progress=Said(), stop_signal=None
    )

    def train(task, trainer, settings, on_epoch_end):
        for step in scores:
            trainer.global_step.assign(step)
            model.layers[0].bias.assign([float(step)])
            if on_epoch_end is not None:
                on_epoch_end(step)
        return True

    monkeypatch.setattr(finetuning, "train", train)
    settings = finetuning.Settings(
        output_dir=out, do_train=True, do_eval=True, evaluate_every_epoch=every_epoch
    )
    best = BestCheckpoint(f"{out}/best", model)
    assert finetuning._train_and_finish(task, settings, trainer, model, None, best, True, out, None)
    return task, trainer.progress.lines, model


@pytest.mark.parametrize(
    "scores, best_step",
    [({4: 0.5, 8: 0.7}, 8), ({4: 0.5, 8: 0.9, 12: 0.6}, 8), ({4: 0.9, 8: 0.5}, 4)],
    ids=["best_is_last", "best_in_the_middle", "best_is_first"],
)
def test_the_final_evaluation_reuses_that_of_the_epoch(tmp_path, monkeypatch, scores, best_step):
    task, lines, model = _finish(tmp_path, monkeypatch, scores)
    out = tmp_path / "out"
    # One evaluation per epoch, none at the end: each step's model was evaluated once.
    steps = [step for _, step in task.calls]
    assert steps == list(scores), task.calls
    assert all(folder == f"{out}/.epoch_evaluation/{step}" for folder, step in task.calls)
    # The final files are those of the best model's evaluation, which is the model kept.
    assert model.layers[0].bias.numpy().tolist() == [float(best_step)]
    assert (out / "eval_predictions.txt").read_text() == f"of {best_step}\n"
    assert (out / "eval_results.txt").read_text() == (
        f"{{'eval_f1': {scores[best_step]}, 'global_step': {best_step}}}\n"
    )
    # Said once, then pointed at.
    evaluations = [line for line in lines if line.startswith("Evaluation at step")]
    assert evaluations == [
        *(
            f"Evaluation at step {s}: {{'eval_f1': {v}, 'global_step': {s}}}"
            for s, v in scores.items()
        ),
        f"Evaluation at step {best_step}: as above ({out}/eval_results.txt)",
    ]
    # Only the best model's evaluation and the latest are kept.
    kept = sorted(int(p.name) for p in (out / ".epoch_evaluation").iterdir())
    assert kept == sorted({best_step, max(scores)})


def test_without_per_epoch_evaluation_the_end_evaluates_once(tmp_path, monkeypatch):
    task, _, _ = _finish(tmp_path, monkeypatch, {4: 0.5, 8: 0.7}, every_epoch=False)
    assert task.calls == [(str(tmp_path / "out"), 8)]


def test_an_evaluation_of_an_earlier_process_is_not_reused(tmp_path):
    """Its dev data or settings may have been others: only this process's count."""
    out = str(tmp_path / "out")
    task = CountingTask({4: 0.5})
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    trainer = types.SimpleNamespace(progress=Said())
    best = BestCheckpoint(f"{out}/best", model)
    EpochEvaluator(task, trainer, best, out)(4)
    later = EpochEvaluator(task, trainer, BestCheckpoint(f"{out}/best", model), out)
    assert later.evaluated(4)
    assert later.reuse(4, out) is None
    assert EpochEvaluator(task, trainer, best, out).reuse(4, out) is None


def test_one_pass_gives_the_tags_and_the_loss_of_an_evaluation_pass():
    """NER's eval_loss from the prediction pass (`with_eval_sums`, `add_up`) is the
    one a separate `Trainer.evaluate` pass gives, bit for bit, with batches cut to
    different lengths and a smaller last batch."""
    keras.utils.set_random_seed(3)
    config = BertConfig(**tiny_config(0.0, vocab_size=99))
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    with strategy.scope():
        model = models.BertTokenClassifier(BertEncoder(config), config, 5)
    objective = TokenClassificationObjective()
    loop = training_eval.EvalLoop(
        strategy, model, objective, tf.Variable(0, dtype=tf.int64), None, Progress()
    )
    rng = np.random.default_rng(0)
    batches = []
    for size, length in ((4, 9), (4, 6), (3, 11)):
        mask = (np.arange(length) < rng.integers(2, length + 1, size=(size, 1))).astype(np.int32)
        labels = np.where(mask > 0, rng.integers(-1, 5, size=(size, length)), -1)
        batches.append(
            {
                "input_word_ids": (rng.integers(1, 99, size=(size, length)) * mask).astype(
                    np.int32
                ),
                "input_mask": mask,
                "input_type_ids": np.zeros((size, length), np.int32),
                "label_ids": labels.astype(np.int32),
            }
        )

    def dataset():
        return tf.data.Dataset.from_generator(
            lambda: iter(batches),
            output_signature={k: tf.TensorSpec([None, None], tf.int32) for k in batches[0]},
        )

    def label_ids(features, outputs):
        return {"label_ids": tf.argmax(outputs["logits"], axis=-1, output_type=tf.int32)}

    output_fn = training_eval.with_eval_sums(label_ids, objective)
    outputs = loop.predict(dataset(), output_fn, "evaluate")
    sums = training_eval.pop_eval_sums(outputs)
    assert set(outputs) == {"label_ids"} and sums["loss"].shape == (3,)
    one_pass = objective.finalize_eval(training_eval.add_up(sums))
    separate = loop.evaluate(dataset())
    assert one_pass["eval_loss"] == separate["eval_loss"]  # Bit for bit.
    assert one_pass["token_accuracy"] == separate["token_accuracy"]
    np.testing.assert_array_equal(
        outputs["label_ids"], loop.predict(dataset(), label_ids)["label_ids"]
    )


def test_a_best_model_save_killed_midway_leaves_nothing_behind(tmp_path):
    """A run killed while it saved its best model leaves TensorFlow's temporary folder
    (best-N_temp/...) in best/; the run that resumes removes it and keeps the model."""
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    best = BestCheckpoint(str(tmp_path / "best"), model)
    assert best.update(4, 0.5)
    leftover = tmp_path / "best" / "best-8_temp" / "part-00000-of-00001.data-00000-of-00001"
    leftover.parent.mkdir()
    leftover.with_name(leftover.name + ".tempstate123").write_bytes(b"cut short")
    resumed = BestCheckpoint(str(tmp_path / "best"), model)
    assert not leftover.parent.exists()
    assert resumed.exists and int(resumed.step.numpy()) == 4
    assert sorted(p.name for p in (tmp_path / "best").iterdir()) == [
        "best-4.data-00000-of-00001",
        "best-4.index",
        "checkpoint",
    ]

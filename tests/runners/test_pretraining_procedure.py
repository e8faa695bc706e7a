"""The paper's pre-training procedure through run_pretraining.py (Appendix A.2): phase 1
at a short sequence length, phase 2 at a longer one from phase 1's checkpoint on new
shards, restarting (the original's --init_checkpoint) or continuing
(--restore_training_state) the step, the schedule and the optimizer; and LAMB.

Every update is checked against `optimizer_reference` (NumPy): from the state stored in
one checkpoint (weights, moments, step), the gradient of the batch the run consumed and
the learning rate the schedule gives at that step, the formula must give the state of
the next checkpoint. The runs save a checkpoint every step and all run in one process
(TensorFlow starts once): about 40 s of CPU time.
"""

import dataclasses
import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from benchmarks.compare import pretraining_vs_hf as bench
from tests.helpers import optimizer_reference as ref
import run_pretraining
import runner_settings
from common.errors import UserError
from modeling.config import BertConfig
from tests.conftest import SAMPLE_DATA, tiny_config
from tests.helpers.pretraining_data_helpers import make_shard, run_pretraining_in_one_process

VOCAB = str(SAMPLE_DATA / "vocab" / "uncased_vocab.txt")
CORPUS = SAMPLE_DATA / "corpus"
BATCH, LR, SEED = 8, 1e-3, 12345
PHASE_1 = dict(seq=32, preds=5)  # the paper's 128 / 20
PHASE_2 = dict(seq=64, preds=10)  # the paper's 512 / 80
CONFIG = tiny_config(dropout=0.0, max_position_embeddings=64)


def phase_args(shard, output_dir, phase, steps, warmup, *extra):
    return [
        f"--input_file={shard}",
        f"--output_dir={output_dir}",
        f"--max_seq_length={phase['seq']}",
        f"--max_predictions_per_seq={phase['preds']}",
        f"--train_batch_size={BATCH}",
        f"--num_train_steps={steps}",
        f"--num_warmup_steps={warmup}",
        f"--learning_rate={LR}",
        "--steps_per_loop=1",
        "--save_checkpoints_steps=1",
        "--do_train",
        *extra,
    ]


def lamb_init_checkpoint(directory) -> str:
    """A random model whose pooler and next-sentence kernels are zero (the pooler's
    bias is not): LAMB's trust ratio then meets ||w|| = 0 with a gradient (the
    next-sentence kernel) and ||w|| = ||update|| = 0 (the pooler kernel, whose
    gradient goes through the zero next-sentence kernel)."""
    keras.utils.set_random_seed(3)
    model = run_pretraining.build_model(BertConfig(**CONFIG), "float32")
    values = {v.path: v for v in model.trainable_variables}
    values["pooler/kernel"].assign(tf.zeros_like(values["pooler/kernel"]))
    values["pooler/bias"].assign(tf.fill(values["pooler/bias"].shape, 0.3))
    values["seq_relationship/dense/kernel"].assign(
        tf.zeros_like(values["seq_relationship/dense/kernel"])
    )
    return tf.train.Checkpoint(model=model).write(str(directory / "init"))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every run of this file, in one process: {name: (error type, message)} and paths."""
    d = tmp_path_factory.mktemp("procedure")
    config_file = d / "bert_config.json"
    config_file.write_text(json.dumps(CONFIG))
    shard_1 = make_shard(
        CORPUS / "bert_paper_v1.txt", d / "phase1.tfrecord", VOCAB, **PHASE_1, seed=1
    )
    shard_2 = make_shard(
        CORPUS / "bert_paper_v2.txt", d / "phase2.tfrecord", VOCAB, **PHASE_2, seed=2
    )
    lamb_init = lamb_init_checkpoint(d)
    config = f"--bert_config_file={config_file}"
    phase1 = d / "phase1"
    # Phase 1: 4 of the schedule's 6 steps; phase 2 continues with 2 (the paper: 90% and
    # 10% of one schedule), or restarts with 3 steps of its own schedule.
    argv = {
        "phase1": phase_args(shard_1, phase1, PHASE_1, 6, 2, config, "--stop_at_step=4"),
        "restart": phase_args(shard_2, d / "restart", PHASE_2, 3, 2, f"--init_checkpoint={phase1}"),
        # Continued, stopped after one step and resumed: the resumed run must skip the
        # one batch it consumed, not the global step's count.
        "continue": phase_args(
            shard_2,
            d / "continue",
            PHASE_2,
            6,
            2,
            f"--init_checkpoint={phase1}",
            "--restore_training_state",
            "--stop_at_step=5",
        ),
        "continue_resumed": phase_args(
            shard_2,
            d / "continue",
            PHASE_2,
            6,
            2,
            f"--init_checkpoint={phase1}",
            "--restore_training_state",
        ),
        "lamb": phase_args(
            shard_1,
            d / "lamb",
            PHASE_1,
            3,
            0,
            config,
            f"--init_checkpoint={lamb_init}",
            "--optimizer=lamb",
            "--learning_rate=0.01",
        ),
        # Bad input.
        "continue_without_checkpoint": phase_args(
            shard_2, d / "bad1", PHASE_2, 6, 2, config, "--restore_training_state"
        ),
        "continue_from_weights_alone": phase_args(
            shard_1,
            d / "bad2",
            PHASE_1,
            6,
            2,
            config,
            f"--init_checkpoint={lamb_init}",
            "--restore_training_state",
        ),
        "continue_past_the_end": phase_args(
            shard_2,
            d / "bad3",
            PHASE_2,
            4,
            2,
            f"--init_checkpoint={phase1}",
            "--restore_training_state",
        ),
        "stop_after_the_end": phase_args(
            shard_1, d / "bad4", PHASE_1, 4, 2, config, "--stop_at_step=5"
        ),
    }
    results = run_pretraining_in_one_process(argv)
    return dict(
        results=results,
        dir=d,
        shards={"phase1": shard_1, "phase2": shard_2},
        lamb_init=lamb_init,
    )


# ----------------------------------------------------------------- the oracle's inputs


class States:
    """Reads the training state stored in checkpoints, and the gradients of batches."""

    def __init__(self):
        self.model = run_pretraining.build_model(BertConfig(**CONFIG), "float32")
        self.variables = self.model.trainable_variables

    def read(self, prefix: str, with_optimizer: bool = True) -> dict:
        tf.train.Checkpoint(model=self.model).restore(prefix).expect_partial()
        state = {"w": [v.numpy().astype(np.float64) for v in self.variables]}
        if not with_optimizer:  # an initial model: fresh moments
            zeros = [np.zeros_like(w) for w in state["w"]]
            return dict(state, m=zeros, v=list(zeros), iterations=0, global_step=0)
        reader = tf.train.load_checkpoint(prefix)

        def get(name):
            return reader.get_tensor(f"{name}/.ATTRIBUTES/VARIABLE_VALUE")

        count = len(self.variables)
        return dict(
            state,
            m=[get(f"optimizer/m/{i}").astype(np.float64) for i in range(count)],
            v=[get(f"optimizer/v/{i}").astype(np.float64) for i in range(count)],
            iterations=int(get("optimizer/iterations")),
            global_step=int(get("global_step")),
        )

    def gradients(self, weights, batch):
        """The gradient of the pre-training loss, written here: the masked-LM
        cross-entropy averaged over the real predictions (masked_lm_weights) of the
        batch plus the next-sentence cross-entropy averaged over its examples."""
        for variable, value in zip(self.variables, weights):
            variable.assign(value.astype(np.float32))
        with tf.GradientTape() as tape:
            outputs = self.model(batch, training=True)
            log_probs = tf.nn.log_softmax(outputs["mlm_logits"])
            picked = tf.gather(log_probs, batch["masked_lm_ids"], batch_dims=2)
            weights = batch["masked_lm_weights"]
            mlm = -tf.reduce_sum(picked * weights) / tf.reduce_sum(weights)
            nsp_log_probs = tf.nn.log_softmax(outputs["next_sentence_logits"])
            labels = tf.reshape(batch["next_sentence_labels"], [-1])
            nsp = -tf.reduce_mean(tf.gather(nsp_log_probs, labels, batch_dims=1))
            loss = mlm + nsp
        grads = tape.gradient(loss, self.variables)
        return [tf.convert_to_tensor(g).numpy().astype(np.float64) for g in grads]


def training_batches(shard, phase, count):
    """The first `count` batches the runner's training input gives (one replica)."""
    return bench.runner_batches(shard, phase["seq"], phase["preds"], BATCH, SEED, count)


def assert_update(states, before, after, batch, lr, optimizer="adamw"):
    """`after` is `before` updated by the NumPy optimizer with this batch's gradient."""
    grads = states.gradients(before["w"], batch)
    expected, ratios = ref.step_all(before, grads, lr, optimizer)
    assert after["iterations"] == before["iterations"] + 1
    assert after["global_step"] == before["global_step"] + 1
    # The change each step makes, to 1e-3 of its size (float32 arithmetic and the
    # gradient's rounding), plus float32 rounding of the stored value. The attention
    # key biases have a gradient of exactly 0 in exact arithmetic (a softmax does not
    # change when one number is added to all its logits): theirs is rounding noise of
    # about 1e-13, which the absolute floors cover; every other variable's step is 1e5
    # or more times larger than these floors.
    floors = {"w": 1e-6 * lr, "m": 1e-12, "v": 1e-20}
    for i, variable in enumerate(states.variables):
        for key in ("w", "m", "v"):
            change = float(np.max(np.abs(expected[key][i] - before[key][i])))
            error = float(np.max(np.abs(after[key][i] - expected[key][i])))
            size = float(np.max(np.abs(expected[key][i])))
            tolerance = 1e-3 * change + 1e-7 * size + floors[key]
            assert error <= tolerance, (variable.path, key, error, change)
    return expected, ratios


def checkpoint(run_dir, step):
    return str(run_dir / f"ckpt-{step}")


# ----------------------------------------------------------------- the tests


def test_flags_become_settings_once_and_the_checks_take_settings():
    """The flags turn into settings once the original flags are mapped
    (--iterations_per_loop -> steps_per_loop); the phase checks read the settings
    alone."""
    flag_values = run_pretraining.FLAGS
    flag_values.unparse_flags()
    try:
        flag_values(
            ["run_pretraining.py", "--input_file=a", "--output_dir=o", "--objective=ltr"]
            + ["--iterations_per_loop=7", "--num_train_steps=40", "--stop_at_step=50"]
        )
        runner_settings.apply_original_flags(flag_values)
        settings = run_pretraining.pretraining_settings(flag_values)
    finally:
        flag_values.unparse_flags()
    assert settings.trainer_options["steps_per_loop"] == 7 and settings.causal_attention
    # Pre-training pads its batches unless told (its instances fill max_seq_length).
    assert settings.pad_to_max_seq_length
    assert run_pretraining.pads_batches(False) is False
    assert settings.flag_values["num_train_steps"] == 40 and settings.seed == 12345
    with pytest.raises(UserError, match=r"--stop_at_step=50 must be after the first step \(0\)"):
        run_pretraining.check_phase_settings(settings)
    assert (
        run_pretraining.check_phase_settings(dataclasses.replace(settings, num_train_steps=50)) == 0
    )
    with pytest.raises(UserError, match="--restore_training_state needs --init_checkpoint"):
        run_pretraining.check_phase_settings(
            dataclasses.replace(settings, restore_training_state=True)
        )


@pytest.mark.slow
def test_bad_phase_flags_say_what_to_do(runs):
    results = runs["results"]
    error, message = results["continue_without_checkpoint"]
    assert error == "UserError" and "--restore_training_state needs --init_checkpoint" in message
    error, message = results["continue_from_weights_alone"]
    assert error == "UserError" and "holds no training state" in message, message
    error, message = results["continue_past_the_end"]
    assert error == "UserError" and "is at global step 4 but --num_train_steps=4" in message
    error, message = results["stop_after_the_end"]
    assert error == "UserError" and "--stop_at_step=5 must be" in message
    assert not (runs["dir"] / "bad4" / "ckpt-1.index").exists()


@pytest.mark.slow
def test_phase_two_restarts_as_the_original(runs):
    """--init_checkpoint=phase 1's output_dir: phase 1's weights, then step 0 with a
    new warmup (its first rate is 0) and fresh moments, on phase 2's first batches."""
    assert runs["results"]["phase1"] == ["no error", ""]
    assert runs["results"]["restart"] == ["no error", ""]
    d, states = runs["dir"], States()
    end_of_phase_1 = states.read(checkpoint(d / "phase1", 4))
    assert end_of_phase_1["global_step"] == 4 and end_of_phase_1["iterations"] == 4
    assert not (d / "phase1" / "ckpt-5.index").exists()  # stopped at 4 of 6
    restart = d / "restart"
    first = states.read(checkpoint(restart, 1))
    for w_before, w_after in zip(end_of_phase_1["w"], first["w"]):
        np.testing.assert_array_equal(w_after, w_before)  # the rate of step 0 is 0
    fresh = dict(
        end_of_phase_1,
        m=[np.zeros_like(w) for w in end_of_phase_1["w"]],
        v=[np.zeros_like(w) for w in end_of_phase_1["w"]],
        iterations=0,
        global_step=0,
    )
    batches = training_batches(runs["shards"]["phase2"], PHASE_2, 3)
    before = fresh
    rates = [ref.original_learning_rate(step, LR, 3, 2) for step in range(3)]
    assert rates == pytest.approx([0.0, LR / 2, LR / 3])  # phase 2's own warmup, decay
    for step in range(3):
        after = states.read(checkpoint(restart, step + 1))
        assert_update(states, before, after, batches[step], rates[step])
        before = after


@pytest.mark.slow
def test_phase_two_continues_with_restore_training_state(runs):
    """--restore_training_state: phase 1's weights, moments, Adam step count and global
    step, the schedule over both phases (step 4 of 6), phase 2's shards from their
    first batch; a resumed phase 2 skips only the batch it had consumed."""
    assert runs["results"]["continue"] == ["no error", ""]
    assert runs["results"]["continue_resumed"] == ["no error", ""]
    d, states = runs["dir"], States()
    before = states.read(checkpoint(d / "phase1", 4))
    batches = training_batches(runs["shards"]["phase2"], PHASE_2, 2)
    for index, step in enumerate((4, 5)):
        after = states.read(checkpoint(d / "continue", step + 1))
        lr = ref.original_learning_rate(step, LR, 6, 2)
        assert lr > 0
        assert_update(states, before, after, batches[index], lr)
        before = after
    assert not (d / "continue" / "ckpt-1.index").exists()


@pytest.mark.slow
def test_lamb_through_run_pretraining_matches_numpy(runs):
    """Three LAMB steps of run_pretraining.py --optimizer=lamb, each equal to You et
    al.'s update computed in NumPy, with the trust ratio's zero cases."""
    assert runs["results"]["lamb"] == ["no error", ""]
    d, states = runs["dir"], States()
    names = [v.path for v in states.variables]
    pooler, nsp = names.index("pooler/kernel"), names.index("seq_relationship/dense/kernel")
    before = states.read(runs["lamb_init"], with_optimizer=False)
    assert not before["w"][pooler].any() and not before["w"][nsp].any()
    batches = training_batches(runs["shards"]["phase1"], PHASE_1, 3)
    all_ratios = []
    for step in range(3):
        after = states.read(checkpoint(d / "lamb", step + 1))
        lr = ref.original_learning_rate(step, 0.01, 3, 0)
        _, ratios = assert_update(states, before, after, batches[step], lr, "lamb")
        for w in after["w"]:
            assert np.all(np.isfinite(w))
        all_ratios.append(ratios)
        before = after
    first = states.read(checkpoint(d / "lamb", 1))
    # Step 1: the pooler kernel had w = 0 and no gradient (update 0, ratio 1, no NaN);
    # the next-sentence kernel had w = 0 and a gradient (ratio 1: it moves off zero).
    assert not first["w"][pooler].any() and all_ratios[0][pooler] == 1.0
    assert first["w"][nsp].any() and all_ratios[0][nsp] == 1.0
    # Step 2: the pooler kernel, still 0, gets a gradient through the moved kernel.
    assert all_ratios[1][pooler] == 1.0
    assert states.read(checkpoint(d / "lamb", 2))["w"][pooler].any()
    # Elsewhere the ratio (about the weights' scale, 0.02, over the Adam step's, 1)
    # shrinks the step some 50 times: an update without it would fail the check above.
    others = [r for i, r in enumerate(all_ratios[0]) if i not in (pooler, nsp) and r != 1.0]
    assert len(others) == sum(w.ndim > 1 for w in before["w"]) - 2
    assert max(others) < 0.2, others

"""The shared training loop and the optimizers (in-process, tiny model)."""

import re
import types

import keras
import numpy as np
import pytest
import tensorflow as tf

from common.errors import UserError
from modeling import models, optimization, training
from modeling.config import BertConfig
from modeling.encoder import BertEncoder
from modeling.objectives import ClassificationObjective, PretrainingObjective
from tests.conftest import tiny_config

TINY = tiny_config(0.0, vocab_size=99)


def test_learning_rate_schedule_matches_the_original():
    lr = lambda step: float(optimization.learning_rate_schedule(step, 1e-4, 100, 10))  # noqa
    assert lr(0) == 0.0
    assert lr(5) == pytest.approx(5e-5)
    # After warmup the decay is measured from step 0: 1e-4 * (1 - 10/100).
    assert lr(10) == pytest.approx(9e-5)
    assert lr(50) == pytest.approx(5e-5)
    assert lr(100) == 0.0 and lr(150) == 0.0
    assert float(optimization.learning_rate_schedule(0, 1e-4, 100, 0)) == pytest.approx(1e-4)


def test_learning_rate_decay_after_warmup_is_hugging_faces_linear_schedule():
    """--lr_decay=after_warmup: transformers' get_linear_schedule_with_warmup, written
    out (its lr_lambda), step by step."""

    def hf(step, warmup, total):
        if step < warmup:
            return step / max(1, warmup)
        return max(0.0, (total - step) / max(1, total - warmup))

    for warmup, total in ((10, 100), (0, 50), (11, 114)):
        for step in range(total + 5):
            ours = optimization.learning_rate_schedule(step, 5e-5, total, warmup, "after_warmup")
            assert float(ours) == pytest.approx(
                5e-5 * hf(step, warmup, total), rel=1e-5, abs=1e-15
            ), step
    with pytest.raises(UserError, match="--lr_decay=cosine: one of original, after_warmup"):
        optimization.learning_rate_schedule(0, 1e-4, 100, 10, "cosine")


def numpy_adamw(params, grads_seq, lr, decay_mask, wd=0.01, b1=0.9, b2=0.999, eps=1e-6):
    """The original AdamWeightDecayOptimizer: no bias correction, decoupled decay."""
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    params = [p.copy() for p in params]
    for grads in grads_seq:
        for i, g in enumerate(grads):
            m[i] = b1 * m[i] + (1 - b1) * g
            v[i] = b2 * v[i] + (1 - b2) * g * g
            update = m[i] / (np.sqrt(v[i]) + eps)
            if decay_mask[i]:
                update = update + wd * params[i]
            params[i] = params[i] - lr * update
    return params


def test_adamw_matches_the_original_algorithm():
    rng = np.random.default_rng(0)
    values = [
        rng.normal(size=(3, 4)).astype(np.float32),
        rng.normal(size=(4,)).astype(np.float32),
        rng.normal(size=(4,)).astype(np.float32),
    ]
    names = ["layer_0/dense/kernel", "layer_0/dense/bias", "layer_0/LayerNorm/gamma"]
    variables = [tf.Variable(v, name=n.replace("/", "_")) for v, n in zip(values, names)]

    class Named:  # stands in for Keras variables, which carry a .path
        def __init__(self, var, path):
            self.value, self.path = var, path
            self.shape = var.shape

    opt = optimization.AdamWeightDecay(
        [Named(v, n) for v, n in zip(variables, names)], bias_correction=False
    )
    grads_seq = [[rng.normal(size=v.shape).astype(np.float32) for v in values] for _ in range(3)]
    for grads in grads_seq:
        opt.apply([tf.constant(g) for g in grads], tf.constant(0.1))
    want = numpy_adamw(values, grads_seq, 0.1, [True, False, False])
    for var, w in zip(variables, want):
        np.testing.assert_allclose(var.numpy(), w, rtol=1e-5, atol=1e-6)
    assert int(opt.iterations.numpy()) == 3
    # A skipped step (non-finite float16 gradients) changes nothing.
    before = [v.numpy() for v in variables]
    opt.apply([tf.constant(g) for g in grads_seq[0]], tf.constant(0.1), tf.constant(False))
    for var, b in zip(variables, before):
        np.testing.assert_array_equal(var.numpy(), b)


class _Named:
    """Stands in for a Keras variable, which carries a .path."""

    def __init__(self, var, path):
        self.value, self.path, self.shape = var, path, var.shape


def test_bias_corrected_adamw_matches_torch_adamw():
    """With bias correction (the runners' default) the update is PyTorch's AdamW with
    the same epsilon and decoupled decay, decay off for bias and LayerNorm."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    shapes = {
        "layer_0/dense/kernel": (3, 4),
        "layer_0/dense/bias": (4,),
        "layer_0/LayerNorm/gamma": (4,),
    }
    values = [rng.normal(size=s).astype(np.float32) for s in shapes.values()]
    variables = [tf.Variable(v) for v in values]
    opt = optimization.create_optimizer(
        "adamw", [_Named(v, n) for v, n in zip(variables, shapes)], weight_decay_rate=0.01
    )
    assert opt.bias_correction  # the default
    params = [torch.nn.Parameter(torch.tensor(v)) for v in values]
    reference = torch.optim.AdamW(
        [{"params": params[:1], "weight_decay": 0.01}, {"params": params[1:], "weight_decay": 0.0}],
        lr=1e-3,
        betas=(0.9, 0.999),
        eps=1e-6,
    )
    for step in range(5):
        grads = [rng.normal(size=v.shape).astype(np.float32) * (step + 1) for v in values]
        opt.apply([tf.constant(g) for g in grads], tf.constant(1e-3))
        for p, g in zip(params, grads):
            p.grad = torch.tensor(g)
        reference.step()
    for var, p in zip(variables, params):
        np.testing.assert_allclose(var.numpy(), p.detach().numpy(), rtol=1e-5, atol=1e-7)
    # The first update is lr * sign(g) (up to epsilon), a third of the original's.
    fresh = tf.Variable(np.zeros(4, np.float32))
    for correct, size in ((True, 1e-3), (False, 1e-3 * 0.1 / np.sqrt(0.001))):
        fresh.assign(np.zeros(4, np.float32))
        optimization.AdamWeightDecay([_Named(fresh, "x/bias")], bias_correction=correct).apply(
            [tf.constant([1.0, -2.0, 3.0, -4.0])], tf.constant(1e-3)
        )
        np.testing.assert_allclose(np.abs(fresh.numpy()), size, rtol=1e-3)


@pytest.mark.parametrize("epsilon", [1e-6, 1e-8])
def test_adam_epsilon_reaches_the_update(epsilon):
    """--adam_epsilon (1e-6 as the original; Hugging Face uses 1e-8): with gradients of
    1e-7 the epsilon dominates the denominator, and the update is PyTorch's AdamW's with
    the same epsilon."""
    torch = pytest.importorskip("torch")
    grads = np.array([1e-7, -3e-7, 2e-6, 0.0], np.float32)
    variable = tf.Variable(np.ones(4, np.float32))
    opt = optimization.create_optimizer(
        "adamw", [_Named(variable, "x/bias")], weight_decay_rate=0.0, epsilon=epsilon
    )
    param = torch.nn.Parameter(torch.ones(4))
    reference = torch.optim.AdamW([param], lr=1e-3, eps=epsilon, weight_decay=0.0)
    for _ in range(3):
        opt.apply([tf.constant(grads)], tf.constant(1e-3))
        param.grad = torch.tensor(grads)
        reference.step()
    np.testing.assert_allclose(variable.numpy(), param.detach().numpy(), rtol=0, atol=1e-7)
    with pytest.raises(ValueError, match="adam_epsilon"):
        optimization.create_optimizer("adamw", [_Named(variable, "x/bias")], epsilon=0.0)


def test_adam_epsilon_flag_defaults_to_the_original():
    from absl import flags

    import runner_flags

    values = flags.FlagValues()
    runner_flags.define_training_flags(values)
    values(["runner", "--adam_epsilon=1e-8"])
    assert values["adam_epsilon"].default == 1e-6 and values.adam_epsilon == 1e-8


def test_lamb_scales_by_trust_ratio():
    w = tf.Variable(np.full((2, 2), 3.0, np.float32))

    class Named:
        def __init__(self, var):
            self.value, self.path, self.shape = var, "dense/kernel", var.shape

    opt = optimization.Lamb([Named(w)], weight_decay_rate=0.0)
    opt.apply([tf.constant(np.full((2, 2), 0.5, np.float32))], tf.constant(0.1))
    # First bias-corrected Adam step is g/|g| = 1 everywhere, trust ratio |w|/|u| = 3.
    np.testing.assert_allclose(w.numpy(), 3.0 - 0.1 * 3.0 * 1.0, atol=1e-5)


def test_optimizer_after_one_over_restored_variables_is_gone(tmp_path):
    """A TF Hub encoder's variables are restored from a SavedModel; once that model is
    deleted, a new optimizer over ordinary variables of the same shapes still steps
    (a compiled step shared between optimizers kept traces of the deleted ones)."""
    import gc

    module = tf.Module()
    module.w = tf.Variable(tf.ones([3]))
    tf.saved_model.save(module, str(tmp_path / "saved"))

    def step_once(variable):
        optimizer = optimization.create_optimizer("adamw", [variable])
        tf.function(lambda: optimizer.apply([tf.ones([3])], 0.1))()
        return variable.numpy()

    restored = tf.saved_model.load(str(tmp_path / "saved"))
    first = step_once(restored.w)
    del restored
    gc.collect()
    np.testing.assert_allclose(step_once(tf.Variable(tf.ones([3]))), first)


def test_dynamic_loss_scale():
    scale = training.DynamicLossScale(initial=8.0, growth_interval=2)
    scale.update(tf.constant(False))
    assert float(scale.scale.numpy()) == 4.0
    scale.update(tf.constant(True))
    scale.update(tf.constant(True))
    assert float(scale.scale.numpy()) == 8.0 and int(scale.good_steps.numpy()) == 0


def classification_data(n=256, seq=8, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, 99, size=(n, seq)).astype(np.int32)
    labels = rng.integers(0, 2, size=n).astype(np.int32)
    ids[:, 1] = 5 + labels  # the label is written in one token: learnable, generalises
    return {
        "input_word_ids": ids,
        "input_mask": np.ones_like(ids),
        "input_type_ids": np.zeros_like(ids),
        "label_ids": labels,
    }


def train_classifier(
    tmp_path,
    name,
    accumulation=1,
    steps=6,
    dtype="float32",
    lr=1e-3,
    seed=7,
    restore=False,
    xla=False,
    **trainer_options,
):
    keras.utils.set_random_seed(seed)
    config = BertConfig(**TINY)
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    with strategy.scope():
        model = models.BertClassifier(BertEncoder(config, dtype=dtype), config, 2)
    trainer = training.Trainer(
        strategy,
        model,
        ClassificationObjective(),
        str(tmp_path / name),
        learning_rate=lr,
        num_train_steps=steps,
        num_warmup_steps=0,
        save_checkpoints_steps=100,
        gradient_accumulation_steps=accumulation,
        dtype=dtype,
        enable_xla=xla,
        **{"steps_per_loop": 2, **trainer_options},
    )
    if restore:
        assert trainer.restore_or_initialize()
    data = classification_data()

    def dataset_fn(context=None):
        return tf.data.Dataset.from_tensor_slices(data).repeat().batch(16, drop_remainder=True)

    summary = trainer.train(dataset_fn, 16)
    return trainer, model, summary


@pytest.fixture(scope="module")
def plain_run(tmp_path_factory):
    """`train_classifier` with its defaults (full batches, float32, op by op): the
    reference of the gradient accumulation and XLA tests, trained once for both."""
    return train_classifier(tmp_path_factory.mktemp("plain"), "plain")


def test_gradient_accumulation_equals_the_full_batch(tmp_path, plain_run):
    _, full, _ = plain_run
    _, accumulated, _ = train_classifier(tmp_path, "acc", accumulation=4)
    for a, b in zip(full.weights, accumulated.weights):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=2e-5)


def test_xla_compiled_step_equals_the_plain_step(tmp_path, plain_run):
    # --enable_xla compiles the whole step (forward, gradients, clipping, AdamW) as one
    # XLA program; it must train the same weights as the op-by-op step.
    _, plain, plain_summary = plain_run
    _, compiled, compiled_summary = train_classifier(tmp_path, "xla", xla=True)
    assert compiled_summary["global_step"] == plain_summary["global_step"] == 6
    assert compiled_summary["loss"] == pytest.approx(plain_summary["loss"], rel=1e-5)
    unmoved = []
    for a, b, initial in zip(plain.weights, compiled.weights, train_classifier_initial()):
        np.testing.assert_allclose(b.numpy(), a.numpy(), atol=2e-6, err_msg=a.path)
        if np.allclose(a.numpy(), initial):
            unmoved.append(a.path)
    # Every weight trained (so the check has teeth) but the key biases, whose gradient
    # is zero: a softmax is unchanged by a constant added to all of a query's scores.
    assert unmoved == [f"layer_{i}/attention_self/key/bias" for i in range(2)]
    _, mixed, summary = train_classifier(tmp_path, "xla_bf16", dtype="bfloat16", xla=True)
    assert np.isfinite(summary["loss"])
    assert all(w.dtype == "float32" for w in mixed.weights)


def train_classifier_initial(seed=7):
    """The initial weights of `train_classifier`'s model (same seed, no training)."""
    keras.utils.set_random_seed(seed)
    config = BertConfig(**TINY)
    model = models.BertClassifier(BertEncoder(config), config, 2)
    model(classification_data(n=2), training=False)
    return [w.numpy() for w in model.weights]


def _logits_and_labels(features, outputs):
    return {"logits": outputs["logits"], "label_ids": features["label_ids"]}


def test_training_learns_evaluates_predicts_and_resumes(tmp_path):
    trainer, model, summary = train_classifier(tmp_path, "run", steps=40, lr=5e-3)
    assert summary["global_step"] == 40 and summary["replica_max_diff"] == 0.0
    data = classification_data(seed=1)
    dataset = tf.data.Dataset.from_tensor_slices(data).batch(8)
    metrics = trainer.evaluate(dataset)
    assert metrics["global_step"] == 40
    assert metrics["eval_accuracy"] > 0.8, metrics
    out = trainer.predict(dataset, _logits_and_labels)
    np.testing.assert_array_equal(out["label_ids"], data["label_ids"])
    accuracy = np.mean(out["logits"].argmax(-1) == data["label_ids"])
    assert accuracy == pytest.approx(metrics["eval_accuracy"])
    # Compiled once per trainer: loops of another length, evaluation and prediction
    # again reuse the traces.
    trainer.num_train_steps, trainer.steps_per_loop = 43, 2  # loops of 2, then 1
    trainer.train(
        lambda context=None: (
            tf.data.Dataset.from_tensor_slices(data).repeat().batch(16, drop_remainder=True)
        ),
        16,
    )
    assert int(trainer.global_step.numpy()) == 43
    uneven = tf.data.Dataset.from_tensor_slices(data).batch(24)  # 10 x 24, then 16
    for _ in range(2):
        trainer.evaluate(uneven)
        trainer.predict(uneven, _logits_and_labels)
    assert trainer.train_loop().experimental_get_tracing_count() == 1
    # Evaluation and prediction are traced once for every batch of the datasets'
    # signature (batch dimension of any size), the smaller last batches included.
    spec = uneven.element_spec
    assert dataset.element_spec == spec
    assert trainer.eval_loop.evaluation_step(spec).experimental_get_tracing_count() == 1
    predict_step = trainer.eval_loop.prediction_step(_logits_and_labels, spec)
    assert predict_step.experimental_get_tracing_count() == 1
    assert tf.train.latest_checkpoint(str(tmp_path / "run")).endswith("ckpt-43")
    # A save killed midway left TensorFlow's temporary folder, never read.
    leftover = tmp_path / "run" / "ckpt-44_temp" / "part-00000-of-00001.data-00000-of-00001"
    leftover.parent.mkdir()
    leftover.with_name(leftover.name + ".tempstate123").write_bytes(b"cut short")
    # A new trainer over the same output_dir resumes at step 43 and trains no further;
    # it removes the leftover. (Another seed: the weights equal only if they were
    # restored.)
    again, model2, summary2 = train_classifier(
        tmp_path, "run", steps=43, lr=5e-3, seed=8, restore=True
    )
    assert summary2["global_step"] == 43
    assert not leftover.parent.exists()
    np.testing.assert_array_equal(model2.weights[0].numpy(), model.weights[0].numpy())


@pytest.mark.parametrize(
    "steps_per_loop,window,loops",
    [(10, (2, 3), 1), (2, (1, 2), 2), (2, (5, 50), 1)],  # in one loop; over two; past the end
)
def test_the_profile_holds_the_loops_of_its_window(tmp_path, steps_per_loop, window, loops):
    """--profile_steps: the profiler starts before the first loop that holds a step of
    the window and stops after the last (or the training's last loop). It once started
    and stopped before a loop that held the whole window: an empty profile."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    train_classifier(tmp_path, "run", steps=6, steps_per_loop=steps_per_loop, profile_steps=window)
    (path,) = (tmp_path / "run" / "profile").rglob("*.xplane.pb")
    space = xplane_pb2.XSpace.FromString(path.read_bytes())
    names = [
        plane.event_metadata[event.metadata_id].name
        for plane in space.planes
        for line in plane.lines
        for event in line.events
    ]
    # One call of the training loop's function per loop, and the ops it ran.
    assert sum(n.startswith("EagerLocalExecute: __inference_loop") for n in names) == loops
    assert any(n.endswith("MatMul") for n in names), sorted(set(names))[:50]


def test_a_bad_profile_window_is_one_line():
    import runner_settings
    from common.errors import UserError

    assert runner_settings.profile_window(["20", "29"]) == (20, 29)
    assert runner_settings.profile_window(None) is None
    for values in (["5"], ["a", "b"], ["9", "3"], ["1", "2", "3"], ["-1", "2"]):
        with pytest.raises(UserError, match=r"--profile_steps=.*give FIRST,LAST"):
            runner_settings.profile_window(values)


def test_float16_and_bfloat16_training_runs(tmp_path):
    for dtype in ("bfloat16", "float16"):
        trainer, model, summary = train_classifier(tmp_path, dtype, steps=4, dtype=dtype)
        assert np.isfinite(summary["loss"])
        assert all(w.dtype == "float32" for w in model.weights)


def test_pretraining_loss_normalises_over_the_global_batch():
    task = PretrainingObjective()
    features = {
        "masked_lm_ids": tf.constant([[1, 2], [3, 0]]),
        "masked_lm_weights": tf.constant([[1.0, 1.0], [1.0, 0.0]]),
        "next_sentence_labels": tf.constant([[0], [1]]),
    }
    logits = tf.zeros([2, 2, 5])
    outputs = {"mlm_logits": logits, "next_sentence_logits": tf.zeros([2, 2])}
    assert {k: float(v) for k, v in task.loss_weights(features).items()} == {
        "masked_lm": 3.0,
        "next_sentence": 2.0,
    }
    sums = task.loss_sums(features, outputs)
    np.testing.assert_allclose(float(sums["masked_lm"]), 3 * np.log(5), rtol=1e-6)
    np.testing.assert_allclose(float(sums["next_sentence"]), 2 * np.log(2), rtol=1e-6)
    no_nsp = PretrainingObjective(use_next_sentence_loss=False)
    assert set(no_nsp.loss_sums(features, outputs)) == {"masked_lm"}


def test_nothing_is_rewritten_by_autograph(tmp_path, monkeypatch):
    """The train loop, the train, evaluation and prediction steps and the input
    pipeline's functions are traced as written (their branches are on Python values, so
    the graphs are the same): AutoGraph's rewriting of every function they call took
    about a quarter of a small fine-tuning run, and parsing the train loop's source for
    its `for` over tf.range half a second more (the loop is a tf.while_loop)."""
    from tensorflow.python.autograph.impl import api

    from data_prep import input_pipeline

    rewritten = []
    convert = api._convert_actual

    def counting(entity, program_ctx):
        rewritten.append(entity.__qualname__)
        return convert(entity, program_ctx)

    monkeypatch.setattr(api, "_convert_actual", counting)
    trainer, _, _ = train_classifier(tmp_path, "run", steps=2)
    dataset = tf.data.Dataset.from_tensor_slices(classification_data(n=16)).batch(8)
    trainer.evaluate(dataset)
    trainer.predict(dataset, _logits_and_labels)
    records = input_pipeline.batched_records(
        tf.data.Dataset.from_tensor_slices([b"a", b"b", b"c"]),
        input_pipeline.RecordMetadata(max_seq_length=4, num_records=3),
        lambda serialized: {"input_mask": tf.ones([tf.size(serialized), 4], tf.int32)},
        batch_size=2,
        is_training=False,
    )
    assert [batch["input_mask"].shape for batch in records] == [(2, 4), (1, 4)]
    assert rewritten == []


def test_prediction_shares_the_evaluations_compiled_step(tmp_path):
    """run_classifier.py and run_ner.py predict with their evaluation's output function
    (`evaluation_outputs`, its sums dropped): one step traced for both passes, and the
    logits of a step of their own."""
    from modeling import classifier_predictions

    trainer, _, _ = train_classifier(tmp_path, "run", steps=2)
    dataset = tf.data.Dataset.from_tensor_slices(classification_data(n=16)).batch(8)
    outputs = classifier_predictions.evaluation_outputs(trainer.objective)
    evaluated, _, metrics = classifier_predictions.predict_for_evaluation(trainer, dataset, outputs)
    logits, labels = classifier_predictions.predict_logits(trainer, dataset, output_fn=outputs)
    assert len(trainer.eval_loop._predict_steps) == 1 and "eval_loss" in metrics
    np.testing.assert_array_equal(logits, evaluated)
    alone, alone_labels = classifier_predictions.predict_logits(trainer, dataset)
    np.testing.assert_array_equal(logits, alone)
    np.testing.assert_array_equal(labels, alone_labels)


@pytest.mark.parametrize("kind", ["classifier", "span", "ner_bilstm", "multiple_choice", "tagger"])
def test_a_bfloat16_model_is_exported_as_a_float32_copy_of_its_weights(kind):
    """`finetuning.float32_model`: what a run's export holds."""
    from modeling import feature_based, finetuning

    config = BertConfig(**TINY)
    build = {
        "classifier": lambda e, c: models.BertClassifier(e, c, 3),
        "span": lambda e, c: models.BertSpanLabeler(e, c),
        "ner_bilstm": lambda e, c: models.BertTokenClassifier(e, c, 5, bilstm_units=4),
        "multiple_choice": lambda e, c: models.BertMultipleChoice(e, c),
        "tagger": lambda e, c: feature_based.BertFeatureBasedTagger(
            e, c, 5, [-1, -2], lstm_units=4
        ),
    }[kind]
    task = types.SimpleNamespace(build_model=build)
    files = types.SimpleNamespace(config=config)
    keras.utils.set_random_seed(3)
    model = build(BertEncoder(config, dtype="bfloat16"), config)
    exported = finetuning.float32_model(task, model, files)
    assert exported is not model and exported.dtype_policy.compute_dtype == "float32"
    assert exported.encoder.dtype_policy.name == "float32"
    unnumbered = lambda weights: [re.sub(r"_\d+/", "/", w.path) for w in weights]  # noqa: E731
    assert unnumbered(exported.weights) == unnumbered(model.weights)  # (Keras numbers LSTMs.)
    for copy, weight in zip(exported.weights, model.weights):
        np.testing.assert_array_equal(copy.numpy(), weight.numpy(), err_msg=weight.path)
    ids = np.array([[2, 17, 33, 41, 3, 0]] * 2, np.int32)
    batch = {"input_word_ids": ids, "input_mask": (ids > 0).astype(np.int32)}
    batch["input_type_ids"] = np.zeros_like(ids)
    if kind == "multiple_choice":
        batch = {k: np.stack([v, v], axis=1) for k, v in batch.items()}
    ours, theirs = exported(batch), model(batch)
    for key, value in ours.items():
        assert value.dtype == tf.float32, key
        np.testing.assert_allclose(value, tf.cast(theirs[key], tf.float32), atol=0.05)
    float32 = build(BertEncoder(config, dtype="float32"), config)
    assert finetuning.float32_model(task, float32, files) is float32  # As it is.

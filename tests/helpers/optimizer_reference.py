"""The optimizers of BERT pre-training written out in NumPy (float64), from their papers
and the original release's description, as oracles for the tests. Nothing here imports
the project.

  original_learning_rate   the original release's schedule: linear warmup from 0, then
                           init_lr * (1 - step / num_train_steps)
  clip_by_global_norm      tf.clip_by_global_norm: g * clip / max(||g||, clip)
  adamw_update             Adam with decoupled weight decay, as the original's
                           AdamWeightDecayOptimizer (no bias correction) or with Adam's
                           bias correction (Kingma & Ba 2015; PyTorch's AdamW)
  lamb_update              LAMB (You et al. 2019, Algorithm 2) with the identity scaling
                           function: the bias-corrected Adam direction plus decay,
                           scaled per variable by ||w|| / ||update|| (1 when either
                           norm is 0)

In BERT every one-dimensional variable is a bias or a LayerNorm scale or offset, and no
other variable is: `excluded(w)` (no weight decay, no trust ratio) is written that way,
independently of any variable name.
"""

from __future__ import annotations

import numpy as np

BETA_1, BETA_2, EPSILON, WEIGHT_DECAY = 0.9, 0.999, 1e-6, 0.01


def original_learning_rate(step: int, init_lr: float, num_train_steps: int, warmup: int):
    """The rate used by the update at 0-based global `step`."""
    if warmup and step < warmup:
        return init_lr * step / warmup
    return init_lr * (1.0 - min(step, num_train_steps) / num_train_steps)


def clip_by_global_norm(grads, clip_norm: float = 1.0):
    norm = np.sqrt(sum(float(np.sum(np.square(g))) for g in grads))
    return [g * (clip_norm / max(norm, clip_norm)) for g in grads], norm


def excluded(w) -> bool:
    return np.ndim(w) == 1


def _moments(g, m, v):
    return BETA_1 * m + (1 - BETA_1) * g, BETA_2 * v + (1 - BETA_2) * np.square(g)


def adamw_update(w, g, m, v, t: int, lr: float, bias_correction: bool):
    """One variable's step t (1-based) -> (w, m, v)."""
    m, v = _moments(g, m, v)
    if bias_correction:
        direction = (m / (1 - BETA_1**t)) / (np.sqrt(v / (1 - BETA_2**t)) + EPSILON)
    else:
        direction = m / (np.sqrt(v) + EPSILON)
    if not excluded(w):
        direction = direction + WEIGHT_DECAY * w
    return w - lr * direction, m, v


def trust_ratio(w, update) -> float:
    w_norm, u_norm = np.linalg.norm(w), np.linalg.norm(update)
    return float(w_norm / u_norm) if w_norm > 0 and u_norm > 0 else 1.0


def lamb_update(w, g, m, v, t: int, lr: float):
    """One variable's step t (1-based) -> (w, m, v, trust ratio)."""
    m, v = _moments(g, m, v)
    update = (m / (1 - BETA_1**t)) / (np.sqrt(v / (1 - BETA_2**t)) + EPSILON)
    ratio = 1.0
    if not excluded(w):
        update = update + WEIGHT_DECAY * w
        ratio = trust_ratio(w, update)
    return w - lr * ratio * update, m, v, ratio


def step_all(state: dict, grads, lr: float, optimizer: str, bias_correction: bool = True):
    """A whole step on state {"w", "m", "v": lists per variable, "iterations": updates
    so far}: gradients clipped, then each variable updated. Returns (new state, the
    trust ratios for "lamb", else None)."""
    grads, _ = clip_by_global_norm([np.asarray(g, np.float64) for g in grads])
    t = state["iterations"] + 1
    out = {"w": [], "m": [], "v": [], "iterations": t}
    ratios = []
    for w, g, m, v in zip(state["w"], grads, state["m"], state["v"]):
        if optimizer == "lamb":
            w, m, v, ratio = lamb_update(w, g, m, v, t, lr)
            ratios.append(ratio)
        else:
            w, m, v = adamw_update(w, g, m, v, t, lr, bias_correction)
        for key, value in (("w", w), ("m", m), ("v", v)):
            out[key].append(value)
    return out, (ratios if optimizer == "lamb" else None)

"""The classification losses against PyTorch's, an independent implementation:
multi-label binary cross-entropy (with a positive weight per label) as
`BCEWithLogitsLoss(pos_weight=...)`, class-weighted cross-entropy as
`CrossEntropyLoss(weight=...)` (a weighted mean), and their evaluation loss."""

import numpy as np
import pytest
import tensorflow as tf

from modeling.objectives import ClassificationObjective

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(3)
LOGITS = (2.0 * RNG.standard_normal((6, 4))).astype(np.float32)


def loss_of(objective, labels):
    features = {"input_word_ids": tf.zeros([6, 5], tf.int32), "label_ids": tf.constant(labels)}
    outputs = {"logits": tf.constant(LOGITS)}
    total = (
        objective.loss_sums(features, outputs)["loss"] / objective.loss_weights(features)["loss"]
    )
    eval_loss = objective.finalize_eval(
        {k: float(v) for k, v in objective.eval_sums(features, outputs).items()}
    )
    return float(total), eval_loss


@pytest.mark.parametrize("pos_weight", [None, [0.5, 3.0, 1.0, 9.0]])
def test_multi_label_loss_is_torch_bce_with_logits(pos_weight):
    labels = (RNG.random((6, 4)) < 0.4).astype(np.int32)
    ours, evaluated = loss_of(
        ClassificationObjective(multi_label=True, class_weights=pos_weight), labels
    )
    weight = None if pos_weight is None else torch.tensor(pos_weight)
    theirs = torch.nn.BCEWithLogitsLoss(pos_weight=weight)(
        torch.tensor(LOGITS), torch.tensor(labels, dtype=torch.float32)
    )
    assert ours == pytest.approx(float(theirs), rel=1e-5)
    assert evaluated == {"eval_loss": pytest.approx(float(theirs), rel=1e-5)}


def test_class_weighted_cross_entropy_is_torch_weighted_mean():
    labels = np.array([0, 3, 3, 1, 2, 3], np.int32)
    weights = [4.0, 2.0, 1.5, 0.25]
    ours, evaluated = loss_of(ClassificationObjective(class_weights=weights), labels)
    theirs = torch.nn.CrossEntropyLoss(weight=torch.tensor(weights))(
        torch.tensor(LOGITS), torch.tensor(labels, dtype=torch.long)
    )
    plain, _ = loss_of(ClassificationObjective(), labels)
    assert ours == pytest.approx(float(theirs), rel=1e-5)
    assert plain == pytest.approx(
        float(torch.nn.CrossEntropyLoss()(torch.tensor(LOGITS), torch.tensor(labels).long())),
        rel=1e-5,
    )
    assert abs(ours - plain) > 0.05  # The weights change the loss.
    assert evaluated["eval_loss"] == pytest.approx(float(theirs), rel=1e-5)
    assert evaluated["eval_accuracy"] == np.mean(LOGITS.argmax(-1) == labels)

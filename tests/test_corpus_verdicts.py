"""Corpus fixes that change nothing on Keras 3, measured: why no rule reports them.

`benchmarks/real_bugs/bugs/*.json` entries with a `verdict` starting "harmless" cite this
module; `benchmarks/real_bugs.py` leaves them out of recall. Each test shows the buggy shape
training exactly like its fix.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
import keras  # noqa: E402


def _net():
    keras.utils.set_random_seed(2)
    return keras.Sequential([keras.Input((3,)), keras.layers.Dense(3), keras.layers.BatchNormalization(),
                             keras.layers.Dense(1)])


def _train(sources_of, steps=3):
    model, optimizer = _net(), keras.optimizers.SGD(0.1)
    x, y = np.ones((8, 3), "float32"), np.zeros((8, 1), "float32")
    losses = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(steps):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
            sources = sources_of(model)
            optimizer.apply_gradients(zip(tape.gradient(loss, sources), sources))
            losses.append(float(loss))
    return losses, [str(w.message) for w in caught]


def test_gradients_asked_for_all_weights_train_like_the_trainable_ones():
    """`model.weights` / `model.variables` as sources (BatchNormalization's statistics included):
    their gradients are None, `apply_gradients` skips them with a warning, training is unchanged."""
    trainable, _ = _train(lambda m: m.trainable_variables)
    everything, messages = _train(lambda m: m.weights)
    assert everything == pytest.approx(trainable)
    assert any("Gradients do not exist" in text for text in messages)


def test_compiled_loss_in_a_train_step_adds_the_sub_models_penalties():
    """Keras 3's `compiled_loss` in a `train_step` override is `compute_loss`, which adds
    `self.losses`: the regularizers of sub-models kept as attributes are not dropped."""
    keras.utils.set_random_seed(3)
    encoder = keras.Sequential([keras.Input((2,)), keras.layers.Dense(
        2, kernel_initializer="ones", kernel_regularizer=keras.regularizers.L2(10.0))])

    class Trainer(keras.Model):
        def __init__(self, encoder):
            super().__init__()
            self.encoder = encoder

        def call(self, x):
            return self.encoder(x)

    trainer = Trainer(encoder)
    trainer.compile(optimizer="sgd", loss="mse")
    x, y = np.ones((4, 2), "float32"), np.zeros((4, 2), "float32")
    prediction = trainer(x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # compiled_loss is deprecated in Keras 3
        total = float(trainer.compiled_loss(y, prediction))
    data = float(keras.losses.MeanSquaredError()(y, prediction))
    assert total == pytest.approx(data + float(sum(encoder.losses)))
    assert float(sum(encoder.losses)) > 1.0


class _ZeroedByOverride(keras.metrics.Metric):
    """Keras 2's `reset_states` overridden to zero every variable (tensorflow/addons' CohenKappa, FBetaScore)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.counts = self.add_weight(name="counts", shape=(2, 2), initializer="zeros")

    def update_state(self, y_true, y_pred, sample_weight=None):
        self.counts.assign_add(tf.ones((2, 2)))

    def result(self):
        return tf.reduce_sum(self.counts)

    def reset_states(self):
        for v in self.variables:
            v.assign(np.zeros((2, 2), "float32"))


def test_a_metric_overriding_only_reset_states_with_zeros_is_still_reset_by_fit():
    """Keras 3's `fit` calls `reset_state`, never `reset_states`; the base `reset_state` zeroes every
    variable, which is all such an override did: each epoch counts only its own 2 batches."""
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse", metrics=[_ZeroedByOverride(name="counts")])
    history = model.fit(np.ones((8, 3)), np.ones((8, 1)), batch_size=4, epochs=3, verbose=0)
    assert history.history["counts"] == [8.0, 8.0, 8.0]

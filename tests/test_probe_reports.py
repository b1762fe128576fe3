"""Every kind of report the runtime probe makes, on real TensorFlow and Keras.

One TensorFlow import for the module. Each test trains a tiny model or a
couple of variables under `tapecheck.probe()` and checks the code, the line
(marked in this file with a trailing `# L:name` comment) and the cause.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

import tapecheck

HERE = os.path.abspath(__file__)
_LINES = Path(HERE).read_text(encoding="utf-8").splitlines()


def line(name: str) -> int:
    hits = [n for n, text in enumerate(_LINES, start=1) if text.rstrip().endswith(f"# L:{name}")]
    assert len(hits) == 1, name
    return hits[0]


def mine(p):
    """(code, line, cause) of the findings in this file."""
    return sorted((f.code, f.line, f.details.get("cause")) for f in p.findings
                  if os.path.realpath(f.path) == os.path.realpath(HERE))


@pytest.fixture
def wb():
    return tf.Variable(2.0, name="w"), tf.Variable(1.0, name="b")


# -- None gradients: TAP101 / TAP102 / TAP103 / TAP104 -------------------------

def test_target_after_the_block_and_a_source_read_outside(wb):
    w, b = wb
    x = tf.constant(3.0)
    with tapecheck.probe() as p:
        with tf.GradientTape() as tape:
            y = w * x
        z = y + b
        grads = tape.gradient(z, [w, b])  # L:late
    assert grads == [None, None]
    # one cause, one finding: `b` unseen by the tape is part of the same late target (no TAP102)
    assert mine(p) == [("TAP101", line("late"), "target-after-block")]
    f101 = next(f for f in p.findings if f.code == "TAP101")
    assert f101.details["sources"] == ["w", "b"] and "`z`" in f101.message
    assert f101.origin == "probe" and f101.hint


def test_target_before_the_block(wb):
    w, _ = wb
    with tapecheck.probe() as p:
        y = w * 3.0
        with tf.GradientTape() as tape:
            pass
        tape.gradient(y, w)  # L:early
    assert ("TAP101", line("early"), "target-before-block") in mine(p)


def test_variable_never_read_by_the_tape(wb):
    w, b = wb
    with tapecheck.probe() as p:
        with tf.GradientTape() as tape:
            loss = w * w
        grads = tape.gradient(loss, [w, b])  # L:unread
    assert grads[0] is not None and grads[1] is None
    assert mine(p) == [("TAP102", line("unread"), "variable-not-read")]
    assert p.findings[0].details["sources"] == ["b"]


def test_keras_model_variable_unused_is_named_by_path():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2), keras.layers.Dense(1)])
    x = tf.ones((4, 3))
    with tapecheck.probe() as p:
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(model.layers[0](x))
        tape.gradient(loss, model.trainable_variables)  # L:keras-unused
    [finding] = p.findings
    assert (finding.code, finding.line) == ("TAP102", line("keras-unused"))
    assert len(finding.details["sources"]) == 2
    assert all(name.endswith(("kernel", "bias")) and "/" in name for name in finding.details["sources"])


def test_tensor_never_watched_and_watched():
    x = tf.constant(3.0)
    with tapecheck.probe() as p:
        with tf.GradientTape() as tape:
            y = x * x
        assert tape.gradient(y, x) is None  # L:unwatched
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = x * x
        assert tape.gradient(y, x) is not None
    assert mine(p) == [("TAP103", line("unwatched"), "tensor-not-watched")]
    assert p.findings[0].details["sources"] == ["x"]


def test_integer_source():
    n = tf.constant(3)
    with tapecheck.probe() as p:
        with tf.GradientTape() as tape:
            tape.watch(n)
            y = tf.cast(n, tf.float32) * 2.0
        tape.gradient(y, n)  # L:int-source
    assert mine(p) == [("TAP103", line("int-source"), "integer-source")]


def test_watch_accessed_variables_false(wb):
    w, _ = wb
    with tapecheck.probe() as p:
        with tf.GradientTape(watch_accessed_variables=False) as tape:
            y = w * w
        tape.gradient(y, w)  # L:no-auto-watch
    assert mine(p) == [("TAP103", line("no-auto-watch"), "variable-not-watched")]


def test_argmax_cuts_the_target_eagerly(wb):
    w, b = wb
    with tapecheck.probe() as p:
        with tf.GradientTape() as tape:
            scores = tf.stack([w * 2.0, b])
            y = tf.cast(tf.argmax(scores), tf.float32)  # L:argmax
        tape.gradient(y, [w, b])
    # one step, eager: the first recording of a tape line runs under the op trace, so the op is named
    assert mine(p) == [("TAP104", line("argmax"), "target-cut-off")]
    assert p.findings[0].details["sources"] == ["w", "b"]
    assert "`ArgMax`" in p.findings[0].message


def test_integer_target(wb):
    w, _ = wb
    with tapecheck.probe() as p:
        with tf.GradientTape() as tape:
            y = tf.cast(w * 3.0, tf.int32)
        tape.gradient(y, w)  # L:int-target
    assert mine(p) == [("TAP104", line("int-target"), "integer-target")]


def test_numpy_round_trip_in_a_custom_loss(wb):
    w, _ = wb

    def numpy_loss(pred):
        return tf.constant(np.mean(pred.numpy() ** 2))

    with tapecheck.probe() as p:
        with tf.GradientTape() as tape:
            loss = numpy_loss(w * tf.ones(3))
        tape.gradient(loss, w)  # L:numpy
    assert mine(p) == [("TAP104", line("numpy"), "target-cut-off")]


def test_traced_function_names_the_op_at_its_own_line(wb):
    w, b = wb

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            y = tf.round(w * x) + b  # L:round
        return tape.gradient(y, [w, b])

    @tf.function
    def step2(x):
        with tf.GradientTape() as tape:
            z = tf.stop_gradient(w * x) * b  # L:stop2
        return tape.gradient(z, [w, b])

    with tapecheck.probe() as p:
        step(tf.constant(1.5))
        step(tf.constant(2.5))  # same signature: not traced again, nothing new
        step2(tf.constant(1.0))
    found = mine(p)
    assert found == [("TAP104", line("round"), "no-differentiable-path"),
                     ("TAP104", line("stop2"), "no-differentiable-path")]
    ops = sorted(f.details["op"] for f in p.findings)
    assert "`Round`" in ops[0] and "`StopGradient`" in ops[1]
    assert all(f.count == 1 for f in p.findings)


def test_traced_function_maps_back_to_the_user_line(wb):
    w, b = wb

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            loss = w * x
        return tape.gradient(loss, [w, b])  # L:traced

    with tapecheck.probe() as p:
        step(tf.constant(1.0))
    assert mine(p) == [("TAP102", line("traced"), "variable-not-read")]


def test_repeats_fold_into_one_finding_with_a_count(wb):
    w, b = wb
    with tapecheck.probe() as p:
        for _ in range(5):
            with tf.GradientTape() as tape:
                loss = w * w
            tape.gradient(loss, [w, b])  # L:repeat
    [finding] = p.findings
    assert (finding.line, finding.count) == (line("repeat"), 5)
    assert "(5 times)" in finding.format()


# -- TAP201 / TAP202 ------------------------------------------------------------

def test_tape_reuse_is_reported_before_the_unchanged_error(wb):
    w, _ = wb
    with tf.GradientTape() as tape:
        y = w * w
    tape.gradient(y, w)
    with pytest.raises(RuntimeError) as plain:
        tape.gradient(y, w)

    with tapecheck.probe() as p:
        with tf.GradientTape() as tape:  # L:reuse-made
            y = w * w
        tape.gradient(y, w)  # L:reuse-first
        with pytest.raises(RuntimeError) as probed:
            tape.gradient(y, w)  # L:reuse-second
        seen_before_raise = list(p.findings)
    assert str(probed.value) == str(plain.value)
    assert [(f.code, f.line) for f in seen_before_raise] == [("TAP201", line("reuse-second"))]
    message = seen_before_raise[0].message
    assert f"line {line('reuse-made')}" in message and f"line {line('reuse-first')}" in message


def test_persistent_tape_used_once(wb):
    w, _ = wb

    def step():
        with tf.GradientTape(persistent=True) as tape:  # L:persistent-once
            y = w * w
        return tape.gradient(y, w)

    def fine():
        with tf.GradientTape(persistent=True) as tape:
            y = w * w
            z = y * w
        grads = tape.gradient(y, w), tape.gradient(z, w)
        del tape
        return grads

    with tapecheck.probe() as p:
        step()
        step()
        fine()
    assert mine(p) == [("TAP202", line("persistent-once"), "persistent-single-use")]
    assert p.findings[0].count == 2


def test_persistent_tape_alive_when_the_probe_ends(wb):
    w, _ = wb
    with tapecheck.probe() as p:
        with tf.GradientTape(persistent=True) as kept:  # L:kept
            y = w * w
            z = y * w
        kept.gradient(y, w), kept.gradient(z, w)
    assert mine(p) == [("TAP202", line("kept"), "persistent-alive-at-exit")]
    del kept


# -- jacobians, nested tapes, TensorFlow's own tapes ---------------------------

def test_jacobian_and_batch_jacobian(wb):
    w, b = wb
    x = tf.ones((2, 3))
    with tapecheck.probe() as p:
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(x)
            y = x * w
        full = tape.jacobian(y, w)
        per_example = tape.batch_jacobian(y, x)
        jac = tape.jacobian(y, [w, b])  # L:jacobian
        del tape
    assert full is not None and per_example is not None and jac[1] is None
    assert mine(p) == [("TAP102", line("jacobian"), "variable-not-read")]


def test_nested_tapes_for_second_derivatives(wb):
    w, _ = wb
    with tapecheck.probe() as p:
        with tf.GradientTape() as outer:
            with tf.GradientTape() as inner:
                y = w * w * w
            dy = inner.gradient(y, w)
        d2y = outer.gradient(dy, w)
    assert float(d2y) == pytest.approx(12.0)
    assert p.findings == []


def test_tensorflows_own_tapes_are_not_reported(wb):
    w, _ = wb
    dense = keras.layers.Dense(2)
    dense.build((None, 3))
    block = tf.recompute_grad(lambda x: dense(x))

    def numpy_square(x):
        return tf.py_function(lambda t: t * t, [x], tf.float32)

    with tapecheck.probe() as p:
        x = tf.ones((1, 3))
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(block(x)) + numpy_square(w)
        grads = tape.gradient(loss, dense.trainable_variables + [w])
    assert all(g is not None for g in grads)
    assert p.findings == []


# -- Keras: fit, train_step, optimizers, metrics -------------------------------

class LateRegularizer(keras.Model):
    def __init__(self):
        super().__init__()
        self.dense = keras.layers.Dense(1, kernel_regularizer="l2")

    def call(self, x):
        return self.dense(x)

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(y - self(x, training=True)))
        loss = loss + tf.add_n(self.losses)
        grads = tape.gradient(loss, self.trainable_variables)  # L:train-step
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        return {"loss": loss}


def test_fit_with_a_custom_train_step():
    model = LateRegularizer()
    model.compile(optimizer="sgd")
    x, y = np.ones((8, 2), "float32"), np.ones((8, 1), "float32")
    with tapecheck.probe() as p, pytest.raises(ValueError, match="No gradients provided"):
        model.fit(x, y, epochs=1, batch_size=4, verbose=0)
    found = mine(p)
    assert ("TAP101", line("train-step"), "target-after-block") in found
    f101 = next(f for f in p.findings if f.code == "TAP101")
    assert f101.details.get("skipped_by_apply_gradients")


def test_apply_gradients_skips_are_added_to_the_cause(wb):
    w, b = wb
    opt = keras.optimizers.SGD(0.1)
    with tapecheck.probe() as p:
        for _ in range(2):
            with tf.GradientTape() as tape:
                loss = w * w
            grads = tape.gradient(loss, [w, b])  # L:cause
            opt.apply_gradients(zip(grads, [w, b]))  # L:skip
    [finding] = p.findings
    assert (finding.code, finding.line, finding.count) == ("TAP102", line("cause"), 2)
    assert finding.details["skipped_by_apply_gradients"] == ["b"]
    assert finding.details["applied_at"] == [f"{os.path.relpath(HERE)}:{line('skip')}"]


class UnusedWeight(keras.layers.Layer):
    def build(self, shape):
        self.kernel = self.add_weight(shape=(shape[-1], 1), name="kernel")
        self.spare = self.add_weight(shape=(1,), name="spare")

    def call(self, x):
        return x @ self.kernel


def test_apply_gradients_from_keras_own_tape():
    model = keras.Sequential([keras.Input((2,)), UnusedWeight()])
    model.compile(optimizer="sgd", loss="mse")
    with tapecheck.probe() as p:
        model.fit(np.ones((4, 2), "float32"), np.ones((4, 1), "float32"), epochs=1, verbose=0)  # L:fit-skip
    assert mine(p) == [("TAP102", line("fit-skip"), "apply-gradients-none")]
    assert p.findings[0].details["sources"][0].endswith("spare")


def _epochs(metric, reset, reads_per_step=False, epochs=3, pairs=False):
    data = tf.data.Dataset.from_tensor_slices(np.arange(4, dtype="float32")).batch(2)
    for _ in range(epochs):
        if reset:
            metric.reset_state()
        for batch in data:
            metric.update_state(*((batch, batch * 0) if pairs else (batch,)))
            if reads_per_step:
                float(metric.result())  # L:step-read
        float(metric.result())  # L:epoch-read


def test_metric_never_reset():
    with tapecheck.probe() as p:
        _epochs(keras.metrics.Mean(name="train_loss"), reset=False)
    assert mine(p) == [("TAP301", line("epoch-read"), "metric-never-reset")]
    # named as the code holds it (the helper's parameter `metric`), not by Keras's name `train_loss`
    assert p.findings[0].count == 2 and "metric `metric` is read" in p.findings[0].message
    assert p.findings[0].hint == "Call `metric.reset_state()` at the start of each epoch."


def test_metric_reset_every_epoch_is_fine_even_read_every_step():
    with tapecheck.probe() as p:
        _epochs(keras.metrics.Mean(), reset=True, reads_per_step=True)
        _epochs(tf.keras.metrics.MeanAbsoluteError(), reset=True, pairs=True)
    assert p.findings == []


def test_metric_subclass_defined_while_the_probe_runs():
    with tapecheck.probe() as p:
        class Total(keras.metrics.Metric):
            def __init__(self):
                super().__init__(name="total")
                self.total = self.add_variable(shape=(), initializer="zeros", name="t")

            def update_state(self, values):
                self.total.assign_add(tf.reduce_sum(values))

            def result(self):
                return self.total

            def reset_state(self):
                self.total.assign(0.0)

        _epochs(Total(), reset=False)
        _epochs(Total(), reset=True)
    assert mine(p) == [("TAP301", line("epoch-read"), "metric-never-reset")]


def test_metrics_reset_by_fit_and_evaluate_are_not_flagged():
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse", metrics=["mae"])
    data = tf.data.Dataset.from_tensor_slices((np.ones((8, 2), "float32"), np.ones((8, 1), "float32"))).batch(4)
    with tapecheck.probe() as p:
        model.fit(data, epochs=3, verbose=0, validation_data=data)
        model.evaluate(data, verbose=0)
    assert p.findings == []


def test_a_source_the_target_does_not_depend_on_is_not_a_mistake():
    # A physics-informed loss: derivatives of the output with respect to the input
    # make the last layer's bias drop out. TensorFlow returns None for it, rightly.
    net = keras.Sequential([keras.Input((1,)), keras.layers.Dense(4, activation="tanh"), keras.layers.Dense(1)])

    def step(points):
        with tf.GradientTape() as tape:
            with tf.GradientTape() as inner:
                inner.watch(points)
                u = net(points)
            loss = tf.reduce_mean(tf.square(inner.gradient(u, points)))
        return tape.gradient(loss, net.trainable_variables)

    with tapecheck.probe() as p:
        eager = step(tf.ones((3, 1)))
        traced = tf.function(step)(tf.ones((3, 1)))
    assert eager[-1] is None and traced[-1] is None
    assert p.findings == []


def test_a_tape_made_before_the_probe_started_is_left_alone(wb):
    w, b = wb
    with tf.GradientTape() as tape:
        y = w * w
    with tapecheck.probe() as p:
        grads = tape.gradient(y, [w, b])
    assert grads[1] is None and p.findings == []


def test_tape_reuse_while_tracing(wb):
    w, _ = wb

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            y = w * x
        first = tape.gradient(y, w)
        return first, tape.gradient(y, w)  # L:traced-reuse

    with tapecheck.probe() as p, pytest.raises(RuntimeError, match="non-persistent GradientTape"):
        step(tf.constant(1.0))
    assert mine(p) == [("TAP201", line("traced-reuse"), "tape-reused")]


def _rank_loss(values):
    return tf.cast(tf.argmax(values), tf.float32)  # L:helper-argmax


def test_eager_loop_names_the_cutting_op_from_the_next_step(wb):
    w, b = wb
    v = tf.Variable([1.0, 2.0], name="v")
    with tapecheck.probe() as p:
        for _ in range(3):
            with tf.GradientTape() as tape:
                y = _rank_loss(v * 2.0)
            tape.gradient(y, v)
            with tf.GradientTape() as tape:
                z = tf.reduce_sum(tf.round(v * w)) + b  # L:eager-round
            tape.gradient(z, [v, b])
    assert mine(p) == [("TAP104", line("helper-argmax"), "target-cut-off"),
                       ("TAP104", line("eager-round"), "no-differentiable-path")]
    assert [f.count for f in sorted(p.findings)] == [3, 3]  # the first step, seen before the op was known, too
    assert "`ArgMax`" in p.findings[0].details["op"] or "`ArgMax`" in p.findings[1].details["op"]


def test_two_metrics_read_on_one_line_give_one_finding_each_with_the_epochs():
    data = tf.data.Dataset.from_tensor_slices(np.arange(4, dtype="float32")).batch(2)
    loss, acc = keras.metrics.Mean(name="train_loss"), keras.metrics.Mean(name="train_acc")
    with tapecheck.probe() as p:
        for _ in range(3):
            for batch in data:
                loss.update_state(batch)
                acc.update_state(batch * 2)
            text = "{} {}".format(loss.result(), acc.result())  # L:one-line
    assert text
    assert mine(p) == [("TAP301", line("one-line"), "metric-never-reset")] * 2
    by_name = {f.details["sources"][0]: f for f in p.findings}
    assert sorted(by_name) == ["acc", "loss"]  # the user's names, not Keras's `train_acc`, `train_loss`
    for name, finding in by_name.items():
        assert f"`{name}`" in finding.message and finding.details["sources"] == [name]
        assert finding.count == 2 and finding.details["stale_epochs"] == [2, 3]  # 3 epochs: 2 and 3 carry the earlier

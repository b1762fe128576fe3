"""The probe's runtime twins of the second-wave rules, and suppressions, on real TensorFlow.

Each program is a small script written to a temporary folder and run as
`__main__` under a probe in this process (one TensorFlow import for the module).
"""

from __future__ import annotations

import contextlib
import io
import runpy
import textwrap
import warnings
from pathlib import Path

import pytest

pytest.importorskip("tensorflow")

import tapecheck


@pytest.fixture(scope="module")
def run_script(tmp_path_factory):
    folder = tmp_path_factory.mktemp("twins")

    def run(name: str, source: str):
        """(findings, path): the script's findings under the probe, its own errors kept quiet."""
        path = folder / name
        path.write_text(textwrap.dedent(source), encoding="utf-8")
        with tapecheck.probe() as p, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with contextlib.suppress(Exception), contextlib.redirect_stdout(io.StringIO()):
                runpy.run_path(str(path), run_name="__main__")
        return p.findings, path

    return run


def lines_of(findings, path: Path, code: str):
    return sorted(f.line for f in findings if f.code == code and Path(f.path).resolve() == path.resolve())


def line_with(path: Path, text: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), start=1) if text in line)


SUPPRESSED = """
    import tensorflow as tf
    w = tf.Variable(2.0)
    for _ in range(2):
        with tf.GradientTape() as tape:
            y = w * w
        z = y + 1.0
        tape.gradient(z, w)  # tapecheck: ignore[TAP101]
    with tf.GradientTape() as tape:
        y = w * w
    z = y + 1.0
    tape.gradient(z, w)  # noqa: TAP102 (another code: does not hide TAP101)
    with tf.GradientTape() as tape:
        y = w * w
    z = y + 1.0
    tape.gradient(z, w)  # noqa: TAP101
"""


def test_suppression_comments_hide_probe_findings_on_their_line(run_script):
    findings, path = run_script("suppressed.py", SUPPRESSED)
    assert lines_of(findings, path, "TAP101") == [line_with(path, "another code")]
    assert len(findings) == 1  # the report, the CLI and the pytest plugin all read `findings`


PAIRING = """
    import tensorflow as tf
    w = tf.Variable(1.0, name="w")
    b = tf.Variable(0.0, name="b")
    opt = tf.keras.optimizers.SGD(0.1)

    def loss():
        return (3.0 * w + b - 1.0) ** 2

    @tf.function
    def traced_step():
        with tf.GradientTape() as tape:
            value = loss()
        grads = tape.gradient(value, [w, b])
        opt.apply_gradients(zip(grads, [b, w]))  # traced: swapped

    for _ in range(2):
        with tf.GradientTape() as tape:
            value = loss()
        grads = tape.gradient(value, [w, b])
        opt.apply_gradients(zip(grads, [b, w]))  # eager: swapped
        with tf.GradientTape() as tape:
            value = loss()
        grads = tape.gradient(value, [w, b])
        opt.apply_gradients(zip(grads, [w, b]))  # right
        with tf.GradientTape() as tape:
            value = loss()
        grads, _ = tf.clip_by_global_norm(tape.gradient(value, [w, b]), 1.0)
        opt.apply_gradients(zip(grads, [w, b]))  # clipped, right
    traced_step()
    traced_step()
"""


def test_gradients_applied_to_other_variables_are_reported_at_apply_gradients(run_script):
    findings, path = run_script("pairing.py", PAIRING)
    eager, traced = line_with(path, "# eager: swapped"), line_with(path, "# traced: swapped")
    assert lines_of(findings, path, "TAP401") == sorted([eager, traced])
    by_line = {f.line: f for f in findings if f.code == "TAP401"}
    assert by_line[eager].count == 2 and by_line[traced].count == 1  # traced once: Python runs while tracing
    assert "`[w, b]`" in by_line[eager].message and "`[b, w]`" in by_line[eager].message
    assert "another order" in by_line[eager].message


STATE = """
    import tensorflow as tf

    class Seen(tf.keras.metrics.Mean):
        def __init__(self):
            super().__init__(name="seen")  # a user's subclass: reported where it is constructed

    w = tf.Variable(1.0)
    kept = tf.keras.optimizers.SGD(0.1)

    def step(opt):
        with tf.GradientTape() as tape:
            loss = (w - 3.0) ** 2
        opt.apply_gradients(zip(tape.gradient(loss, [w]), [w]))
        return loss

    for epoch in range(2):
        per_epoch = tf.keras.metrics.Mean()  # per epoch: fine
        for batch in range(4):
            adam = tf.keras.optimizers.Adam(0.1)  # optimizer per step
            seen = Seen()  # metric per step
            scale = tf.Variable(2.0)  # variable per step
            per_epoch.update_state(step(adam if batch % 2 else kept))
            seen.update_state(scale)
"""


def test_state_made_at_every_step_is_reported_once_with_a_count(run_script):
    findings, path = run_script("state.py", STATE)
    expected = [line_with(path, f"# {kind} per step") for kind in ("optimizer", "metric", "variable")]
    assert lines_of(findings, path, "TAP402") == sorted(expected)
    counts = {f.line: f.count for f in findings if f.code == "TAP402"}
    assert set(counts.values()) == {8}  # two epochs of four steps: every object made at that line
    causes = {f.details["cause"] for f in findings if f.code == "TAP402"}
    assert causes == {"optimizer-created-in-step", "metric-created-in-step", "variable-created-in-step"}


STATE_TRACED_STEP = """
    import tensorflow as tf
    w = tf.Variable(1.0)
    opt = tf.keras.optimizers.SGD(0.1)

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum((w * x - 3.0) ** 2)
        opt.apply_gradients(zip(tape.gradient(loss, [w]), [w]))  # runs in Python only while tracing
        return loss

    data = tf.data.Dataset.range(8).map(lambda i: tf.cast(i, tf.float32)).batch(2)
    for epoch in range(2):
        per_epoch = tf.keras.metrics.Mean()  # per epoch: four batches each, fine
        for x in data:
            per_batch = tf.keras.metrics.Mean()  # metric per step
            loss = step(x)
            per_batch.update_state(loss)
            per_epoch.update_state(loss)
"""


def test_steps_of_a_traced_function_are_counted_by_the_batches_they_draw(run_script):
    findings, path = run_script("state_traced.py", STATE_TRACED_STEP)
    assert lines_of(findings, path, "TAP402") == [line_with(path, "# metric per step")]
    assert findings[0].count == 8


TRAINING_FLAG = """
    import tensorflow as tf

    def make():
        return tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(4),
                                    tf.keras.layers.BatchNormalization(), tf.keras.layers.Dropout(0.5)])

    student, teacher = make(), make()
    opt = tf.keras.optimizers.SGD(0.01)
    x = tf.ones((4, 3))

    def train_step():
        with tf.GradientTape() as tape:
            soft = teacher(x)  # teacher, not trained: fine
            hard = teacher(x, training=False)
            loss = tf.reduce_mean((student(x) - soft - hard) ** 2)  # eager: no flag
        grads = tape.gradient(loss, student.trainable_variables)
        opt.apply_gradients(zip(grads, student.trainable_variables))

    @tf.function
    def traced_step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(student(x) ** 2)  # traced: no flag
        grads = tape.gradient(loss, student.trainable_variables)
        opt.apply_gradients(zip(grads, student.trainable_variables))

    def good_step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(student(x, training=True) ** 2)
        grads = tape.gradient(loss, student.trainable_variables)
        opt.apply_gradients(zip(grads, student.trainable_variables))

    def val_step():
        return student(x, training=True)  # validation in training mode

    def mc_dropout_predictions():
        return [student(x, training=True) for _ in range(2)]  # on purpose: not a validation step

    for _ in range(2):
        train_step()
        traced_step()
        good_step()
        val_step()
        mc_dropout_predictions()
"""


def test_layers_in_the_wrong_mode_are_reported_at_the_model_call(run_script):
    findings, path = run_script("training_flag.py", TRAINING_FLAG)
    expected = [line_with(path, text) for text in ("# eager: no flag", "# traced: no flag", "# validation in")]
    assert lines_of(findings, path, "TAP403") == sorted(expected)
    counts = {f.line: f.count for f in findings if f.code == "TAP403"}
    assert counts[line_with(path, "# eager: no flag")] == 2  # once per step, not once per layer
    assert counts[line_with(path, "# traced: no flag")] == 1  # Python runs while tracing only
    assert {f.details["cause"] for f in findings if f.code == "TAP403"} == {
        "training-flag-missing", "training-flag-in-validation"}

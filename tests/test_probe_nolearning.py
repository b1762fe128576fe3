"""Silent no-learning on real TensorFlow: variables whose gradient is zero and which never move.

The fixtures in `fixtures/probe/nolearning/` are bad/good twins written like
real projects (a GAN trainer class, `fit` with `compile(loss=...)`, a
`train_step` override, a `tf.function` step with a helper in another module)
and the cases that must stay silent (weight decay, a frozen backbone, a
gradient zero on some steps only, a learning rate of 0). They run in this
process as `__main__` under a probe (one TensorFlow import for the module).
"""

from __future__ import annotations

import contextlib
import io
import re
import runpy
import sys
import warnings
from pathlib import Path

import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from probe_objects import assert_restored, patched_objects
from tensorflow.python.eager import context

import tapecheck

FOLDER = Path(__file__).resolve().parents[1] / "fixtures" / "probe" / "nolearning"
EXPECT = re.compile(r"#\s*probe-expect:\s*(TAP\d{3})")
BAD = sorted(FOLDER.glob("bad_*.py"))
GOOD = sorted(FOLDER.glob("good_*.py"))

# fixture -> (the model named in the finding, the variables named, the updates counted)
EXPECTED = {
    "bad_gan_trainer_sign.py": ("generator", ["dense/kernel", "dense/bias", "dense_1/kernel", "dense_1/bias"], 8),
    "bad_fit_compile_loss.py": ("classifier", ["dense/kernel", "dense/bias", "dense_1/kernel", "dense_1/bias"], 8),
    "bad_train_step_override.py": ("encoder", ["dense/kernel", "dense/bias", "dense_1/kernel", "dense_1/bias"], 8),
    "bad_tf_function_step.py": ("net", ["encoder/kernel", "encoder/bias"], 6),
}
SIGN = [p for p in BAD if p.name in EXPECTED]


@contextlib.contextmanager
def fixture_path():
    sys.path.insert(0, str(FOLDER))
    saved = sys.argv
    try:
        yield
    finally:
        sys.argv = saved
        sys.path.remove(str(FOLDER))


def run(path: Path, probe=True):
    """(findings, the fixture's globals after `main()`), the program run as `__main__`."""
    with fixture_path(), warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        sys.argv = [str(path)]
        if not probe:
            return [], runpy.run_path(str(path), run_name="__main__")
        with tapecheck.probe() as p:
            kept = runpy.run_path(str(path), run_name="__main__")
    return p.findings, kept


def expected_lines(path: Path):
    """The `# probe-expect:` lines of the fixture and of the helpers it imports (`_binarize.py`)."""
    text = path.read_text(encoding="utf-8")
    files = [path] + [helper for helper in sorted(FOLDER.glob("_*.py")) if f"from {helper.stem} import" in text]
    return sorted((f.name, number, match.group(1))
                  for f in files
                  for number, line in enumerate(f.read_text(encoding="utf-8").splitlines(), start=1)
                  if (match := EXPECT.search(line)))


def kinds(names):
    """Keras numbers layers per process (`dense_6`): compare the names without the counters."""
    return [re.sub(r"_\d+(?=/)", "", name) for name in names]


def test_every_bad_fixture_has_a_good_twin():
    assert {p.name.removeprefix("bad_") for p in BAD} <= {p.name.removeprefix("good_") for p in GOOD} | {
        "gan_trainer_sign.py", "wgan_critic_dead_units.py"}  # twins: good_gan_trainer_ste.py, good_wgan_critic.py
    assert (FOLDER / "good_gan_trainer_ste.py").exists() and (FOLDER / "good_wgan_critic.py").exists()
    assert len(BAD) == 5


@pytest.mark.parametrize("path", SIGN, ids=lambda p: p.name)
def test_a_zero_gradient_is_reported_at_the_op_with_the_model_variables_and_steps(path):
    findings, _ = run(path)
    assert sorted((Path(f.path).name, f.line, f.code) for f in findings) == expected_lines(path)
    (finding,) = findings
    model, names, steps = EXPECTED[path.name]
    assert finding.details["cause"] == "zero-gradient" and finding.details["op"] == "Sign"
    assert finding.details["model"] == model and kinds(finding.details["sources"]) == kinds(names)
    assert finding.details["steps"] == steps
    # the static rule's wording, so that lint and the probe read alike
    assert "`tf.sign()`" in finding.message and "has a zero gradient" in finding.message
    assert finding.message.endswith("the weights never move, and nothing warns")
    assert f"of `{model}`" in finding.message and f"over {steps} updates" in finding.message
    assert finding.details["applied_at"] and finding.hint


def test_dead_units_are_reported_and_a_cancelling_zero_is_not():
    # good_wgan_critic.py: the output bias of `mean(critic(fake)) - mean(critic(real))` has a zero gradient at
    # every step and never moves; it is silent (parametrized below). Its twin's zero-initialised hidden ReLU
    # layer is a real cut: the critic's weights behind it are reported, its output bias still is not.
    path = FOLDER / "bad_wgan_critic_dead_units.py"
    findings, kept = run(path)
    assert sorted((Path(f.path).name, f.line, f.code) for f in findings) == expected_lines(path)
    by_model = {f.details["model"]: f for f in findings}
    assert kinds(by_model["critic"].details["sources"]) == ["dense/kernel", "dense/bias", "dense/kernel"]  # counters dropped
    assert kinds(by_model["generator"].details["sources"]) == [
        "dense/kernel", "dense/bias", "dense/kernel", "dense/bias"]
    assert all(f.details["op"] == "" and f.details["steps"] == 8 for f in findings)
    assert "units that are never active" in by_model["critic"].message


@pytest.mark.parametrize("path", GOOD, ids=lambda p: p.name)
def test_the_twins_and_the_deliberate_cases_are_silent(path):
    findings, _ = run(path)
    assert findings == []


def test_weights_are_bit_identical_with_and_without_the_probe_and_the_finding_is_true():
    path = FOLDER / "bad_gan_trainer_sign.py"
    with fixture_path(), warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        module = runpy.run_path(str(path), run_name="nolearning_fixture")
        plain = module["main"]()
        with tapecheck.probe() as p:
            probed = module["main"]()
        keras.utils.set_random_seed(3)  # as main() does: the weights the trainer started from
        start = module["GANTrainer"]()
    (finding,) = p.findings
    assert finding.details["model"] == "generator"
    for net in ("generator", "discriminator"):
        for a, b in zip(getattr(plain, net).get_weights(), getattr(probed, net).get_weights()):
            assert a.tobytes() == b.tobytes()
    # what the finding says is so: the generator never moved, the discriminator (not named) learned
    assert all((a == b).all() for a, b in zip(start.generator.get_weights(), probed.generator.get_weights()))
    assert any((a != b).any() for a, b in zip(start.discriminator.get_weights(), probed.discriminator.get_weights()))


def sign_loop(steps, learning_rate=0.1):
    keras.utils.set_random_seed(1)
    x, y = tf.random.normal((8, 3), seed=1), tf.ones((8, 1))
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    optimizer = keras.optimizers.SGD(learning_rate)
    before = [w.copy() for w in model.get_weights()]
    for _ in range(steps):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.sign(model(x)) - y))  # L:sign
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
    assert all((a == b).all() for a, b in zip(before, model.get_weights()))  # it really never moved
    return model


def test_one_eager_step_is_not_enough_two_are():
    # A first gradient of zeros can be an initialization (zero kernels): it takes a second update.
    with tapecheck.probe() as p:
        sign_loop(1)
    assert p.findings == []
    with tapecheck.probe() as p:
        sign_loop(2)
    assert [(f.code, f.details["steps"], f.details["model"]) for f in p.findings] == [("TAP104", 2, "model")]
    assert p.findings[0].line == _line("sign")


def test_a_zero_gradient_with_a_learning_rate_of_zero_is_still_reported():
    # good_learning_rate_zero.py is silent (its gradients are not zero); the zero gradient is the finding
    with tapecheck.probe() as p:
        sign_loop(3, learning_rate=0.0)
    assert [f.details["cause"] for f in p.findings] == ["zero-gradient"]


def test_everything_put_back_and_dropped_also_with_the_op_callback_still_armed():
    before = patched_objects()
    with tapecheck.probe() as p:
        learning = p._hooks[2].learning
        sign_loop(1)  # the first step arms an op callback for the next one, which never comes
        assert learning.trace is not None and context.context().op_callbacks
    assert context.context().op_callbacks == []
    assert_restored(before)
    assert learning.entries == {} and learning.trace is None and learning.copied == 0


def test_a_traced_step_adds_nothing_to_the_graph():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    optimizer = keras.optimizers.SGD(0.1)

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.sign(model(x)))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    x = tf.ones((2, 3))
    plain = [op.type for op in step.get_concrete_function(x).graph.get_operations()]
    model2 = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    with tapecheck.probe() as p:
        model = model2  # the step's closure reads `model`: a new model, traced again under the probe
        optimizer = keras.optimizers.SGD(0.1)
        traced = step.get_concrete_function(tf.ones((4, 3)))
        for _ in range(2):
            step(tf.ones((4, 3)))
    assert sorted(op.type for op in traced.graph.get_operations()) == sorted(plain)
    assert [f.details["cause"] for f in p.findings] == ["zero-gradient"]


def _line(name: str) -> int:
    lines = Path(__file__).read_text(encoding="utf-8").splitlines()
    (hit,) = [n for n, text in enumerate(lines, start=1) if text.rstrip().endswith(f"# L:{name}")]
    return hit


def test_zeros_asked_for_are_reported_at_the_op_that_has_no_gradient():
    # `unconnected_gradients=ZERO` turns round's None into zeros: nothing raises, nothing learns
    # (plain tf.Variables: TensorFlow 2.21 cannot make those zeros for Keras 3 variables)
    kernel = tf.Variable(tf.random.normal((3, 2), seed=2), name="kernel")
    bias = tf.Variable(tf.zeros((2,)), name="bias")
    optimizer = keras.optimizers.Adam(0.01)
    x = tf.random.normal((8, 3), seed=2)
    with tapecheck.probe() as p:
        for _ in range(3):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.round(x @ kernel + bias))  # L:round
            grads = tape.gradient(loss, [kernel, bias], unconnected_gradients=tf.UnconnectedGradients.ZERO)
            optimizer.apply_gradients(zip(grads, [kernel, bias]))
    (finding,) = p.findings
    assert (finding.code, finding.line, finding.details["op"]) == ("TAP104", _line("round"), "Round")
    assert finding.message.startswith("`tf.round()` (the `Round` op) has no gradient")
    assert finding.details["sources"] == ["kernel", "bias"] and finding.details["steps"] == 3


def test_a_nested_probe_gets_the_finding_of_what_it_watched():
    # as under `pytest --tapecheck` or `tapecheck probe`: the running probe's hooks serve both
    outer = tapecheck.probe().start()
    try:
        with tapecheck.probe() as before:
            sign_loop(2, learning_rate=0.1)
        with tapecheck.probe() as clean:
            keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])  # nothing trained here
    finally:
        outer.stop()
    assert [f.details["cause"] for f in before.findings] == ["zero-gradient"]
    assert clean.findings == []  # the earlier model's entries are not this probe's
    assert [f.details["cause"] for f in outer.findings] == ["zero-gradient"]  # and the outer one keeps it


@pytest.mark.parametrize("clip", ["global_norm", "value", "loss_scale", "none_good"])
def test_a_traced_zero_survives_clipping_and_loss_scaling(clip):
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2), keras.layers.Dense(1)])
    optimizer = keras.optimizers.SGD(0.1)
    if clip == "loss_scale":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    x = tf.random.normal((8, 3), seed=4)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            out = model(x)
            loss = tf.reduce_mean(tf.square(out - 1.0) if clip == "none_good" else tf.sign(out))
        grads = tape.gradient(loss, model.trainable_variables)
        if clip == "global_norm":
            grads, _ = tf.clip_by_global_norm(grads, 1.0)
        elif clip == "value":
            grads = [tf.clip_by_value(g, -0.5, 0.5) for g in grads]
        optimizer.apply_gradients(zip(grads, model.trainable_variables))

    with tapecheck.probe() as p:
        for _ in range(3):
            step()
    assert [f.details["cause"] for f in p.findings] == ([] if clip == "none_good" else ["zero-gradient"])

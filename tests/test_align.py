"""`tapecheck align`: correct loops match fit to float precision; each injected mistake is
caught at the step where it first shows. Real TensorFlow, tiny models, the fixtures in
fixtures/align. TensorFlow is imported once, for the whole module."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

tf = pytest.importorskip("tensorflow")
import keras
import numpy as np
from click.testing import CliRunner
from expectations import expected, found

from tapecheck.align import AlignError, align, cli, load_loop
from tapecheck.lint import lint_file

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures" / "align"
FLOAT_PRECISION = 1e-6  # what a correct loop must reach; the default tolerance is 1e-5


def fixture(name: str) -> str:
    return str(FIXTURES / name)


@pytest.fixture(scope="module")
def good():
    return load_loop(fixture("good_loop.py"))


_RESULTS = {}


def aligned(name: str):
    """align() on a fixture with its defaults, run once per module (tracing costs seconds)."""
    if name not in _RESULTS:
        _RESULTS[name] = align(spec=load_loop(fixture(name)))
    return _RESULTS[name]


# --- loops that are right ------------------------------------------------------------


def test_reference_loop_aligns_with_fit_to_float_precision():
    result = align(spec=load_loop(fixture("reference_loop.py")))
    assert result.aligned, result.summary()
    assert len(result.fit_losses) == 12  # 354 rows in batches of 64: 6 steps (the last short), 2 epochs
    assert result.max_loss_rel_diff <= FLOAT_PRECISION
    assert result.max_weight_rel_diff <= FLOAT_PRECISION
    # The epoch metrics the reference reports (weighted by batch size, reset each epoch) are fit's.
    assert [sorted(epoch) for epoch in result.epoch_metrics] == [["loss", "mae"], ["loss", "mae"]]
    for epoch in result.epoch_metrics:
        for fit_value, your_value in epoch.values():
            assert abs(fit_value - your_value) <= FLOAT_PRECISION * abs(fit_value)


def test_good_loop_aligns_and_fit_loss_is_per_batch_not_the_running_mean():
    result = aligned("good_loop.py")
    assert result.aligned, result.summary()
    assert result.max_loss_rel_diff <= FLOAT_PRECISION and result.max_weight_rel_diff <= FLOAT_PRECISION
    # fit prints the running mean; align compares each batch's own loss. With equal batches
    # the running mean after step k is the mean of the first k batch losses, which differs.
    running_mean = np.cumsum(result.fit_losses[:4]) / np.arange(1, 5)
    assert not np.allclose(running_mean[1:], result.fit_losses[1:4])
    # The last epoch's reported loss is the mean of that epoch's batch losses.
    fit_epoch_2, _ = result.epoch_metrics[1]["loss"]
    assert fit_epoch_2 == pytest.approx(np.mean(result.fit_losses[4:]), rel=1e-6)


def test_a_correct_loop_written_differently_aligns_within_rounding(good):
    """A hand-written mean squared error adds in another order: float32 rounding, no more."""

    def train_step(model, optimizer, x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(y - model(x, training=True)))
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        return loss

    result = align(good.build_model, good.make_optimizer, good.loss_fn, good.data, train_step=train_step, batch_size=32)
    assert result.aligned, result.summary()
    assert result.max_loss_rel_diff < 1e-6


def test_fit_is_keras_own_train_step_even_when_the_model_class_overrides_it(good):
    """Otherwise fit would run the user's override and compare a loop with itself."""

    class GradientAscent(keras.Sequential):
        def train_step(self, data):  # a broken override: climbs the loss
            x, y = data
            with tf.GradientTape() as tape:
                loss = -self.compute_loss(x, y, self(x, training=True))
            self.optimizer.apply_gradients(zip(tape.gradient(loss, self.trainable_variables), self.trainable_variables))
            return {"loss": loss}

    def build_model():
        return GradientAscent(good.build_model().layers)

    result = align(build_model, good.make_optimizer, good.loss_fn, good.data, train=good.train, batch_size=32)
    assert result.aligned, result.summary()


# --- injected mistakes ----------------------------------------------------------------

MISTAKES = [
    # file, first diverging step, epoch, what diverges, its name contains
    ("no_training_flag.py", 1, 1, "loss", "loss"),
    ("sum_reduction.py", 1, 1, "loss", "loss"),
    ("wrong_target.py", 1, 1, "variable", "kernel"),
    ("metric_not_reset.py", 8, 2, "epoch metric", "loss"),
    ("optimizer_recreated.py", 2, 1, "variable", "sequential"),
]


@pytest.mark.parametrize("name,step,epoch,kind,variable", MISTAKES, ids=[m[0] for m in MISTAKES])
def test_each_injected_mistake_is_caught_at_its_first_diverging_step(name, step, epoch, kind, variable):
    result = aligned(name)
    assert not result.aligned
    divergence = result.divergence
    assert (divergence.step, divergence.epoch, divergence.kind) == (step, epoch, kind), divergence.describe()
    assert variable in divergence.name
    assert divergence.rel_diff > 1e-3  # a real difference, not rounding
    assert f"step {step} (epoch {epoch})" in result.summary()


def test_metric_never_reset_leaves_every_step_aligned():
    result = aligned("metric_not_reset.py")
    assert result.max_loss_rel_diff <= FLOAT_PRECISION and result.max_weight_rel_diff <= FLOAT_PRECISION
    fit_1, yours_1 = result.epoch_metrics[0]["loss"]
    fit_2, yours_2 = result.epoch_metrics[1]["loss"]
    assert yours_1 == pytest.approx(fit_1, rel=1e-6)
    assert yours_2 == pytest.approx((fit_1 + fit_2) / 2, rel=1e-6)  # epochs 1 and 2 together


def test_with_weights_compared_every_n_steps_the_per_step_loss_still_finds_the_first_step():
    # wrong_target's weights part at step 1; compared only at step 3, the loss of step 2
    # (computed from the parted weights) is what names the divergence first.
    result = align(spec=load_loop(fixture("wrong_target.py")), weights_every=3)
    assert (result.divergence.kind, result.divergence.step) == ("loss", 2)
    assert "weights compared every 3 steps" in result.summary()


def test_a_loop_that_stops_early_is_a_step_count_divergence(good):
    def train(model, optimizer, dataset, epochs):
        steps = good.train(model, optimizer, dataset, epochs)
        for item in steps:
            if isinstance(item, dict):
                return  # stops after the first epoch
            yield item

    result = align(good.build_model, good.make_optimizer, good.loss_fn, good.data, train=train, batch_size=32)
    assert (result.divergence.kind, result.divergence.step, result.divergence.epoch) == ("steps", 5, 2)
    assert "fit ran 8 steps, your loop yielded 4" in result.summary()


def test_tolerance_is_the_one_given():
    assert aligned("sum_reduction.py").divergence.rel_diff > 10
    result = align(spec=load_loop(fixture("sum_reduction.py")), rtol=1e9)
    assert result.aligned
    # and align leaves TensorFlow's op determinism off, as it found it
    from tensorflow.python.framework import config as tf_config

    assert not tf_config.is_op_determinism_enabled()


# --- the command ----------------------------------------------------------------------


def run_cli(*args):
    return CliRunner().invoke(cli, [str(arg) for arg in args])


def test_cli_passes_on_the_good_loop_and_writes_the_plot(tmp_path):
    plot = tmp_path / "align.png"
    outcome = run_cli(fixture("good_loop.py"), "--plot", plot)
    assert outcome.exit_code == 0, outcome.output
    assert "good_loop.py: aligned: 8 steps" in outcome.output
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_fails_on_a_mistake_naming_the_step_and_the_variable(tmp_path):
    plot = tmp_path / "diverged.png"
    outcome = run_cli(fixture("wrong_target.py"), "--plot", plot)
    assert outcome.exit_code == 1, outcome.output
    # Keras numbers layer names per process (dense, dense_1, ...): the path is fit's model's.
    assert re.search(r"diverged at step 1 \(epoch 1\): variable sequential(_\d+)?/dense(_\d+)?/kernel\[\d+, \d+\] differs", outcome.output)
    assert plot.stat().st_size > 1000


def write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    "source,message",
    [
        ("def build_model(): pass\n", "missing make_optimizer, loss_fn, data, train or train_step"),
        ("import nothing_by_this_name\nbuild_model = make_optimizer = loss_fn = data = train_step = None\n",
         "importing it raised ModuleNotFoundError: No module named 'nothing_by_this_name'"),
        ("def broken(:\n", "syntax error at line 1: invalid syntax (nothing was run)"),
    ],
    ids=["protocol", "import", "syntax"],
)
def test_cli_bad_files_give_one_line_naming_the_file(tmp_path, source, message):
    path = write(tmp_path / "loop.py", source)
    outcome = run_cli(path)
    assert outcome.exit_code == 2
    assert outcome.output.count("\n") == 1 and "Traceback" not in outcome.output
    assert outcome.output.startswith(f"{path}: error: ") and message in outcome.output


def test_cli_missing_file_is_one_line(tmp_path):
    outcome = run_cli(tmp_path / "absent.py")
    assert outcome.exit_code == 2 and outcome.output == f"{tmp_path / 'absent.py'}: error: no such file\n"


def test_cli_loop_that_raises_names_the_step(tmp_path):
    path = write(
        tmp_path / "raises.py",
        "import keras\n"
        "import numpy as np\n"
        "def build_model(): return keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])\n"
        "def make_optimizer(): return keras.optimizers.SGD(0.1)\n"
        "loss_fn = keras.losses.MeanSquaredError()\n"
        "def data(): return np.ones((8, 2)), np.ones((8, 1))\n"
        "def train(model, optimizer, dataset, epochs):\n"
        "    yield 1.0\n"
        "    raise ValueError('shapes do not match')\n",
    )
    outcome = run_cli(path)
    assert outcome.exit_code == 2
    assert outcome.output == f"{path}: error: your loop raised at step 2: ValueError: shapes do not match\n"


def test_cli_plot_to_an_unwritable_place_is_one_line(tmp_path):
    plot = tmp_path / "no" / "such" / "dir.png"
    outcome = run_cli(fixture("good_loop.py"), "--plot", plot)
    assert outcome.exit_code == 2 and outcome.output == f"{plot}: error: cannot write the plot: no such directory\n"


def test_api_rejects_data_that_is_not_x_y_or_is_reshuffled(good):
    with pytest.raises(AlignError, match=r"data\(\) must return"):
        align(good.build_model, good.make_optimizer, good.loss_fn, lambda: np.zeros(3), train=good.train)

    def reshuffled():
        x, y = good.data()
        return tf.data.Dataset.from_tensor_slices((x, y)).shuffle(128, reshuffle_each_iteration=True).batch(32)

    with pytest.raises(AlignError, match="order changes between iterations"):
        align(good.build_model, good.make_optimizer, good.loss_fn, reshuffled, train=good.train)


# --- the fixtures under the linter -----------------------------------------------------


@pytest.mark.parametrize("name", sorted(p.name for p in FIXTURES.glob("*.py")))
def test_align_fixtures_lint_as_annotated(name):
    """The loops that align are clean; the metric never reset and the optimizer made each step
    (in a helper of good_loop.py, which the program model reads) are lint findings too."""
    path = FIXTURES / name
    report = lint_file(str(path))
    assert not report.errors
    assert found(report.findings) == expected(path.read_text())


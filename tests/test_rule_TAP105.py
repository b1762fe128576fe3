"""TAP105 (regularization-losses-dropped): the silent twins in fixtures/silent, linted and run.

The mistake raises nothing, so the fixtures cannot go in fixtures/model: here the bad
trainer is linted (exactly its `# expect:` finding), its twin is clean, and under real
TensorFlow the bad one's kernels end up clearly larger than the twin's, whose weights
match `fit` on the same model from the same start.
"""

from __future__ import annotations

import runpy
import sys
import warnings
from pathlib import Path

import pytest

from expectations import expected, found
from tapecheck.lint import lint_paths

ROOT = Path(__file__).resolve().parents[1] / "fixtures" / "silent"
NAME = "regularized_trainer.py"


def findings_of(path: Path):
    report = lint_paths([str(path.parent)], jobs=1)
    assert report.errors == []
    return [f for f in report.findings if Path(f.path).resolve() == path.resolve() and f.code == "TAP105"]


def test_the_bad_trainer_gives_exactly_its_finding():
    path = ROOT / "bad" / NAME
    assert found(findings_of(path)) == [e for e in expected(path.read_text()) if e[1] == "TAP105"] != []
    assert "line 9 of _regularized_models.py" in findings_of(path)[0].message


def test_the_corrected_twin_is_clean():
    path = ROOT / "good" / NAME
    assert expected(path.read_text()) == []
    report = lint_paths([str(path.parent)], jobs=1)
    assert report.errors == [] and [f for f in report.findings if Path(f.path).name == NAME] == []


def _load(kind: str):
    """The fixture run as a module (not `__main__`), with its sibling module importable."""
    folder = ROOT / kind
    sys.path.insert(0, str(folder))
    try:
        return runpy.run_path(str(folder / NAME), run_name=f"tap105_{kind}")
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop("_regularized_models", None)


def _kernel_norm(model):
    import numpy as np

    return float(sum(np.sum(np.square(v.numpy())) for v in model.trainable_variables if "kernel" in v.path))


def test_under_tensorflow_the_bad_trainer_skips_the_penalty_fit_applies():
    pytest.importorskip("tensorflow")
    import keras
    import numpy as np

    warnings.simplefilter("ignore")
    bad, good = _load("bad"), _load("good")
    epochs = 30
    bad_model = bad["main"](epochs).model
    good_trainer = good["main"](epochs)
    # the penalty is what differs: without it the kernels are clearly larger
    assert _kernel_norm(bad_model) > 1.3 * _kernel_norm(good_trainer.model)

    # the corrected twin is what fit does, from the same start
    keras.utils.set_random_seed(0)
    x, y = good["data"]()
    start = good["Trainer"]()
    start.model(x[:1])
    initial = start.model.get_weights()
    twin = good["Trainer"]()
    twin.model(x[:1])
    twin.model.set_weights(initial)
    twin.fit(x, y, epochs=epochs)
    fitted = type(start.model)()
    fitted(x[:1])
    fitted.set_weights(initial)
    fitted.compile(optimizer=keras.optimizers.SGD(learning_rate=0.05), loss="mse")
    fitted.fit(x, y, batch_size=len(x), epochs=epochs, shuffle=False, verbose=0)
    for mine, theirs in zip(twin.model.get_weights(), fitted.get_weights()):
        np.testing.assert_allclose(mine, theirs, rtol=1e-4, atol=1e-5)
    # and the bad trainer, from that same start, is not
    drop = bad["Trainer"]()
    drop.model(x[:1])
    drop.model.set_weights(initial)
    drop.fit(x, y, epochs=epochs)
    assert _kernel_norm(drop.model) > 1.3 * _kernel_norm(fitted)


# -- the unsafe fix ---------------------------------------------------------------------------
TWINS = Path(__file__).resolve().parents[1] / "fixtures" / "probe" / "twins15"


def _copy_bad_programs(folder: Path) -> dict[str, bytes]:
    import shutil

    for path in [ROOT / "bad" / NAME, ROOT / "bad" / "_regularized_models.py", TWINS / "_data.py",
                 TWINS / "bad_regularized_trainer.py", TWINS / "bad_sparse_autoencoder.py"]:
        shutil.copy(path, folder / path.name)
    return {p.name: p.read_bytes() for p in folder.glob("*.py")}


def _lint_cli(*args):
    from click.testing import CliRunner

    from tapecheck.cli import main

    return CliRunner().invoke(main, ["lint", "--no-cache", *args], catch_exceptions=False)


def test_the_unsafe_fix_adds_the_models_losses_inside_the_tape_and_the_files_lint_clean(tmp_path):
    before = _copy_bad_programs(tmp_path)
    assert len([f for f in lint_paths([str(tmp_path)], jobs=1).findings if f.code == "TAP105"]) == 3

    _lint_cli("--fix", str(tmp_path))  # safe fixes only: TAP105's is unsafe
    assert {p.name: p.read_bytes() for p in tmp_path.glob("*.py")} == before

    _lint_cli("--fix", "--unsafe-fixes", str(tmp_path))
    changed = {p.name: p.read_text() for p in tmp_path.glob("*.py") if p.read_bytes() != before[p.name]}
    assert sorted(changed) == ["bad_regularized_trainer.py", "bad_sparse_autoencoder.py", NAME]
    # the model as each step names it, added where the tape computes the loss
    assert "            loss = self.data_loss(y, self.model(x, training=True)) + sum(self.model.losses)\n" in \
        changed["bad_regularized_trainer.py"]
    assert "            loss = reconstruction_error(x, reconstruction) + sum(self.losses)\n" in \
        changed["bad_sparse_autoencoder.py"]
    assert "            loss = mse(y, pred) + sum(self.model.losses)\n" in changed[NAME]
    report = lint_paths([str(tmp_path)], jobs=1)
    assert report.errors == [] and [f for f in report.findings if f.code == "TAP105"] == []


AMBIGUOUS = """
import tensorflow as tf
model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1, kernel_regularizer="l2")])
opt = tf.keras.optimizers.SGD(0.1)
def step(x, y, robust):
    with tf.GradientTape() as tape:
        pred = model(x, training=True)
        if robust:
            loss = tf.reduce_mean(tf.abs(y - pred))
        else:
            loss = tf.reduce_mean(tf.square(y - pred))
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
def step_outside(x, y):
    loss = tf.reduce_mean(tf.square(y - model(x, training=True)))
    with tf.GradientTape() as tape:
        pred = model(x, training=True)
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
def step_conditional(x, y, robust):
    with tf.GradientTape() as tape:
        pred = model(x, training=True)
        loss = tf.reduce_mean(tf.abs(y - pred)) if robust else tf.reduce_mean(tf.square(y - pred))
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
"""


def test_the_fix_is_offered_only_where_it_is_unambiguous(tmp_path):
    from tapecheck.lint.fixing import fix_source

    path = tmp_path / "steps.py"
    path.write_text(AMBIGUOUS)
    findings = {f.line: f for f in lint_paths([str(path)], jobs=1).findings if f.code == "TAP105"}
    lines = AMBIGUOUS.splitlines()
    gradient_lines = [n for n, line in enumerate(lines, 1) if "tape.gradient" in line]
    assert sorted(findings) == gradient_lines  # every step drops the penalty
    branches, outside, conditional = (findings[n] for n in gradient_lines)
    assert branches.fix is None  # two assignments reach the call: which one?
    assert outside.fix is None  # the loss is not computed inside the tape
    assert conditional.fix is not None and not conditional.fix.safe
    fixed = fix_source(path.read_bytes(), str(path), unsafe=True).fixed.decode()
    assert ("        loss = (tf.reduce_mean(tf.abs(y - pred)) if robust else tf.reduce_mean(tf.square(y - pred)))"
            " + sum(model.losses)\n") in fixed
    assert fixed.count("sum(model.losses)") == 1


def test_the_fixed_trainer_trains_like_its_corrected_twin(tmp_path):
    pytest.importorskip("tensorflow")
    import keras
    import numpy as np

    _copy_bad_programs(tmp_path)
    _lint_cli("--fix", "--unsafe-fixes", str(tmp_path / "bad_regularized_trainer.py"))
    warnings.simplefilter("ignore")
    trained = []
    for path in (tmp_path / "bad_regularized_trainer.py", TWINS / "good_regularized_trainer.py"):
        sys.path.insert(0, str(path.parent))
        try:
            namespace = runpy.run_path(str(path), run_name="tap105_fixed")
            keras.utils.set_random_seed(0)
            trained.append(namespace["Trainer"]().fit(namespace["regression_dataset"](), epochs=3).get_weights())
        finally:
            sys.path.remove(str(path.parent))
            sys.modules.pop("_data", None)
    for fixed, twin in zip(*trained):
        np.testing.assert_allclose(fixed, twin, rtol=1e-6, atol=1e-7)

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

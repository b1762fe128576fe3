"""TAP106 (variable-derived-outside-call): the silent twins in fixtures/silent, linted and run.

Under real TensorFlow the bad layer's kernel, derived in `build`, leaves its variables
`g` and `v` with None gradients: they never move, only the bias trains. The twin, which
derives the kernel in `call`, moves them. Nothing raises in either.
"""

from __future__ import annotations

import runpy
import warnings
from pathlib import Path

import pytest

from expectations import expected, findings_of, found

ROOT = Path(__file__).resolve().parents[1] / "fixtures" / "silent"
NAME = "weight_norm_layer.py"


def test_the_bad_layer_gives_exactly_its_finding():
    path = ROOT / "bad" / NAME
    findings = findings_of(path)
    assert found(findings) == expected(path.read_text()) == [(23, "TAP106")]
    assert "`call` uses it (line 26)" in findings[0].message


def test_the_corrected_twin_is_clean():
    path = ROOT / "good" / NAME
    assert expected(path.read_text()) == [] and findings_of(path) == []


def test_under_tensorflow_the_derived_kernel_leaves_its_variables_untrained():
    pytest.importorskip("tensorflow")
    import numpy as np

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # apply_gradients warns about the skipped variables
        bad = runpy.run_path(str(ROOT / "bad" / NAME), run_name="tap106_bad")["main"]()
        good = runpy.run_path(str(ROOT / "good" / NAME), run_name="tap106_good")["main"]()
    for (layer, before, grads), derived in ((bad, True), (good, False)):
        names = [w.name for w in layer.trainable_variables]
        for name, weight in zip(names, layer.trainable_variables):
            gradients = [step[names.index(name)] for step in grads]
            moved = not np.allclose(weight.numpy(), before[name])
            if name in ("g", "v"):
                assert all(g is None for g in gradients) == derived, name
                assert moved != derived, name
            else:  # the bias trains in both
                assert all(g is not None for g in gradients) and moved, name

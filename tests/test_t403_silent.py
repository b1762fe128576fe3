"""TAP403's shapes from real fixed bugs, each run under real TensorFlow both ways.

`fixtures/model/silent/{bad,good}/t403_*.py`: the bad twin gives exactly its `# expect:`
findings (tests/test_model_silent.py checks every silent fixture's lint), and here its
`run()` shows the misbehaviour in numbers next to the good twin's.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "fixtures" / "model" / "silent"


def run(kind: str, name: str, *args):
    pytest.importorskip("tensorflow")
    folder = str(ROOT / kind)
    sys.path.insert(0, folder)
    try:
        return runpy.run_path(str(ROOT / kind / f"{name}.py"))["run"](*args)
    finally:
        sys.path.remove(folder)
        for module in [n for n, m in sys.modules.items() if folder in str(getattr(m, "__file__", "") or "")]:
            del sys.modules[module]  # each folder has its own `_t403_nets`


def test_a_wrapper_that_runs_the_wrapped_layers_call_directly_never_drops_out():
    assert run("bad", "t403_wrapper_direct_call") is False  # training-mode passes are identical
    assert run("good", "t403_wrapper_direct_call") is True  # and the block's own Dropout, given no flag, drops


def test_a_block_that_hard_codes_training_true_is_random_at_inference():
    assert run("bad", "t403_block_hardcoded_training") is False
    assert run("good", "t403_block_hardcoded_training") is True


def test_an_evaluation_step_copied_from_the_training_step_is_random_and_moves_the_statistics():
    same, moved = run("bad", "t403_eval_step_copied")
    assert same is False and moved > 0.01
    assert run("good", "t403_eval_step_copied") == (True, 0.0)


def test_a_critic_trained_without_its_flag_keeps_its_batch_norm_statistics_still():
    assert run("bad", "t403_star_import_trainer") == 0.0
    assert run("good", "t403_star_import_trainer") > 0.01


def test_a_train_step_calling_self_without_training_freezes_the_backbone_statistics_under_fit():
    assert run("bad", "t403_detector_train_step") == 0.0
    assert run("good", "t403_detector_train_step") > 0.1


def test_keras_hands_the_callers_training_to_sublayers_called_without_it():
    """Why TAP403 stays silent on a layer that does not pass `training` on (seven fixes in the
    real-bug corpus did only that): Keras 3's call context carries it, to a sublayer called in
    `call` and to one called through a helper function."""
    pytest.importorskip("tensorflow")
    import numpy as np
    import keras

    def apply(mlp, x):
        return mlp(x)

    class Block(keras.layers.Layer):
        def __init__(self):
            super().__init__()
            self.drop = keras.layers.Dropout(0.5)
            self.mlp = keras.Sequential([keras.layers.Dense(16), keras.layers.Dropout(0.5)])

        def call(self, x, training=None):
            return self.drop(x), apply(self.mlp, x)

    block, x = Block(), np.ones((8, 16), "float32")
    for training in (True, False):
        (direct, helper), (direct_again, helper_again) = block(x, training=training), block(x, training=training)
        assert bool((direct.numpy() == 0).any()) is training  # dropped only in training mode
        assert np.allclose(helper.numpy(), helper_again.numpy()) is not training  # random only in training mode

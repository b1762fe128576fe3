"""Rules with their own byte screen: spellings the rule resolves must pass the screen.

(tests/test_performance_design.py checks every fixture and example with and without the
screen; these are the spellings those files do not use.)
"""

from __future__ import annotations

import pytest

from tapecheck.lint.engine import lint_python

SIDE_EFFECT_BODY = """
def step(x):
    return float(tf.reduce_sum(x))
"""

SPELLINGS = {
    "TAP501-alias": "import tensorflow as tf2\n@tf2.function" + SIDE_EFFECT_BODY.replace("tf.", "tf2."),
    "TAP501-compat": "import tensorflow as tf\n@tf.compat.v2.function" + SIDE_EFFECT_BODY,
    "TAP501-from-import": "import tensorflow as tf\nfrom tensorflow import (\n    keras,\n    function,\n)\n@function" + SIDE_EFFECT_BODY,
    "TAP501-wrapped": "import tensorflow as tf\ndef step(x):\n    return float(tf.reduce_sum(x))\nstep = tf.function(step)\n",
    "TAP301-split-read": (
        "import tensorflow as tf\nacc = tf.keras.metrics.Mean()\nfor epoch in range(3):\n"
        "    for x in data:\n        acc.update_state(x)\n    print(acc.\\\n        result())\n"
    ),
    "TAP302-spaced-lr": "import tensorflow as tf\nopt = tf.keras.optimizers.Adam(lr = 0.1)\n",
    "TAP502-comment-between": (
        "import tensorflow as tf\ndef stop(x):\n    return (tf.reduce_all(x)  # done?\n            is\n            not False)\n"
    ),
    "TAP502-singleton-first": "import tensorflow as tf\ndef stop(x):\n    return (True)is(tf.reduce_all(x))\n",
    "TAP502-crlf-comment": "import numpy as np\r\ndef f(x):\r\n    return (np.all(x) is  # c\r\n            0)\r\n",
    "TAP304-continued-fit": (
        "import tensorflow as tf\nfrom tensorflow import keras\nclass Regressor(keras.Model):\n"
        "    def __init__(self):\n        super().__init__()\n        self.dense = keras.layers.Dense(1)\n"
        "    def call(self, x):\n        return self.dense(x)\n"
        "    def train_step(self, data):\n        x, y = data\n"
        "        with tf.GradientTape() as tape:\n            loss = tf.reduce_mean(tf.square(y - self(x, training=True)))\n"
        "        grads = tape.gradient(loss, self.trainable_variables)\n"
        "        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))\n"
        "        return {\"loss\": loss}\n"
        "def train(x, y):\n    model = Regressor()\n    model.compile(optimizer=\"adam\")\n"
        "    return (model.  # Keras runs it\n            fit)(x, y, epochs=10)\n"
    ),
    "TAP403-spaced-flag": (
        "import keras\nmodel = keras.Sequential([keras.layers.Dense(4), keras.layers.Dropout(0.5)])\n"
        "def val_step(x):\n    return model(x, training = True)\n"
    ),
}


@pytest.mark.parametrize("name", sorted(SPELLINGS))
def test_the_screen_lets_through_every_spelling_a_rule_fires_on(name):
    source = SPELLINGS[name]
    unscreened = lint_python(source, "spelling.py", screen=False)
    code = name.split("-")[0]
    assert code in {f.code for f in unscreened}, "the spelling must make the rule fire"
    assert lint_python(source, "spelling.py") == unscreened


# The other direction: a screen that lets everything through costs a parse per file, and
# nothing else shows it (the findings are the same). A file with a trigger but without the
# rest of what the rule needs is screened out.
NOT_ENOUGH = {
    "TAP104": b"import tensorflow as tf\nclass Net:\n    def build(self):\n        self.w = self.add_weight(shape=(2,))\n",
    "TAP106": b"import tensorflow as tf\nw = tf.Variable(1.0)\n",
    "TAP105": b"import tensorflow as tf\nwith tf.GradientTape() as tape:\n    pass\n",
    "TAP301": b"import keras\nm = keras.metrics.Mean()\n",
    # `is None` everywhere, `is` in prose, a number in a name: no `is` beside True/False/a number
    "TAP502": b"import tensorflow as tf\ndef f(x, axis=None):\n    # this is fine\n    return x is None or axis is not None\n",
    # a plain loop's step function, never run by `fit`/`evaluate`
    "TAP304": b"import tensorflow as tf\ndef train_step(x):\n    return x\nfor x in data:\n    train_step(x)\nmodel.fitness()\n",
}


@pytest.mark.parametrize("code", sorted(NOT_ENOUGH))
def test_the_screen_rejects_a_file_with_only_part_of_what_the_rule_needs(code):
    from tapecheck.lint.engine import rule_screen
    from tapecheck.rules import RULES_BY_CODE

    assert rule_screen(RULES_BY_CODE[code])(NOT_ENOUGH[code]) is False


# Searches rewritten to start with a literal (found at memchr speed) must answer as the
# patterns they replace did: the same for the Keras 2 marker and the `loss=` keyword, a
# superset for the imports of TensorFlow.
import re  # noqa: E402

MARKER_CASES = [
    b"import tf_keras\n", b"from tf_keras import layers\n", b"import\ttf_keras as k\n", b"xfrom tf_keras import a\n",
    b"import tf_keras2\n", b"os.environ['TF_USE_LEGACY_KERAS'] = '1'\n", b"tf_keras = 1\n", b"# tf_keras\n", b"",
]
LOSS_CASES = [
    b"model.compile(loss=my_loss)\n", b"model.compile(loss = \\\n  focal)\n", b"x = val_loss=3\n", b"loss='mse'\n",
    b"total_loss=x\n", b"(loss=f)", b"loss=f", b"_loss=f\n", b"9loss=f\n", b".loss=f\n", b"loss=\n",
]
IMPORT_CASES = [
    b"import tensorflow as tf\n", b"from tensorflow import function\n", b"from tensorflow.compat.v2 import (\n  function)\n",
    b"import tensorflow.compat.v1 as tf\nfrom tensorflow import keras\n", b"from x import tensorflow\n", b"import os\n",
    b"from tensorflow import keras, \\\n  function as f\n",
]


@pytest.mark.parametrize("source", MARKER_CASES)
def test_the_keras2_marker_search_answers_as_its_pattern(source):
    from tapecheck.lint.parallel import KERAS2_MARKER, keras2_marked

    assert keras2_marked(source) is (KERAS2_MARKER.search(source) is not None)


@pytest.mark.parametrize("source", LOSS_CASES)
def test_the_loss_keyword_search_answers_as_the_word_bounded_pattern(source):
    from tapecheck.rules._common import _loss_keyword

    bounded = re.compile(rb"\bloss[ \t]*=[ \t\\\n]*[^\s\"'#]")
    assert _loss_keyword(source) is (bounded.search(source) is not None)


@pytest.mark.parametrize("source", IMPORT_CASES)
def test_the_tensorflow_imports_are_found_as_the_one_pattern_found_them(source):
    from tapecheck.rules.tap501_python_side_effect_in_function import TF_IMPORTS, TF_MODULE

    one = re.compile(
        rb"(?:from[ \t]+" + TF_MODULE + rb"[ \t]+import|import[ \t]+" + TF_MODULE + rb")[ \t]*"
        rb"(\([^)]*\)|(?:[^\n\\]|\\\n)*)"
    )
    found = {(m.start(), m.group(0)) for pattern in TF_IMPORTS for m in pattern.finditer(source)}
    assert {(m.start(), m.group(0)) for m in one.finditer(source)} <= found

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
}


@pytest.mark.parametrize("code", sorted(NOT_ENOUGH))
def test_the_screen_rejects_a_file_with_only_part_of_what_the_rule_needs(code):
    from tapecheck.lint.engine import rule_screen
    from tapecheck.rules import RULES_BY_CODE

    assert rule_screen(RULES_BY_CODE[code])(NOT_ENOUGH[code]) is False

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
    # the compat module imported alone, under its name or another, and its v2 module
    "TAP501-compat-module": "import tensorflow as tf\nfrom tensorflow import compat\n@compat.v2.function" + SIDE_EFFECT_BODY,
    "TAP501-compat-as": "import tensorflow as tf\nfrom tensorflow import compat as tfc\n@tfc.v1.function" + SIDE_EFFECT_BODY,
    "TAP501-v2-module": "import tensorflow as tf\nfrom tensorflow.compat import v2\n@v2.function" + SIDE_EFFECT_BODY,
    "TAP501-second-import": "import os, tensorflow as tf2\n@tf2.function" + SIDE_EFFECT_BODY.replace("tf.", "tf2."),
    "TAP501-wrapped-compat": (
        "import tensorflow as tf\nfrom tensorflow import compat\ndef step(x):\n    return float(tf.reduce_sum(x))\n"
        "step = compat.v1.function(step)\n"
    ),
    # `tf` handed out by a module of the project: the file never says `tensorflow`
    "TAP501-project-tf": "from .common import tf\n@tf.function" + SIDE_EFFECT_BODY,
    "TAP501-star-tf": "from project.common import *\n@tf.function" + SIDE_EFFECT_BODY,
    "TAP501-bracketed-map": (
        "import numpy as np\nimport tensorflow as tf\ndef augment(image):\n    return image + np.random.normal(0.0, 0.1)\n"
        "ds = tf.data.Dataset.from_tensor_slices(images)\nds = (ds.map  # each element\n      )(augment)\n"
    ),
    "TAP501-commented-decorator": "import tensorflow as tf\n@(tf.  # traced\n  function)" + SIDE_EFFECT_BODY,
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
    # a layer made while tracing, the decorator spelled through the compat module or in brackets
    "TAP402-compat-decorator": (
        "import keras\nfrom tensorflow import compat\n@compat.v2.function\ndef predict(x):\n"
        "    return keras.layers.Dense(4)(x)\n"
    ),
    "TAP402-bracketed-decorator": (
        "import keras\nimport tensorflow as tf\n@(\n    tf.function)\ndef predict(x):\n"
        "    return keras.layers.Dense(4)(x)\n"
    ),
    "TAP402-aliased-function": (
        "import keras\nfrom tensorflow import function as traced\n@traced(jit_compile=True)\ndef predict(x):\n"
        "    return keras.layers.Dense(4)(x)\n"
    ),
    "TAP407-bracketed-zip": (
        "def step(opt, grads, variables):\n    pairs = (zip)  (grads, variables)\n"
        "    kept = [(g, v) for g, v in pairs if g is not None]\n    opt.apply(kept)\n"
        "    return [v for _, v in pairs]\n"
    ),
    "TAP407-map": (
        "def norms(values):\n    squares = map(lambda v: v * v, values)\n    total = sum(squares)\n"
        "    return total, max(squares)\n"
    ),
    # lone `\r` line breaks (Python and libcst take them): a comment ends at the `\r`
    "TAP501-cr-commented-map": (
        "import numpy as np\rimport tensorflow as tf\rdef augment(image):\r    return image + np.random.normal(0.0, 0.1)\r"
        "ds = tf.data.Dataset.from_tensor_slices(images)\rds = (ds.map  # each element\r      )(augment)\r"
    ),
    "TAP501-cr-commented-function": "import tensorflow as tf\r@(tf.  # traced\r  function)" + SIDE_EFFECT_BODY.replace("\n", "\r"),
    "TAP402-cr-commented-decorator": (
        "import keras\rimport tensorflow as tf\r@(  # traced\r    tf.function)\rdef predict(x):\r"
        "    return keras.layers.Dense(4)(x)\r"
    ),
    "TAP407-cr-commented-zip": (
        "def step(opt, grads, variables):\r    pairs = (zip  # pairs\r    )(grads, variables)\r"
        "    kept = [(g, v) for g, v in pairs if g is not None]\r    opt.apply(kept)\r"
        "    return [v for _, v in pairs]\r"
    ),
    # a comment between the tokens a screen looks for, or brackets closing before the call
    "TAP301-commented-read": (
        "import tensorflow as tf\nacc = tf.keras.metrics.Mean()\nfor epoch in range(3):\n"
        "    for x in data:\n        acc.update_state(x)\n    print((acc.  # the running mean\n        result()))\n"
    ),
    "TAP403-commented-flag": (
        "import keras\nmodel = keras.Sequential([keras.layers.Dense(4), keras.layers.Dropout(0.5)])\n"
        "def val_step(x):\n    return model(x, training=  # on purpose?\n                 True)\n"
    ),
    "TAP107-bracketed-variable": (
        "import tensorflow as tf\nclass Linear(tf.keras.layers.Layer):\n    def __init__(self, units=4, input_dim=2):\n"
        "        super().__init__()\n        self.w = (tf.Variable)(tf.random.normal((input_dim, units)))\n"
        "    def call(self, x):\n        return tf.matmul(x, self.w)\n"
    ),
    "TAP107-commented-variable": (
        "import tensorflow as tf\nclass Linear(tf.keras.layers.Layer):\n    def __init__(self, units=4, input_dim=2):\n"
        "        super().__init__()\n        self.w = (tf.Variable  # the weights\n            (tf.random.normal((input_dim, units))))\n"
        "    def call(self, x):\n        return tf.matmul(x, self.w)\n"
    ),
    "TAP302-commented-lr": "import tensorflow as tf\nopt = tf.keras.optimizers.Adam(1e-3)\nprint((opt.  # the rate\n    lr))\n",
    "TAP404-commented-apply": (
        "import tensorflow as tf\nclass GANTrainer:\n    def __init__(self, make_gen, make_disc):\n"
        "        self.gen = make_gen()\n        self.disc = make_disc()\n        self.optimizer = tf.keras.optimizers.Adam(2e-4)\n"
        "    def disc_step(self, grads):\n        (self.optimizer  # shared\n            .apply)(grads, self.disc.trainable_variables)\n"
        "    def gen_step(self, grads):\n        (self.optimizer.  # the same one\n            apply)(grads, self.gen.trainable_variables)\n"
        "    def train(self, batches):\n        for d_grads, g_grads in batches:\n            self.disc_step(d_grads)\n"
        "            self.gen_step(g_grads)\n"
    ),
    "TAP403-spaced-flag": (
        "import keras\nmodel = keras.Sequential([keras.layers.Dense(4), keras.layers.Dropout(0.5)])\n"
        "def val_step(x):\n    return model(x, training = True)\n"
    ),
    "TAP403-bracketed-flag": (
        "import keras\nmodel = keras.Sequential([keras.layers.Dense(4), keras.layers.Dropout(0.5)])\n"
        "def val_step(x):\n    return model(x, training=(True))\n"
    ),
    # the optimizer made in the call: a bracket before the comma that ends the first argument
    "TAP104-optimizer-made-in-compile": (
        "import tensorflow as tf\nimport keras\ndef my_loss(y_true, y_pred):\n"
        "    return tf.reduce_mean(tf.round(y_pred) - y_true)\n"
        "model = keras.Sequential([keras.layers.Dense(1)])\nmodel.compile(keras.optimizers.Adam(1e-3), my_loss)\n"
    ),
}


@pytest.mark.parametrize("name", sorted(SPELLINGS))
def test_the_screen_lets_through_every_spelling_a_rule_fires_on(name):
    from tapecheck.rules import RULES_BY_CODE

    source = SPELLINGS[name]
    code = name.split("-")[0]
    # the rule alone: another rule's broader screen must not hide a hole in this one's
    alone = lint_python(source, "spelling.py", [RULES_BY_CODE[code]], screen=False)
    assert code in {f.code for f in alone}, "the spelling must make the rule fire"
    assert lint_python(source, "spelling.py", [RULES_BY_CODE[code]]) == alone
    assert lint_python(source, "spelling.py") == lint_python(source, "spelling.py", screen=False)


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
    # TensorFlow's own `def_function.function`, and `tf.function` in prose with no `tf` imported
    "TAP402": (
        b"from tensorflow.python.eager import def_function\n@def_function.function\ndef f(x):\n"
        b'    """Like a tf.function, a function."""\n    return x\n'
    ),
    "TAP501": (
        b"from tensorflow.python.eager import def_function\nf = def_function.function(g)\n"
        b'"""Wrap it in `tf.function` or `tf.compat.v1.function`."""\n'
    ),
    # a method `map`, words holding `zip` and `filter`, no call of the builtins
    "TAP407": b"import gzip\nfilters = 3\nbitmap = zipfile.ZipFile(x)\nds = ds.map(f).filter(g)\nunzip(x)\n",
}


@pytest.mark.parametrize("source", [
    b"model.  # the net\n    compile(optimizer, my_loss)\n", b"(model.compile)  (opt, \\\n  focal)\n",
    b"model.compile(optimizer,  # then the loss\n    my_loss)\n",
    b"model.compile(keras.optimizers.Adam(1e-3), my_loss)\n", b"model.compile(opt, (my_loss))\n",
    b"model.compile(make_optimizer(lr=[1, 2])['sgd'], losses.focal)\n",
])
def test_the_compiled_loss_screen_reads_the_call_across_token_gaps(source):
    from tapecheck.rules._common import compiles_a_loss

    assert compiles_a_loss(source)


@pytest.mark.parametrize("source", [
    b"model.compile(optimizer)\n", b"model.compile(make_opt(1, 2))\n", b"model.compile([a, b])\n",
    b"model.compile()\nx = f(a, b)\n",
])
def test_the_compiled_loss_screen_turns_away_a_compile_with_no_loss(source):
    from tapecheck.rules._common import compiles_a_loss

    assert not compiles_a_loss(source)


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
    b"from tensorflow import keras, \\\n  function as f\n", b"import os, tensorflow as tf2\n", b"from tensorflow import compat\n",
    b"from tensorflow \\\n  import compat as c\n", b"from tensorflow.compat import v1, v2 as two\n", b"from .common import tf\n",
    b"from project import *\n", b"try: import tensorflow.compat.v2 as tfv2\nexcept ImportError: pass\n",
    b"from tensorflow.python.eager import def_function\nimport tensorflow.python.eager.def_function as df\n",
    b"from tensorflow import (  # the compat module\n    compat as c,\n)\n", b"import tensorflow.function as tff\n",
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
def test_the_tensorflow_import_names_hold_every_name_the_facts_bind_to_tensorflow(source):
    from tapecheck.lint.source import facts_of
    from tapecheck.rules._common import _tensorflow_import_names

    origins = {"tensorflow", "tensorflow.compat", "tensorflow.compat.v1", "tensorflow.compat.v2"}
    origins |= {origin + ".function" for origin in origins}
    bound = {name for name, origin in facts_of(source, "x.py").imports.items() if origin in origins}
    assert {name.encode() for name in bound} - {b"tensorflow"} <= _tensorflow_import_names(source)

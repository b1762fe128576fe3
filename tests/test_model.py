"""The program model: bindings, calls, summaries, bounds, and what must stay silent.

Each case is a real source linted through the real engine (libcst, the facts, the
model); a few ask the model directly."""

from __future__ import annotations

import textwrap

import pytest

from expectations import expected, found
from tapecheck.lint import lint_source
from tapecheck.lint.source import facts_of as _facts
from tapecheck.model import Function, Instance, Klass, model_of


def model(source: str):
    return model_of(_facts(textwrap.dedent(source).encode(), "example.py"))


def check(source: str):
    source = textwrap.dedent(source)
    assert found(lint_source(source, "example.py")) == expected(source)


HEADER = "import numpy as np\nimport tensorflow as tf\n"

SEEN = {
    "a helper's helper, reached through an alias": HEADER + """
def _log(x):
    return np.log(x)  # expect: TAP104
def penalty(pred):
    return tf.reduce_sum(_log(pred))
loss_fn = penalty
def step(model, x):
    with tf.GradientTape() as tape:
        loss = loss_fn(model(x))
    return tape.gradient(loss, model.trainable_variables)
""",
    "a method through self, with a keyword argument": HEADER + """
class Trainer:
    def __init__(self, model):
        self.model = model
    def loss(self, *, pred):
        return tf.constant(float(tf.reduce_mean(pred)))  # expect: TAP104
    def step(self, x):
        with tf.GradientTape() as tape:
            loss = self.loss(pred=self.model(x))
        return tape.gradient(loss, self.model.trainable_variables)
""",
    "an instance of a local Layer held on self": HEADER + """
import keras
class Rounder(keras.layers.Layer):
    def __init__(self):
        super().__init__()
        self.dense = keras.layers.Dense(1)
    def call(self, x):
        return tf.round(self.dense(x))  # expect: TAP104
class Trainer:
    def __init__(self):
        self.net = Rounder()
    def step(self, x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(self.net(x))
        return tape.gradient(loss, self.net.trainable_variables)
""",
    "a Loss subclass instance given to compile": HEADER + """
import keras
class Hinge(keras.losses.Loss):
    def call(self, y_true, y_pred):
        hits = tf.cast(tf.argmax(y_pred, axis=-1), tf.float32)  # expect: TAP104
        return tf.reduce_mean(tf.abs(hits - y_true))
model = keras.Sequential([keras.layers.Dense(1)])
model.compile(optimizer="adam", loss=Hinge())
""",
}

CLEAN = {
    "variables read inside the tape through a closure and a lambda": HEADER + """
def step(model, x, w):
    scale = lambda t: t * w
    def head(t):
        return scale(model(t))
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(head(x))
    return tape.gradient(loss, [w] + model.trainable_variables)
""",
    "one head cut for logging, the other carries the gradient": HEADER + """
def accuracy(y, logits):
    return tf.reduce_mean(tf.cast(tf.argmax(logits, -1) == y, tf.float32))
def loss_and_acc(y, logits):
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits)), accuracy(y, logits)
def step(model, x, y):
    with tf.GradientTape() as tape:
        loss, acc = loss_and_acc(y, model(x))
    return tape.gradient(loss, model.trainable_variables), acc
""",
    "a recursive and a mutually recursive helper (unknown: silent)": HEADER + """
def depth_sum(x, n):
    return x if n == 0 else depth_sum(np.log(x), n - 1)
def ping(x, n):
    return pong(x, n) if n else x
def pong(x, n):
    return ping(np.abs(x), n - 1)
def step(model, x):
    with tf.GradientTape() as tape:
        loss = depth_sum(model(x), 3) + ping(model(x), 2)
    return tape.gradient(loss, model.trainable_variables)
""",
    "a helper whose name is rebound to a parameter": HEADER + """
def loss_fn(x):
    return np.mean(x)
def step(model, x, loss_fn):
    with tf.GradientTape() as tape:
        loss = loss_fn(model(x))
    return tape.gradient(loss, model.trainable_variables)
""",
    "a parameter rebound on one path only": HEADER + """
def clip(pred, hard=False):
    if hard:
        pred = tf.round(pred)
    return tf.reduce_mean(pred)
def step(model, x):
    with tf.GradientTape() as tape:
        loss = clip(model(x))
    return tape.gradient(loss, model.trainable_variables)
""",
    "a state maker guarded to run once, and one called before the loop": HEADER + """
class Trainer:
    def __init__(self, model):
        self.model, self.tracker = model, None
    def make(self):
        return tf.keras.metrics.Mean()
    @tf.function
    def train_step(self, x):
        if self.tracker is None:
            self.tracker = self.make()
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(self.model(x))
        grads = tape.gradient(loss, self.model.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
def make_optimizer():
    return tf.keras.optimizers.Adam()
def fit(model, data):
    opt = make_optimizer()
    for x in data:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(model(x))
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
""",
}


@pytest.mark.parametrize("source", SEEN.values(), ids=SEEN.keys())
def test_the_model_sees_mistakes_away_from_the_tape(source):
    assert expected(source)
    check(source)


@pytest.mark.parametrize("source", CLEAN.values(), ids=CLEAN.keys())
def test_what_the_model_cannot_see_enough_of_stays_silent(source):
    check(source)


def test_bindings_resolve_aliases_instances_attributes_and_closures():
    m = model("""
        import keras
        class Net(keras.Model):
            def call(self, x):
                return x
        def helper(x):
            return x
        alias = helper
        net = Net()
        class Trainer:
            def __init__(self):
                self.net = Net()
            def run(self, x):
                def inner():
                    return alias(x)
                return self.net(x), inner()
    """)
    facts = m.facts
    calls = {c.func.text: c for c in facts.calls}
    assert isinstance(m.binding("alias", calls["alias"].site), Function)
    assert m.resolve(calls["alias"]).name == "helper"
    assert m.resolve(calls["self.net"]).qualname == "Net.call"
    assert isinstance(m.binding("net", calls["self.net"].site), Instance)
    assert isinstance(m.binding("Net", calls["Net"].site), Klass)
    assert m.resolve(calls["Net"]) is None  # a constructor runs __init__, not a summarised call
    assert m.binding("x", calls["alias"].site) is None  # a parameter: unknown


def test_summaries_say_how_the_return_depends_on_each_parameter():
    m = model(HEADER + """
def f(a, b, c):
    t = np.log(a)
    return tf.reduce_sum(t) + b * 2.0
""")
    fn = next(f for f in m.functions.values() if f.name == "f")
    returns = m.summary(fn).returns
    assert returns.live == {"b"}
    assert returns.cuts["a"].what == "`np.log()`" and returns.cuts["a"].site.line == 5
    assert "c" not in returns.cuts and "c" not in returns.live


def chain_program(length: int) -> str:
    chain = "\n".join(f"def f{i}(x):\n    return f{i + 1}(x)" for i in range(length))
    return HEADER + chain + f"\ndef f{length}(x):\n    return np.log(x)\n" + """
def step(model, x):
    with tf.GradientTape() as tape:
        loss = f0(model(x))
    return tape.gradient(loss, model.trainable_variables)
"""


def test_a_call_chain_is_followed_to_its_cut():
    findings = lint_source(chain_program(20), "example.py")
    assert [f.code for f in findings] == ["TAP104"] and "`f20` (line 44)" in findings[0].message and findings[0].line == 44


def test_a_huge_call_chain_stays_bounded_and_silent():
    """Past MAX_CALL_DEPTH calls the model knows nothing, and says nothing (no crash, no guess)."""
    assert lint_source(chain_program(3000), "example.py") == []


def test_a_tape_handed_to_a_helper_of_another_module_that_asks_it_in_a_loop(tmp_path):
    """Every "line N" of the message says its file: the loop and the call are in helpers.py."""
    from tapecheck.lint import lint_paths

    (tmp_path / "helpers.py").write_text(textwrap.dedent("""\
        def per_task(tape, losses, variables):
            grads = []
            for loss in losses:
                grads.append(tape.gradient(loss, variables))
            return grads
        """))
    (tmp_path / "train.py").write_text(textwrap.dedent("""\
        import tensorflow as tf
        from helpers import per_task

        def step(model, x, ys):
            with tf.GradientTape() as tape:
                losses = [tf.reduce_mean(o - y) for o, y in zip(model(x, training=True), ys)]
            return per_task(tape, losses, model.trainable_variables)
        """))
    (finding,) = lint_paths([str(tmp_path / "train.py")], jobs=1).findings
    assert (finding.code, finding.line) == ("TAP201", 7)
    assert "in the loop at line 3 of helpers.py, in `per_task` (line 4 of helpers.py)" in finding.message


@pytest.mark.parametrize("layout", ["through-a-local-helper", "through-a-third-module"])
def test_each_line_of_a_handed_tape_message_names_its_own_file(tmp_path, layout):
    """The gradient is asked in helpers.py, reached through a helper of train.py or of a third
    module: "line 4" is helpers.py's, and says so (it said "line 4", and "line 4 of middle.py")."""
    from tapecheck.lint import lint_paths

    (tmp_path / "helpers.py").write_text(textwrap.dedent("""\
        def per_task(tape, losses, variables):
            grads = []
            for loss in losses:
                grads.append(tape.gradient(loss, variables))
            return grads
        """))
    (tmp_path / "middle.py").write_text("from helpers import per_task\n\n\ndef middle(tape, losses, variables):\n"
                                        "    return per_task(tape, losses, variables)\n")
    head = ("from helpers import per_task\n\n\ndef middle(tape, losses, variables):\n    return per_task(tape, losses, variables)\n"
            if layout == "through-a-local-helper" else "from middle import middle\n\n\n\n\n")
    (tmp_path / "train.py").write_text("import tensorflow as tf\n" + head + textwrap.dedent("""\
        def step(model, x, ys):
            with tf.GradientTape() as tape:
                losses = [tf.reduce_mean(o - y) for o, y in zip(model(x, training=True), ys)]
            return middle(tape, losses, model.trainable_variables)
        """))
    (finding,) = lint_paths([str(tmp_path / "train.py")], jobs=1).findings
    assert (finding.code, finding.line) == ("TAP201", 10)
    asked = "in the loop at line 3 of helpers.py, in `per_task` (line 4 of helpers.py)"
    if layout == "through-a-local-helper":
        asked += ", called from `middle` (line 6);"  # line 6 of train.py: `return per_task(...)`
    assert asked in finding.message


def test_the_model_knows_which_names_hold_a_keras_model(tmp_path):
    """`holds_a_model`: built here or by a function of another module, handed to a trainer's
    constructor, `self` in a Model subclass, `self.model` in a callback; unknown is False."""
    from tapecheck.lint.engine import read_source
    from tapecheck.model import model_of

    (tmp_path / "nets.py").write_text(textwrap.dedent("""\
        import keras
        def build():
            return keras.Sequential([keras.layers.Dense(1)])
        def build_named():
            inputs = keras.Input((3,))
            model = keras.Model(inputs, keras.layers.Dense(1)(inputs))
            return model
    """), encoding="utf-8")
    (tmp_path / "train.py").write_text(textwrap.dedent("""\
        import keras
        from nets import build, build_named
        class Net(keras.Model):
            def call(self, x):
                return self.save_weights("a.weights.h5")
        class Plain:
            def run(self):
                return self.save_weights("a.weights.h5")
        class Trainer:
            def __init__(self, model):
                self.model = model
            def end(self):
                self.model.save_weights("b.weights.h5")
        class Saver(keras.callbacks.Callback):
            def on_epoch_end(self, epoch, logs=None):
                self.model.save_weights("c.weights.h5")
        def keep(thing):
            thing.save_weights("d.weights.h5")
        loaded = keras.models.load_model("m.keras")
        Trainer(build()).end()
        keep(object())
        loaded.save_weights("e.weights.h5")
        named = build_named()
        named.save_weights("f.weights.h5")
    """), encoding="utf-8")
    path = str(tmp_path / "train.py")
    m = model_of(_facts(read_source(path), path))
    saves = {c.site.line: c for c in m.facts.calls if c.method == "save_weights"}
    holds = {line: m.holds_a_model(call.receiver, call.site) for line, call in saves.items()}
    assert holds == {5: True, 8: False, 13: True, 16: True, 18: False, 22: True, 24: True}


def test_the_model_knows_which_models_are_built_when_made(tmp_path):
    """`holds_a_model(..., built=True)`: a functional model (here or returned by another module's
    builder), a Sequential that starts with its input, an application, a loaded model; not a
    Sequential without input, not a subclass, not a parameter (measured on Keras 3.15: `model.built`)."""
    from tapecheck.lint.engine import read_source
    from tapecheck.model import model_of

    (tmp_path / "nets.py").write_text(textwrap.dedent("""\
        import keras
        def functional():
            inputs = keras.Input((3,))
            model = keras.Model(inputs=inputs, outputs=keras.layers.Dense(1)(inputs))
            return model
        def unbuilt():
            return keras.Sequential([keras.layers.Dense(1)])
    """), encoding="utf-8")
    (tmp_path / "train.py").write_text(textwrap.dedent("""\
        import keras
        from nets import functional, unbuilt
        class Net(keras.Model):
            def call(self, x):
                return x
        a = functional()
        b = unbuilt()
        c = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
        d = keras.Sequential([keras.layers.Dense(1, input_shape=(3,))])
        e = keras.applications.MobileNetV2(weights=None)
        f = keras.models.load_model("m.keras")
        g = Net()
        h = keras.Model()
        def given(model):
            return model
        for name in (a, b, c, d, e, f, g, h):
            print(name)
    """), encoding="utf-8")
    path = str(tmp_path / "train.py")
    m = model_of(_facts(read_source(path), path))
    site = next(c.site for c in m.facts.calls if c.func.text == "print")
    built = {name: m.holds_a_model(name, site, built=True) for name in "abcdefgh"}
    assert built == {"a": True, "b": False, "c": True, "d": True, "e": True, "f": True, "g": False, "h": False}
    assert all(m.holds_a_model(name, site) for name in "abcdefgh")  # every one is a model
    param = next(a for a in m.facts.assigns if a.kind == "param" and a.target == "model")
    assert not m.holds_a_model("model", param.site, built=True)


def test_a_dataset_made_by_another_module_traces_the_function_mapped_over_it(tmp_path):
    """`make_dataset` of data.py returns a `tf.data` pipeline; train.py maps `augment` over it: the
    NumPy draw in `augment` runs once, at trace time (TAP501). A `.map` of anything else is not read."""
    from tapecheck.lint import lint_paths

    (tmp_path / "data.py").write_text(textwrap.dedent("""\
        import tensorflow as tf

        def make_dataset(images, labels, batch_size=8):
            return tf.data.Dataset.from_tensor_slices((images, labels)).shuffle(64).batch(batch_size)

        def make_table(rows):
            return {row: row for row in rows}
        """))
    (tmp_path / "train.py").write_text(textwrap.dedent("""\
        import numpy as np
        from data import make_dataset, make_table

        def augment(image, label):
            return image + np.random.normal(0.0, 0.1, size=(4,)).astype("float32"), label

        def relabel(row):
            return np.random.choice([row, -row])

        ds = make_dataset(np.zeros((32, 4), "float32"), np.zeros((32,), "int64")).map(augment)
        table = make_table([1, 2]).map(relabel)
        """))
    (finding,) = lint_paths([str(tmp_path / "train.py")], jobs=1).findings
    assert (finding.code, finding.line) == ("TAP501", 5)
    assert "`Dataset.map` (line 10) traces" in finding.message


def test_tensorflows_short_names_are_the_keras_classes():
    """`tf.optimizers.Adam is keras.optimizers.Adam` (also `tf.metrics`, `tf.losses`), measured on TF 2.21."""
    from tapecheck.model import is_keras_class, keras_member

    assert keras_member("tensorflow.optimizers.Adam", "optimizers") == "Adam"
    assert keras_member("tensorflow.compat.v2.metrics.Mean", "metrics") == "Mean"
    assert is_keras_class("tensorflow.losses.MeanSquaredError", "losses")
    assert keras_member("tensorflow.optimizers.Adam", "metrics") == ""
    assert keras_member("tensorflow.math.reduce_mean", "optimizers") == ""
    findings = lint_source("import tensorflow as tf\nopt = tf.optimizers.SGD(lr=0.1)\n", "t.py")
    assert [f.code for f in findings] == ["TAP302"]


def test_a_name_bound_in_both_branches_of_an_if_else_reaches_the_site_from_each():
    source = """
    import tensorflow as tf
    def step(tape, loss, model, mixed, clip, other):
        if mixed:
            grads = tape.gradient(loss, model.trainable_variables)
        elif clip:
            with tf.name_scope("clip"):
                grads = tape.gradient(loss, model.variables)
        else:
            grads = None
            grads = tape.gradient(loss, other)
        use(grads)
        if mixed:
            half = 1
        use(half)
        try:
            tried = 1
        except ValueError:
            pass
        use(tried)
    """
    m = model(source)
    facts = m.facts

    def site_of(name):
        return next(use.site for use in facts.uses if use.name == name)

    lines = sorted(a.site.line for a in m.assigns_on_every_path("grads", site_of("grads")))
    assert lines == [5, 8, 11]  # the last binding of each path; `grads = None` is overwritten
    assert m.assigns_on_every_path("half", site_of("half")) == []  # no `else`: a path without it
    assert m.assigns_on_every_path("tried", site_of("tried")) == []  # a try may not bind it



def test_a_name_picked_by_an_if_else_may_hold_each_branchs_function():
    m = model("""
        import tensorflow as tf
        def build_sgd(model, rate):
            def step(x):
                with tf.GradientTape() as tape:
                    loss = tf.reduce_sum(model(x))
                return tape.gradient(loss, model.trainable_variables)
            return step
        def build_adam(model, rate):
            return None
        def pick(name, fallback, model):
            if name == "sgd":
                build = build_sgd
            else:
                build = build_adam
            if name == "x":
                maybe = build_sgd
            else:
                maybe = fallback
            def later():
                return build(model, 0.1)
            return build(model, 0.1), maybe(model, 0.1), later()
    """)
    calls = {}
    for call in m.facts.calls:
        calls.setdefault(call.func.text, []).append(call)
    here, inner = calls["build"][1].site, calls["build"][0].site
    assert m.binding("build", here) is None  # two different functions: no one answer
    assert [f.name for f in m.candidates("build", here)] == ["build_sgd", "build_adam"]
    assert [f.name for f in m.candidates("build", inner)] == ["build_sgd", "build_adam"]  # a closure
    assert m.candidates("maybe", calls["maybe"][0].site) is None  # a parameter in one branch: unknown
    assert m.candidates("model", here) is None
    functions = {f.name: f for f in m.candidates("build", here)}
    assert m.opens_tape(functions["build_sgd"].block.id)  # in the step it returns
    assert not m.opens_tape(functions["build_adam"].block.id)


def test_the_one_reaching_answer_serves_every_query_after_an_if_else():
    source = """
    import tensorflow as tf
    def step(model, x, y, use_l2, fast):
        if use_l2:
            loss = model.loss_a(x, y)
        else:
            loss = model.loss_b(x, y)
        report(loss)
        total = 1
        if fast:
            total = 2
        else:
            report(total)
        report(total)
    """
    m = model(source)
    facts = m.facts

    def site_of(name, nth=0):
        return [use.site for use in facts.uses if use.name == name][nth]

    loss_at = site_of("loss")
    assert [a.site.line for a in m.assigns_here("loss", loss_at)] == [5, 7]  # each branch reaches it
    assert [a.site.line for a in m.assigns_reaching("loss", loss_at)] == [5, 7]
    assert m.assign_here("loss", loss_at) is None  # two may hold: not one
    # in the `else:` the `total = 2` of the `if` never reaches; after both, either may hold
    assert [a.site.line for a in m.assigns_here("total", site_of("total", 0))] == [9]
    assert m.assign_here("total", site_of("total", 0)).site.line == 9
    assert [a.site.line for a in m.assigns_here("total", site_of("total", 1))] == [9, 11]
    assert m.exclusive(facts.assigns[[a.site.line for a in facts.assigns].index(11)].site, site_of("total", 0))
    assert not m.exclusive(loss_at, site_of("total", 1))


def test_a_test_expecting_the_error_covers_its_with_suite_and_header_only():
    source = """
    import pytest
    def test_twice(tape, loss, w):
        tape.gradient(loss, w)
        with pytest.raises(RuntimeError):
            tape.gradient(loss, w)
            tape.gradient(loss, w)
        tape.gradient(loss, w)
    """
    m = model(source)
    assert [line for line in range(1, 10) if m.expects_error(line)] == [5, 6, 7]
    assert not model("def f(tape):\n    with tape:\n        pass\n").expects_error(3)

def test_which_keras_layers_hold_state_once_made():
    """`layer_state`, measured on Keras 3.15: weights at the first call (Dense, BatchNormalization),
    a SeedGenerator variable at construction (Dropout, RandomFlip), none (Flatten, Rescaling,
    CenterCrop); a Sequential holds what its layers hold; a project class what its `__init__` and
    `build` make."""
    m = model("""
        import tensorflow as tf
        from tensorflow.keras import layers
        class Scale(layers.Layer):
            def build(self, shape):
                self.w = self.add_weight(shape=(), initializer="ones")
        class Identity(layers.Layer):
            def call(self, x):
                return x
        class Block(tf.keras.Model):
            def __init__(self):
                super().__init__()
                self.dense = Scale()
        a = layers.Dense(4)
        b = layers.BatchNormalization()
        c = tf.keras.layers.Dropout(0.5)
        d = layers.RandomFlip("horizontal")
        e = layers.Flatten()
        f = tf.keras.Sequential([layers.CenterCrop(8, 8), layers.Rescaling(1 / 255)])
        g = tf.keras.Sequential([layers.RandomCrop(8, 8), layers.Rescaling(1 / 255)])
        h = Scale()
        i = Identity()
        j = Block()
        k = layers.Concatenate()
        """)
    made = {a.site.line: m.value_call(a) for a in m.facts.assigns if a.kind == "assign" and len(a.target) == 1}
    states = {line: m.layer_state(call) for line, call in made.items()}
    assert states == {14: "weights", 15: "weights", 16: "seed", 17: "seed", 18: "", 19: "", 20: "seed",
                      21: "weights", 22: "", 23: "weights", 24: ""}
    kinds = {call.site.line: m.state_kind(call) for call in m.facts.calls if call.func.text.endswith("RandomCrop")}
    assert kinds == {20: ""}  # inside the Sequential: the Sequential is the state made


def test_the_functions_a_dataset_map_traces_through_lambdas():
    """`mapped_functions`: a lambda bound in each branch of an `if`, or written in the call; the
    receiver known as a dataset by its annotation."""
    from tapecheck.model import dataset_map, mapped_functions

    m = model("""
        import tensorflow as tf
        def prepare(element, training):
            return element
        def pipeline(dataset: tf.data.Dataset, training):
            if training:
                fn = lambda e: prepare(e, True)
            else:
                fn = lambda e: prepare(e, False)
            return dataset.map(fn), dataset.map(lambda e: prepare(e, False))
        def other(table):
            return table.map(lambda e: prepare(e, False))
        """)
    maps = [call for call in m.facts.calls if call.method == "map"]
    assert [dataset_map(m, call) for call in maps] == [True, True, False]
    assert [fn.block.line for fn in mapped_functions(m, maps[0].args[0], maps[0].site)] == [7, 9]
    assert [fn.block.line for fn in mapped_functions(m, maps[1].args[0], maps[1].site)] == [10]


def test_which_subclassed_models_wait_for_their_first_call_to_make_weights():
    """`builds_lazily`: a `Dense` made in `__init__`, a `build` that adds weights, a project layer
    that builds lazily; not a class whose `__init__` calls itself, a layer of its own or `build`,
    not one whose only layers are a `Sequential` opened with `keras.Input`, not a plain class."""
    m = model("""
        import tensorflow as tf
        class Critic(tf.keras.Model):
            def __init__(self):
                super().__init__()
                self.q = tf.keras.layers.Dense(1)
        class Encoder(tf.keras.layers.Layer):
            def build(self, shape):
                self.w = self.add_weight(shape=(shape[-1], 4))
        class Wrapper(tf.keras.Model):
            def __init__(self):
                super().__init__()
                self.encoder = Encoder()
        class SelfBuilt(tf.keras.Model):
            def __init__(self):
                super().__init__()
                self.q = tf.keras.layers.Dense(1)
                self.q(tf.zeros((1, 3)))
        class SuperBuilt(tf.keras.Model):
            def __init__(self):
                super().__init__()
                self.q = tf.keras.layers.Dense(1)
                super().build((None, 3))
        class WithInput(tf.keras.Model):
            def __init__(self):
                super().__init__()
                self.net = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(2)])
        class Plain:
            def __init__(self):
                self.q = tf.keras.layers.Dense(1)
        """)
    lazy = {klass.name: m.builds_lazily(klass) for klass in m.classes.values()}
    assert lazy == {"Critic": True, "Encoder": True, "Wrapper": True, "SelfBuilt": False, "SuperBuilt": False,
                    "WithInput": False, "Plain": False}


def test_which_models_a_train_step_may_be_running_on():
    """`instances_made`, `makes_another_model` and `span_reads`: what a Model subclass's step may
    find in a module-level name (the rule TAP406 asks them)."""
    m = model("""\
        import keras
        class Fitter(keras.Model):
            pass
        class Wider(Fitter):
            pass
        class Other(keras.Model):
            pass
        def build():
            return keras.Sequential([keras.layers.Dense(1)])
        def build_fitter():
            return Fitter()
        def build_named():
            net = keras.Sequential([keras.layers.Dense(1)])
            return net
        base = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
        a = build()
        b = Other()
        c = build_fitter()
        d = Wider()
        e = keras.models.clone_model(base)
        f = build_named()
        inputs = base.inputs
        g = Fitter(inputs, base.outputs)
        h = Fitter(keras.Input((2,)))
    """)
    fitter = next(k for k in m.classes.values() if k.name == "Fitter")
    made = {c.site.line: c for c in m.facts.calls if c.site.line >= 15 and m.facts.scope_of(c.site) == 0}
    assert sorted(c.site.line for c in m.instances_made(fitter)) == [11, 19, 23, 24]  # Wider derives from it
    another = {line: m.makes_another_model(made[line], fitter) for line in (15, 16, 17, 18, 19, 20, 21)}
    assert another == {15: True, 16: True, 17: True, 18: False, 19: False, 20: False, 21: False}
    g, h = made[23], made[24]
    assert m.span_reads((g.site.order, g.end_order), "base")  # directly and through `inputs`
    assert not m.span_reads((h.site.order, h.end_order), "base")
def test_an_attribute_bound_in_both_branches_of_one_method_holds_either_value_when_it_returns():
    """`attribute_on_each_path` (TAP112): the bindings of `self.<attr>` at the end of the one method
    that sets it, one per branch of the `if`/`else` that binds it in each; nothing when another method
    sets it too, when a path leaves it unbound, or when it is bound in a loop."""
    m = model("""
        import tensorflow as tf
        class Trainer:
            def __init__(self, use_bias, learn, n):
                if use_bias:
                    self.b = tf.Variable(0.0)
                else:
                    self.b = None
                    self.b = []
                if learn:
                    self.scale = tf.Variable(1.0)
                for _ in range(n):
                    self.counts = []
                self.later = []
            def build(self):
                self.later = tf.Variable(0.0)
        """)
    klass = next(iter(m.classes.values()))
    assert sorted(a.site.line for a in m.attribute_on_each_path(klass, "b")) == [6, 9]  # `None` is overwritten
    assert m.attribute_on_each_path(klass, "scale") == []  # no `else`: a path leaves it unset
    assert m.attribute_on_each_path(klass, "counts") == []  # in a loop
    assert m.attribute_on_each_path(klass, "later") == []  # set in two methods
    assert m.attribute_on_each_path(klass, "missing") == []


def test_a_sum_keeps_its_operands_two_levels_deep():
    """The summary of `a + [b]` holds both operands (TAP112 reads the list literal among them)."""
    m = model("""
        variables = encoder.trainable_variables + decoder.trainable_variables + [scale]
        """)
    value = next(a.value for a in m.facts.assigns if a.target == "variables")
    assert value.kind == "binop" and value.method == "Add"
    left, right = value.operands
    assert [o.text for o in left.operands] == ["encoder.trainable_variables", "decoder.trainable_variables"]
    assert right.kind == "list" and [e.text for e in right.elements] == ["scale"]
    assert left.operands[0].operands == ()  # a name: nothing below it


OPT_MODULE = """\
import tensorflow as tf
class Opt(tf.keras.optimizers.SGD):
    def __init__(self):
        super().__init__(0.1)
        self.scale = 2.0
    def apply_gradients(self, *pairs):
        return super().apply_gradients(pairs)
"""
TRAIN_MODULE = """\
import tensorflow as tf
from opt import Opt
class Other(tf.Module):
    def __init__(self):
        self.rate = 1
    def run(self):
        return 1
opt = Opt()
other = Other()
"""


def test_questions_about_a_class_of_another_file_are_answered_by_its_own_file(tmp_path):
    """A block id means something only within its file: the imported `Opt` and the local `Other`
    are both block 1. Handed to this file's model, `Opt`'s block gets `Opt`'s answers, not `Other`'s
    (the questions read classes by id, and remembered answers by id)."""
    from tapecheck.lint.engine import read_source

    (tmp_path / "opt.py").write_text(OPT_MODULE, encoding="utf-8")
    (tmp_path / "train.py").write_text(TRAIN_MODULE, encoding="utf-8")
    path = str(tmp_path / "train.py")
    m = model_of(_facts(read_source(path), path))
    made = {c.func.text: c for c in m.facts.calls if c.func.text in ("Opt", "Other")}
    opt, other = (m.binding(name, made[name].site) for name in ("Opt", "Other"))
    assert isinstance(opt, Klass) and opt.model is not m and other.model is m
    assert opt.block.id == other.block.id  # the collision this is about
    # the local class first: its answers must not be handed back for the other file's block
    assert [f.name for f in m.methods(other.block)] == ["__init__", "run"]
    assert m.base_names(other.block) == ("tensorflow.Module",)
    assert [a.target for a, _ in m.attribute_assigns(other.block, "rate")] == ["self.rate"]
    assert [f.name for f in m.methods(opt.block)] == ["__init__", "apply_gradients"]
    assert m.method_of_block(opt.block, "apply_gradients") is opt.model.method(opt, "apply_gradients") is not None
    assert m.method_of_block(opt.block, "run") is None
    assert [b.name for b in m.bases(opt.block)] == ["Opt"]
    assert m.base_names(opt.block) == ("tensorflow.keras.optimizers.SGD",)
    assert m.is_keras(opt.block, "optimizers") and not m.is_keras(other.block, "optimizers")
    assert [a.target for a, _ in m.attribute_assigns(opt.block, "scale")] == ["self.scale"]
    assert m.attribute_assigns(opt.block, "rate") == [] and m.instances_made(opt.block) == []


def test_arguments_are_mapped_to_parameters_by_position_or_keyword_not_by_span():
    """An argument holding nothing to track (`3`, `[1]`) has an empty order span, ending where
    its neighbour's ends: mapped by that end it took its neighbour's parameter (or the callee's),
    and `arguments_for` answered None (unknown) for its own."""
    m = model("""
        def scale(a, b):
            return a * b
        def pad(a, c=None):
            return a
        class Net:
            def run(self, a, b):
                return a + b
        def step(x, y):
            scale(x, 3)
            scale(2, y)
            pad(x, c=[1])
            net = Net()
            net.run(x, 5)
    """)
    fns = {fn.name: fn for fn in m.functions.values()}

    def passed(fn, param):
        found = m.arguments_for(fns[fn], param)
        return None if found is None else [(call.site.line, value.kind, value.text or value.value) for call, value in found]

    assert passed("scale", "a") == [(10, "name", "x"), (11, "constant", 2)]
    assert passed("scale", "b") == [(10, "constant", 3), (11, "name", "y")]
    assert passed("pad", "c") == [(12, "list", None)]
    assert passed("run", "b") == [(14, "constant", 5)]
    for call in m.facts.calls:
        if call.func.text in ("scale", "pad", "net.run"):
            fn = fns[call.func.text.rpartition(".")[2]]
            expected = {"scale": ["a", "b"], "pad": ["a", "c"], "run": ["a", "b"]}[fn.name]
            assert [m.parameter_of(call, fn, key) for key, _, _ in call.arg_spans] == expected


def test_a_kept_model_of_an_imported_file_is_built_again_when_a_file_it_imports_changes(tmp_path):
    """The models of a project's imported files are kept between lints in one process (the
    language server's): `models.py` unchanged, but `layers.py` it imports changed from `tf.round`
    to `tf.nn.relu`. The summary of `forward` that `models`'s kept model worked out through
    `layers.quant` must not survive the change: the lint after it is a fresh process's."""
    import os

    from tapecheck.lint import lint_paths

    (tmp_path / "layers.py").write_text("import tensorflow as tf\n\n\ndef quant(x):\n    return tf.round(x)\n")
    (tmp_path / "models.py").write_text("from layers import quant\n\n\ndef forward(model, x):\n    return quant(model(x))\n")
    (tmp_path / "train.py").write_text(
        "import tensorflow as tf\nfrom models import forward\n\n\ndef step(model, x, y, opt):\n"
        "    with tf.GradientTape() as tape:\n        loss = tf.reduce_mean(forward(model, x) - y)\n"
        "    grads = tape.gradient(loss, model.trainable_variables)\n"
        "    opt.apply_gradients(zip(grads, model.trainable_variables))\n"
    )
    train = str(tmp_path / "train.py")

    def codes():
        return [f.code for f in lint_paths([train], jobs=1, cache=False).findings]

    assert codes() == ["TAP104"]
    layers = tmp_path / "layers.py"
    layers.write_text("import tensorflow as tf\n\n\ndef quant(x):\n    return tf.nn.relu(x)  # differentiable\n")
    stamp = os.stat(layers).st_mtime_ns + 10**9
    os.utime(layers, ns=(stamp, stamp))  # a later stamp, however coarse the file system's clock
    assert codes() == []

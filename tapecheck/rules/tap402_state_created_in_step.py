'''# TAP402 state-created-in-step

## What it does
Flags a Keras optimizer, a Keras metric or a `tf.Variable` constructed once per
training step: inside the loop body that computes or applies the gradients, or
inside the step function itself (a `@tf.function`, a Keras `train_step`, or
a function called from a loop) when that function computes or applies gradients.
A construction guarded by an `if` (made on the first call only) is not flagged.
A `tf.Variable` made in the `call` of a Keras layer or model is flagged too: `call`
runs at every forward pass. So is a Keras layer or model that holds state
(`layers.BatchNormalization()`, `Dense`, `Dropout`, the `Random*` augmentation layers, a
`Sequential` of them, a layer class of the project that makes weights) constructed in a
layer's `call` or in a method `call` runs, in a training step or another `@tf.function`, or
in a function given to a `tf.data` dataset's `map` (also through a lambda, or a function it
calls).
In a layer's `call`, an `if` that only asks what the call was given (`if labels is not None:`,
`if training:`, parameters that default to `None`) does not make the construction a first-call
one: the branch runs again at every call given labels, at every training pass.

The program model also follows the calls: state made by a helper (of this file
or of another module of the project) that a step function, a step loop or a loss
given to `compile()` calls each time is reported where it is made, with the call
that runs it. Creation guarded to run once (`if self.tracker is None:`) is fine.
An optimizer made afresh by a function called in a loop and handed to a `tf.function` step
that applies gradients with it is flagged too: each new optimizer means a new trace that
creates its variables again.

## Why is this bad?
These objects are state that must live across steps. A layer made in `call` builds new
weights at each forward pass: the model does not track them (they are missing from
`trainable_variables`) and no optimizer trains them; under `fit`, `tf.function` or
`Dataset.map`, the variables they make while tracing (weights, or the SeedGenerator of
`Dropout` and `RandomFlip`) raise `ValueError: tf.function only supports singleton
tf.Variables created on the first call`. An optimizer made anew each
step forgets its moments and its iteration count: Adam restarts from its bias-
corrected first step every time, momentum never builds up, a learning-rate
schedule never advances. A metric made each step reports the last batch only. A
variable made each step is re-initialized each step, and inside `tf.function`
TensorFlow raises `ValueError: tf.function only supports singleton tf.Variables
created on the first call`.

## Example
```python
import tensorflow as tf

def train(model, dataset, loss_fn):
    for x, y in dataset:
        optimizer = tf.keras.optimizers.Adam(1e-3)
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
```

## Use instead
```python
import tensorflow as tf

def train(model, dataset, loss_fn):
    optimizer = tf.keras.optimizers.Adam(1e-3)
    for x, y in dataset:
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
```

## Where it stays silent
Creation guarded to run once (`if self.norm is None:`, an early `return`), made in
`__init__` or `build()`, or before the loop. Layers that hold no state (`Flatten`,
`Reshape`, `Activation`, `Concatenate`, `Add`, pooling, `Lambda`, `Rescaling`, `CenterCrop`,
`Resizing`, measured on Keras 3: no variable made or built) and a `Sequential` of only those.
A layer given to the constructor of another (`Sequential([Dense(4)])`) is reported once, as
the outer one. A class whose state the analysis cannot see (of a library) is not reported.
'''

from __future__ import annotations

from tapecheck.model import GRADIENT_METHODS, TF_FUNCTIONS, dataset_map, line_at, mapped_functions, method_of, model_of
from tapecheck.rules._common import calls_map_method, compiles_a_loss, defines_call, names_tf_function, report

# Its mistake raises an exception: findings inside a test that expects that error
# (`pytest.raises`, `assertRaises`) are left out, by the rule catalog.
RAISES = True
CODE = "TAP402"
NAME = "state-created-in-step"
SUMMARY = "an optimizer, metric, `tf.Variable` or stateful Keras layer is created anew at every training step or forward pass"
PROBE = True


def screen(source: bytes) -> bool:
    """What the check reads: a tape or an `apply_gradients` (a training step or loop), a loss given
    to `compile` (Keras records it on its own tape), a layer's `call` (a variable or a layer it
    could make), a `tf.function` decorator (a layer it could make while tracing, an optimizer handed
    to it), or a `.map(` (of a `tf.data` dataset)."""
    if b"apply_gradients" in source or b"GradientTape" in source or compiles_a_loss(source):
        return True
    if defines_call(source) or names_tf_function(source, decorator=True):
        return True
    return calls_map_method(source)


NOT_STEPS = frozenset({"__init__", "build", "__call__", "call"})
KERAS_STEPS = frozenset({"train_step", "test_step"})  # `fit` and `evaluate` call these per batch

HINT = "Create it once, before the training loop (or in `__init__`), and reuse it."
WHY = {
    "optimizer": "a new optimizer each step forgets its moments and iteration count (Adam restarts, momentum never builds)",
    "metric": "a new metric each step only ever reports the last batch",
    "variable": "the variable is re-initialized each step (inside tf.function this raises ValueError)",
    "layer": "a new layer each step starts from fresh weights that the model does not track and no optimizer "
             "trains (inside tf.function making its variables raises ValueError)",
}

VALID = [
    # made once: the test asks whether the state exists yet; and a test comparing a step
    # argument (`if step == 0:` may well mean the first call) is left alone too
    """
import tensorflow as tf
class Tagger(tf.keras.Model):
    def __init__(self, num_tags):
        super().__init__()
        self.num_tags = num_tags
        self.transitions = None
        self.dense = tf.keras.layers.Dense(num_tags)
    def call(self, x, labels=None, step=0):
        scores = self.dense(x)
        if labels is not None and self.transitions is None:
            self.transitions = tf.keras.Variable(tf.zeros((self.num_tags, self.num_tags)))
        if step == 0:
            self.offset = tf.keras.Variable(0.0)
        return scores
""",
    # made once before the loop, reset per epoch, re-created per epoch for the metric
    """
import tensorflow as tf
def fit(model, train_ds, loss_fn, epochs):
    optimizer = tf.keras.optimizers.Adam(1e-3)
    for epoch in range(epochs):
        train_acc = tf.keras.metrics.SparseCategoricalAccuracy()
        for x, y in train_ds:
            with tf.GradientTape() as tape:
                logits = model(x, training=True)
                loss = loss_fn(y, logits)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            train_acc.update_state(y, logits)
        print(epoch, float(train_acc.result()))
""",
    # the tf.function pattern: create on the first call only
    """
import tensorflow as tf
class Trainer:
    def __init__(self, model):
        self.model = model
        self.optimizer = tf.keras.optimizers.SGD(learning_rate=0.1)
        self.step_count = None
    @tf.function
    def train_step(self, x, y):
        if self.step_count is None:
            self.step_count = tf.Variable(0, trainable=False)
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(self.model(x, training=True) - y))
        grads = tape.gradient(loss, self.model.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
        self.step_count.assign_add(1)
""",
    # a layer's weight made once, in build; a variable made in a plain function's `call`
    """
import tensorflow as tf
class Scale(tf.keras.layers.Layer):
    def build(self, input_shape):
        self.scale = self.add_weight(shape=(), initializer="ones")
    def call(self, x):
        return x * self.scale
class Counter:
    def call(self):
        return tf.Variable(0)
""",
    # a learning-rate schedule object and a loss object are not per-step state
    """
import tensorflow as tf
def step(model, opt, x, y):
    loss_fn = tf.keras.losses.MeanSquaredError()
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
    opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
""",
    # layers made once in __init__, a stateless layer made in call, a lazy layer made on the first call only
    """
import tensorflow as tf
from tensorflow.keras import layers
class Critic(tf.keras.Model):
    def __init__(self):
        super().__init__()
        self.hidden = layers.Dense(64, activation="relu")
        self.norm = None
    def call(self, inputs, training=None):
        out = layers.Concatenate()(inputs)
        if self.norm is None:
            self.norm = layers.BatchNormalization()
        return layers.Flatten()(self.norm(self.hidden(out), training=training))
""",
    # the augmentation model built once, outside the function `map` traces; a stateless one inside it
    """
import tensorflow as tf
augment = tf.keras.Sequential([tf.keras.layers.RandomFlip("horizontal")])
def prepare(image, label):
    crop = tf.keras.Sequential([tf.keras.layers.CenterCrop(24, 24), tf.keras.layers.Rescaling(1 / 255)])
    return crop(augment(image)), label
dataset = tf.data.Dataset.from_tensor_slices((images, labels)).map(prepare)
""",
    # a function that runs the whole training: the optimizer is made once per call
    """
import tensorflow as tf
def train(model, ds):
    opt = tf.keras.optimizers.Adam()
    for x, y in ds:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(model(x, training=True) - y)
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
""",
    # a test asserting that a variable made in a layer's `call` fails under `fit`
    """
import tensorflow as tf
from tensorflow import keras
class LayerTest(tf.test.TestCase):
    def test_variable_made_in_call_fails_under_fit(self):
        with self.assertRaisesRegex(ValueError, "singleton"):
            class Scale(keras.layers.Layer):
                def call(self, x):
                    scale = tf.Variable(1.0)
                    return x * scale
            model = keras.Sequential([keras.Input((2,)), Scale()])
            model.compile(optimizer="sgd", loss="mse")
            model.fit(tf.ones((4, 2)), tf.ones((4, 2)), verbose=0)
""",
]

INVALID = [
    # made under a test of the call's own optional arguments: again at every call given labels
    """
import tensorflow as tf
class Tagger(tf.keras.Model):
    def __init__(self, num_tags):
        super().__init__()
        self.num_tags = num_tags
        self.dense = tf.keras.layers.Dense(num_tags)
    def call(self, x, labels=None, training=None):
        scores = self.dense(x)
        if labels is not None:
            self.transitions = tf.Variable(tf.zeros((self.num_tags, self.num_tags)))  # expect: TAP107, TAP402
            return scores, tf.gather(self.transitions, labels)
        return scores
""",
    # a variable made in a layer's call: every forward pass (under fit: ValueError)
    """
import tensorflow as tf
class Scale(tf.keras.layers.Layer):
    def call(self, x):
        scale = tf.Variable(1.0)  # expect: TAP402
        return x * scale
""",
    # the Keras backend's variable, made by a loss given to compile()
    """
import tensorflow as tf
from tensorflow.keras import backend as K
def weighted_loss(y_true, y_pred):
    weights = K.variable([1.0, 2.0])  # expect: TAP402
    return K.mean(K.square(y_true - y_pred) * weights)
model = tf.keras.Sequential([tf.keras.layers.Dense(2)])
model.compile(optimizer="adam", loss=weighted_loss)
""",
    # a helper called by the traced step makes the metric
    """
import tensorflow as tf
def log_scalar(value):
    tracker = tf.keras.metrics.Mean()  # expect: TAP402
    tracker.update_state(value)
    return tracker.result()
@tf.function
def train_step(model, optimizer, x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    return log_scalar(loss)
""",
    """
import tensorflow as tf
@tf.function
def train_step(model, optimizer, x, y):
    loss_metric = tf.keras.metrics.Mean()  # expect: TAP402
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    loss_metric.update_state(loss)
    return loss_metric.result()
""",
    # BatchNormalization layers made in a model's call, directly and through a helper method
    """
import tensorflow as tf
from tensorflow.keras import layers
class Actor(tf.keras.Model):
    def __init__(self, action_dim):
        super().__init__()
        self.hidden = layers.Dense(64, activation="relu")
        self.action = layers.Dense(action_dim, activation="tanh")
    def call(self, states, training=None):
        out = layers.BatchNormalization()(self.hidden(states), training=training)  # expect: TAP402
        return self.action(self._normalise(out, training))
    def _normalise(self, out, training):
        return layers.LayerNormalization()(out)  # expect: TAP402
""",
    # a layer built in a tf.function that is no training step
    """
import tensorflow as tf
@tf.function
def embed(tokens):
    return tf.keras.layers.Embedding(1000, 16)(tokens)  # expect: TAP402
""",
    # an augmentation model with random layers built in the function a dataset's map traces
    """
import tensorflow as tf
def prepare(image, label):
    augment = tf.keras.Sequential([tf.keras.layers.RandomCrop(24, 24), tf.keras.layers.RandomFlip()])  # expect: TAP402
    return augment(image), label
dataset = tf.data.Dataset.from_tensor_slices((images, labels))
dataset = dataset.map(lambda image, label: prepare(image, label))
""",
    # the step is a function called from the batch loop, which makes the optimizer
    """
from tensorflow import keras
import tensorflow as tf
def train_step(model, optimizer, x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
for x, y in dataset:
    opt = keras.optimizers.SGD(learning_rate=0.01, momentum=0.9)  # expect: TAP402
    train_step(model, opt, x, y)
""",
]


def _is_step_work(facts, call) -> bool:
    """A call that computes or applies gradients: the body of a training step."""
    method = method_of(call)
    if method == "apply_gradients":
        return True
    return method in GRADIENT_METHODS and bool(call.receiver) and facts.tape_for(call.receiver, call.site) is not None


def _step_functions(model, work) -> dict[int, str]:
    """Function blocks that do one training step per call: block id -> name."""
    facts = model.facts
    called_in_loops = {
        call.func.text.rsplit(".", 1)[-1]
        for call in facts.calls
        if call.func.text and model.loops_around(call.site)
    }
    steps = {}
    for call in work:
        block = facts.blocks[facts.scope_of(call.site)]
        if block.kind != "function" or block.name in NOT_STEPS or model.loops_around(call.site):
            continue
        if block.name.startswith("test"):
            continue  # a unit test: runs once
        if set(block.decorators) & TF_FUNCTIONS or block.name in KERAS_STEPS or block.name in called_in_loops:
            steps[block.id] = block.name
    return steps


def _step_loops(model, work, steps) -> dict[int, int]:
    """Loop blocks whose every pass is one training step: loop id -> line of the step."""
    loops = {}
    step_names = set(steps.values())
    work_ids = {id(call) for call in work}
    for call in model.facts.calls:
        if id(call) in work_ids or call.func.text.rsplit(".", 1)[-1] in step_names:
            inner = model.loops_around(call.site)
            if inner:
                loops.setdefault(inner[-1], call.site.line)
    return loops


def check(facts):
    model = model_of(facts)
    makers = [(call, model.state_kind(call)) for call in facts.calls]
    makers = [(call, kind) for call, kind in makers if kind and not call.site.in_comprehension]
    work = [call for call in facts.calls if _is_step_work(facts, call)]
    steps = _step_functions(model, work)
    loops = _step_loops(model, work, steps)
    reported = set()
    for call, kind in makers:
        scope = facts.scope_of(call.site)
        chain = facts.chain(call.site.block)
        where = ""
        if scope in steps and not model.guarded(call.site, scope):
            where = f"inside the step function `{steps[scope]}`"
        else:
            for loop in reversed(chain):
                if loop in loops and facts.blocks[loop].scope == scope and not model.guarded(call.site, loop):
                    where = f"inside the loop that runs a training step each pass (line {loops[loop]})"
                    break
        if where:
            reported.add(call.site)
            yield report(facts, call.site, CODE, f"`{call.func.text}` is created {where}: {WHY[kind]}", HINT)
        elif kind in ("variable", "layer"):
            fn = model.functions.get(scope)
            if fn is not None and fn.name == "call" and fn.owner is not None and model.is_keras(fn.owner, "layers") \
                    and not model.guarded(call.site, scope, argument_tests_repeat=True):
                reported.add(call.site)
                if kind == "variable":
                    yield report(facts, call.site, CODE, f"`{call.func.text}` is created in `{fn.qualname}`, {IN_CALL}",
                                 CALL_HINT)
                else:
                    yield report(facts, call.site, CODE, f"`{call.func.text}` is created in `{fn.qualname}` "
                                 f"(line {call.site.line}), {LAYER_IN_CALL[model.layer_state(call)]}", LAYER_HINT)
    yield from _layers_in_traced_functions(facts, model, makers, reported)
    yield from _mapped(facts, model, reported)
    yield from _in_helpers(facts, model, steps, loops, reported)
    yield from _optimizers_handed_to_traced_steps(facts, model, makers, reported)
    yield from _variables_from_call_helpers(facts, model, reported)


def _variables_from_call_helpers(facts, model, reported):
    """A `tf.Variable` made by a method or function that a Keras layer's `call` runs on every forward
    pass (unguarded there): made again at each call, as if written in `call` itself."""
    for fn in model.functions.values():
        if fn.name != "call" or fn.owner is None or not model.is_keras(fn.owner, "layers"):
            continue
        for call in model.calls_in_scope(fn.block.id):
            if call.site.in_comprehension or model.guarded(call.site, fn.block.id):
                continue
            callee = model.resolve(call)
            if callee is None or callee is fn or callee.name in NOT_STEPS:
                continue
            summary = model.summary(callee)
            if summary is None or not any(made.kind in ("variable", "layer") for made in summary.creates):
                continue
            where = f"`{fn.qualname}` calls `{{fn}}` at every forward pass (line {call.site.line})"
            whys = {"layer": LAYER_IN_CALL_HELPER}
            if any(made.kind == "variable" for made in summary.creates):  # then all it makes, as before
                whys.update(variable=IN_CALL_HELPER, metric=IN_CALL_HELPER, optimizer=IN_CALL_HELPER)
            for finding in _created_by(facts, model, callee, where, whys, reported, call.site):
                yield finding


def _layers_in_traced_functions(facts, model, makers, reported):
    """A stateful Keras layer made, unguarded, in a `@tf.function` that is no training step (a
    forward or inference function): tracing makes its variables, and TensorFlow raises ValueError at
    the first call (measured on TF 2.21: tf.function traces a function that makes variables twice)."""
    for call, kind in makers:
        if kind != "layer" or call.site in reported:
            continue
        scope = facts.scope_of(call.site)
        fn = model.functions.get(scope)
        if fn is None or not set(fn.block.decorators) & TF_FUNCTIONS or model.guarded(call.site, scope):
            continue
        reported.add(call.site)
        yield report(facts, call.site, CODE,
                     f"`{call.func.text}` is created in the tf.function `{fn.qualname}` (line {call.site.line}): "
                     f"{MAPPED}", LAYER_HINT)


def _mapped(facts, model, reported):
    """State made by a function given to a `tf.data` dataset's `map` (or by what it calls): `map`
    traces the function into a graph, and a variable made while tracing raises ValueError."""
    for call in facts.calls:
        if not call.args or not dataset_map(model, call):
            continue
        for fn in mapped_functions(model, call.args[0], call.site):
            where = f"`Dataset.map` (line {call.site.line}) traces `{{fn}}` into a graph"
            if fn.name != "<lambda>":
                yield from _created_by(facts, model, fn, where, MAPPED, reported, call.site)
                continue
            # a lambda's body is not summarised (it may run many times): the functions it calls are
            for inner in model.calls_in_scope(fn.block.id):
                callee = model.resolve(inner)
                if callee is not None and callee.name not in NOT_STEPS:
                    traced = f"`Dataset.map` (line {call.site.line}) traces the lambda of line {fn.block.line}, " \
                             f"which calls `{{fn}}`"
                    yield from _created_by(facts, model, callee, traced, MAPPED, reported, inner.site)


def _applies_through(model, fn, param: str) -> bool:
    """Whether `fn` calls `<param>.apply_gradients(...)` (or `.apply`, `.minimize`) itself."""
    return any(call.receiver == param and call.method in ("apply_gradients", "apply", "minimize")
               for call in model.calls_in_scope(fn.block.id))


def _optimizers_handed_to_traced_steps(facts, model, makers, reported):
    """An optimizer made in a function on each of its calls, one made again and again (called in a
    loop), and handed to a `tf.function` step that applies gradients with it: the step creates the
    optimizer's variables while tracing, and a new optimizer means a new trace creating them again."""
    for maker, kind in makers:
        if kind != "optimizer" or maker.site in reported:
            continue
        scope = facts.scope_of(maker.site)
        fn = model.functions.get(scope)
        if fn is None or model.guarded(maker.site, scope) or model.loops_around(maker.site):
            continue
        bound = [a for a in model.assigns_in(scope) if a.kind == "assign" and model.value_call(a) is maker]
        if len(bound) != 1 or "." in bound[0].target:
            continue
        name = bound[0].target
        repeated = next((c for c in model.callers(fn) if model.loops_around(c.site)), None)
        if repeated is None:
            continue
        for call in model.calls_in_scope(scope):
            step = model.resolve(call)
            if step is None or not set(step.block.decorators) & TF_FUNCTIONS:
                continue
            for key, _, end in call.arg_spans:
                value = call.passed(key) if key != -1 else None
                if value is None or value.kind != "name" or value.text != name:
                    continue
                param = model.parameter(call, step, end)
                if param and _applies_through(model, step, param):
                    reported.add(maker.site)
                    yield report(
                        facts, maker.site, CODE,
                        f"`{maker.func.text}` is created in `{fn.qualname}` on each of its calls (called in a loop "
                        f"at line {repeated.site.line}) and handed to the tf.function `{step.qualname}` (line "
                        f"{call.site.line}), whose `{param}.apply_gradients` creates the optimizer's variables while "
                        "tracing: the next call brings a new optimizer, a new trace creates them again, and "
                        "TensorFlow raises ValueError (tf.function only supports singleton tf.Variables created on "
                        "the first call)",
                        "Create the optimizer once (in `__init__`) and reset its variables between runs if needed "
                        "(`for v in optimizer.variables: v.assign(tf.zeros_like(v))`).",
                    )
                    break
            if maker.site in reported:
                break


IN_CALL = ("which Keras runs at every forward pass: under `fit` or `tf.function` it raises ValueError "
           "(tf.function only supports singleton tf.Variables created on the first call); run eagerly, each "
           "call makes a new variable that the layer does not track and no optimizer trains")
CALL_HINT = "Create it once, in `build()` with `self.add_weight(...)` (or in `__init__`), and read it in `call`."


LAYER_IN_CALL = {
    state: "which Keras runs at every forward pass: each call builds a new layer " + held
    + ", which the model does not track (missing from `trainable_variables`) and no optimizer trains; under "
    "`fit` or `tf.function` making its variables raises ValueError (tf.function only supports singleton "
    "tf.Variables created on the first call)"
    for state, held in (("weights", "with fresh weights"), ("seed", "with a new random-seed variable"))
}
LAYER_IN_CALL_HELPER = ("each call builds a new layer, with fresh variables that the model does not track and no "
                        "optimizer trains; under `fit` or `tf.function` making them raises ValueError (tf.function "
                        "only supports singleton tf.Variables created on the first call)")
LAYER_HINT = "Create the layer once, in `__init__` (or `build()`), store it on `self`, and call it in `call`."
MAPPED = ("it makes its variables while tracing, and TensorFlow raises ValueError (tf.function only supports "
          "singleton tf.Variables created on the first call)")


IN_CALL_HELPER = ("under `fit` or `tf.function` it raises ValueError (tf.function only supports singleton "
                  "tf.Variables created on the first call); run eagerly, each call makes a new variable")


TRACED = "it raises ValueError (tf.function only supports singleton tf.Variables created on the first call)"


def _in_helpers(facts, model, steps, loops, reported):
    """State made by a function of this file that a step, a step loop or a compiled loss calls each time."""
    for call in model.spans.calls:
        if call.site.in_comprehension:
            continue
        scope = facts.scope_of(call.site)
        where, why = "", ""
        if scope in steps and not model.guarded(call.site, scope):
            step = facts.blocks[scope]
            traced = bool(set(step.decorators) & TF_FUNCTIONS) or step.name in KERAS_STEPS
            where = f"the step function `{steps[scope]}` calls `{{fn}}` on every step (line {call.site.line})"
            why = TRACED if traced else ""
        else:
            for loop in reversed(facts.chain(call.site.block)):
                if loop in loops and facts.blocks[loop].scope == scope and not model.guarded(call.site, loop):
                    where = f"the training loop calls `{{fn}}` on every pass (line {call.site.line})"
                    break
        if not where:
            continue
        callee = model.resolve(call)
        if callee is None or callee.block.id in steps or callee.name in NOT_STEPS:
            continue
        yield from _created_by(facts, model, callee, where, why, reported, call.site)
    for compile_call, fn, _ in model.compiled_losses():
        where = f"`fit` runs `{{fn}}` as the loss given to `compile` (line {compile_call.site.line}), inside tf.function"
        yield from _created_by(facts, model, fn, where, TRACED, reported, compile_call.site)


def _created_by(facts, model, fn, where, why, reported, call_site):
    """Report what `fn` (or what it calls) creates on every call; `where` says who calls `fn`.

    State made in another file is reported here, at the call that leads there."""
    summary = model.summary(fn)
    where = where.replace("{fn}", fn.qualname)
    elsewhere = fn.model is not model
    for made in summary.creates if summary is not None else ():
        file = made.file or (fn.model.facts.path if elsewhere else "")
        site = call_site if file else made.site
        if site in reported or isinstance(why, dict) and made.kind not in why:
            continue
        reported.add(site)
        told = why[made.kind] if isinstance(why, dict) else why or WHY[made.kind]
        at = line_at(file, made.site.line, facts.path)
        if made.calls and not file:
            chain = [fn.qualname] + [name for name, _ in made.calls]
            lines = ", ".join(f"`{caller}` calls `{callee}` at line {line}"
                              for caller, (callee, line) in zip(chain, made.calls))
            origin = f"`{made.text}` is created in `{made.function}` ({at}; {lines}), and {where}"
        else:
            origin = f"`{made.text}` is created in `{made.function}` ({at}), and {where}"
        yield report(facts, site, CODE, f"{origin}: {told}", LAYER_HINT if made.kind == "layer" else HINT)

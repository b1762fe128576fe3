'''# TAP602 state-outside-strategy-scope

## What it does
Flags a Keras model trained in a distributed step but built outside
`with strategy.scope():`. The step is the function given to `strategy.run(fn, ...)`
of a `tf.distribute.MirroredStrategy` or `MultiWorkerMirroredStrategy` built in the
file; the model is the one whose `trainable_variables` the step differentiates and
updates, bound to a name, a global, a closure or `self.model`. Reported where the
model is built: a functional `keras.Model(inputs, outputs)`, a `Sequential` that
starts with `keras.Input(...)`, or a local builder function returning one of those.

It stays silent for a model built inside the scope (also by a builder called
there), a `Sequential` without an `Input` (its variables are made on the first
call, inside `strategy.run`, which works), a file that enters a scope in a way it
cannot place (`scope = strategy.scope()`, `experimental_set_strategy`), and for
optimizers and metrics made outside the scope (measured on TensorFlow 2.21: they
run correctly).

## Why is this bad?
Variables made outside the strategy's scope are plain variables on one device, not
mirrored ones, and Keras's optimizer cannot update them through the strategy. Measured
on TensorFlow 2.21, on one device as on two, the traced step fails at the first
`apply_gradients`: with `SGD`, an empty `AssertionError` "in user code" from
`_distributed_tf_update_step` that names neither the model nor the scope; with `Adam`,
`ValueError: colocate_vars_with must only be passed a variable created in this
tf.distribute.Strategy.scope()` while it builds its slots, naming a kernel.

## Example
```python
import tensorflow as tf

strategy = tf.distribute.MirroredStrategy()
model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])
with strategy.scope():
    optimizer = tf.keras.optimizers.SGD(0.1)

def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.nn.compute_average_loss(tf.square(y - model(x, training=True))[:, 0])
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))

@tf.function
def distributed_step(x, y):
    strategy.run(train_step, args=(x, y))
```

## Use instead
```python
import tensorflow as tf

strategy = tf.distribute.MirroredStrategy()
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])
    optimizer = tf.keras.optimizers.SGD(0.1)

def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.nn.compute_average_loss(tf.square(y - model(x, training=True))[:, 0])
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))

@tf.function
def distributed_step(x, y):
    strategy.run(train_step, args=(x, y))
```
'''

from __future__ import annotations

from tapecheck.model import (
    STRATEGIES,
    builds_variables,
    callee_of,
    makes_strategy,
    method_of,
    model_of,
    strategy_steps,
    variable_owner,
)
from tapecheck.rules._common import report

# Its mistake raises an exception: findings inside a test that expects that error
# (`pytest.raises`, `assertRaises`) are left out, by the rule catalog.
RAISES = True
CODE = "TAP602"
NAME = "state-outside-strategy-scope"
SUMMARY = "a model trained in a `strategy.run` step is built outside `strategy.scope()`"
PROBE = False


def screen(source: bytes) -> bool:
    """A Mirrored strategy built here, and a gradient taken."""
    return b"MirroredStrategy" in source and b"gradient" in source


SETS_STRATEGY = frozenset({"tensorflow.distribute.experimental_set_strategy"})

HINT = "Build the model (and its optimizer) inside `with strategy.scope():`."

VALID = [
    # built in the scope, by a builder; an optimizer made outside runs fine
    """
import tensorflow as tf
def build():
    inputs = tf.keras.Input((4,))
    return tf.keras.Model(inputs, tf.keras.layers.Dense(1)(inputs))
strategy = tf.distribute.MirroredStrategy()
optimizer = tf.keras.optimizers.SGD(0.1)
with strategy.scope():
    model = build()
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.nn.compute_average_loss(tf.square(y - model(x, training=True))[:, 0])
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
@tf.function
def distributed_step(x, y):
    strategy.run(train_step, args=(x, y))
""",
    # no Input: the variables are made on the first call, inside strategy.run
    """
import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
with strategy.scope():
    optimizer = tf.keras.optimizers.SGD(0.1)
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.nn.compute_average_loss(tf.square(y - model(x, training=True))[:, 0])
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
@tf.function
def distributed_step(x, y):
    strategy.run(train_step, args=(x, y))
""",
    # a scope entered through a name: not placed, silent
    """
import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
scope = strategy.scope()
with scope:
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])
    optimizer = tf.keras.optimizers.SGD(0.1)
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.nn.compute_average_loss(tf.square(y - model(x, training=True))[:, 0])
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
@tf.function
def distributed_step(x, y):
    strategy.run(train_step, args=(x, y))
""",
    # a test asserting that a model built outside the strategy's scope fails its step
    """
import tensorflow as tf
from tensorflow import keras
class ScopeTest(tf.test.TestCase):
    def test_model_outside_scope_fails(self):
        strategy = tf.distribute.MirroredStrategy()
        with self.assertRaises(ValueError):
            model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
            with strategy.scope():
                optimizer = keras.optimizers.Adam()
            @tf.function
            def step(x, y):
                def replica(x, y):
                    with tf.GradientTape() as tape:
                        loss = tf.nn.compute_average_loss(tf.square(y - model(x, training=True))[:, 0])
                    grads = tape.gradient(loss, model.trainable_variables)
                    optimizer.apply_gradients(zip(grads, model.trainable_variables))
                strategy.run(replica, args=(x, y))
            step(tf.ones((4, 4)), tf.ones((4, 1)))
""",
]

INVALID = [
    # a trainer that opens the scope for the optimizer only
    """
import tensorflow as tf
from tensorflow import keras
def build_model():
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
class Trainer:
    def __init__(self):
        self.strategy = tf.distribute.MirroredStrategy()
        self.model = build_model()  # expect: TAP602
        with self.strategy.scope():
            self.optimizer = keras.optimizers.Adam()
    def train_step(self, x, y):
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(tf.square(y - self.model(x, training=True))[:, 0])
        grads = tape.gradient(loss, self.model.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
    @tf.function
    def distributed_step(self, x, y):
        self.strategy.run(self.train_step, args=(x, y))
""",
]


def _scope_blocks(facts):
    """Ids of `with X.scope():` blocks; None when a `.scope()` call is not such a `with`."""
    found = set()
    for call in facts.calls:
        if method_of(call) != "scope" or call.args or call.keywords:
            continue
        blocks = [b for b in facts.blocks if b.kind == "with" and b.parent == call.site.block and b.line == call.site.line]
        if len(blocks) != 1:
            return None
        found.add(blocks[0].id)
    return found


def _outside(facts, assign, scopes) -> bool:
    """The assignment runs outside every strategy scope, for sure."""
    if any(b in scopes for b in facts.chain(assign.site.block)):
        return False
    scope = facts.scope_of(assign.site)
    if facts.blocks[scope].kind == "module":
        return True
    in_function = [c for c in facts.calls if facts.scope_of(c.site) == scope]
    return any(callee_of(facts, c) in STRATEGIES for c in in_function) or any(
        facts.blocks[b].scope == scope for b in scopes
    )


def check(facts):
    if not makes_strategy(facts):
        return
    if any(callee_of(facts, c) in SETS_STRATEGY for c in facts.calls):
        return
    scopes = _scope_blocks(facts)
    if scopes is None:
        return
    model = model_of(facts)
    reported = set()
    for step, run in strategy_steps(model):
        scope = step.block.id
        for call in facts.calls:
            if facts.scope_of(call.site) != scope or method_of(call) != "apply_gradients":
                continue
            owners = {variable_owner(u.name) for u in model.spans.uses_in((call.site.order, call.end_order))}
            for owner in sorted(o for o in owners if o):
                assigns = model.assigns_of(owner, call.site, bases=False)
                made = [model.value_call(a) for a in assigns]
                if not made or any(c is None or not builds_variables(model, c) for c in made):
                    continue
                if not all(_outside(facts, a, scopes) for a in assigns):
                    continue
                for assign in assigns:
                    if assign.site in reported:
                        continue
                    reported.add(assign.site)
                    yield report(
                        facts, assign.site, CODE,
                        f"`{owner}` is built outside `strategy.scope()`, and `{run.func.text}` trains it in "
                        f"`{step.qualname}` (line {call.site.line}): its variables are not mirrored, and the traced "
                        f"step fails at `apply_gradients` (an AssertionError with SGD, a `colocate_vars_with` "
                        f"ValueError with Adam)",
                        HINT,
                    )

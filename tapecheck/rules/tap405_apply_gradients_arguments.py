'''# TAP405 apply-gradients-arguments

## What it does
Flags a call of `apply_gradients` that does not hand the optimizer one
iterable of `(gradient, variable)` pairs:

- the pairs unpacked into separate arguments: `apply_gradients(*zip(grads, variables))`;
- one pair instead of a list of pairs: `apply_gradients((grads[0], variable))`;
- on a Keras optimizer, the arguments of older APIs: TF1's `global_step=`, Keras 2's
  `name=`, `experimental_aggregate_gradients=` or a second positional argument, also
  when an optimizer subclass forwards them to `super().apply_gradients(...)`.

## Why is this bad?
Keras 3's `apply_gradients` takes exactly one argument, `grads_and_vars`. The first
step raises `TypeError: BaseOptimizer.apply_gradients() takes 2 positional arguments
but 3 were given` (or `got an unexpected keyword argument 'global_step'`), inside a
`tf.function` at its first trace, far from where the call was written. A single pair
is iterated as if it were a list: `ValueError: too many values to unpack`. Code
ported from TF1 or Keras 2 (`optimizer.apply_gradients(pairs, global_step=step)`)
breaks this way on upgrade; the step counter lives in `optimizer.iterations` now.

## Example
```python
import tensorflow as tf

class Trainer:
    def __init__(self, model):
        self.model = model
        self.optimizer = tf.keras.optimizers.Adam(1e-3)

    def step(self, x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(self.model(x, training=True) - y))
        grads = tape.gradient(loss, self.model.trainable_variables)
        self.optimizer.apply_gradients(*zip(grads, self.model.trainable_variables))
        return loss
```

## Use instead
```python
import tensorflow as tf

class Trainer:
    def __init__(self, model):
        self.model = model
        self.optimizer = tf.keras.optimizers.Adam(1e-3)

    def step(self, x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(self.model(x, training=True) - y))
        grads = tape.gradient(loss, self.model.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
        return loss
```

## Where it stays silent
The extra arguments are reported only where the optimizer is known to be a Keras
one (built from `keras.optimizers`/`tf.optimizers` in the file, or the compiled
`self.optimizer` of a Keras model): `tf.compat.v1.train` optimizers take
`global_step` and `name`, and an optimizer of unknown origin is left alone. When the
file targets Keras 2 (`keras-version = "2"`), `name=` and
`experimental_aggregate_gradients=` are valid and not reported.
'''

from __future__ import annotations

from tapecheck.model import GRADIENT_METHODS, is_keras_class, model_of
from tapecheck.rules._common import report

# Its mistake raises an exception: findings inside a test that expects that error
# (`pytest.raises`, `assertRaises`) are left out, by the rule catalog.
RAISES = True
CODE = "TAP405"
NAME = "apply-gradients-arguments"
SUMMARY = "`apply_gradients` is not given one list of (gradient, variable) pairs"
TRIGGERS = (b"apply_gradients",)

# Keyword arguments of Keras 2's optimizers (OptimizerV2 and the 2.11+ optimizers) that Keras 3's
# `apply_gradients(grads_and_vars)` rejects.
KERAS2_KEYWORDS = frozenset({"name", "experimental_aggregate_gradients", "skip_gradients_aggregation"})
# TF1's `tf.compat.v1.train.Optimizer.apply_gradients(grads_and_vars, global_step=None, name=None)`:
# no Keras optimizer ever took it.
TF1_KEYWORDS = frozenset({"global_step"})

VALID = [
    # one iterable of pairs: a zip, a list of pairs, a list comprehension
    """
import tensorflow as tf
opt = tf.keras.optimizers.Adam()
def step(model, x):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model(x, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
    opt.apply_gradients([(g, v) for g, v in zip(grads, model.trainable_variables) if g is not None])
    opt.apply_gradients([(grads[0], model.trainable_variables[0])])
""",
    # a TF1 optimizer takes global_step and name
    """
import tensorflow as tf
opt = tf.compat.v1.train.AdamOptimizer(1e-3)
def step(grads_and_vars, global_step):
    return opt.apply_gradients(grads_and_vars, global_step=global_step, name="train")
""",
    # an optimizer of unknown origin: its API is not known
    """
def step(optimizer, pairs, step_counter):
    optimizer.apply_gradients(pairs, global_step=step_counter)
""",
    # a class of the user's own whose apply_gradients takes pairs as separate arguments
    """
class Averager:
    def apply_gradients(self, *pairs):
        return [g for g, _ in pairs]
avg = Averager()
def step(grads, variables):
    avg.apply_gradients(*zip(grads, variables))
""",
    # an override with Keras 3's signature, forwarding one argument
    """
import keras
class Clipped(keras.optimizers.Adam):
    def apply_gradients(self, grads_and_vars):
        pairs = [(keras.ops.clip(g, -1.0, 1.0), v) for g, v in grads_and_vars]
        return super().apply_gradients(pairs)
""",
    # a test asserting that Keras 3 rejects the TF1-style step counter
    """
import pytest
import tensorflow as tf
def test_global_step_is_rejected():
    w = tf.Variable(1.0)
    opt = tf.keras.optimizers.SGD(0.1)
    with tf.GradientTape() as tape:
        loss = w * w
    grads = tape.gradient(loss, [w])
    with pytest.raises(TypeError):
        opt.apply_gradients(zip(grads, [w]), global_step=tf.Variable(0))
""",
]

INVALID = [
    """
import tensorflow as tf
opt = tf.keras.optimizers.SGD(0.1)
def step(model, x):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model(x, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(*zip(grads, model.trainable_variables))  # expect: TAP405
""",
    # ported from TF1: the step counter handed to a Keras optimizer
    """
import tensorflow as tf
class Trainer:
    def __init__(self, model):
        self.model = model
        self.opt = tf.keras.optimizers.Adam(1e-4)
        self.global_step = tf.Variable(0)
    def step(self, x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(self.model(x, training=True))
        grads = tape.gradient(loss, self.model.trainable_variables)
        self.opt.apply_gradients(zip(grads, self.model.trainable_variables), global_step=self.global_step)  # expect: TAP405
""",
    # a Keras 2 override forwarding its arguments
    """
import tensorflow as tf
class Accumulating(tf.keras.optimizers.Adam):
    def apply_gradients(self, grads_and_vars, name=None, experimental_aggregate_gradients=True):
        return super().apply_gradients(grads_and_vars, name, experimental_aggregate_gradients)  # expect: TAP405
""",
    # one pair, not a list of pairs
    """
import tensorflow as tf
w = tf.Variable(1.0)
opt = tf.keras.optimizers.SGD(0.1)
def step(x):
    with tf.GradientTape() as tape:
        loss = (w * x - 1.0) ** 2
    grad = tape.gradient(loss, w)
    opt.apply_gradients((grad, w))  # expect: TAP405
""",
]


def _own_class_takes_many(model, receiver: str, site) -> bool:
    """Whether `receiver` holds an instance of a class of this file whose `apply_gradients`
    takes more than one argument (then unpacked pairs may be what it wants)."""
    made = model.binding(receiver, site) if receiver else None
    klass = getattr(made, "klass", None)
    if klass is None:
        calls = model.value_calls(receiver, site) or []
        blocks = [model.local_class(model.resolved(c.func.text, c.site)) for c in calls if c.func.text]
        return any(model.method_of_block(block, "apply_gradients") is not None for block in blocks if block is not None)
    return model.method(klass, "apply_gradients") is not None  # asked of the model of its own file


def _keras_optimizer(model, receiver: str, site) -> bool:
    """Whether `receiver` is known to hold a Keras optimizer at `site`."""
    if not receiver:
        return False
    calls = model.value_calls(receiver, site)
    if calls:
        return all(model.state_kind(call) == "optimizer" for call in calls)
    head, _, attribute = receiver.partition(".")
    if attribute == "optimizer" and not model.assigns_of(receiver, site):
        klass = model.self_class(head, site)
        return klass is not None and model.is_model_class(klass)  # the optimizer `compile` was given
    return False


def _optimizer_subclass(model, facts, site) -> bool:
    """Whether `site` is in a method of a class deriving from a Keras optimizer."""
    fn = model.functions.get(facts.scope_of(site))
    if fn is None or fn.owner is None:
        return False
    return any(is_keras_class(base, "optimizers") for cls in model.bases(fn.owner) for base in cls.bases)


def _starred_zip(model, call):
    """The `zip(...)` call unpacked with `*` into `call`'s arguments, or None."""
    for key, start, end in call.arg_spans:
        if key != -1:
            continue
        inner = model.whole_call((start, end))
        if inner is not None and inner.func.kind == "name" and inner.func.text == "zip":
            return inner
    return None


def _holds_gradient(model, expr, site) -> bool:
    """Whether `expr` (a name, or a subscript of one) holds what `tape.gradient(...)` returned."""
    name = expr.text if expr.kind in ("name", "subscript") else ""
    if not name or "." in name:
        return False
    calls = model.value_calls(name, site)
    return bool(calls) and all(c.method in GRADIENT_METHODS for c in calls)


def _extra_arguments(call) -> list[str]:
    """What a Keras 3 `apply_gradients(grads_and_vars)` call is given beyond its one argument."""
    extra = [f"`{key}=`" for key in call.keywords if key != "grads_and_vars"]
    if len(call.args) > 1:
        extra.insert(0, "a second positional argument")
    return extra


def _only_keras2(call) -> bool:
    """Whether Keras 2 accepts every extra argument (its `name=`, a string as the second one)."""
    if any(key not in KERAS2_KEYWORDS and key != "grads_and_vars" for key in call.keywords):
        return False
    if len(call.args) > 2:
        return False
    return len(call.args) < 2 or (call.args[1].kind == "constant" and isinstance(call.args[1].value, str))


def check(facts):
    model = model_of(facts)
    for call in facts.calls:
        forwarded = call.func.kind == "super" and call.func.method == "apply_gradients"
        if call.method != "apply_gradients" and not forwarded:
            continue
        starred = _starred_zip(model, call)
        if starred is not None and not call.args:
            if forwarded or not _own_class_takes_many(model, call.receiver, call.site):
                yield report(
                    facts, call.site, CODE,
                    "`apply_gradients(*zip(...))` unpacks the (gradient, variable) pairs into separate "
                    "arguments; the optimizer takes one iterable of pairs: TypeError "
                    "(`apply_gradients() takes 2 positional arguments but 3 were given`)",
                    "Drop the `*`: `apply_gradients(zip(grads, variables))`.",
                )
            continue
        first = call.arg(0, "grads_and_vars")
        if (first is not None and first.kind == "tuple" and len(first.elements) == 2
                and _holds_gradient(model, first.elements[0], call.site)
                and (forwarded or not _own_class_takes_many(model, call.receiver, call.site))):
            yield report(
                facts, call.site, CODE,
                "`apply_gradients` is given one (gradient, variable) pair; it iterates its argument as "
                "a list of pairs: ValueError (`too many values to unpack`)",
                "Wrap the pair in a list: `apply_gradients([(grad, variable)])`.",
            )
            continue
        extra = _extra_arguments(call)
        if not extra:
            continue
        if forwarded:
            keras = _optimizer_subclass(model, facts, call.site)
            what = "`super().apply_gradients(...)`"
        else:
            keras = _keras_optimizer(model, call.receiver, call.site)
            what = f"`{call.func.text}(...)`"
        if not keras:
            continue
        step = "; the step counter is `optimizer.iterations` now" if "global_step" in call.keywords else ""
        yield report(
            facts, call.site, CODE,
            f"{what} passes {', '.join(extra)} to a Keras optimizer, whose `apply_gradients` takes only "
            f"`grads_and_vars` in Keras 3: TypeError at the first step{step}",
            "Pass the pairs alone: `apply_gradients(zip(grads, variables))`.",
            details={"keras2": None} if _only_keras2(call) else {},
        )

'''# TAP303 dunder-call-override

## What it does
Flags a subclass of a Keras `Model` (`keras.Model`, `tf.keras.Model`, `Sequential`, also
through the file's own base classes) that defines its forward pass as `__call__`
instead of `call`: a `def __call__` that never hands over to Keras's own
`__call__` (`super().__call__(...)`).

## Why is this bad?
`Model.__call__` is where Keras does its bookkeeping before it runs `call`: it builds
the model, sets the call context that carries `training` down to Dropout and
BatchNormalization, and records the inputs. A `__call__` of your own replaces all of it.
The layers inside still make their weights (so a custom loop trains them, which hides
the mistake), but, measured on TensorFlow 2.21 / Keras 3.15:

- the model is never marked built: `model.built` stays `False` after it was called,
  and `save_weights` raises `ValueError: You are saving a model that has not yet been
  built`;
- `fit`, `evaluate` and `predict` decide from `call`'s signature whether to pass
  `training=True`, and the base `call` takes none: `fit` calls the model without it
  (a `training` parameter of `__call__` receives `None`), so Dropout stays off and
  BatchNormalization never updates its moving statistics during training;
- `model.call(x)` raises `NotImplementedError: Model ... does not have a call() method
  implemented`, and `model(x, training=True)` raises `TypeError` when `__call__` has no
  `training` parameter.

## Example
```python
import tensorflow as tf

class Critic(tf.keras.Model):
    def __init__(self):
        super().__init__()
        self.fc1 = tf.keras.layers.Dense(256, activation="relu")
        self.q = tf.keras.layers.Dense(1)

    def __call__(self, state, action):
        return self.q(self.fc1(tf.concat([state, action], axis=1)))
```

## Use instead
```python
import tensorflow as tf

class Critic(tf.keras.Model):
    def __init__(self):
        super().__init__()
        self.fc1 = tf.keras.layers.Dense(256, activation="relu")
        self.q = tf.keras.layers.Dense(1)

    def call(self, state, action):
        return self.q(self.fc1(tf.concat([state, action], axis=1)))
```

Name the method `call`; calling the model (`critic(state, action)`) still works, through
Keras's `__call__`. A `__call__` of your own is fine when it returns
`super().__call__(...)`.

## Where it stays silent
A `__call__` that calls `super().__call__(...)` (or `keras.Model.__call__(self, ...)`); a
decorated `__call__` (`@tf.function` for a SavedModel signature: the model is used as a
`tf.Module`, on purpose);
classes that are not Keras models, also `tf.Module` subclasses. A Keras `Layer` subclass
with its own `__call__`: measured inside a model's `call`, its sublayers still get
`training` from the model's call context, it is saved with the model, and `fit` updates its
BatchNormalization, so nothing silent goes wrong (a `training=` it does not take raises
`TypeError` at once). Silent for Keras 2 code (`keras-version = "2"`): not measured there.
'''

from __future__ import annotations

import dataclasses

from tapecheck.model import model_of
from tapecheck.rules._common import report

CODE = "TAP303"
NAME = "dunder-call-override"
SUMMARY = ("a Keras `Model` subclass that defines `__call__` instead of `call`: never built (`save_weights` "
           "raises), `fit` never passes `training=True` to its Dropout/BatchNormalization")
PROBE = False

TRIGGERS = (b"__call__",)

HINT = ("Rename the method to `call` (calling the model still works, through Keras's `__call__`), or end "
        "your `__call__` with `return super().__call__(...)` and put the forward pass in `call`.")


VALID = [
    # the forward pass in `call`
    """
import tensorflow as tf
class Critic(tf.keras.Model):
    def __init__(self):
        super().__init__()
        self.q = tf.keras.layers.Dense(1)
    def call(self, state, action):
        return self.q(tf.concat([state, action], axis=1))
""",
    # a `__call__` that hands over to Keras's own
    """
import keras
class Actor(keras.Model):
    def __init__(self):
        super().__init__()
        self.mu = keras.layers.Dense(2)
    def call(self, state, training=None):
        return self.mu(state)
    def __call__(self, state, *args, **kwargs):
        state = keras.ops.convert_to_tensor(state)
        return super().__call__(state, *args, **kwargs)
class Value(keras.Model):
    def call(self, state):
        return state
    def __call__(self, state):
        return keras.Model.__call__(self, state)
""",
    # a traced `__call__`: a SavedModel signature, on purpose
    """
import tensorflow as tf
class Exported(tf.keras.Model):
    def __init__(self):
        super().__init__()
        self.v = self.add_weight(shape=(), initializer="ones")
    @tf.function
    def __call__(self, x):
        return x * self.v
""",
    # a Layer (not a Model), a tf.Module and a plain class
    """
import tensorflow as tf
class Block(tf.keras.layers.Layer):
    def __init__(self):
        super().__init__()
        self.fc = tf.keras.layers.Dense(4)
    def __call__(self, x):
        return self.fc(x)
class Affine(tf.Module):
    def __call__(self, x):
        return x
class Policy:
    def __call__(self, x):
        return x
""",
]

INVALID = [
    # SAC's networks, written as `__call__`
    """
import tensorflow as tf
from tensorflow import keras
class CriticModel(keras.Model):
    def __init__(self):
        super().__init__()
        self.fc1 = keras.layers.Dense(256, activation="relu")
        self.q = keras.layers.Dense(1)
    def __call__(self, state, action):  # expect: TAP303
        return self.q(self.fc1(tf.concat([state, action], axis=1)))
class ActorModel(keras.Model):
    def __init__(self):
        super().__init__()
        self.mu = keras.layers.Dense(2)
    def __call__(self, state):  # expect: TAP303
        return self.mu(state)
    def sample(self, state):
        return self.__call__(state)
""",
    # `call` is there, but `__call__` runs it itself; and through a base class of the file
    """
import keras
class Net(keras.Model):
    def call(self, x, training=None):
        return x
    def __call__(self, x, training=None):  # expect: TAP303
        return self.call(x, training=training)
class Base(keras.Model):
    pass
class Head(Base):
    def __call__(self, x):  # expect: TAP303
        return x
""",
]


def _hands_over(model, fn) -> bool:
    """Whether `fn` (a `__call__`) calls Keras's own: `super().__call__(...)`, or `Base.__call__(self, ...)`."""
    for call in model.calls_in_scope(fn.block.id):
        if call.func.kind == "super" and call.func.method == "__call__":
            return True
        head, _, method = call.func.text.rpartition(".")  # `keras.Model.__call__(self, ...)`
        first = call.args[0] if call.args else None
        if method == "__call__" and head and head != fn.self_name and first is not None \
                and first.kind == "name" and first.text == fn.self_name:
            return True
    return False


def check(facts):
    model = model_of(facts)
    for fn in model.functions.values():
        klass = fn.owner
        if fn.name != "__call__" or klass is None or not fn.bound:
            continue
        if fn.block.decorators or not model.is_model_class(klass) or _hands_over(model, fn):
            continue
        made = next((a for a in model.assigns_in(klass.id) if a.kind == "def" and a.target == "__call__"
                     and a.site.line == fn.block.line), None)
        if made is None:
            continue
        if model.method_of_block(klass, "call") is not None:
            message = (f"`{klass.name}` is a Keras model and its `__call__` runs in place of Keras's `Model.__call__` "
                       "(it never calls `super().__call__`): the model is never marked built, so `save_weights` raises "
                       "`ValueError: You are saving a model that has not yet been built`")
        else:
            message = (f"`{klass.name}` is a Keras model and defines its forward pass as `__call__` instead of `call`: "
                       "Keras's own `__call__` never runs, so the model is never marked built (`save_weights` raises "
                       "`ValueError: You are saving a model that has not yet been built`), `fit`/`evaluate` call it "
                       "without `training=True` (Dropout stays off, BatchNormalization never updates its statistics), "
                       "and `model.call(...)` raises `NotImplementedError`")
        finding = report(
            facts, made.site, CODE, message,
            HINT,
        )
        yield dataclasses.replace(finding, details={"keras2": None})  # Keras 2: not measured here, silent

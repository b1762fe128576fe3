'''# TAP304 step-logs-replaced-by-trackers

## What it does
Flags a `train_step` or `test_step` of a Keras 3 `Model` subclass that returns
`{"loss": loss}` when the model keeps no metric of its own (no tracker made in
any of its methods, no `metrics` property, nothing handed to `super().train_step`)
and the file runs it with `fit` (or `evaluate`, for `test_step`).

## Why is this bad?
Keras 3's `fit` and `evaluate` do not log a returned dict as it is when its keys
are exactly the names of the model's metrics: they log those metrics' results
instead. A model that keeps no metric of its own has one, Keras's loss tracker,
named `loss`, and a hand-written step never updates it. So `{"loss": loss}` is
replaced by the tracker's result, 0.0, at every epoch: the history, the progress
bar, `EarlyStopping` and `ReduceLROnPlateau` all read a loss of zero (and with
`compile(metrics=[...])` the epoch ends in `ValueError: Cannot get result() since
the metric has not yet been built`). `self.compute_loss(...)` does not update the
tracker either. Keras 2 logged the returned values, so the same code worked there.
Measured on TensorFlow 2.21 / Keras 3.15 (fixture `siamese_step_returns_loss`, a
contrastive siamese encoder, 3 epochs): `history["loss"]` and `history["val_loss"]`
are 0.0 at every epoch while the validation pairs' contrastive loss is 0.022; the
twin with a `Mean` tracker logs 0.020, 0.014, 0.011 and a `val_loss` of 0.022. A
regressor whose step uses `self.compute_loss` logs 0.0 the same way.

## Example
```python
import tensorflow as tf
from tensorflow import keras

class Regressor(keras.Model):
    def __init__(self):
        super().__init__()
        self.dense = keras.layers.Dense(1)

    def call(self, x):
        return self.dense(x)

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(y - self(x, training=True)))
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        return {"loss": loss}

def train(x, y):
    model = Regressor()
    model.compile(optimizer="adam")
    return model.fit(x, y, epochs=10, callbacks=[keras.callbacks.EarlyStopping("loss")])
```

## Use instead
```python
import tensorflow as tf
from tensorflow import keras

class Regressor(keras.Model):
    def __init__(self):
        super().__init__()
        self.dense = keras.layers.Dense(1)
        self.loss_tracker = keras.metrics.Mean(name="loss")

    def call(self, x):
        return self.dense(x)

    @property
    def metrics(self):
        return [self.loss_tracker]

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(y - self(x, training=True)))
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        self.loss_tracker.update_state(loss)
        return {"loss": self.loss_tracker.result()}

def train(x, y):
    model = Regressor()
    model.compile(optimizer="adam")
    return model.fit(x, y, epochs=10, callbacks=[keras.callbacks.EarlyStopping("loss")])
```

## Where it stays silent
A dict with other keys as well (`{"loss": loss, "kl": kl}`: not the metrics' names,
so Keras logs it as it is); a value that is a tracker's `.result()`; a class (or a
local base) that makes any Keras metric or defines `metrics`; a step that calls
`super()` or `self.compiled_loss` (TAP302's case) or touches `_loss_tracker`; a class
whose bases are not all known (a base class of another module may keep trackers);
a model this file never hands to `fit`/`evaluate` (trained by another module, or by a loop
of its own that reads the dict itself);
Keras 2 (`tf_keras`, `TF_USE_LEGACY_KERAS`, `keras-version = "2"`), where the dict is
logged as returned.
'''

from __future__ import annotations

import re

from tapecheck.model import Instance, model_of
from tapecheck.rules._common import report, token_gap

CODE = "TAP304"
NAME = "step-logs-replaced-by-trackers"
SUMMARY = "a Keras 3 train_step/test_step returning {\"loss\": loss} with no tracker: fit logs 0.0"

# `.fit` / `.evaluate` called as a method: token gap between the dot and the name (spaces, line
# continuations and, inside brackets, comments). Starts with a literal (found at memchr speed).
RUN_CALL = re.compile(rb"\." + token_gap() + rb"(?:fit|evaluate)\b")


def screen(source: bytes) -> bool:
    """A method named `train_step` or `test_step` (the name as written), and a `fit` or
    `evaluate` method called here: the rule reports a step only with such a run in the file.
    (`_step` alone let every plain loop's `def train_step(...)` through to a parse.)"""
    if b"train_step" not in source and b"test_step" not in source:
        return False
    if b"fit" not in source and b"evaluate" not in source:
        return False
    return RUN_CALL.search(source) is not None

STEPS = frozenset({"train_step", "test_step"})

VALID = [
    # other keys beside the loss: logged as returned
    """
import tensorflow as tf
from tensorflow import keras
class VAE(keras.Model):
    def call(self, x):
        return x
    def train_step(self, data):
        with tf.GradientTape() as tape:
            recon, kl = self.losses_of(data)
            loss = recon + kl
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        return {"loss": loss, "kl": kl}
""",
    # a tracker, updated and returned
    """
import tensorflow as tf
from tensorflow import keras
class Net(keras.Model):
    def __init__(self):
        super().__init__()
        self.dense = keras.layers.Dense(1)
        self.loss_tracker = keras.metrics.Mean(name="loss")
    @property
    def metrics(self):
        return [self.loss_tracker]
    def call(self, x):
        return self.dense(x)
    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(y - self(x, training=True)))
        self.optimizer.apply_gradients(zip(tape.gradient(loss, self.trainable_variables), self.trainable_variables))
        self.loss_tracker.update_state(loss)
        return {"loss": loss}
""",
    # a base class of another module: it may keep trackers
    """
import tensorflow as tf
from project.base import TrackedModel
class Net(TrackedModel):
    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(y - self(x, training=True)))
        self.optimizer.apply_gradients(zip(tape.gradient(loss, self.trainable_variables), self.trainable_variables))
        return {"loss": loss}
""",
    # not a Keras model: a trainer class of its own
    """
import tensorflow as tf
class Trainer:
    def train_step(self, x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(y - self.model(x, training=True)))
        self.optimizer.apply_gradients(zip(tape.gradient(loss, self.model.trainable_variables), self.model.trainable_variables))
        return {"loss": loss}
""",
]

INVALID = [
    """
import tensorflow as tf
from tensorflow import keras
class Regressor(keras.Model):
    def __init__(self):
        super().__init__()
        self.dense = keras.layers.Dense(1)
    def call(self, x):
        return self.dense(x)
    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(y - self(x, training=True)))
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        return {"loss": loss}  # expect: TAP304
    def test_step(self, data):
        x, y = data
        return {"loss": tf.reduce_mean(tf.square(y - self(x)))}  # expect: TAP304
def train(x, y):
    model = Regressor()
    model.compile(optimizer="adam")
    return model.fit(x, y, validation_split=0.2, epochs=10)
""",
    # compute_loss does not update the tracker either
    """
import tensorflow as tf
import keras
class Classifier(keras.Model):
    def __init__(self, encoder, head):
        super().__init__()
        self.encoder, self.head = encoder, head
    def call(self, x, training=False):
        return self.head(self.encoder(x, training=training))
    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(x=x, y=y, y_pred=y_pred)
        self.optimizer.apply_gradients(zip(tape.gradient(loss, self.trainable_variables), self.trainable_variables))
        return {"loss": loss}  # expect: TAP304
classifier = Classifier(keras.layers.Dense(16), keras.layers.Dense(3))
classifier.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
history = classifier.fit(features, labels, epochs=5)
""",
    # a subclass of the model is the one fitted
    """
import tensorflow as tf
from tensorflow import keras
class Base(keras.Model):
    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(y - self(x, training=True)))
        self.optimizer.apply_gradients(zip(tape.gradient(loss, self.trainable_variables), self.trainable_variables))
        return {"loss": loss}  # expect: TAP304
class Net(Base):
    def __init__(self):
        super().__init__()
        self.dense = keras.layers.Dense(1)
    def call(self, x):
        return self.dense(x)
def fit_net(x, y):
    net = Net()
    net.compile(optimizer="sgd")
    net.fit(x, y, epochs=3)
""",
]


def _keeps_trackers(model, facts, klass) -> bool:
    """Whether the class or one of its local bases makes a Keras metric in a method, or defines
    `metrics`; True too when a base is neither local nor Keras's (it may)."""
    for cls in model.bases(klass):
        for fn in model.methods(cls):
            if fn.name == "metrics":
                return True
            if any(model.state_kind(call) == "metric" for call in facts.calls_in_scope(fn.block.id)):
                return True
    return False


def _step_defers(facts, fn) -> bool:
    """A step that hands over to Keras (`super().train_step`), uses the compiled shims or Keras's own
    loss tracker, or returns a tracker's result."""
    for call in facts.calls_in_scope(fn.block.id):
        if call.func.kind == "super" or call.method == "compiled_loss" or "loss_tracker" in call.func.text:
            return True
    return False


def _runs_of(model, facts, klass, methods) -> list:
    """The `fit`/`evaluate` calls of this file on an instance of `klass` (or of a class deriving
    from it): the runs whose logs the step's dict becomes."""
    runs = []
    for call in facts.calls:
        if call.method not in methods or not call.receiver:
            continue
        held = model.binding(call.receiver, call.site)
        if isinstance(held, Instance) and held.klass.model is model \
                and any(cls is klass for cls in model.bases(held.klass.block)):
            runs.append(call)
    return runs


def check(facts):
    model = model_of(facts)
    for fn in model.functions.values():
        klass = fn.owner
        if fn.name not in STEPS or klass is None or not fn.bound or not model.is_model_class(klass):
            continue
        if _keeps_trackers(model, facts, klass) or _step_defers(facts, fn):
            continue
        runs = _runs_of(model, facts, klass, ("fit",) if fn.name == "train_step" else ("fit", "evaluate"))
        if not runs:
            continue  # trained elsewhere, or not by fit: the logs are not in view
        for exit_ in facts.exits:
            if exit_.kind != "return" or facts.scope_of(exit_.site) != fn.block.id:
                continue
            if [key for key, _ in exit_.items] != ["loss"]:
                continue
            value = exit_.items[0][1]
            if value.kind == "call" and value.method == "result":
                continue
            logged = "the history's `loss`" if fn.name == "train_step" else "`val_loss`"
            run = runs[0]
            yield report(
                facts, exit_.site, CODE,
                f"`{fn.name}` returns {{\"loss\": ...}}, but `{klass.name}` keeps no metric of its own: Keras 3 "
                "logs the results of the model's metrics instead of a returned dict whose keys are exactly their "
                "names (here only `loss`, its own loss tracker), and this step never updates that tracker, so "
                f"{logged} is 0.0 at every epoch of `{run.func.text}` (line {run.site.line}; EarlyStopping and "
                "ReduceLROnPlateau read it too)",
                "Keep a tracker: `self.loss_tracker = keras.metrics.Mean(name=\"loss\")` in `__init__`, "
                "`self.loss_tracker.update_state(loss)` in the step, return `{\"loss\": self.loss_tracker.result()}` "
                "and list it in a `metrics` property.",
                details={"step": fn.name, "keras2": None},  # Keras 2 logs the dict as returned: silent
            )

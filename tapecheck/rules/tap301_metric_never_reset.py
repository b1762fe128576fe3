'''# TAP301 metric-never-reset

## What it does
Flags a Keras metric object that is updated every step (`update_state` or a
call) and read every epoch (`result()` inside the epoch loop) but never
`reset_state()`: not at the epoch boundary, not anywhere.

## Why is this bad?
A metric accumulates until it is reset. `model.fit` resets its metrics at each
epoch; a custom loop has to do it itself. Without the reset, the "epoch 2"
figure is the average over epochs 1 and 2, epoch 10 over all ten: the curve
looks smoother and better than the model is, and validation numbers lag.

Metrics of a `keras.Model` subclass that overrides `train_step` are reset by
`fit` and are not flagged.

## Example
```python
import tensorflow as tf

train_loss = tf.keras.metrics.Mean(name="train_loss")

def train_step(model, opt, x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(y - model(x, training=True)))
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
    train_loss.update_state(loss)

def fit(model, opt, dataset, epochs):
    for epoch in range(epochs):
        for x, y in dataset:
            train_step(model, opt, x, y)
        print(epoch, float(train_loss.result()))
```

## Use instead
```python
import tensorflow as tf

train_loss = tf.keras.metrics.Mean(name="train_loss")

def train_step(model, opt, x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(y - model(x, training=True)))
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
    train_loss.update_state(loss)

def fit(model, opt, dataset, epochs):
    for epoch in range(epochs):
        train_loss.reset_state()
        for x, y in dataset:
            train_step(model, opt, x, y)
        print(epoch, float(train_loss.result()))
```

## Fix safety
The fix inserts `<metric>.reset_state()` as the first statement of the epoch
loop. It is unsafe (applied only with `--unsafe-fixes`): it changes the numbers
the loop reports, which is the point, but the loop it picks may not be the one
you think of as the epoch.
'''

import re

from tapecheck.rules._common import metric_bindings, report

CODE = "TAP301"
NAME = "metric-never-reset"
SUMMARY = "a Keras metric read every epoch is never reset"
PROBE = True
FIXABLE = True
RESULT_READ = re.compile(rb"\.[\s\\]*result\b")  # `m.result`, even split over lines


def screen(source: bytes) -> bool:
    """A metric must be made here and its `result` read here."""
    return b"etric" in source and RESULT_READ.search(source) is not None


RESETS = frozenset({"reset_state", "reset_states"})

VALID = [
    # fit resets the metrics of a train_step override
    """
import keras
class Model(keras.Model):
    def __init__(self):
        super().__init__()
        self.loss_tracker = keras.metrics.Mean(name="loss")
    def train_step(self, data):
        x, y = data
        self.loss_tracker.update_state(self.compute_loss(x, y))
        return {"loss": self.loss_tracker.result()}
""",
    # reset through a loop over all metrics
    """
import tensorflow as tf
acc = tf.keras.metrics.SparseCategoricalAccuracy()
loss = tf.keras.metrics.Mean()
for epoch in range(3):
    for m in (acc, loss):
        m.reset_state()
    for x, y in data:
        acc.update_state(y, x)
        loss(y)
    print(acc.result(), loss.result())
""",
    # re-created each epoch
    """
import tensorflow as tf
for epoch in range(3):
    acc = tf.keras.metrics.Accuracy()
    for x, y in data:
        acc.update_state(y, x)
    print(acc.result())
""",
]

INVALID = [
    """
from tensorflow import keras
val_acc = keras.metrics.SparseCategoricalAccuracy()
for epoch in range(10):
    for x, y in val_ds:
        val_acc(y, model(x, training=False))
    print("val acc", val_acc.result())  # expect: TAP301
""",
]


def check(facts):
    metrics = metric_bindings(facts)
    if not metrics:
        return
    resets = [c for c in facts.calls if c.method in RESETS or c.method == "reset_metrics"]
    if any(c.receiver not in metrics for c in resets):
        return  # something resets metrics we cannot name (a loop over them, `model.reset_metrics()`)
    reset_names = {c.receiver for c in resets}
    for name, bindings in metrics.items():
        if name in reset_names or any(facts.loops_between(None, b.site) for b in bindings):
            continue  # reset, or made anew inside a loop
        owner = facts.enclosing_class(bindings[0].site)
        is_model = owner is not None and any(base.endswith("Model") for base in owner.bases)
        if is_model and facts.methods_of(owner) & {"train_step", "test_step"}:
            continue  # `fit` resets the metrics of a train_step override
        updates = [
            c for c in facts.calls
            if (c.receiver == name and c.method == "update_state") or (c.func.text == name)
        ]
        reads = [c for c in facts.calls if c.receiver == name and c.method == "result"]
        finding = _first_epoch_read(facts, reads, updates)
        if finding is not None:
            yield report(
                facts, finding.site, CODE,
                f"`{name}` is read every epoch here but never reset: each result includes all earlier epochs",
                f"Call `{name}.reset_state()` at the start of each epoch.",
            )


def _first_epoch_read(facts, reads, updates):
    """A read inside a loop that runs after each pass of updates made per step."""
    for read in reads:
        loops = facts.loops_between(None, read.site)
        if not loops:
            continue
        for update in updates:
            if facts.scope_of(update.site) != facts.scope_of(read.site):
                return read  # updated in a step function, read in the epoch loop
            for loop in loops:
                inner = facts.loops_between(None, update.site)
                if loop in inner and inner.index(loop) < len(inner) - 1:
                    return read  # updated in a loop nested inside the loop that reads
    return None

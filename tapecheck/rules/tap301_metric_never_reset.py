'''# TAP301 metric-never-reset

## What it does
Flags a Keras metric object that is updated every step (`update_state` or a
call) and read every epoch (`result()` inside the epoch loop) but never
`reset_state()`: not at the epoch boundary, not anywhere.

The program model follows the metric into helpers: a metric read by an
`evaluate()` helper that an epoch loop calls, and a reset that runs only once,
before the epoch loop, count as never reset. A metric made at module level and
updated in a Keras model's `train_step` is flagged at the update: `fit` resets
only the metrics the model tracks (its attributes, `compile`'s, a `metrics`
property), not a global one.

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
from typing import NamedTuple

from tapecheck.model import model_of
from tapecheck.rules._common import metric_bindings, report, token_gap

CODE = "TAP301"
NAME = "metric-never-reset"
SUMMARY = "a Keras metric read every epoch is never reset"
PROBE = True
FIXABLE = True
RESULT_READ = re.compile(rb"\." + token_gap() + rb"result\b")  # `m.result`, even split over lines or by a comment


def screen(source: bytes) -> bool:
    """A metric must be made here and its `result` read here."""
    return b"etric" in source and RESULT_READ.search(source) is not None


RESETS = frozenset({"reset_state", "reset_states"})

VALID = [
    # the helper resets the metric it reads, at each call
    """
import tensorflow as tf
val_acc = tf.keras.metrics.SparseCategoricalAccuracy()
def evaluate(model, ds):
    val_acc.reset_state()
    for x, y in ds:
        val_acc.update_state(y, model(x, training=False))
    return val_acc.result()
def fit(model, ds, epochs):
    for epoch in range(epochs):
        print(epoch, evaluate(model, ds))
""",
    # a step-count loop logging a running mean since the start: no epochs
    """
import tensorflow as tf
running = tf.keras.metrics.Mean()
def train(model, opt, batches):
    for step, (x, y) in enumerate(batches):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        running.update_state(loss)
        if step % 100 == 0:
            print(step, running.result())
""",
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
    # made in the function that runs one epoch: a fresh metric on every call
    """
import tensorflow as tf
def train_epoch(model, opt, ds):
    epoch_loss = tf.keras.metrics.Mean()
    for x, y in ds:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        epoch_loss.update_state(loss)
    return epoch_loss.result()
def fit(model, opt, ds, epochs):
    for epoch in range(epochs):
        print(epoch, train_epoch(model, opt, ds))
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
    # read through a helper, reset once before the epochs
    """
import tensorflow as tf
val_acc = tf.keras.metrics.SparseCategoricalAccuracy()
def evaluate(model, ds):
    for x, y in ds:
        val_acc.update_state(y, model(x, training=False))
    return val_acc.result()  # expect: TAP301
def fit(model, ds, epochs):
    val_acc.reset_state()
    for epoch in range(epochs):
        print(epoch, evaluate(model, ds))
""",
    # a module-level metric in a train_step override: fit does not reset it
    """
import keras
import tensorflow as tf
tracker = keras.metrics.Mean(name="loss")
class Net(keras.Model):
    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(self(x, training=True) - y))
        self.optimizer.apply_gradients(zip(tape.gradient(loss, self.trainable_variables), self.trainable_variables))
        tracker.update_state(loss)  # expect: TAP301
        return {"loss": tracker.result()}
""",
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
    model = model_of(facts)
    resets = [c for c in facts.calls if c.method in RESETS or c.method == "reset_metrics"]
    if any(c.receiver not in metrics for c in resets):
        return  # something resets metrics we cannot name (a loop over them, `model.reset_metrics()`)
    for name, bindings in metrics.items():
        if any(facts.loops_between(None, b.site) for b in bindings):
            continue  # made anew inside a loop
        own_resets = [c for c in resets if c.receiver == name]
        owner = facts.enclosing_class(bindings[0].site)
        is_model = owner is not None and any(base.endswith("Model") for base in owner.bases)
        if is_model and facts.methods_of(owner) & {"train_step", "test_step"}:
            continue  # `fit` resets the metrics of a train_step override
        updates = [
            c for c in facts.calls
            if (c.receiver == name and c.method == "update_state") or (c.func.text == name)
        ]
        if not own_resets:
            untracked = _untracked_in_train_step(facts, model, name, bindings, updates)
            if untracked is not None:
                yield untracked
                continue
        reads = [c for c in facts.calls if c.receiver == name and c.method == "result"]
        finding, through = _first_epoch_read(facts, model, reads, updates)
        if finding is None:
            continue
        if through is not None and "." not in name and all(
                facts.scope_of(b.site) == facts.scope_of(finding.site) for b in bindings):
            continue  # a local of the per-epoch function: a fresh metric on every call
        epoch_scope = through.scope if through is not None else facts.scope_of(finding.site)
        once = [c for c in own_resets if _runs_once(facts, c, epoch_scope)]
        if len(once) != len(own_resets):
            continue  # reset where it can run per epoch
        if once and not all(c.site.order < _loop_start(facts, finding, through) for c in once):
            continue
        where = "here" if through is None else f"here, in `{through.helper}`, called in a loop at line {through.line}"
        reset = (f"is reset only once, at line {once[0].site.line}, before the epoch loop"
                 if once else "is never reset")
        made = f" (made at line {bindings[0].site.line})" if len(bindings) == 1 and bindings[0].site.line != finding.site.line else ""
        yield report(
            facts, finding.site, CODE,
            f"`{name}`{made} is read every epoch {where}, but {reset}: each result includes all earlier epochs",
            f"Call `{name}.reset_state()` at the start of each epoch.",
        )


def _runs_once(facts, reset, epoch_scope: int) -> bool:
    """A reset outside any loop in the scope that runs the epochs: once, before them. (A reset in
    another function, a helper or a callback, may run per epoch: it counts.)"""
    return facts.scope_of(reset.site) == epoch_scope and not facts.loops_between(None, reset.site)


def _loop_start(facts, read, through) -> int:
    """An order before every event of the epoch loop (the read's outermost loop, or the caller's)."""
    if through is not None:
        return through.order
    loops = facts.loops_between(None, read.site)
    inside = [c.site.order for c in facts.calls if facts.inside(c.site, loops[0])]
    return min(inside, default=read.site.order)


def _untracked_in_train_step(facts, model, name, bindings, updates):
    """A metric made at module level and updated in a local Keras model's `train_step`/`test_step`:
    `fit` resets only the metrics the model tracks, so this one accumulates across epochs."""
    if not all(facts.blocks[facts.scope_of(b.site)].kind == "module" for b in bindings):
        return None
    for update in updates:
        fn = model.functions.get(facts.scope_of(update.site))
        if fn is None or fn.owner is None or fn.name not in ("train_step", "test_step"):
            continue
        klass = fn.owner
        if not model.is_keras(klass) or model.method_of_block(klass, "metrics") is not None:
            continue  # a `metrics` property may list it: fit then resets it
        return report(
            facts, update.site, CODE,
            f"`{name}` is made at module level (line {bindings[0].site.line}) and updated in "
            f"`{klass.name}.{fn.name}`: `fit` resets only the metrics the model tracks, so each epoch's "
            "value includes all earlier epochs",
            f"Make it an attribute of the model (`self.{name} = ...` in `__init__`), or list it in a "
            "`metrics` property, and `fit` resets it every epoch.",
        )
    return None


def _first_epoch_read(facts, model, reads, updates):
    """A read inside a loop that runs after each pass of updates made per step; or a read in a
    helper, after its update loop, that a loop elsewhere calls. (read, None) or (read, (helper, line, order))."""
    for read in reads:
        loops = facts.loops_between(None, read.site)
        if not loops:
            through = _called_from_a_loop(facts, model, read, updates)
            if through is not None:
                return read, through
            continue
        for update in updates:
            if facts.scope_of(update.site) != facts.scope_of(read.site):
                return read, None  # updated in a step function, read in the epoch loop
            for loop in loops:
                inner = facts.loops_between(None, update.site)
                if loop in inner and inner.index(loop) < len(inner) - 1:
                    return read, None  # updated in a loop nested inside the loop that reads
    return None, None


class Through(NamedTuple):
    """A read in a helper, and the call of it in a loop elsewhere that makes it run per epoch."""

    helper: str
    line: int  # of the call
    order: int  # of the call
    scope: int  # the scope of the loop that calls it


def _called_from_a_loop(facts, model, read, updates):
    fn = model.functions.get(facts.scope_of(read.site))
    if fn is None:
        return None
    scope = fn.block.id
    if not any(facts.scope_of(u.site) == scope and facts.loops_between(None, u.site)
               and u.site.order < read.site.order for u in updates):
        return None  # the helper does not accumulate a whole pass before it reads
    for caller in model.callers(fn):
        if facts.loops_between(None, caller.site) and facts.scope_of(caller.site) != scope:
            return Through(fn.qualname, caller.site.line, caller.site.order, facts.scope_of(caller.site))
    return None

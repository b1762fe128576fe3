'''# TAP601 loss-not-scaled-for-replicas

## What it does
Flags the loss of a distributed training step averaged over the per-replica
batch by hand: inside the function given to `strategy.run(fn, args=...)`, where
`strategy` is a `tf.distribute.MirroredStrategy` or `MultiWorkerMirroredStrategy`
built in the file, the target of `tape.gradient` is `tf.reduce_mean` (or
`keras.ops.mean`) of per-example losses: a Keras loss function
(`keras.losses.mse`), a loss object made with `reduction=None`, or element-wise
ops on the model's output.

The step can be a function, a method given as `self.train_step`, or a local name
bound to one. It stays silent for `tf.nn.compute_average_loss`, a loss divided by
the global batch size or by `num_replicas_in_sync`, a Keras loss object with its
default reduction (it scales itself by the number of replicas), a loss computed by
a helper, and when the file uses `num_replicas_in_sync` for anything but the batch
size (gradients or learning rate rescaled by hand).

## Why is this bad?
`apply_gradients` under a `MirroredStrategy` sums the gradients of all replicas.
Each replica must therefore contribute its share of the global mean: its loss
summed and divided by the global batch size. A per-replica mean makes the update
N times too large on N devices (measured on TensorFlow 2.21 with two devices:
a weight moves 0.4 where one device moves it 0.2). Nothing fails: the model trains
with an N times larger learning rate, and on one device the mistake does not show.

## Example
```python
import tensorflow as tf

strategy = tf.distribute.MirroredStrategy()
GLOBAL_BATCH_SIZE = 64 * strategy.num_replicas_in_sync
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])
    optimizer = tf.keras.optimizers.SGD(0.1)

def train_step(x, y):
    with tf.GradientTape() as tape:
        per_example = tf.keras.losses.mse(y, model(x, training=True))
        loss = tf.reduce_mean(per_example)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss

@tf.function
def distributed_step(x, y):
    return strategy.run(train_step, args=(x, y))
```

## Use instead
```python
import tensorflow as tf

strategy = tf.distribute.MirroredStrategy()
GLOBAL_BATCH_SIZE = 64 * strategy.num_replicas_in_sync
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])
    optimizer = tf.keras.optimizers.SGD(0.1)

def train_step(x, y):
    with tf.GradientTape() as tape:
        per_example = tf.keras.losses.mse(y, model(x, training=True))
        loss = tf.nn.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH_SIZE)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss

@tf.function
def distributed_step(x, y):
    return strategy.run(train_step, args=(x, y))
```

## Fix safety
No automatic fix: the global batch size is the program's to name.
'''

from __future__ import annotations

from tapecheck.model import (
    METADATA_CALLS,
    Instance,
    all_calls,
    callee_of,
    keras_member,
    makes_keras_model,
    makes_strategy,
    method_of,
    model_of,
    strategy_steps,
)
from tapecheck.rules._common import report

CODE = "TAP601"
NAME = "loss-not-scaled-for-replicas"
SUMMARY = "a `strategy.run` step averages its loss over the per-replica batch: the update is N times too large"
PROBE = True


def screen(source: bytes) -> bool:
    """A Mirrored strategy built here, and a gradient taken."""
    return b"MirroredStrategy" in source and b"gradient" in source


MEANS = frozenset({"tensorflow.reduce_mean", "tensorflow.math.reduce_mean", "keras.ops.mean", "tensorflow.keras.ops.mean"})
# Ops whose result keeps the batch dimension of a per-example input.
ELEMENTWISE = frozenset(
    f"{root}{name}"
    for root in ("tensorflow.", "tensorflow.math.")
    for name in ("square", "abs", "squared_difference", "exp", "log", "sqrt", "maximum", "minimum", "multiply",
                 "subtract", "add", "pow", "negative", "log1p", "softplus")
) | frozenset(
    f"{root}{name}"
    for root in ("keras.ops.", "tensorflow.keras.ops.")
    for name in ("square", "abs", "exp", "log", "sqrt", "maximum", "minimum", "multiply", "subtract", "add")
) | frozenset({"tensorflow.cast", "tensorflow.dtypes.cast"})
PER_EXAMPLE_LOSSES = frozenset(
    {
        "tensorflow.nn.softmax_cross_entropy_with_logits",
        "tensorflow.nn.sparse_softmax_cross_entropy_with_logits",
        "tensorflow.nn.sigmoid_cross_entropy_with_logits",
        "tensorflow.nn.weighted_cross_entropy_with_logits",
    }
)
NOT_LOSSES = frozenset({"get", "serialize", "deserialize"})  # `losses.get("MeanSquaredError")` may be an object
NONE_REDUCTIONS = frozenset({"none"})
BATCH_USES = ("batch",)  # `GLOBAL_BATCH_SIZE = BATCH * strategy.num_replicas_in_sync`, `.batch(...)`
MAX_DEPTH = 8

HINT = ("Sum over the global batch instead: `tf.nn.compute_average_loss(per_example_loss, "
        "global_batch_size=GLOBAL_BATCH_SIZE)`, or a Keras loss object with its default reduction.")

VALID = [
    # the tutorial's way: compute_average_loss with the global batch size
    """
import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
GLOBAL_BATCH_SIZE = 64 * strategy.num_replicas_in_sync
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])
    optimizer = tf.keras.optimizers.SGD(0.1)
    loss_object = tf.keras.losses.MeanSquaredError(reduction=None)
def train_step(x, y):
    with tf.GradientTape() as tape:
        per_example = loss_object(y, model(x, training=True))
        loss = tf.nn.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH_SIZE)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
@tf.function
def distributed_step(x, y):
    strategy.run(train_step, args=(x, y))
""",
    # a Keras loss object with its default reduction scales itself by the replicas;
    # the mean of that scalar changes nothing
    """
import tensorflow as tf
from tensorflow import keras
class Trainer:
    def __init__(self):
        self.strategy = tf.distribute.MirroredStrategy()
        with self.strategy.scope():
            self.model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
            self.optimizer = keras.optimizers.Adam()
            self.loss_fn = keras.losses.MeanSquaredError()
    def train_step(self, x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(self.loss_fn(y, self.model(x, training=True)))
        grads = tape.gradient(loss, self.model.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
    @tf.function
    def distributed_step(self, x, y):
        self.strategy.run(self.train_step, args=(x, y))
""",
    # the mean divided by the number of replicas; and a loss computed by a helper
    """
import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])
    optimizer = tf.keras.optimizers.SGD(0.1)
def scaled_loss(y, pred):
    return tf.nn.compute_average_loss(tf.square(y - pred)[:, 0])
def train_step(x, y):
    with tf.GradientTape() as tape:
        pred = model(x, training=True)
        loss = tf.reduce_mean(tf.square(y - pred)) / strategy.num_replicas_in_sync
        total = loss + scaled_loss(y, pred)
    grads = tape.gradient(total, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
@tf.function
def distributed_step(x, y):
    strategy.run(train_step, args=(x, y))
""",
    # gradients rescaled by hand: the file uses num_replicas_in_sync in the step
    """
import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])
    optimizer = tf.keras.optimizers.SGD(0.1)
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(y - model(x, training=True)))
    grads = tape.gradient(loss, model.trainable_variables)
    grads = [g / strategy.num_replicas_in_sync for g in grads]
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
@tf.function
def distributed_step(x, y):
    strategy.run(train_step, args=(x, y))
""",
    # no Mirrored strategy here: a per-batch mean is right
    """
import tensorflow as tf
strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
def train_step(model, optimizer, x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(y - model(x, training=True)))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
""",
]

INVALID = [
    # a method given as self.train_step, a loss object with reduction=None, then a mean
    """
import tensorflow as tf
from tensorflow import keras
class Trainer:
    def __init__(self, global_batch):
        self.strategy = tf.distribute.MirroredStrategy()
        with self.strategy.scope():
            self.model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
            self.optimizer = keras.optimizers.Adam()
            self.loss_object = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
    def train_step(self, x, y):
        with tf.GradientTape() as tape:
            per_example = self.loss_object(y, self.model(x, training=True))
            loss = tf.reduce_mean(per_example)  # expect: TAP601
        grads = tape.gradient(loss, self.model.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
    @tf.function
    def distributed_step(self, x, y):
        self.strategy.run(self.train_step, args=(x, y))
""",
    # the step built inside main, the model from a local builder, element-wise ops
    """
import tensorflow as tf
def build_model():
    return tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])
def main(dataset):
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = build_model()
        optimizer = tf.keras.optimizers.SGD(0.1)
    def step(x, y):
        with tf.GradientTape() as tape:
            pred = model(x, training=True)
            loss = tf.reduce_mean(tf.square(pred - y))  # expect: TAP601
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
    run_step = tf.function(lambda x, y: strategy.run(step, args=(x, y)))
    for x, y in dataset:
        run_step(x, y)
""",
]


# -- what names hold, models, losses -------------------------------------------------------
def _is_forward(facts, model, call) -> bool:
    """A call of a Keras model or layer: its output has the batch dimension."""
    if call.func.kind not in ("name", "attribute") or not call.func.text:
        return False
    target = model.binding(call.func.text, call.site)
    if isinstance(target, Instance):
        return model.is_keras(target.klass, "layers") and not model.is_keras(target.klass, "losses")
    return all_calls(model, call.func.text, call.site, lambda c: makes_keras_model(model, c))


def _unreduced_loss_object(facts, model, call) -> bool:
    """A call of a Keras loss object made with `reduction=None` / "none" / `Reduction.NONE`."""
    def made_unreduced(maker):
        if not keras_member(callee_of(facts, maker), "losses")[:1].isupper():
            return False
        reduction = maker.keywords.get("reduction")
        if reduction is None:
            return False
        if reduction.kind == "constant" or (reduction.kind == "name" and reduction.text == "None"):
            return reduction.value is None or str(reduction.value).lower() in NONE_REDUCTIONS
        return reduction.kind == "attribute" and reduction.text.rsplit(".", 1)[-1] == "NONE"
    return call.func.kind in ("name", "attribute") and all_calls(model, call.func.text, call.site, made_unreduced)


class _Judge:
    """Whether a value has one entry per example (is not yet reduced), in the step's terms."""

    def __init__(self, facts, model, step):
        self.facts, self.model, self.step = facts, model, step
        self.params = set(step.params[1:] if step.bound else step.params)

    def name(self, text, site, depth) -> bool:
        if depth > MAX_DEPTH or not text:
            return False
        facts = self.facts
        if "." not in text and facts.scope_of(site) == self.step.block.id and text in self.params:
            if not self.model.assigns_here(text, site):
                return True  # a tensor of the per-replica batch given by `strategy.run(..., args=...)`
        assigns = self.model.assigns_of(text, site, bases=False)
        if not assigns or any(a.kind != "assign" or a.value is None for a in assigns):
            return False
        return all(self.expr(a.value, a.span, a.site, depth + 1) for a in assigns)

    def expr(self, expr, span, site, depth) -> bool:
        if depth > MAX_DEPTH:
            return False
        if expr.kind in ("name", "attribute"):
            return self.name(expr.text, site, depth)
        if expr.kind == "call":
            call = self.model.call_at(span, expr)
            return call is not None and self.call(call, depth)
        if expr.kind in ("binop", "unaryop", "subscript"):
            return self.span(span, site, depth)
        return False

    def call(self, call, depth) -> bool:
        facts, model = self.facts, self.model
        callee = callee_of(facts, call)
        member = keras_member(callee, "losses")
        if callee in PER_EXAMPLE_LOSSES or (member and member[0].islower() and member not in NOT_LOSSES):
            return True
        if _unreduced_loss_object(facts, model, call) or _is_forward(facts, model, call):
            return True
        if callee in ELEMENTWISE:
            return self.span((call.arg_spans[0][1], call.end_order) if call.arg_spans else (0, 0), call.site, depth)
        return False

    def span(self, span, site, depth) -> bool:
        """Operators over values: per example when one operand is and no call in it reduces or is unknown."""
        if span == (0, 0):
            return False
        facts, model = self.facts, self.model
        calls = model.spans.calls_in(span)
        outer = [c for c in calls if not any(o is not c and o.site.order < c.site.order <= o.end_order for o in calls)]
        for call in outer:
            callee = callee_of(facts, call)
            if callee in METADATA_CALLS:
                continue
            if not self.call(call, depth + 1):
                return False
        if outer:
            return True
        inside_calls = lambda order: any(c.site.order < order <= c.end_order for c in calls)  # noqa: E731
        uses = [u for u in model.spans.uses_in(span) if not inside_calls(u.site.order)]
        return any(self.name(u.name, site, depth + 1) for u in uses)


# -- the rule -------------------------------------------------------------------------------
def _rescaled_by_hand(facts) -> bool:
    """`num_replicas_in_sync` used for something else than a batch size: the program scales itself."""
    for use in facts.uses:
        if not use.name.endswith(".num_replicas_in_sync"):
            continue
        assigned = [a for a in facts.assigns if a.kind == "assign" and a.span[0] < use.site.order <= a.span[1]]
        calls = [c for c in facts.calls if c.site.order < use.site.order <= c.end_order]
        if any("batch" in a.target.rsplit(".", 1)[-1].lower() for a in assigned):
            continue
        if calls and method_of(max(calls, key=lambda c: c.site.order)) == "batch":
            continue
        return True
    return False


def check(facts):
    if not makes_strategy(facts) or _rescaled_by_hand(facts):
        return
    model = model_of(facts)
    seen = set()
    for step, run in strategy_steps(model):
        if step.block.id in seen:
            continue
        seen.add(step.block.id)
        scope = step.block.id
        if not any(method_of(c) == "apply_gradients" and facts.scope_of(c.site) == scope for c in facts.calls):
            continue
        judge = _Judge(facts, model, step)
        for gradient, _tape in model.gradient_calls():
            if facts.scope_of(gradient.site) != scope or not gradient.args:
                continue
            target = gradient.args[0]
            if target.kind != "name":
                continue
            assign = model.assign_here(target.text, gradient.site)
            mean = model.value_call(assign) if assign is not None else None
            if mean is None or callee_of(facts, mean) not in MEANS or not mean.arg_spans:
                continue
            if len(mean.args) != 1 or mean.keywords or len(mean.arg_spans) != 1 or mean.arg_spans[0][0] != 0:
                continue  # an axis, keepdims: not the whole-batch mean
            _, start, end = mean.arg_spans[0]
            if not judge.expr(mean.args[0], (start, end), mean.site, 0):
                continue
            yield report(
                facts, mean.site, CODE,
                f"`{mean.func.text}` averages the loss over this replica's batch inside `{step.qualname}`, which "
                f"`{run.func.text}` runs on every replica (line {run.site.line}): the gradients of the replicas are "
                f"summed, so the update is N times too large on N devices",
                HINT,
            )

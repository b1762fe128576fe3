'''# TAP110 gradient-of-raw-output

## What it does
Flags `tape.gradient(pred, variables)` whose target is the model's output (or
another value the loss is computed from) while the loss made from it on the same
tape is left out, and those gradients are handed to `apply_gradients`:

```python
with tf.GradientTape() as tape:
    pred = model(x, training=True)
    loss = loss_fn(y, pred)
grads = tape.gradient(pred, model.trainable_variables)  # not `loss`
```

## Why is this bad?
`tape.gradient` of a tensor that is not a scalar differentiates the sum of its
elements. The gradient above is that of `sum(pred)`: it does not depend on the
labels at all, so every step pushes the outputs up (or down) whatever the targets
say, and the loss printed beside it never goes down for the reason it should.
Nothing raises and nothing warns: the loss is computed, logged or returned as
usual, only it is not what is minimised. Measured on TensorFlow 2.21 (fixture
`trainer_gradient_of_prediction`): a linear regression trained so for 60 steps
of SGD goes from a loss of 20.2 to 4.3e4, the twin differentiating the loss to
1.7e-3.

## Example
```python
import tensorflow as tf

class Trainer:
    def __init__(self, model):
        self.model = model
        self.loss_fn = tf.keras.losses.MeanSquaredError()
        self.optimizer = tf.keras.optimizers.Adam(1e-3)

    def train_step(self, x, y):
        with tf.GradientTape() as tape:
            pred = self.model(x, training=True)
            loss = self.loss_fn(y, pred)
        grads = tape.gradient(pred, self.model.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
        return loss
```

## Use instead
```python
import tensorflow as tf

class Trainer:
    def __init__(self, model):
        self.model = model
        self.loss_fn = tf.keras.losses.MeanSquaredError()
        self.optimizer = tf.keras.optimizers.Adam(1e-3)

    def train_step(self, x, y):
        with tf.GradientTape() as tape:
            pred = self.model(x, training=True)
            loss = self.loss_fn(y, pred)
        grads = tape.gradient(loss, self.model.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
        return loss
```

## Where it stays silent
Only when everything is in view in one function: the target is bound once, inside
the tape, by a call of the model whose variables are the sources (or of a name
known to hold a Keras model); a loss (a name with `loss` in it, or the value of a
Keras loss, `tf.nn.*cross_entropy*`, `compute_loss`) is computed from it after that,
inside the same tape, from something else as well (the labels); and the gradients
reach an `apply_gradients` of the same function. A loss that is only logged or
returned does not make the gradient right, so that is still reported. Silent for a
target that is itself a loss (`loss`, `total_cost`), for a vector-Jacobian product
(`output_gradients=`), for `jacobian`/`batch_jacobian`, for saliency and Grad-CAM
code (the gradients of the output are never applied by an optimizer), and for a
tape asked for gradients more than once (a penalty on the output beside the loss).
'''

from __future__ import annotations

from tapecheck.model import keras_member, model_of, prefixes, variable_owner
from tapecheck.rules._common import report

CODE = "TAP110"
NAME = "gradient-of-raw-output"
SUMMARY = "`tape.gradient` of the model's output while the loss computed from it is left out"
TRIGGERS = (b"apply_gradients",)

# words that say a name holds a loss (or an objective the code means to differentiate)
LOSS_WORDS = ("loss", "cost", "objective", "risk", "penalty", "elbo", "nll", "energy", "reward", "error")

VALID = [
    # the loss is the target
    """
import tensorflow as tf
def train_step(model, opt, loss_fn, x, y):
    with tf.GradientTape() as tape:
        pred = model(x, training=True)
        loss = loss_fn(y, pred)
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
    return loss
""",
    # saliency: the output's gradient with respect to the input, never applied
    """
import tensorflow as tf
def saliency(model, x, y, loss_fn):
    x = tf.convert_to_tensor(x)
    with tf.GradientTape() as tape:
        tape.watch(x)
        logits = model(x, training=False)
        loss = loss_fn(y, logits)
    return tape.gradient(logits, x), loss
""",
    # a vector-Jacobian product: the output's gradient weighted by the loss's gradient
    """
import tensorflow as tf
def step(model, opt, x, y, loss_fn):
    with tf.GradientTape() as outer:
        pred = model(x, training=True)
    with tf.GradientTape() as inner:
        inner.watch(pred)
        loss = loss_fn(y, pred)
    dpred = inner.gradient(loss, pred)
    grads = outer.gradient(pred, model.trainable_variables, output_gradients=dpred)
    opt.apply_gradients(zip(grads, model.trainable_variables))
""",
    # the model returns its own loss
    """
import tensorflow as tf
def step(model, opt, x, y):
    with tf.GradientTape() as tape:
        per_example_loss = model(x, y, training=True)
        mean_loss = tf.reduce_mean(per_example_loss)
    grads = tape.gradient(per_example_loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
""",
    # a persistent tape asked twice: a penalty on the output and the loss
    """
import tensorflow as tf
def step(model, opt, x, y, loss_fn):
    with tf.GradientTape(persistent=True) as tape:
        pred = model(x, training=True)
        loss = loss_fn(y, pred)
    out_grads = tape.gradient(pred, model.trainable_variables)
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
    return out_grads
""",
]

INVALID = [
    # a trainer: the prediction differentiated, the loss only returned
    """
import tensorflow as tf
class Trainer:
    def __init__(self, model):
        self.model = model
        self.loss_fn = tf.keras.losses.MeanSquaredError()
        self.optimizer = tf.keras.optimizers.Adam(1e-3)
    def train_step(self, x, y):
        with tf.GradientTape() as tape:
            pred = self.model(x, training=True)
            loss = self.loss_fn(y, pred)
        grads = tape.gradient(pred, self.model.trainable_variables)  # expect: TAP110
        grads = [tf.clip_by_norm(g, 1.0) for g in grads]
        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
        return loss
""",
    # a function step, logits into a Keras loss, the gradients clipped before they are applied
    """
import tensorflow as tf
def step(model, opt, x, y):
    with tf.GradientTape() as tape:
        logits = model(x, training=True)
        ce = tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True))
    grads = tape.gradient(logits, model.trainable_variables)  # expect: TAP110
    grads, _ = tf.clip_by_global_norm(grads, 5.0)
    opt.apply_gradients(zip(grads, model.trainable_variables))
    return ce
""",
    # a `train_step` override of a Keras model
    """
import tensorflow as tf
class Regressor(tf.keras.Model):
    def __init__(self):
        super().__init__()
        self.dense = tf.keras.layers.Dense(1)
    def call(self, x):
        return self.dense(x)
    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = tf.reduce_mean(tf.square(y - y_pred))
        gradients = tape.gradient(y_pred, self.trainable_variables)  # expect: TAP110
        self.optimizer.apply_gradients(zip(gradients, self.trainable_variables))
        return {"loss": loss}
""",
]


def _lossy(name: str) -> bool:
    last = name.rsplit(".", 1)[-1].lower()
    return any(word in last for word in LOSS_WORDS)


def _loss_call(model, call) -> bool:
    """A call that computes a loss: a Keras loss (function, class, or an instance of one held by
    the name called), a `tf.nn.*cross_entropy*`/`tf.nn.l2_loss`, or Keras's `compute_loss`."""
    if call is None or not call.func.text:
        return False
    if call.method in ("compute_loss", "compiled_loss"):
        return True
    callee = model.resolved(call.func.text, call.site)
    if keras_member(callee, "losses") or (callee.startswith("tensorflow.nn.") and (
            "cross_entropy" in callee or callee.endswith("l2_loss"))):
        return True
    return model.loss_constructions(call.func.text, call.site) is not None


def _applied(model, facts, call, scope: int):
    """The `apply_gradients` call of the scope that the result of the gradient `call` reaches
    (through its assigned name and names computed from it), or None."""
    grads = next((a for a in model.assigns_in(scope) if a.kind == "assign" and a.span[0] < call.site.order
                  and call.end_order <= a.span[1]), None)
    derived = {grads.target} if grads is not None else set()
    for assign in sorted(model.assigns_in(scope), key=lambda a: a.site.order):
        if assign.site.order <= call.site.order or assign.span == (0, 0) or assign.target in derived:
            continue
        if any(use.name in derived for use in model.spans.uses_in(assign.span)):
            derived.add(assign.target)
    for other in facts.calls_in_scope(scope):
        if other.method != "apply_gradients" or other.site.order < call.site.order:
            continue
        span = (other.site.order, other.end_order)
        if other.site.order < call.site.order <= other.end_order:
            return other  # `opt.apply_gradients(zip(tape.gradient(pred, vs), vs))`
        if any(use.name in derived for use in model.spans.uses_in(span)):
            return other
    return None


def check(facts):
    model = model_of(facts)
    for call, tape in model.gradient_calls():
        if call.method != "gradient" or len(call.args) > 2 or "output_gradients" in call.keywords:
            continue
        target = call.arg(0, "target")
        if target is None or target.kind != "name" or _lossy(target.text):
            continue
        if len(model.tape_uses(tape)) != 1:
            continue  # asked more than once: the output's gradient may be wanted beside the loss's
        reaching = facts.reaching_assigns(target.text, call.site)
        if len(reaching) != 1:
            continue
        made = reaching[0]
        if made.kind != "assign" or made.value is None or made.value.kind != "call" \
                or not facts.records(tape, made.site):
            continue
        forward = model.value_call(made)
        if forward is None or not forward.func.text or forward.func.kind not in ("name", "attribute"):
            continue
        _, owners = model.gradient_roots(call, tape)
        runner = forward.func.text
        if runner not in owners and not model.holds_a_model(runner, forward.site):
            continue  # not known to be the model whose variables are asked for
        if _loss_call(model, forward):
            continue
        scope = facts.scope_of(call.site)
        loss = _loss_from(model, facts, tape, made, call, scope)
        if loss is None:
            continue
        applied = _applied(model, facts, call, scope)
        if applied is None:
            continue  # never applied by an optimizer: saliency, Grad-CAM, a diagnostic
        label = tape.name or "the tape"
        yield report(
            facts, call.site, CODE,
            f"`{label}.gradient` differentiates `{target.text}` (line {made.site.line}: the output of "
            f"`{runner}`), not the loss `{loss.target}` computed from it at line {loss.site.line}: the gradient "
            f"is that of the sum of `{target.text}`'s elements, which ignores the labels, and "
            f"`apply_gradients` (line {applied.site.line}) moves the weights by it, so `{loss.target}` is "
            "never minimised",
            f"Differentiate the loss: `{label}.gradient({loss.target}, ...)`.",
            details={"target": target.text, "loss": loss.target},
        )


def _loss_from(model, facts, tape, made, call, scope: int):
    """The loss assigned from the target inside the tape, after it and before the gradient call, that
    also reads something else (the labels), and that no gradient call differentiates; or None."""
    target = made.target
    for assign in sorted(model.assigns_in(scope), key=lambda a: a.site.order):
        if not made.site.order < assign.site.order < call.site.order or assign.kind != "assign" \
                or assign.value is None or assign.span == (0, 0) or not facts.records(tape, assign.site):
            continue
        uses = [u for u in model.spans.uses_in(assign.span) if u.context not in ("receiver", "callee")]
        if not any(u.name == target for u in uses):
            continue
        if not _lossy(assign.target) and not any(_loss_call(model, c) for c in model.spans.calls_in(assign.span)):
            continue
        others = [u for u in uses if target not in prefixes(u.name) and u.name not in ("True", "False", "None")
                  and not variable_owner(u.name)]
        if not others:
            continue  # `tf.reduce_mean(out)`: the same direction, only scaled
        if any(_reads(model, other, assign.target) for other, _ in model.gradient_calls()):
            return None  # the loss is differentiated somewhere: this call is on purpose
        return assign
    return None


def _reads(model, call, name: str) -> bool:
    return any(use.name == name for use in model.spans.uses_in((call.site.order, call.end_order)))

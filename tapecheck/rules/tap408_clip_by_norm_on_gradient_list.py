'''# TAP408 clip-by-norm-on-gradient-list

## What it does
Flags `tf.clip_by_norm(grads, clip_norm)` given the whole list of gradients that
`tape.gradient(loss, variables)` returned (a list of variables in, a list of gradients out),
directly or through the parameter of a helper every call of which passes such a list.

## Why is this bad?
`tf.clip_by_norm` clips one tensor. Given a list, it first converts the list to one tensor
by stacking it. Measured on TensorFlow 2.21: gradients of different shapes (a kernel and
its bias) raise `InvalidArgumentError: Shapes of all inputs must match: values[0].shape =
[3,2] != values[1].shape = [2] [Op:Pack]` eagerly, and `ValueError: Shapes must be equal
rank, but are 2 and 1` when a `tf.function` step is traced; `grads, _ = tf.clip_by_norm(...)`
fails the same way. When every gradient has the same shape nothing raises: one stacked
tensor comes back, clipped by the norm of all gradients together (the result of
`tf.clip_by_global_norm`, `[0.42, 0.57]` for gradients `[3, 3]` and `[4, 4]` clipped to 1.0,
where per-tensor clipping gives `[0.71, 0.71]` each).

## Example
```python
import tensorflow as tf

def train_step(model, optimizer, x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
    grads = tape.gradient(loss, model.trainable_variables)
    grads = tf.clip_by_norm(grads, 1.0)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss
```

## Use instead
```python
import tensorflow as tf

def train_step(model, optimizer, x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
    grads = tape.gradient(loss, model.trainable_variables)
    grads = [tf.clip_by_norm(g, 1.0) for g in grads]
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss
```

Clip each gradient as above, or all of them by their global norm:
`grads, _ = tf.clip_by_global_norm(grads, 1.0)`.

## Where it stays silent
When the gradient is asked for one variable (`tape.gradient(loss, w)`: one tensor), for
one item of the list (`grads[0]`), inside a comprehension over the list, and when what the
name holds is not known to be the list `tape.gradient` returned (a parameter of a function
nothing in the file calls, a list rebuilt by an unknown call).
'''

from __future__ import annotations

from tapecheck.model import GRADIENT_METHODS, model_of
from tapecheck.rules._common import report

# Its mistake raises an exception (when the gradients' shapes differ): findings inside a
# test that expects that error (`pytest.raises`, `assertRaises`) are left out.
RAISES = True
CODE = "TAP408"
NAME = "clip-by-norm-on-gradient-list"
SUMMARY = "`tf.clip_by_norm` given the list of gradients: it stacks them (a shape error, or one joint clip)"
TRIGGERS = (b"clip_by_norm",)

CLIP_BY_NORM = frozenset({"tensorflow.clip_by_norm", "tensorflow.compat.v1.clip_by_norm",
                          "tensorflow.compat.v2.clip_by_norm"})
VARIABLE_LISTS = frozenset({"trainable_variables", "trainable_weights", "variables", "weights"})
MAX_DEPTH = 3

VALID = [
    # one gradient at a time, and the global norm
    """
import tensorflow as tf
def step(model, opt, x):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model(x, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    clipped = [tf.clip_by_norm(g, 1.0) for g in grads]
    clipped_again, _ = tf.clip_by_global_norm(grads, 5.0)
    first = tf.clip_by_norm(grads[0], 1.0)
    opt.apply_gradients(zip(clipped, model.trainable_variables))
""",
    # the gradient of one variable is one tensor
    """
import tensorflow as tf
w = tf.Variable([1.0, 2.0])
def step(x):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(w * x)
    grad = tape.gradient(loss, w)
    return tf.clip_by_norm(grad, 1.0)
""",
    # a helper nothing in the file calls: what it is given is unknown
    """
import tensorflow as tf
def clip(grads, norm):
    return tf.clip_by_norm(grads, norm)
""",
]

INVALID = [
    """
import tensorflow as tf
def step(model, opt, x):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model(x, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    grads = tf.clip_by_norm(grads, 1.0)  # expect: TAP408
    opt.apply_gradients(zip(grads, model.trainable_variables))
""",
    # a static helper given the gradient list by the step
    """
import tensorflow as tf
class Trainer:
    def __init__(self, model, clip):
        self.model, self.clip = model, clip
        self.optimizer = tf.keras.optimizers.Adam()
    @staticmethod
    def clip_gradients(gradients, threshold):
        return tf.clip_by_norm(gradients, threshold)  # expect: TAP408
    def train_step(self, x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(self.model(x, training=True) - y))
        gradients = tape.gradient(loss, self.model.trainable_variables)
        gradients = Trainer.clip_gradients(gradients, self.clip)
        self.optimizer.apply_gradients(zip(gradients, self.model.trainable_variables))
""",
    # a list literal of variables, and unpacking the result
    """
import tensorflow as tf
w = tf.Variable(tf.ones((3, 2)))
b = tf.Variable(tf.zeros((2,)))
def step(x):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(x @ w + b)
    grads = tape.gradient(loss, [w, b])
    gw, gb = tf.clip_by_norm(grads, 1.0)  # expect: TAP408
    return gw, gb
""",
]


def _variable_list(model, expr, site, depth=0) -> bool:
    """Whether `expr` (what `tape.gradient` was given as sources) is known to be a list of
    variables: a list/tuple literal, `<model>.trainable_variables` (and kin), or a name bound
    only to those."""
    if expr is None or depth > MAX_DEPTH:
        return False
    if expr.kind in ("list", "tuple"):
        return True
    if expr.kind == "attribute" and expr.text.rpartition(".")[2] in VARIABLE_LISTS:
        return True
    if expr.kind == "name" and expr.text:
        assigns = model.assigns_of(expr.text, site)
        return bool(assigns) and all(
            a.kind == "assign" and _variable_list(model, a.value, a.site, depth + 1) for a in assigns)
    return False


def _gradient_call(model, assign):
    """The `tape.gradient(target, sources)` call a binding's value is, when its sources are a
    list of variables (so it returns a list of gradients); None otherwise."""
    call = model.value_call(assign)
    if call is None or call.method not in GRADIENT_METHODS:
        return None
    return call if _variable_list(model, call.arg(1, "sources"), call.site) else None


def _gradient_list(model, facts, expr, site, depth=0):
    """The `tape.gradient` call whose list of gradients `expr` (a name) holds at `site` on every
    path, through the parameter of a function every call of which passes such a list; None
    when unknown."""
    if expr is None or expr.kind != "name" or not expr.text or depth > MAX_DEPTH:
        return None
    assigns = model.assigns_of(expr.text, site)
    if not assigns:
        return None
    if len(assigns) == 1 and assigns[0].kind == "param":
        fn = model.functions.get(facts.scope_of(site))
        passed = model.arguments_for(fn, expr.text) if fn is not None else None
        if not passed:
            return None
        found = [_gradient_list(model, facts, value, call.site, depth + 1) for call, value in passed]
        return found[0] if all(found) else None
    found = None
    for assign in assigns:
        gradient = _gradient_call(model, assign)
        if gradient is not None:
            found = found or gradient
            continue
        # `gradients = optimizer.get_unscaled_gradients(gradients)`: a method handed the list
        # and bound to the same name keeps it a list; anything else is unknown
        call = model.value_call(assign)
        if (call is None or call.func.kind != "attribute" or call.func.text.startswith(("tf.", "tensorflow."))
                or not call.args or call.args[0].kind != "name" or call.args[0].text != assign.target):
            return None
    return found


def check(facts):
    model = model_of(facts)
    for call in facts.calls:
        if not call.func.text.endswith("clip_by_norm"):
            continue
        if model.resolved(call.func.text, call.site) not in CLIP_BY_NORM:
            continue
        argument = call.arg(0, "t")
        gradient = _gradient_list(model, facts, argument, call.site)
        if gradient is None:
            continue
        yield report(
            facts, call.site, CODE,
            f"`{call.func.text}({argument.text}, ...)` is given the list of gradients "
            f"`{gradient.func.text}(...)` returned (line {gradient.site.line}): it stacks them into one tensor, "
            "which raises when their shapes differ (InvalidArgumentError `Shapes of all inputs must match`; "
            "ValueError `Shapes must be equal rank` in a `tf.function`) and otherwise clips them jointly, "
            "returning one stacked tensor",
            f"Clip each gradient: `[{call.func.text}(g, ...) for g in {argument.text}]`, or all by their "
            f"global norm: `{argument.text}, _ = tf.clip_by_global_norm({argument.text}, ...)`.",
        )

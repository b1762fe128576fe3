'''# TAP502 tensor-compared-by-identity

## What it does
Flags `is` and `is not` between a tensor (or a NumPy scalar) and `True`, `False`
or a number: `tf.reduce_all(done) is True`, `tf.equal(a, b) is False`,
`np.isnan(loss) is True`, `step_count is 0` where the value comes from a
TensorFlow or NumPy op.

## Why is this bad?
`is` asks whether two names are one object. A tensor is never the object `True`
(and a NumPy result is `np.True_`, not `True`), so `t is True` is always `False`
and `t is not True` always `True`, whatever the tensor holds. The branch it guards
is dead or always taken: an early stop that never stops, a NaN guard that never
fires, a "converged" flag that never flips. Inside `tf.function` the test is
decided once, while tracing, with the same answer.

## Example
```python
import tensorflow as tf

def train(model, optimizer, batches, loss_fn):
    for x, y in batches:
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        if tf.math.is_nan(loss) is True:
            raise FloatingPointError("loss is NaN")
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
```

## Use instead
```python
import tensorflow as tf

def train(model, optimizer, batches, loss_fn):
    for x, y in batches:
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        if bool(tf.math.is_nan(loss)):
            raise FloatingPointError("loss is NaN")
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
```

Read the value (`bool(t)`, `t.numpy()`, `int(t)`) and compare with `==`, or use
the tensor itself as the condition (`if t:`, `tf.cond` in a graph).

## Where it stays silent
Only values known to be tensors or NumPy scalars: the result of a TensorFlow or
NumPy op that returns one (comparisons, reductions, `tf.math.is_nan`...), written
in place or bound to a name whose every binding is one. TensorFlow functions that
return Python values (`tf.executing_eagerly()`, `tf.is_tensor(x)`,
`tf.io.gfile.exists(p)`) are not tensors.
'''

from __future__ import annotations

import re

from tapecheck.model import model_of
from tapecheck.rules._common import report, token_gap

CODE = "TAP502"
NAME = "tensor-compared-by-identity"
SUMMARY = "a tensor or NumPy scalar compared with `is True`/`is False`/`is 0`: always False"

# The screen: `is` (or `is not`) with `True`, `False` or a decimal integer on either side (the
# only operands `_singleton` accepts), whatever lies between the tokens (`token_gap`: whitespace,
# line continuations, comments inside brackets; here brackets too). Each
# pattern starts with a literal or a small set of bytes; `x is None` (in most files) passes none.
_SINGLETON_AFTER = re.compile(
    rb"is(?<!\wis)" + token_gap(rb"(") + rb"(?:not" + token_gap(rb"(") + rb")?(?:True|False|[0-9])"
)
_SINGLETON_BEFORE = tuple(
    re.compile(first + token_gap(rb")") + rb"is(?!\w)") for first in (rb"True", rb"False", rb"[0-9]")
)


def screen(source: bytes) -> bool:
    """An `is`/`is not` comparison with `True`, `False` or a number as an operand may be here.
    (`" is "` alone let nearly every file through: `x is None` is everywhere.)"""
    if _SINGLETON_AFTER.search(source) is not None:
        return True
    return any(pattern.search(source) is not None for pattern in _SINGLETON_BEFORE)

VALID = [
    # values read first; Python values of TensorFlow functions
    """
import numpy as np
import tensorflow as tf
def check(loss, path, x):
    if bool(tf.math.is_nan(loss)):
        raise FloatingPointError(path)
    if tf.executing_eagerly() is True and tf.is_tensor(x) is True:
        pass
    done = bool(tf.reduce_all(x > 0))
    if done is True:
        return np.isnan(float(loss)) == True
    return tf.reduce_any(x > 1) is not None
""",
    # a name rebound from something else on another path is not known to be a tensor
    """
import tensorflow as tf
def stop(flag, x):
    converged = flag
    if x is not None:
        converged = tf.reduce_all(x < 1e-3)
    return converged is True
""",
]

INVALID = [
    """
import tensorflow as tf
def train(model, opt, batches, loss_fn):
    for x, y in batches:
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        if tf.math.is_nan(loss) is True:  # expect: TAP502
            break
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
""",
    """
import numpy as np
import tensorflow as tf
def run(env, policy, obs):
    done = tf.reduce_all(env.step(policy(obs)))
    while done is not True:  # expect: TAP502
        done = tf.reduce_all(env.step(policy(obs)))
    finite = np.isfinite(obs).all()
    return np.all(obs > 0) is False  # expect: TAP502
""",
]

# The last part of TensorFlow and NumPy functions that return a tensor (or a NumPy array or
# scalar), never a Python value. A function is looked up by its resolved name's last part, under
# `tensorflow.` / `tensorflow.math.` / `numpy.`.
TENSOR_FUNCTIONS = frozenset({
    "equal", "not_equal", "greater", "greater_equal", "less", "less_equal",
    "reduce_all", "reduce_any", "reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod",
    "logical_and", "logical_or", "logical_not", "logical_xor",
    "is_nan", "is_inf", "is_finite", "isnan", "isinf", "isfinite",
    "all", "any", "sum", "mean", "max", "min", "argmax", "argmin", "count_nonzero",
    "cast", "constant", "convert_to_tensor", "size", "rank", "shape", "abs", "sign", "round",
})
PACKAGES = ("tensorflow.", "tensorflow.math.", "tensorflow.experimental.numpy.", "numpy.")


def _makes_tensor(model, func_text: str, method: str, site) -> str:
    """How a call (its dotted callee as written, or the method it calls) makes a tensor or a
    NumPy value (`tf.reduce_all(...)`, `.numpy()`), or ""."""
    if func_text:
        callee = model.resolved(func_text, site)
        last = callee.rsplit(".", 1)[-1]
        if last in TENSOR_FUNCTIONS and callee[: len(callee) - len(last)] in PACKAGES:
            return f"`{func_text}(...)`"
    return "`.numpy()`" if method == "numpy" else ""


def _made_by_op(model, expr, site) -> str:
    """How `expr` (a call, or a name each of whose bindings is one) is known to hold a tensor or
    a NumPy value, or ""."""
    if expr is None:
        return ""
    if expr.kind == "call":
        return _makes_tensor(model, expr.func_text, expr.method, site)
    if expr.kind != "name":
        return ""
    calls = model.value_calls(expr.text, site)
    how = {_makes_tensor(model, call.func.text, call.method or call.func.method, call.site) for call in calls or ()}
    if not how or "" in how:
        return ""
    return f"`{expr.text}` (from {', '.join(sorted(how))})"


def _singleton(expr) -> str:
    """`True`, `False` or an integer written as the other operand, as written; else "". (A float,
    `x is 1.0`, is left out: the screen looks for a digit after `is`, and `.5` starts with a dot.)"""
    if expr is None or expr.kind not in ("name", "constant"):
        return ""
    value = expr.value
    return repr(value) if isinstance(value, int) else ""


def check(facts):
    model = model_of(facts)
    for compare in facts.compares:
        if compare.operator not in ("is", "is not"):
            continue
        for value, other in ((compare.left, compare.right), (compare.right, compare.left)):
            constant = _singleton(other)
            if not constant:
                continue
            made = _made_by_op(model, value, compare.site)
            if not made:
                continue
            always = "False" if compare.operator == "is" else "True"
            yield report(
                facts, compare.site, CODE,
                f"{made} is a tensor (or a NumPy value), never the object `{constant}`: "
                f"`{compare.operator} {constant}` is always {always}, whatever it holds",
                f"Compare its value: `bool(...)` for a flag, or `== {constant}`"
                + (" after `.numpy()`" if constant not in ("True", "False") else "") + ".",
            )
            break

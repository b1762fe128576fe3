'''# TAP106 variable-derived-outside-call

## What it does
Flags a tensor computed from a layer's own trainable variables in `build()` or
`__init__` and stored on `self` (a normalised kernel `self.w / tf.norm(self.w)`,
`tf.transpose(self.kernel)`, a concatenation of weights), when `call` reads it.

The variables are the layer's `self.add_weight(...)` and `tf.Variable(...)`
attributes (of the class or its local base classes), also through a local name
in the same method. A value that is the variable itself, a new variable, a
shape or a Python number, a deliberate copy of the initial values
(`tf.identity(self.w)`, `self.w.read_value()`), a value derived from an integer
counter, a lambda, or one that `call` (or another method) assigns again is not
reported.

## Why is this bad?
`build()` and `__init__` run once, outside any `GradientTape`. The derived tensor
is a constant holding the variables' initial values: `call` uses it on every
step, but the tape records nothing back to the variables. Their gradients are
`None`; `apply_gradients` warns and skips them (or raises "No gradients provided
for any variable" when they are all there is), and the layer never learns.

## Example
```python
import tensorflow as tf

class WeightNormDense(tf.keras.layers.Layer):
    def __init__(self, units):
        super().__init__()
        self.units = units

    def build(self, input_shape):
        self.v = self.add_weight(shape=(input_shape[-1], self.units))
        self.g = self.add_weight(shape=(self.units,), initializer="ones")
        self.kernel = self.g * self.v / tf.norm(self.v, axis=0)

    def call(self, x):
        return tf.matmul(x, self.kernel)
```

## Use instead
```python
import tensorflow as tf

class WeightNormDense(tf.keras.layers.Layer):
    def __init__(self, units):
        super().__init__()
        self.units = units

    def build(self, input_shape):
        self.v = self.add_weight(shape=(input_shape[-1], self.units))
        self.g = self.add_weight(shape=(self.units,), initializer="ones")

    def call(self, x):
        kernel = self.g * self.v / tf.norm(self.v, axis=0)  # recorded at every step
        return tf.matmul(x, kernel)
```
'''

from __future__ import annotations

import re

from tapecheck.model import VARIABLE_CLASSES, WEIGHT_METHODS, Tracer, model_of, prefixes
from tapecheck.rules._common import defines_call, report

CODE = "TAP106"
NAME = "variable-derived-outside-call"
SUMMARY = "a tensor derived from a layer's variables in `build()`/`__init__` is used in `call`: the variables get no gradient"
PROBE = True

HINT = "Compute it in `call` from the variables (a local name there), so the tape records it at every step."
TRIGGERS = (b"add_weight", b"add_variable", b"Variable")


def screen(source: bytes) -> bool:
    """A variable made here, and a `call` (or `__call__`) method that could read what was derived from it."""
    return any(trigger in source for trigger in TRIGGERS) and defines_call(source)

SETUP = ("build", "__init__")
USERS = ("call", "__call__")
INTEGER = re.compile(r"int|bool")
SNAPSHOTS = frozenset({
    "tensorflow.identity", "tensorflow.convert_to_tensor", "tensorflow.constant",
    "keras.ops.copy", "keras.ops.convert_to_tensor", "numpy.array", "numpy.copy",
})

VALID = [
    # the derived kernel recomputed in call; a shape and a Python number derived in build
    """
import tensorflow as tf
class Norm(tf.keras.layers.Layer):
    def build(self, input_shape):
        self.w = self.add_weight(shape=(input_shape[-1], 4))
        self.fan_in = self.w.shape[0]
        self.scale = 1.0 / float(input_shape[-1])
    def call(self, x):
        w = self.w / tf.norm(self.w)
        return tf.matmul(x, w) * self.scale / self.fan_in
""",
    # an alias of the variable, a new variable initialised from it, a non-trainable one
    """
import tensorflow as tf
class Tied(tf.keras.layers.Layer):
    def build(self, input_shape):
        self.kernel = self.add_weight(shape=(input_shape[-1], 4))
        self.weight = self.kernel
        self.shadow = tf.Variable(tf.identity(self.kernel), trainable=False)
        self.count = self.add_weight(shape=(), initializer="zeros", trainable=False)
        self.count_plus = self.count + 1.0
        self.steps = tf.Variable(0)
        self.steps_f = tf.cast(self.steps, tf.float32)
        self.anchor = tf.identity(self.kernel)
    def call(self, x):
        self.add_loss(tf.reduce_sum(tf.square(self.kernel - self.anchor)))
        return tf.matmul(x, self.weight) + 0.0 * self.count_plus * self.steps_f
""",
    # a lambda computes when called
    """
import tensorflow as tf
class Lazy(tf.keras.layers.Layer):
    def build(self, input_shape):
        self.w = self.add_weight(shape=(input_shape[-1], 4))
        self.w_fn = lambda: self.w / tf.norm(self.w)
    def call(self, x):
        return tf.matmul(x, self.w_fn())
""",
    # a derived value that another method assigns again (kept in sync on purpose) is not judged
    """
import tensorflow as tf
class Cached(tf.keras.layers.Layer):
    def build(self, input_shape):
        self.w = self.add_weight(shape=(input_shape[-1], 4))
        self.w_t = tf.transpose(self.w)
    def refresh(self):
        self.w_t = tf.transpose(self.w)
    def call(self, x):
        return tf.matmul(x, tf.transpose(self.w_t))
""",
]

INVALID = [
    # transposed kernel cached in build
    """
import tensorflow as tf
class TiedDecoder(tf.keras.layers.Layer):
    def build(self, input_shape):
        self.kernel = self.add_weight(shape=(4, input_shape[-1]))
        self.kernel_t = tf.transpose(self.kernel)  # expect: TAP106
    def call(self, x):
        return tf.matmul(x, self.kernel_t)
""",
    # tf.Variable made in __init__, concatenated through a local name
    """
import keras
import tensorflow as tf
class TwoPart(keras.layers.Layer):
    def __init__(self):
        super().__init__()
        self.a = tf.Variable(tf.ones((3, 2)))  # expect: TAP107
        b = tf.Variable(tf.zeros((3, 2)))
        self.b = b
        self.ab = tf.concat([self.a, b], axis=1)  # expect: TAP106
    def call(self, x):
        return x @ self.ab
""",
]


def _weight_attributes(pm, klass) -> dict[str, int]:
    """`self.<name>` attributes that hold a trainable variable of the class: name -> line."""
    found: dict[str, int] = {}
    blocks = {cls.id for cls in pm.bases(klass)}
    for fn in pm.functions.values():
        if fn.owner is None or fn.owner.id not in blocks or not fn.bound:
            continue
        for assign in pm.assigns_in(fn.block.id):
            if not assign.target.startswith(fn.self_name + "."):
                continue
            if _makes_variable(pm, assign.value, fn.self_name, assign.span):
                found.setdefault("self." + assign.target[len(fn.self_name) + 1:], assign.site.line)
    return found


def _makes_variable(pm, value, self_name: str, span=None) -> bool:
    """`self.add_weight(...)` / `tf.Variable(...)`, not `trainable=False`."""
    if value is None or value.kind != "call":
        return False
    trainable = value.keywords.get("trainable")
    if trainable is not None and trainable.value is not True:
        return False
    dtype = value.keywords.get("dtype")
    if dtype is not None and INTEGER.search(dtype.text or str(dtype.value or "")):
        return False  # a counter: no gradient to lose
    if value.method in WEIGHT_METHODS and value.receiver == self_name:
        return True
    if (value.callee or pm.facts.resolve(value.func_text)) not in VARIABLE_CLASSES:
        return False
    outer = next((c for c in pm.spans.calls_in(span) if c.func.text == value.func_text), None) if span else None
    initial = outer.arg(0, "initial_value") if outer is not None else value.keywords.get("initial_value")
    return not (initial is not None and initial.kind == "constant" and isinstance(initial.value, (int, bool)))


def _snapshot(pm, value) -> bool:
    """`tf.identity(self.w)`, `self.w.read_value()`: a copy of the initial values, on purpose."""
    if value is None or value.kind != "call":
        return False
    if value.method in ("read_value", "value", "numpy"):
        return True
    return (value.callee or pm.facts.resolve(value.func_text)) in SNAPSHOTS


def _normalise(name: str, self_name: str) -> str:
    return "self." + name[len(self_name) + 1:] if name.startswith(self_name + ".") else name


def _method_assigns(pm, fn):
    return sorted(
        pm.assigns_in(fn.block.id),
        key=lambda a: a.site.order,
    )


def check(facts):
    pm = model_of(facts)
    for klass in pm.classes.values():
        if not pm.is_keras(klass):
            continue
        weights = _weight_attributes(pm, klass)
        if not weights:
            continue
        methods = [fn for fn in pm.functions.values() if fn.owner is klass and fn.bound]
        users = [fn for fn in methods if fn.name in USERS]
        if not users:
            continue
        assigned_elsewhere = {
            _normalise(a.target, fn.self_name)
            for fn in methods if fn.name not in SETUP
            for a in pm.assigns_in(fn.block.id)
        }
        for fn in methods:
            if fn.name in SETUP:
                yield from _derived_in(pm, fn, weights, users, assigned_elsewhere)


def _derived_in(pm, fn, weights, users, assigned_elsewhere):
    facts = pm.facts
    self_name = fn.self_name
    local_weights: set[str] = set()

    def origin_of(name):
        for prefix in prefixes(name):
            normal = _normalise(prefix, self_name)
            if normal in weights or prefix in local_weights:
                return {normal}
        return set()

    tracer = Tracer(pm, origin_of)
    for assign in _method_assigns(pm, fn):
        if assign.kind not in ("assign", "augassign") or assign.span == (0, 0):
            continue
        if _makes_variable(pm, assign.value, self_name, assign.span):
            if "." not in assign.target:
                local_weights.add(assign.target)
            tracer.state.pop(assign.target, None)
            continue
        flow = tracer.assign(assign, merge=assign.site.block != fn.block.id)
        target = _normalise(assign.target, self_name)
        if not target.startswith("self.") or target in weights or target in assigned_elsewhere:
            continue
        if not flow.live or _is_alias(assign) or _snapshot(pm, assign.value):
            continue
        use = _first_use(pm, users, target)
        if use is None or _in_lambda(pm, assign):
            continue
        variables = ", ".join(f"`{v}`" for v in sorted(flow.live))
        user, line = use
        yield report(
            facts, assign.site, CODE,
            f"`{target}` is computed from {variables} in `{fn.name}`, once, outside any tape, and `{user}` uses it "
            f"(line {line}): the tape never records it, so no gradient reaches {variables} through it "
            "(None: apply_gradients skips them)",
            HINT,
        )


def _is_alias(assign) -> bool:
    """`self.weight = self.kernel`: the variable itself."""
    return assign.value is not None and assign.value.kind in ("name", "attribute")


def _in_lambda(pm, assign) -> bool:
    """`self.kernel_fn = lambda: ...` (computed when called), a ternary, a comprehension: not judged."""
    return assign.value is not None and assign.value.kind in ("other", "fstring", "lambda")


def _first_use(pm, users, target: str):
    """(method, line) of the first read of `self.<attr>` in `call`, unless `call` assigns it first."""
    facts = pm.facts
    for fn in users:
        name = fn.self_name + target[len("self"):]
        rebinds = [a.site.order for a in pm.assigns_in(fn.block.id) if a.target == name]
        for use in pm.spans.uses:
            if facts.scope_of(use.site) != fn.block.id:
                continue
            if use.name == name or use.name.startswith(name + "."):
                if rebinds and min(rebinds) < use.site.order:
                    return None
                return fn.name, use.site.line
    return None

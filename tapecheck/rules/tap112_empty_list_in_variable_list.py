'''# TAP112 empty-list-in-variable-list

## What it does
Flags an attribute that one method (a trainer's or model's `__init__` or `build`) sets to
a variable on one path of an `if`/`else` and to `[]` on the other (`if use_bias:
self.b = tf.Variable(...)` / `else: self.b = []`), when another method always puts it,
as one item, into the variables it hands to `tape.gradient` or to
`apply_gradients(zip(grads, ...))`: `[self.w, self.b]`,
`self.model.trainable_variables + [self.b]`, or a name bound to such a list.

## Why is this bad?
On the path where the attribute is `[]` the variable list holds a nested `[]` as one of
its items. Measured on TensorFlow 2.21 / Keras 3.15: `tape.gradient` returns `[]` in that
place without complaint, and the first update fails inside the optimizer with
`AttributeError: 'list' object has no attribute '_unique_id'` (eagerly, in a
`tf.function` step, and under `fit` with a `train_step` override, where a Keras model
wraps the attribute in a `TrackedList`), an error that names neither the attribute nor
the flag. A manual update (`v.assign_sub(lr * g)`) fails with `'list' object has no
attribute 'assign_sub'`. The configuration that sets the flag is often not the one the
code was tried with, so the crash waits for the first run that turns the option off.

Concatenating lists is fine: `self.w_list + self.extra` with `self.extra = []` just drops
nothing (measured: the update runs, one variable in the list).

## Example
```python
import tensorflow as tf

class LinearTrainer:
    def __init__(self, n_features, use_bias=True):
        self.w = tf.Variable(tf.zeros((n_features, 1)))
        if use_bias:
            self.b = tf.Variable(tf.zeros((1,)))
        else:
            self.b = []
        self.use_bias = use_bias
        self.optimizer = tf.keras.optimizers.SGD(0.1)

    def train_step(self, x, y):
        with tf.GradientTape() as tape:
            pred = x @ self.w
            if self.use_bias:
                pred = pred + self.b
            loss = tf.reduce_mean((pred - y) ** 2)
        grads = tape.gradient(loss, [self.w, self.b])
        self.optimizer.apply_gradients(zip(grads, [self.w, self.b]))
        return loss
```

## Use instead
```python
import tensorflow as tf

class LinearTrainer:
    def __init__(self, n_features, use_bias=True):
        self.w = tf.Variable(tf.zeros((n_features, 1)))
        if use_bias:
            self.b = tf.Variable(tf.zeros((1,)))
            self.params = [self.w, self.b]
        else:
            self.b = None
            self.params = [self.w]
        self.optimizer = tf.keras.optimizers.SGD(0.1)

    def train_step(self, x, y):
        with tf.GradientTape() as tape:
            pred = x @ self.w
            if self.b is not None:
                pred = pred + self.b
            loss = tf.reduce_mean((pred - y) ** 2)
        grads = tape.gradient(loss, self.params)
        self.optimizer.apply_gradients(zip(grads, self.params))
        return loss
```

Keep the list of variables to train, and build it on each path with the variables that
exist there (or keep the optional variable in a list of its own, `[]` when it is off, and
concatenate that list).

## Where it stays silent
The attribute set in more than one method (a `build` that makes it later), in a loop, or
on a path the `if`/`else` does not cover; a ternary (`tf.Variable(...) if use_bias else
[]`: not read); an attribute the class appends to; a variable list built under an `if`
(or in a comprehension, `tf.nest.flatten`, a call); an attribute whose other path is a
list of variables (a nested list on every path is another mistake); concatenation of the
attribute itself (`params + self.extra`); a tape the model does not know.
'''

from __future__ import annotations

from tapecheck.model import (
    GRADIENT_METHODS, VARIABLE_CLASSES, WEIGHT_METHODS, call_span, method_of, model_of, spans_of,
)
from tapecheck.rules._common import report

CODE = "TAP112"
NAME = "empty-list-in-variable-list"
SUMMARY = ("an attribute set to a variable on one path and to `[]` on the other, always put as one item into "
           "the variables given to `tape.gradient`/`apply_gradients`: on the `[]` path the optimizer raises "
           "`AttributeError: 'list' object has no attribute '_unique_id'`")
PROBE = False

GROWS = frozenset({"append", "extend", "insert"})  # list methods that fill an attribute set to `[]`


def screen(source: bytes) -> bool:
    """An empty list, a gradient or an update, and a variable made here."""
    return (b"[]" in source and (b"gradient" in source)
            and (b"Variable" in source or b"add_weight" in source or b"add_variable" in source))


VALID = [
    # lists concatenated: the empty one adds nothing
    """
import tensorflow as tf
class Trainer:
    def __init__(self, model, learn_scale):
        self.model = model
        if learn_scale:
            self.extra = [tf.Variable(1.0)]
        else:
            self.extra = []
        self.opt = tf.keras.optimizers.Adam()
    def step(self, x):
        variables = self.model.trainable_variables + self.extra
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(self.model(x, training=True))
        self.opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
""",
    # the list built only when the variable exists
    """
import tensorflow as tf
class Trainer:
    def __init__(self, model, learn_scale):
        self.model = model
        if learn_scale:
            self.scale = tf.Variable(1.0)
        else:
            self.scale = []
        self.opt = tf.keras.optimizers.Adam()
    def step(self, x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(self.model(x, training=True))
        if self.scale != []:
            variables = self.model.trainable_variables + [self.scale]
        else:
            variables = self.model.trainable_variables
        self.opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
""",
    # `[]` first, the variable made later in `build`: one method does not decide it
    """
import tensorflow as tf
class Head(tf.keras.layers.Layer):
    def __init__(self, use_bias):
        super().__init__()
        self.use_bias = use_bias
        self.b = []
    def build(self, shape):
        self.w = self.add_weight(shape=(shape[-1], 1))
        if self.use_bias:
            self.b = self.add_weight(shape=(1,))
    def fit_step(self, x, opt):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(x @ self.w)
        opt.apply_gradients(zip(tape.gradient(loss, [self.w, self.b]), [self.w, self.b]))
""",
    # the optional variable kept in its own list, spread into the variables; `None` on its off path
    """
import tensorflow as tf
class Trainer:
    def __init__(self, model, use_gain):
        self.model = model
        if use_gain:
            self.gain = tf.Variable(1.0)
            self.extra = [self.gain]
        else:
            self.gain = None
            self.extra = []
    def step(self, x, opt):
        variables = [*self.model.trainable_variables, *self.extra]
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(self.model(x, training=True))
        grads = tape.gradient(loss, variables)
        opt.apply_gradients(zip(grads, variables))
""",
]

INVALID = [
    # the textbook manual update, with the bias optional
    """
import tensorflow as tf
class LinearRegression:
    def __init__(self, n_features, fit_intercept=True, lr=0.1):
        self.w = tf.Variable(tf.zeros((n_features, 1)))
        if fit_intercept:
            self.b = tf.Variable(0.0)
        else:
            self.b = []
        self.fit_intercept = fit_intercept
        self.lr = lr
    def fit_step(self, x, y):
        params = [self.w, self.b]  # expect: TAP112
        with tf.GradientTape() as tape:
            pred = x @ self.w
            if self.fit_intercept:
                pred += self.b
            loss = tf.reduce_mean((pred - y) ** 2)
        for p, g in zip(params, tape.gradient(loss, params)):
            p.assign_sub(self.lr * g)
""",
    # a model's variables plus an optional one, through a name, in a traced step
    """
import tensorflow as tf
class Trainer:
    def __init__(self, model, learn_temperature=False):
        self.model = model
        if learn_temperature:
            self.log_t = tf.Variable(0.0)
        else:
            self.log_t = []
        self.learn_temperature = learn_temperature
        self.opt = tf.keras.optimizers.Adam()
    @tf.function
    def step(self, x):
        variables = self.model.trainable_variables + [self.log_t]  # expect: TAP112
        with tf.GradientTape() as tape:
            logits = self.model(x, training=True)
            if self.learn_temperature:
                logits = logits / tf.exp(self.log_t)
            loss = tf.reduce_mean(tf.nn.softmax(logits))
        grads = tape.gradient(loss, variables)
        self.opt.apply_gradients(zip(grads, variables))
""",
    # a Keras model's optional weight, in its own train_step
    """
import keras
import tensorflow as tf
class Scorer(keras.Model):
    def __init__(self, units, use_offset=True):
        super().__init__()
        self.dense = keras.layers.Dense(units, use_bias=False)
        self.use_offset = use_offset
        if use_offset:
            self.offset = self.add_weight(shape=(units,), initializer="zeros")
        else:
            self.offset = []
    def call(self, x):
        out = self.dense(x)
        return out + self.offset if self.use_offset else out
    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((self(x, training=True) - y) ** 2)
        grads = tape.gradient(loss, self.dense.trainable_variables + [self.offset])  # expect: TAP112
        self.optimizer.apply_gradients(zip(grads, self.dense.trainable_variables + [self.offset]))
        return {"loss": loss}
""",
]


def _zip_of(model, spans, apply):
    """The `zip(grads, variables)` call whose pairs `apply_gradients` receives (given there, or bound
    to a name once), or None."""
    pairs = apply.arg(0, "grads_and_vars")
    if pairs is None:
        return None
    span = call_span(apply)
    if pairs.kind == "name":
        reaching = model.assigns_reaching(pairs.text, apply.site)
        if len(reaching) != 1 or reaching[0].kind != "assign" or reaching[0].value is None:
            return None
        pairs, span = reaching[0].value, reaching[0].span
    if pairs.kind != "call" or pairs.func_text != "zip" or "zip" in model.facts.imports:
        return None
    return next((c for c in spans.calls_in(span) if c.func.text == "zip"), None)


def _variables_given(model, spans, call):
    """The variable list a call takes: the sources of `tape.gradient` (a tape the model knows), the
    second argument of the `zip` given to `apply_gradients`; None for other calls."""
    method = method_of(call)
    if method in GRADIENT_METHODS and call.receiver:
        if model.facts.tape_for(call.receiver, call.site) is None:
            return None
        return call.arg(1, "sources")
    if method == "apply_gradients":
        zipped = _zip_of(model, spans, call)
        if zipped is not None and len(zipped.args) == 2 and not zipped.spread:
            return zipped.args[1]
    return None


def _items(model, expr, site, depth=0):
    """The items of the list literals a variable list is made of, each with the site of the statement
    that builds it: `[a, b]`, `x + [a]` (each operand), a name bound once to one of those."""
    if expr is None or depth > 3:
        return []
    if expr.kind in ("list", "tuple"):
        return [(item, site) for item in expr.elements]
    if expr.kind == "binop" and expr.method == "Add":
        return [found for operand in expr.operands for found in _items(model, operand, site, depth + 1)]
    if expr.kind == "name":
        reaching = model.assigns_reaching(expr.text, site)
        if len(reaching) != 1 or reaching[0].kind != "assign" or model.facts.scope_of(reaching[0].site) != model.facts.scope_of(site):
            return []
        return _items(model, reaching[0].value, reaching[0].site, depth + 1)
    return []


def _empty_list(assign) -> bool:
    value = assign.value
    return assign.kind == "assign" and value is not None and value.kind == "list" and not value.elements


def _makes_variable(model, assign) -> bool:
    """`tf.Variable(...)`, `keras.Variable(...)`, `self.add_weight(...)`: one variable."""
    value = assign.value
    if assign.kind != "assign" or value is None or value.kind != "call":
        return False
    if value.func_text and model.resolved(value.func_text, assign.site) in VARIABLE_CLASSES:
        return True
    fn = model.functions.get(model.facts.scope_of(assign.site))
    return value.method in WEIGHT_METHODS and fn is not None and fn.bound and value.receiver == fn.self_name


def _appended(model, klass, attribute: str) -> bool:
    """Whether a method of the class grows the attribute in place (`self.extra.append(v)`)."""
    for cls in model.bases(klass):
        for method in model.methods(cls):
            if method.bound:
                target = f"{method.self_name}.{attribute}"
                if any(call.receiver == target and call.method in GROWS
                       for call in model.calls_in_scope(method.block.id)):
                    return True
    return False


def _paths(model, klass, attribute: str):
    """(the `[]` binding, the variable binding), when those are the two paths of one method; else None."""
    paths = model.attribute_on_each_path(klass, attribute)
    if len(paths) != 2 or len(model.attribute_assigns(klass, attribute)) != 2:
        return None
    empty = [a for a in paths if _empty_list(a)]
    made = [a for a in paths if _makes_variable(model, a)]
    if len(empty) != 1 or len(made) != 1 or _appended(model, klass, attribute):
        return None
    return empty[0], made[0]


def check(facts):
    model = model_of(facts)
    spans = spans_of(facts)
    reported = set()
    for fn in model.functions.values():
        klass = fn.owner
        if klass is None or not fn.bound:
            continue
        prefix = f"{fn.self_name}."
        for call in model.calls_in_scope(fn.block.id):
            given = _variables_given(model, spans, call)
            if given is None or model.guarded(call.site, fn.block.id):
                continue
            for item, built in _items(model, given, call.site):
                if item.kind != "attribute" or not item.text.startswith(prefix):
                    continue
                attribute = item.text[len(prefix):]
                if "." in attribute or (fn.block.id, attribute) in reported or model.guarded(built, fn.block.id):
                    continue
                paths = _paths(model, klass, attribute)
                if paths is None:
                    continue
                reported.add((fn.block.id, attribute))
                empty, made = paths
                owner = model.functions.get(facts.scope_of(empty.site))
                where = f"`{owner.name}`" if owner is not None else "its method"
                what = "`tape.gradient`" if method_of(call) in GRADIENT_METHODS else "`apply_gradients`"
                at = "" if built.line == call.site.line else f" on line {call.site.line}"
                yield report(
                    facts, built, CODE,
                    f"`{item.text}` is a variable on one path of {where} (line {made.site.line}) and `[]` on the "
                    f"other (line {empty.site.line}), and here it is one item of the variables given to {what}{at}: "
                    f"when it is `[]` the list holds a nested `[]`, `tape.gradient` returns `[]` in its place and "
                    f"the update fails (`apply_gradients` raises `AttributeError: 'list' object has no attribute "
                    f"'_unique_id'`, a manual `v.assign_sub(...)` `'list' object has no attribute 'assign_sub'`)",
                    f"Build the list of variables to train on each path with the ones that exist there (`[{item.text}]` "
                    f"or nothing), or keep the optional variable in a list of its own that is `[]` when it is off "
                    f"and concatenate that list instead of putting `{item.text}` in as one item.",
                    details={"attribute": item.text, "empty_line": empty.site.line, "variable_line": made.site.line},
                )

'''# TAP107 untracked-layer-variable

## What it does
Flags a trainable `tf.Variable(...)` kept on `self` in a method of a Keras layer or
model (a subclass of `keras.layers.Layer` or `keras.Model`, also through the file's own
base classes): `self.w = tf.Variable(...)`, or a list or tuple of them.

Not reported: `self.add_weight(...)` and `keras.Variable(...)` (Keras tracks those),
`trainable=False` variables, integer ones (counters: `tf.Variable(0)`), a class that defines its own `trainable_variables` (or
`trainable_weights`) or a method that returns the attribute (a getter of the variables to
train), and a variable whose attribute this file hands to a tape's
`gradient` or to `apply_gradients` by name (`[model.w, model.b]`), or a file that trains
what its tapes watched (`tape.watched_variables()`): that loop trains it.
Silent for Keras 2 code (`keras-version = "2"`, or a file that imports `tf_keras` itself):
Keras 2 tracked `tf.Variable` attributes as `tf.Module` does.

Also flags sublayers attached past Keras's attribute tracking (its `__setattr__`):
`self.__dict__.update(...)`, `object.__setattr__(self, name, layer)` and
`self.__dict__[name] = layer`, when what is attached is a Keras layer made right there
(`Dense(...)`, a layer class of the file) or a dict whose name says it holds modules or
layers (`self.__dict__.update(kwarg_modules)`). Unknown values (`self.__dict__.update(config)`)
are left alone, and so is Keras 2 code (not measured there).

## Why is this bad?
Keras 3 tracks only its own variables. A `tf.Variable` on a layer is not in the
layer's `trainable_variables` (nor in `weights`), so nothing that asks the model for
its variables sees it: `fit` trains the rest (or warns "The model does not have any
trainable weights" and trains nothing), a custom loop's
`tape.gradient(loss, model.trainable_variables)` leaves it out and it keeps its initial
value, and `save_weights` does not save it. The TensorFlow 2 guides wrote layers this
way for Keras 2, where it worked.

A sublayer attached through `self.__dict__` or `object.__setattr__` is not tracked either:
measured on TensorFlow 2.21 / Keras 3.15, a layer given two `Dense` sublayers by
`self.__dict__.update(modules)` has 0 trainable variables (4 with `setattr`), a model
holding it has 2 of its 6, and `fit` never moves the sublayers' kernels (`save_weights`
still saves them: Keras's saving walks the attributes itself).

## Example
```python
import tensorflow as tf

class Linear(tf.keras.layers.Layer):
    def __init__(self, units, input_dim):
        super().__init__()
        self.w = tf.Variable(tf.random.normal((input_dim, units)))
        self.b = tf.Variable(tf.zeros((units,)))

    def call(self, x):
        return tf.matmul(x, self.w) + self.b
```

## Use instead
```python
import tensorflow as tf

class Linear(tf.keras.layers.Layer):
    def __init__(self, units, input_dim):
        super().__init__()
        self.w = self.add_weight(shape=(input_dim, units), initializer="random_normal")
        self.b = self.add_weight(shape=(units,), initializer="zeros")

    def call(self, x):
        return tf.matmul(x, self.w) + self.b
```
'''

from __future__ import annotations

import dataclasses
import re

from tapecheck.model import GRADIENT_METHODS, MODEL_CLASSES, Klass, method_of, model_of
from tapecheck.rules._common import flatten, is_keras_class, report, token_gap

CODE = "TAP107"
NAME = "untracked-layer-variable"
SUMMARY = "a `tf.Variable` kept on a Keras 3 layer or model (not `add_weight`): not tracked, so never trained or saved"
PROBE = False

TF_VARIABLES = frozenset({"tensorflow.Variable", "tensorflow.compat.v2.Variable"})
KERAS_BASES = frozenset({"keras.Layer", "tensorflow.keras.Layer"}) | MODEL_CLASSES
OWN_LISTS = frozenset({"trainable_variables", "trainable_weights"})
HINT = ("Make it with `self.add_weight(shape=..., initializer=...)` (in `build()` or `__init__`), "
        "or as a `keras.Variable(...)`: Keras 3 tracks those.")


VARIABLE_CALL = re.compile(rb"Variable" + token_gap(rb")") + rb"\(")  # `(tf.Variable)(...)`, a comment before `(`


def screen(source: bytes) -> bool:
    """A class and a `...Variable(` call here (or `__dict__` / `__setattr__`: a sublayer attached past
    tracking), in a file that names Keras (where a layer's base is resolved from). The rule reads the
    call as spelled (no alias of `tf.Variable`)."""
    if b"keras" not in source or b"class" not in source:
        return False
    if b"__dict__" in source or b"__setattr__" in source:
        return True
    return b"Variable" in source and VARIABLE_CALL.search(source) is not None


VALID = [
    # hyperparameters through __dict__, a parent kept out of tracking on purpose, setattr
    """
import keras
class Block(keras.layers.Layer):
    def __init__(self, parent=None, **config):
        super().__init__()
        self.__dict__.update(config)
        object.__setattr__(self, "_parent", parent)
        for name, layer in {"fc": keras.layers.Dense(2)}.items():
            setattr(self, name, layer)
    def call(self, x):
        return self.fc(x)
""",
    # Keras's own variables; a counter that is not trained
    """
import keras
import tensorflow as tf
class Linear(keras.layers.Layer):
    def __init__(self, units):
        super().__init__()
        self.units = units
        self.steps = tf.Variable(0, trainable=False)
    def build(self, input_shape):
        self.w = self.add_weight(shape=(input_shape[-1], self.units))
        self.b = keras.Variable(keras.ops.zeros((self.units,)))
    def call(self, x):
        return x @ self.w + self.b
""",
    # a tf.Module tracks tf.Variables; a class that is not a layer
    """
import tensorflow as tf
class Affine(tf.Module):
    def __init__(self):
        super().__init__()
        self.w = tf.Variable(1.0)
class State:
    def __init__(self):
        self.w = tf.Variable(1.0)
""",
    # the loop trains what the tape watched
    """
import tensorflow as tf
class Shift(tf.keras.layers.Layer):
    def __init__(self):
        super().__init__()
        self.shift = tf.Variable(0.0)
    def call(self, x):
        return x + self.shift
layer = Shift()
opt = tf.keras.optimizers.SGD(0.1)
def step(x):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(layer(x) ** 2)
    variables = tape.watched_variables()
    opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
""",
    # the class hands its variables out itself
    """
import tensorflow as tf
class Scaler(tf.keras.layers.Layer):
    def __init__(self):
        super().__init__()
        self.scale = tf.Variable(1.0)
    def variables_to_train(self):
        return [self.scale]
    def call(self, x):
        return x * self.scale
""",
    # the loop hands the attributes to the tape and the optimizer itself
    """
import tensorflow as tf
class Line(tf.keras.Model):
    def __init__(self):
        super().__init__()
        self.w = tf.Variable(0.0)
        self.b = tf.Variable(0.0)
    def call(self, x):
        return self.w * x + self.b
model = Line()
opt = tf.keras.optimizers.SGD(0.1)
def step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean((model(x) - y) ** 2)
    grads = tape.gradient(loss, [model.w, model.b])
    opt.apply_gradients(zip(grads, [model.w, model.b]))
""",
]

INVALID = [
    # sublayers attached past Keras's tracking: a DAG layer of named modules, a dict, object.__setattr__
    """
import tensorflow as tf
tfkl = tf.keras.layers
class DAGLayer(tfkl.Layer):
    def __init__(self, dag, **kwarg_modules):
        super().__init__()
        self.module_names = list(kwarg_modules)
        self.__dict__.update(kwarg_modules)  # expect: TAP107
        self.dag = dag
class Head(tf.keras.Model):
    def __init__(self):
        super().__init__()
        self.__dict__.update({"hidden": tfkl.Dense(8), "out": tfkl.Dense(1)})  # expect: TAP107
        object.__setattr__(self, "norm", tfkl.LayerNormalization())  # expect: TAP107
        self.__dict__["extra"] = DAGLayer([])  # expect: TAP107
    def call(self, x):
        return self.out(self.hidden(self.norm(x)))
""",
    # the TF 2 guide's layer, and a model with a list of them
    """
import tensorflow as tf
class Linear(tf.keras.layers.Layer):
    def __init__(self, units=4, input_dim=2):
        super().__init__()
        self.w = tf.Variable(tf.random.normal((input_dim, units)))  # expect: TAP107
        self.b = tf.Variable(tf.zeros((units,)), trainable=True)  # expect: TAP107
    def call(self, x):
        return tf.matmul(x, self.w) + self.b
class Mixture(tf.keras.Model):
    def build(self, input_shape):
        self.scales = [tf.Variable(1.0), tf.Variable(2.0)]  # expect: TAP107
    def call(self, x):
        return x * self.scales[0] + self.scales[1]
""",
    # through a base class of the file
    """
import tensorflow as tf
from tensorflow import keras
class Base(keras.layers.Layer):
    pass
class Gate(Base):
    def build(self, input_shape):
        self.gate = tf.Variable(tf.ones(input_shape[-1:]))  # expect: TAP107
    def call(self, x):
        return x * tf.sigmoid(self.gate)
""",
]


def _keras_layer(model, klass) -> bool:
    """A subclass of a Keras layer or model (not of a plain `tf.Module`, which tracks `tf.Variable`s),
    also through a module-level alias (`tfkl = tf.keras.layers`, `class Net(tfkl.Layer)`) and
    `tf.compat.v2.keras` (the same package as `tf.keras`)."""
    return any(
        base in KERAS_BASES or is_keras_class(base, "layers") or is_keras_class(base, "models")
        for cls in model.bases(klass) for base in map(_v2, model.base_names(cls))
    )


def _v2(dotted: str) -> str:
    """`tensorflow.keras.layers.Layer` for `tensorflow.compat.v2.keras.layers.Layer`."""
    return "tensorflow." + dotted[len(V2):] if dotted.startswith(V2) else dotted


V2 = "tensorflow.compat.v2."


def _trained_by_name(facts, spans) -> set[str]:
    """Attribute names (`w` of `model.w`) this file passes to a `gradient` or `apply_gradients` call."""
    names = set()
    for call in facts.calls:
        if method_of(call) in GRADIENT_METHODS or method_of(call) == "apply_gradients":
            for use in spans.uses_in((call.first_arg, call.end_order)):
                head, _, attribute = use.name.rpartition(".")
                if head:
                    names.add(attribute)
    return names


def _trains_what_was_watched(facts) -> bool:
    """`tape.watched_variables()`: the loop trains every variable its tape saw, tracked or not."""
    return any(method_of(call) == "watched_variables" for call in facts.calls)


def _handed_out(model, klass, attribute: str) -> bool:
    """Whether a method of the class other than `call` returns `self.<attribute>` (`def variables_to_train(self):
    return [self.w, self.b]`): the training code may take the variables from there."""
    facts = model.facts
    for cls in model.bases(klass):
        for method in model.methods(cls):
            if method.name in ("call", "__call__") or not method.bound:
                continue
            target = f"{method.self_name}.{attribute}"
            for exit_ in facts.exits:
                if exit_.kind != "return" or exit_.span == (0, 0) or facts.scope_of(exit_.site) != method.block.id:
                    continue
                if any(use.name == target for use in model.spans.uses_in(exit_.span)):
                    return True
    return False


def check(facts):
    model = model_of(facts)
    if _trains_what_was_watched(facts):
        return
    yield from _attached_past_tracking(model, facts)
    handed = None  # worked out when first needed
    for fn in model.functions.values():
        klass = fn.owner
        if klass is None or not fn.bound or not _keras_layer(model, klass):
            continue
        if any(method.name in OWN_LISTS for cls in model.bases(klass) for method in model.methods(cls)):
            continue
        prefix = f"{fn.self_name}."
        for assign in model.assigns_in(fn.block.id):
            if assign.kind != "assign" or not assign.target.startswith(prefix) or assign.value is None:
                continue
            attribute = assign.target[len(prefix):]
            if "." in attribute:
                continue
            made = [e for e in flatten(assign.value) if e.kind == "call" and _trainable_variable(model, e, assign)]
            if not made:
                continue
            if handed is None:
                handed = _trained_by_name(facts, model.spans)
            if attribute in handed or _handed_out(model, klass, attribute):
                continue
            if _assigned(model, klass, attribute):
                # state the code updates itself (a rate, a counter, an average): what is true of it is
                # that saving leaves it out, not that no optimizer trains it
                finding = report(
                    facts, assign.site, CODE,
                    f"`{assign.target}` is a `tf.Variable` made in `{fn.qualname}` and updated with `.assign` "
                    "(state): Keras 3 tracks only the variables a layer makes with `add_weight` (or "
                    "`keras.Variable`), so `save_weights` and the model's checkpoints leave it out, and a "
                    "restored model starts it from its initial value",
                    "Make it with `self.add_weight(shape=..., initializer=..., trainable=False)` and update it "
                    "with `.assign` as now.",
                )
            else:
                finding = report(
                    facts, assign.site, CODE,
                    f"`{assign.target}` is a `tf.Variable` made in `{fn.qualname}`: Keras 3 tracks only the variables "
                    "a layer makes with `add_weight` (or `keras.Variable`), so it is missing from the model's "
                    "`trainable_variables`: `fit` and a custom loop over them never update it, and `save_weights` "
                    "leaves it out",
                    HINT,
                )
            yield dataclasses.replace(finding, details={"keras2": None})


def _assigned(model, klass, attribute: str) -> bool:
    """Whether the methods of `klass` update `self.<attribute>` with `.assign`/`.assign_add`/`.assign_sub`."""
    for cls in model.bases(klass):
        for method in model.methods(cls):
            if not method.bound:
                continue
            target = f"{method.self_name}.{attribute}"
            if any(call.receiver == target and call.method in ("assign", "assign_add", "assign_sub")
                   for call in model.calls_in_scope(method.block.id)):
                return True
    return False


def _trainable_variable(model, expr, assign) -> bool:
    """A `tf.Variable(...)` call that is not given `trainable=False` (nor a flag we cannot read), nor
    made as an integer (`tf.Variable(0)`, `dtype=tf.int64`: a counter, which no gradient reaches)."""
    if model.facts.resolve(expr.func_text) not in TF_VARIABLES:  # as spelled: the screen looks for `Variable(`
        return False
    trainable = expr.keywords.get("trainable")
    if trainable is not None and trainable.value is not True:
        return False
    call = model.call_at(assign.span, expr) if assign.value is expr else None
    initial = call.arg(0, "initial_value") if call is not None else expr.keywords.get("initial_value")
    if initial is not None and initial.kind == "constant" and type(initial.value) is int:
        return False
    dtype = expr.keywords.get("dtype")
    return dtype is None or not any(word in dtype.text for word in ("int", "bool"))


# Words of a dict's name that say its values are modules (`kwarg_modules`, `sub_layers`, `networks`).
MODULE_WORDS = frozenset({"modules", "submodules", "layers", "sublayers", "networks", "nets"})


def _attached_past_tracking(model, facts):
    """`self.__dict__.update(...)`, `object.__setattr__(self, name, value)` and `self.__dict__[name] =
    value` in a method of a Keras layer or model, attaching a Keras layer made there or a dict named
    for modules: Keras's `__setattr__` never sees them."""
    for fn in model.functions.values():
        klass = fn.owner
        if klass is None or not fn.bound or not _keras_layer(model, klass):
            continue
        if any(method.name in OWN_LISTS for cls in model.bases(klass) for method in model.methods(cls)):
            continue
        me = fn.self_name
        for call in model.calls_in_scope(fn.block.id):
            if call.func.text == f"{me}.__dict__.update" and call.args:
                value, span = call.args[0], (call.site.order, call.end_order)
                what = f"`{me}.__dict__.update(...)`"
            elif call.func.text == "object.__setattr__" and len(call.args) == 3 \
                    and call.args[0].kind == "name" and call.args[0].text == me:
                value, span = call.args[2], call.arg_span(2, "value") or (call.site.order, call.end_order)
                what = "`object.__setattr__(...)`"
            else:
                continue
            if _holds_layers(model, value, span, call.site):
                yield _past_tracking(facts, call.site, what, klass)
        for store in facts.stores:
            if store.target == f"{me}.__dict__" and facts.scope_of(store.site) == fn.block.id \
                    and store.value is not None and _holds_layers(model, store.value, store.span, store.site):
                yield _past_tracking(facts, store.site, f"`{me}.__dict__[...] = ...`", klass)


def _holds_layers(model, value, span, site) -> bool:
    """A Keras layer made in `span` (`Dense(...)`, a layer class of the file), or a name (`kwarg_modules`)
    whose words say it holds modules or layers."""
    if value.kind == "name" and value.text:
        return bool(MODULE_WORDS & set(value.text.lower().split("_")))
    made = [(value.func_text, site)] if value.kind == "call" and value.func_text else []
    made += [(call.func.text, call.site) for call in model.spans.calls_in(span) if call.func.text]
    return any(_makes_a_layer(model, name, at) for name, at in made)


def _makes_a_layer(model, name: str, site) -> bool:
    """Whether calling `name` at `site` makes a Keras layer or model (a Keras class, or one of the file)."""
    callee = model.resolved(name, site)
    if is_keras_class(callee, "layers") or is_keras_class(callee, "models"):
        return True
    made = model.binding(name, site)
    return isinstance(made, Klass) and _keras_layer(model, made.block)


def _past_tracking(facts, site, what: str, klass):
    finding = report(
        facts, site, CODE,
        f"{what} attaches layers to `{klass.name}` past Keras's attribute tracking (its `__setattr__`): "
        "Keras 3 does not track them, so their weights are missing from the model's `trainable_variables`: "
        "`fit` and a custom loop over them never train them",
        "Attach each with `setattr(self, name, layer)` (or `self.name = layer`): Keras tracks layers set "
        "through its `__setattr__`.",
    )
    return dataclasses.replace(finding, details={"keras2": None})

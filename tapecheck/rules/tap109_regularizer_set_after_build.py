'''# TAP109 regularizer-set-after-build

## What it does
Flags a weight regularizer or constraint (`kernel_regularizer`, `bias_regularizer`,
`kernel_constraint`, ...) assigned as an attribute of a layer of a model that is already
built: `for layer in model.layers: layer.kernel_regularizer = l2(1e-4)` (or
`setattr(layer, "kernel_regularizer", ...)`, or a layer taken with `model.get_layer(...)`
or `model.layers[i]`) after the model was made as a functional `Model(inputs, outputs)`,
a `Sequential` that starts with its `Input`, a `keras.applications` network or a loaded
model (also when a function of this file or of a project module returns one), or after a
call that builds it (`model(x)`, `model.build(...)`, `model.fit(...)`) on every path to
the assignment.

## Why is this bad?
A layer hands its regularizer and constraint to `add_weight` when it builds its weights;
Keras 3 keeps them on the weight (`kernel.regularizer`), and `model.losses` and the
optimizer read them from there. Setting the layer's attribute afterwards changes nothing.
Measured on TensorFlow 2.21 / Keras 3.15: after `layer.kernel_regularizer = l2(0.1)` on
every `Conv2D` of a built segmentation model, `model.losses` is `[]`, `conv.kernel.regularizer`
is `None` and `fit` trains without the penalty; the same model made with
`kernel_regularizer=l2(0.1)` has 2 losses (0.39 and 0.08). A `kernel_constraint` set so is
not applied either (a `NonNeg` kernel still has negative weights after `fit`).

## Example
```python
import tensorflow as tf

base = tf.keras.applications.MobileNetV2(include_top=False, weights=None, input_shape=(96, 96, 3))
for layer in base.layers:
    if isinstance(layer, tf.keras.layers.Conv2D):
        layer.kernel_regularizer = tf.keras.regularizers.l2(1e-4)
```

## Use instead
```python
import tensorflow as tf

base = tf.keras.applications.MobileNetV2(include_top=False, weights=None, input_shape=(96, 96, 3))
for layer in base.layers:
    if isinstance(layer, tf.keras.layers.Conv2D):
        layer.kernel_regularizer = tf.keras.regularizers.l2(1e-4)
weights = base.get_weights()
base = tf.keras.Model.from_config(base.get_config())  # the layers are made anew, with the regularizers
base.set_weights(weights)
```

Pass `kernel_regularizer=` when the layer is made, or rebuild the model from its config
after setting the attributes, as above (measured: the rebuilt model has its penalties in
`model.losses`; `keras.models.clone_model` does the same).

## Where it stays silent
`activity_regularizer`: Keras reads it at every call (measured: set after the build, it
adds its loss). A model not known to be built at that point: a `Sequential` without an
input, a subclassed model before its first call (measured: layers set before the build get
their penalties), or called only in a branch; a model of unknown origin (a parameter, a builder that is not read).
`self.kernel_regularizer = ...` in a layer's own methods. A file that rebuilds a model after
the assignment (`get_config`, `to_json`, `from_config`, `model_from_json`, `clone_model`,
`load_model`). Silent for Keras 2 code (`keras-version = "2"`): not measured there.
'''

from __future__ import annotations

import dataclasses

from tapecheck.model import model_of
from tapecheck.rules._common import report

CODE = "TAP109"
NAME = "regularizer-set-after-build"
SUMMARY = ("`layer.kernel_regularizer = ...` (or a constraint) on a layer of an already built model: "
           "the weights were made without it, so `model.losses` stays empty and nothing is penalised")
PROBE = False

TRIGGERS = (b"_regularizer", b"_constraint")

# Calls after which the model is made anew from its config, with the attributes as set.
REBUILDS = frozenset({"get_config", "to_json", "to_yaml", "from_config", "model_from_json", "model_from_config",
                      "model_from_yaml", "clone_model", "load_model"})
LAYER_LISTS = frozenset({"layers", "submodules"})
# Methods of a model that build it (measured: a subclassed model called once has its weights made).
BUILDING_METHODS = frozenset({"build", "fit", "predict", "evaluate", "train_on_batch", "predict_on_batch",
                              "test_on_batch"})

HINT = ("Pass it when the layer is made (`Conv2D(..., kernel_regularizer=l2(1e-4))`), or rebuild the model "
        "after setting it: `weights = model.get_weights(); model = keras.Model.from_config(model.get_config()); "
        "model.set_weights(weights)`.")


VALID = [
    # at construction; in the layer's own __init__
    """
import keras
inputs = keras.Input((8,))
outputs = keras.layers.Dense(1, kernel_regularizer=keras.regularizers.l2(1e-4))(inputs)
model = keras.Model(inputs, outputs)
class Head(keras.layers.Layer):
    def __init__(self, regularizer=None):
        super().__init__()
        self.kernel_regularizer = regularizer
""",
    # a Sequential without an input, a subclass before its first call: not built yet
    """
import keras
model = keras.Sequential([keras.layers.Dense(8), keras.layers.Dense(1)])
for layer in model.layers:
    layer.kernel_regularizer = keras.regularizers.l2(1e-4)
class Net(keras.Model):
    def __init__(self):
        super().__init__()
        self.fc = keras.layers.Dense(1)
    def call(self, x):
        return self.fc(x)
net = Net()
for layer in net.layers:
    layer.bias_regularizer = keras.regularizers.l2(1e-4)
def maybe_built(data):
    seq = keras.Sequential([keras.layers.Dense(1)])
    if data is not None:
        seq(data)
    for layer in seq.layers:
        layer.kernel_regularizer = keras.regularizers.l2(1e-4)
""",
    # rebuilt from its config afterwards; an activity regularizer (read at every call)
    """
import tensorflow as tf
base = tf.keras.applications.ResNet50(weights=None)
for layer in base.layers:
    layer.activity_regularizer = tf.keras.regularizers.l1(1e-5)
    if hasattr(layer, "kernel_regularizer"):
        setattr(layer, "kernel_regularizer", tf.keras.regularizers.l2(1e-4))
weights = base.get_weights()
base = tf.keras.Model.from_config(base.get_config())
base.set_weights(weights)
""",
    # a model of unknown origin
    """
def add_weight_decay(model, regularizer):
    for layer in model.layers:
        layer.kernel_regularizer = regularizer
""",
]

INVALID = [
    # the segmentation script: a functional model, then regularizers on its Conv2D layers
    """
import tensorflow as tf
def build_model(size):
    inputs = tf.keras.Input((size, size, 3))
    x = tf.keras.layers.Conv2D(8, 3, padding="same")(inputs)
    outputs = tf.keras.layers.Conv2D(1, 1, activation="sigmoid")(x)
    return tf.keras.Model(inputs=inputs, outputs=outputs)
model = build_model(64)
for layer in model.layers:
    if isinstance(layer, tf.keras.layers.Conv2D):
        layer.kernel_regularizer = tf.keras.regularizers.l2(1e-4)  # expect: TAP109
        layer.bias_constraint = tf.keras.constraints.NonNeg()  # expect: TAP109
model.compile(optimizer="adam", loss="binary_crossentropy")
""",
    # an application's layers, by setattr, by get_layer and by index; a Sequential with its input
    """
import keras
base = keras.applications.MobileNetV2(include_top=False, weights=None)
for i, layer in enumerate(base.layers):
    for attr in ["kernel_regularizer", "depthwise_regularizer"]:
        if hasattr(layer, attr):
            setattr(layer, attr, keras.regularizers.l2(1e-4))  # expect: TAP109
conv = base.get_layer("Conv1")
conv.kernel_regularizer = keras.regularizers.l2(1e-4)  # expect: TAP109
head = keras.Sequential([keras.Input((16,)), keras.layers.Dense(4)])
last = head.layers[-1]
last.kernel_regularizer = keras.regularizers.l2(1e-4)  # expect: TAP109
""",
    # a subclassed model after its first call
    """
import tensorflow as tf
class Net(tf.keras.Model):
    def __init__(self):
        super().__init__()
        self.fc = tf.keras.layers.Dense(1)
    def call(self, x):
        return self.fc(x)
net = Net()
net(tf.zeros((1, 4)))
for layer in net.layers:
    layer.kernel_regularizer = tf.keras.regularizers.l2(1e-4)  # expect: TAP109
""",
]


def _attribute(name: str) -> str:
    """"regularizer" or "constraint" for an attribute a layer hands to `add_weight`, else ""."""
    if name == "activity_regularizer":  # read at every call
        return ""
    for kind in ("regularizer", "constraint"):
        if name.endswith(f"_{kind}") and len(name) > len(kind) + 1:
            return kind
    return ""


def _set_attributes(model, facts):
    """(site, the layer's name, the attribute, its scope) for each `layer.<attr> = ...` and
    `setattr(layer, "<attr>", ...)` (the name given as a string, or a loop over a list of them)."""
    for assign in facts.assigns:
        if assign.kind != "assign":
            continue
        head, _, attribute = assign.target.rpartition(".")
        if head and "." not in head and _attribute(attribute):
            yield assign.site, head, attribute
    for call in facts.calls:
        if call.func.kind != "name" or call.func.text != "setattr" or len(call.args) < 3:
            continue
        layer, name = call.args[0], call.args[1]
        if layer.kind != "name":
            continue
        for attribute in _names(model, name, call.site):
            if _attribute(attribute):
                yield call.site, layer.text, attribute
                break


def _names(model, expr, site) -> list[str]:
    """The strings `expr` may be: a constant, or a loop variable over a list or tuple of constants."""
    if expr.kind == "constant":
        return [expr.value] if isinstance(expr.value, str) else []
    if expr.kind != "name":
        return []
    found = []
    for assign in model.assigns_of(expr.text, site):
        value = assign.value
        if assign.kind != "for" or value is None or value.kind not in ("list", "tuple"):
            return []
        found += [e.value for e in value.elements if e.kind == "constant" and isinstance(e.value, str)]
    return found


def _layers_of(model, name: str, site):
    """The model whose layer `name` is at `site`, with the site of that model: `for layer in
    model.layers` (a slice of it, or `enumerate` of it), `layer = model.get_layer(...)`, `layer =
    model.layers[i]`. None when `name` has other bindings."""
    assigns = model.assigns_of(name, site)
    owners = set()
    for assign in assigns:
        value = assign.value
        owner = None
        if assign.kind == "for" and value is None:
            owner = _enumerated(model, assign)
        elif assign.kind in ("for", "assign") and value is not None:
            if value.kind in ("attribute", "subscript") and value.text.rpartition(".")[2] in LAYER_LISTS:
                if assign.kind == "for" or value.kind == "subscript":
                    owner = value.text.rpartition(".")[0]
            elif assign.kind == "assign" and value.kind == "call" and value.method == "get_layer" and value.receiver:
                owner = value.receiver
        if not owner:
            return None
        owners.add((owner, assign.site.order))
    if len(owners) != 1:
        return None
    owner, order = owners.pop()
    sites = [a.site for a in assigns if a.site.order == order]
    return owner, sites[0]


def _enumerated(model, assign) -> str:
    """`model` for the item variable of `for i, layer in enumerate(model.layers)`."""
    for call in model.calls_in_scope(model.facts.scope_of(assign.site)):
        if call.site.line == assign.site.line and call.func.kind == "name" and call.func.text == "enumerate" \
                and call.args and call.args[0].kind == "attribute" \
                and call.args[0].text.rpartition(".")[2] in LAYER_LISTS:
            return call.args[0].text.rpartition(".")[0]
    return ""


def _rebuilt_after(facts, site) -> bool:
    """A call after `site` that makes a model anew from a config (`get_config`, `from_config`, `clone_model`...)."""
    for call in facts.calls:
        if call.site.order <= site.order or call.func.kind == "super":
            continue
        name = call.func.method or call.func.text.rpartition(".")[2]
        if name in REBUILDS:
            return True
    return False


def _made_at(model, owner: str, site) -> str:
    """Where the built model `owner` was made, for the message."""
    lines = sorted({assign.site.line for assign in model.assigns_of(owner, site)})
    if len(lines) == 1:
        return f"made at line {lines[0]}"
    return "made " + ", ".join(f"at line {line}" for line in lines)


def _built_before(model, owner: str, site) -> str:
    """For a Keras model that is not built when made (a subclass, a Sequential without input): a call
    that builds it, run before `site` on every path (in the same scope, in a block holding `site`):
    `owner(x)`, `owner.build(...)`, `owner.fit(...)`, `owner.predict(...)`. Where, for the message."""
    if not model.holds_a_model(owner, site):
        return ""
    facts = model.facts
    scope = facts.scope_of(site)
    holding = set()
    block = facts.blocks[site.block]
    while True:
        holding.add(block.id)
        if block.id == scope or block.parent is None:
            break
        block = facts.blocks[block.parent]
    for call in model.calls_in_scope(scope):
        if call.site.order >= site.order or call.site.block not in holding:
            continue
        if call.func.kind in ("name", "attribute") and call.func.text == owner or \
                call.func.receiver == owner and call.func.method in BUILDING_METHODS:
            return f"by the call at line {call.site.line}"
    return ""


def check(facts):
    model = model_of(facts)
    for site, layer, attribute in _set_attributes(model, facts):
        if model.self_class(layer, site) is not None:
            continue  # `self.kernel_regularizer = ...`: the layer's own
        found = _layers_of(model, layer, site)
        if found is None:
            continue
        owner, owner_site = found
        if model.holds_a_model(owner, owner_site, built=True):
            how = _made_at(model, owner, owner_site)
        else:
            how = _built_before(model, owner, owner_site)
        if not how or _rebuilt_after(facts, site):
            continue
        kind = _attribute(attribute)
        what = ("`model.losses` never gets its penalty and training is not regularised" if kind == "regularizer"
                else "the optimizer never applies it after an update")
        finding = report(
            facts, site, CODE,
            f"`{layer}.{attribute}` is set on a layer of `{owner}`, which is already built here ({how}): the layer made its "
            f"weights with the {kind} it had then (Keras 3 keeps it on the weight), so setting the attribute now "
            f"changes nothing: {what}",
            HINT,
        )
        yield dataclasses.replace(finding, details={"keras2": None})  # Keras 2: not measured here, silent

'''# TAP403 missing-training-flag

## What it does
Finds the models whose definition contains a layer that behaves differently in
training and inference (`Dropout` and its variants, `GaussianNoise`,
`BatchNormalization`): a class that builds one (or names one, as in a table of
norm layers to pick from), a function that builds a model with one, a
`keras.Sequential([...])` holding one. The definition may be in another file of
the same lint run (`from models import Net`). Then it flags:
- a call of such a model inside the tape that trains it (the tape's gradient is
  asked for its variables) without `training=True`;
- a call with `training=True` inside a validation step (`val_step`,
  `test_step`, `evaluate...`) that records no tape.

Where the definition is out of sight (a library model, a constructor
argument), what the code itself says stands in for it:
- a model trained on a tape without `training=True` that another call of the
  same model (not the other branch of an `if`) gives `training=True`;
- a validation step's `training=True` copied from the training step's call;
- `self(x)` in a `train_step` override whose own `call` passes `training` on
  to its sublayers.

Inside the `call(self, ..., training=...)` of a Keras layer or model it also
flags a sublayer's `call` run directly (`self.layer.call(x)`: it skips Keras's
`__call__`, so the `training` of the call context never reaches it) and a
sublayer given a literal `training=True` (it stays in training mode at inference).
A sublayer called with no `training` at all is fine: Keras 3 hands it the
`training` its caller was called with. And a layer's `call(self, inputs,
**kwargs)` that reads `kwargs.get("training")` or tests `"training" in kwargs`:
Keras 3 passes `training` only to a `call` whose signature names it (even a
`training=True` the caller writes is dropped), so the value is always the default
and the test always false (Keras 2 did put it in `**kwargs`; silent with
`keras-version = "2"`). Measured on TF 2.21 / Keras 3.15: a wrapper
`call(self, *args, **kwargs)` called with `training=True` sees empty `kwargs`.

A frozen model on the tape (a distillation teacher, the discriminator in the
generator's step) and `training=False` written on purpose (fine-tuning with
frozen batch norm) are not flagged, nor repeated `training=True` calls in a loop
or `super().call(x, training=True)` (Monte Carlo dropout), nor test files (they
pin a layer's mode on purpose).

## Why is this bad?
Outside `fit`, Keras runs a model in inference mode unless told otherwise:
called without `training=True` in a custom loop, Dropout drops nothing and
BatchNormalization normalizes with its moving averages and never updates them.
The model trains without the regularization it was designed with, and its
batch-norm statistics stay at their initial values, so evaluation is wrong too.
The reverse mistake, `training=True` while validating, makes validation scores
random and pollutes the batch-norm statistics with validation data.

## Example
```python
import tensorflow as tf

model = tf.keras.Sequential([
    tf.keras.layers.Dense(64, activation="relu"),
    tf.keras.layers.Dropout(0.5),
    tf.keras.layers.Dense(10),
])

def train_step(optimizer, loss_fn, x, y):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
```

## Use instead
```python
import tensorflow as tf

model = tf.keras.Sequential([
    tf.keras.layers.Dense(64, activation="relu"),
    tf.keras.layers.Dropout(0.5),
    tf.keras.layers.Dense(10),
])

def train_step(optimizer, loss_fn, x, y):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
```
'''

from __future__ import annotations

import dataclasses

import os
import re

from tapecheck.model import (
    GRADIENT_METHODS,
    LIBRARIES,
    MODEL_CLASSES,
    Function,
    Klass,
    callee_of,
    load_module,
    model_of,
    spans_of,
    variable_owner,
)
from tapecheck.rules._common import keras_member, report, token_gap

CODE = "TAP403"
NAME = "missing-training-flag"
SUMMARY = "a model with Dropout/BatchNormalization trained without `training=True`, or validated with it"
PROBE = True
# Keras layers that behave differently in training and in inference.
MODE_LAYERS = frozenset(
    {
        "Dropout", "SpatialDropout1D", "SpatialDropout2D", "SpatialDropout3D", "AlphaDropout",
        "GaussianDropout", "GaussianNoise", "BatchNormalization", "SyncBatchNormalization",
    }
)
MAX_PARAMETER_DEPTH = 3  # a parameter holds what its callers pass: followed this many calls up
BUILTIN_CALLS = frozenset({"print", "len", "range", "zip", "enumerate", "float", "int", "str", "list", "dict", "tuple", "isinstance"})
TRAINING_TRUE = re.compile(rb"training" + token_gap() + rb"=" + token_gap(rb"(") + rb"True")  # however spaced, commented or bracketed


def screen(source: bytes) -> bool:
    """A model trained under a tape, one called with `training=True` (however spaced), a layer's
    `call` that runs a sublayer's `.call(` directly, or one that reads `"training"` from its kwargs."""
    return (b"GradientTape" in source or TRAINING_TRUE.search(source) is not None
            or (b".call(" in source and b"training" in source)
            or b"\"training\"" in source or b"'training'" in source)


TEST_FILE = re.compile(r"test_.*\.py|.*_test\.py|conftest\.py")
VALIDATION_STEP = re.compile(r"(val|valid|validation|validate|eval|evaluate|evaluation|test)_step|(val|valid|validate|eval|evaluate)(_\w+)?")

VALID = [
    # a key of the features dict, not of `**kwargs`
    """
import keras
class Features(keras.layers.Layer):
    def call(self, inputs, **kwargs):
        if "training" in inputs:
            return inputs["training"]
        return inputs["serving"]
""",
    # keys of another parameter than `**kwargs` (a dict given after the inputs)
    """
import keras
class Masked(keras.layers.Layer):
    def call(self, inputs, mask=None, **kwargs):
        if "training" in mask:
            return inputs * mask["training"]
        return inputs * mask.get("training", 1.0)
""",
    # the wrapper passes `training` to the wrapped `call` where that call takes it
    """
import inspect
import keras
class Quantized(keras.layers.Wrapper):
    def call(self, inputs, training=None):
        if "training" in inspect.getfullargspec(self.layer.call).args:
            return self.layer.call(inputs, training=training)
        return self.layer.call(inputs)
""",
    # sublayers called without `training`: Keras 3's call context hands them the block's own
    """
import keras
class Block(keras.layers.Layer):
    def __init__(self):
        super().__init__()
        self.drop = keras.layers.Dropout(0.3)
    def call(self, x, training=None):
        return self.drop(x)
""",
    # Monte Carlo dropout, on purpose; a flag tested before `training=True` is passed on
    """
import keras
class MCDropout(keras.layers.Dropout):
    def call(self, inputs, training=None):
        return super().call(inputs, training=True)
class Noisy(keras.layers.Layer):
    def __init__(self):
        super().__init__()
        self.drop = keras.layers.Dropout(0.3)
    def call(self, x, training=None):
        if training:
            return self.drop(x, training=True)
        return x
""",
    # the two calls are the branches of one `if`: the flag is given where the model takes it
    """
import tensorflow as tf
class Trainer:
    def __init__(self, model, takes_flag):
        self.model, self.takes_flag = model, takes_flag
    def step(self, opt, x, y):
        with tf.GradientTape() as tape:
            if self.takes_flag:
                pred = self.model(x, training=True)
            else:
                pred = self.model(x)
            loss = tf.reduce_mean(tf.square(pred - y))
        grads = tape.gradient(loss, self.model.trainable_variables)
        opt.apply_gradients(zip(grads, self.model.trainable_variables))
""",
    # Dropout in one Sequential of the module says nothing about the other one
    """
import tensorflow as tf
from tensorflow.keras import layers
teacher = tf.keras.Sequential([layers.Dense(16), layers.Dropout(0.3), layers.Dense(1)])
student = tf.keras.Sequential([layers.Dense(8), layers.Dense(1)])
opt = tf.keras.optimizers.Adam()
def distill_step(x):
    target = teacher(x, training=False)
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(student(x) - target))
    grads = tape.gradient(loss, student.trainable_variables)
    opt.apply_gradients(zip(grads, student.trainable_variables))
""",
    # a prediction helper used only outside any tape: inference mode is right
    """
import tensorflow as tf
from tensorflow.keras import layers
class Trainer:
    def __init__(self):
        self.model = tf.keras.Sequential([layers.Dense(16), layers.Dropout(0.3), layers.Dense(1)])
        self.opt = tf.keras.optimizers.Adam()
    def predict(self, x):
        return self.model(x)
    def step(self, x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(self.model(x, training=True) - y))
        grads = tape.gradient(loss, self.model.trainable_variables)
        self.opt.apply_gradients(zip(grads, self.model.trainable_variables))
        return self.predict(x)
""",
    # the model's call passes its own flag on as training=; Dropout in one model says nothing of another
    """
import keras
import tensorflow as tf
class Net(keras.Model):
    def __init__(self):
        super().__init__()
        self.d = keras.layers.Dense(4)
        self.drop = keras.layers.Dropout(0.5)
    def call(self, x, is_training=False):
        return self.drop(self.d(x), training=is_training)
class Plain(keras.Model):
    def __init__(self):
        super().__init__()
        self.d = keras.layers.Dense(1)
    def call(self, x):
        return self.d(x)
net, plain = Net(), Plain()
def step(opt, x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(plain(x) - y) + tf.reduce_mean(net(x, is_training=True))
    variables = plain.trainable_variables + net.trainable_variables
    opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
""",
    # distillation: the teacher runs in inference mode on the student's tape
    """
import tensorflow as tf
from tensorflow import keras
def make():
    return keras.Sequential([keras.layers.Dense(8), keras.layers.Dropout(0.3), keras.layers.Dense(2)])
teacher = make()
student = make()
def distill_step(opt, x):
    with tf.GradientTape() as tape:
        soft = tf.nn.softmax(teacher(x))
        loss = tf.reduce_mean(tf.keras.losses.KLDivergence()(soft, tf.nn.softmax(student(x, training=True))))
    grads = tape.gradient(loss, student.trainable_variables)
    opt.apply_gradients(zip(grads, student.trainable_variables))
""",
    # fine-tuning with frozen batch norm, on purpose; evaluation in inference mode
    """
import tensorflow as tf
from tensorflow.keras import layers
base = tf.keras.Sequential([layers.Conv2D(8, 3), layers.BatchNormalization(), layers.GlobalAveragePooling2D()])
head = layers.Dense(2)
def train_step(opt, x, y):
    with tf.GradientTape() as tape:
        logits = head(base(x, training=False))
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
    variables = base.trainable_variables + head.trainable_variables
    opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
def val_step(x):
    return head(base(x, training=False))
""",
    # Monte Carlo dropout at evaluation: repeated training=True samples, on purpose
    """
import tensorflow as tf
model = tf.keras.Sequential([tf.keras.layers.Dense(8), tf.keras.layers.Dropout(0.5)])
def evaluate_uncertainty(x, samples=20):
    preds = [model(x, training=True) for _ in range(samples)]
    return tf.math.reduce_std(tf.stack(preds), axis=0)
""",
    # a model without mode-dependent layers needs no flag
    """
import tensorflow as tf
model = tf.keras.Sequential([tf.keras.layers.Dense(8), tf.keras.layers.Dense(1)])
def step(opt, x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
    opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
""",
]

INVALID = [
    # a wrapper deciding whether to pass `training` on, from `**kwargs`: Keras 3 never puts it there
    """
import keras
class Annotate(keras.layers.Wrapper):
    def call(self, *args, **kwargs):
        if "training" in kwargs:  # expect: TAP403
            del kwargs["training"]
        return self.layer.call(*args, **kwargs)
""",
    # a layer reading the mode from `**kwargs`: Keras 3 never puts it there
    """
import keras
class NoisyBlock(keras.layers.Layer):
    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        self.dense = keras.layers.Dense(units)
        self.dropout = keras.layers.Dropout(0.5)
    def call(self, inputs, **kwargs):
        training = kwargs.get("training", False)  # expect: TAP403
        return self.dropout(self.dense(inputs), training=training)
""",
    # a wrapper runs the wrapped layer's `call` directly: the context's `training` never reaches it
    """
import keras
class Masked(keras.layers.Wrapper):
    def call(self, inputs, training=None):
        return self.layer.call(inputs)  # expect: TAP403
""",
    # a block that hands `training=True` to its sublayers whatever it is asked
    """
import keras
class Block(keras.layers.Layer):
    def __init__(self):
        super().__init__()
        self.drop = keras.layers.Dropout(0.3)
    def call(self, x, training=None):
        return self.drop(x, training=True)  # expect: TAP403
""",
    # the evaluation step copied from the training step, model built out of sight
    """
import tensorflow as tf
class Pretrainer:
    def __init__(self, build):
        self.model = build()
    def train_step(self, x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(self.model(x, training=True) - y))
        grads = tape.gradient(loss, self.model.trainable_variables)
        self.model.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
    def eval_step(self, x, y):
        return tf.reduce_mean(tf.square(self.model(x, training=True) - y))  # expect: TAP403
""",
    # `self(x)` in train_step, while the model's own call passes `training` to its backbone
    """
import keras
import tensorflow as tf
class Detector(keras.Model):
    def __init__(self, backbone):
        super().__init__()
        self.backbone = backbone
    def call(self, x, training=False):
        return self.backbone(x, training=training)
    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(self(x) - y))  # expect: TAP403
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        return {"loss": loss}
""",
    # the forward pass in a helper method the tape calls
    """
import tensorflow as tf
from tensorflow.keras import layers
class Trainer:
    def __init__(self):
        self.model = tf.keras.Sequential([layers.Dense(16), layers.Dropout(0.3), layers.Dense(1)])
        self.opt = tf.keras.optimizers.Adam()
    def forward(self, x):
        return self.model(x)  # expect: TAP403
    def step(self, x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(self.forward(x) - y))
        grads = tape.gradient(loss, self.model.trainable_variables)
        self.opt.apply_gradients(zip(grads, self.model.trainable_variables))
    def predict(self, x):
        return self.forward(x)
""",
    # the model's own flag, left out in the training step
    """
import keras
import tensorflow as tf
class Net(keras.Model):
    def __init__(self):
        super().__init__()
        self.d = keras.layers.Dense(4)
        self.drop = keras.layers.Dropout(0.5)
    def call(self, x, is_training=False):
        return self.drop(self.d(x), training=is_training)
net = Net()
def step(opt, x):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(net(x))  # expect: TAP403
    opt.apply_gradients(zip(tape.gradient(loss, net.trainable_variables), net.trainable_variables))
""",
    # a subclassed model with batch norm, in its own train_step and test_step
    """
import keras
import tensorflow as tf
class Net(keras.Model):
    def __init__(self):
        super().__init__()
        self.body = keras.layers.Dense(16)
        self.norm = keras.layers.BatchNormalization()
        self.out = keras.layers.Dense(1)
    def call(self, x, training=None):
        return self.out(self.norm(self.body(x), training=training))
    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            loss = self.compute_loss(y=y, y_pred=self(x))  # expect: TAP403
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        return {"loss": loss}
    def test_step(self, data):
        x, y = data
        return {"loss": self.compute_loss(y=y, y_pred=self(x, training=True))}  # expect: TAP403
""",
    # a builder function with dropout, used from a trainer class
    """
import tensorflow as tf
from tensorflow.keras import layers
def build_classifier():
    inputs = tf.keras.Input((8,))
    x = layers.Dropout(0.2)(layers.Dense(16)(inputs))
    return tf.keras.Model(inputs, layers.Dense(3)(x))
class Trainer:
    def __init__(self):
        self.model = build_classifier()
        self.opt = tf.keras.optimizers.Adam()
    def step(self, x, y):
        with tf.GradientTape() as tape:
            logits = self.model(x)  # expect: TAP403
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
        grads = tape.gradient(loss, self.model.trainable_variables)
        self.opt.apply_gradients(zip(grads, self.model.trainable_variables))
""",
]


def _is_mode_layer(facts, call) -> bool:
    return keras_member(callee_of(facts, call), "layers") in MODE_LAYERS


def _is_model_class(facts, call) -> bool:
    return callee_of(facts, call) in MODEL_CLASSES


def _mode_calls_of(model) -> list:
    """The calls of the file that make a mode-dependent layer, found once per file."""
    if "TAP403.mode layer calls" not in model.memo:
        facts = model.facts
        model.memo["TAP403.mode layer calls"] = [c for c in facts.calls if _is_mode_layer(facts, c)]
    return model.memo["TAP403.mode layer calls"]


def _local_definitions(model) -> dict[str, str]:
    """Classes (and model-building functions) of this file with a mode-dependent layer."""
    facts = model.facts
    mode_calls = _mode_calls_of(model)
    # a class may also name the layer class without calling it there (a table of norm layers to
    # pick from, `norm=layers.BatchNormalization` as a default): it builds one
    mode_refs = [u for u in facts.uses if "keras" in facts.resolved_name(u.name)
                 and keras_member(facts.resolved_name(u.name), "layers") in MODE_LAYERS]
    if not mode_calls and not mode_refs:
        return {}
    model_calls = [c for c in facts.calls if _is_model_class(facts, c)]

    def holding(events) -> set[int]:  # the blocks holding one of the events (each block scanned them all before)
        return {block_id for event in events for block_id in facts.chain(event.site.block)}

    with_mode, with_model, with_ref = holding(mode_calls), holding(model_calls), holding(mode_refs)
    found = {}
    for block in facts.blocks:
        if block.kind not in ("class", "function"):
            continue
        if block.id in with_mode and (block.kind == "class" or block.id in with_model):
            found.setdefault(block.name, f"`{block.name}`, line {block.line}")
        elif block.kind == "class" and block.id in with_ref:
            found.setdefault(block.name, f"`{block.name}`, line {block.line}")
    for block in facts.blocks:  # subclasses of such a class
        if block.kind == "class" and block.name not in found and any(base in found for base in block.bases):
            found[block.name] = f"`{block.name}`, line {block.line}"
    return found


def _definitions(model) -> dict[str, str]:
    """`_local_definitions` of a file's model, worked out once per file."""
    if "TAP403.definitions" not in model.memo:
        model.memo["TAP403.definitions"] = _local_definitions(model)
    return model.memo["TAP403.definitions"]


def _from_file(made, name: str) -> str:
    """"`Net` from `models`" for a class or builder of another project file, or "" when it has no
    mode-dependent layer."""
    other = made.model
    definition = made.block.name if isinstance(made, Klass) else made.name
    if definition not in _definitions(other):
        return ""
    module = os.path.splitext(os.path.basename(other.facts.path))[0]
    return f"`{name}` from `{module}`"


def _made_with_mode(model, assign, scopes_with_mode_layers) -> str:
    """Where the model one assignment makes has its mode-dependent layer; "" when it has none we know of."""
    facts = model.facts
    value = assign.value
    if assign.kind != "assign" or value is None or value.kind != "call":
        return ""
    calls = model.spans.calls_in(assign.span)
    if not calls:
        return ""
    # the target's own value: `net, plain = Net(), Plain()` binds each to its own call
    made_by = value.func_text or calls[0].func.text
    local = _definitions(model)
    made = model.binding(made_by, assign.site) if made_by else None
    if isinstance(made, (Klass, Function)) and made.model is not model:
        return _from_file(made, made_by)
    if made_by in local and (made is not None or not _imported(facts, made_by)):
        return local[made_by]
    callee = value.callee if value.func_text else callee_of(facts, calls[0])
    if callee not in MODEL_CLASSES:
        return ""
    # `Sequential([...])` holds its layers; a functional `Model(inputs, outputs)` was wired
    # from layers called before it, in its scope
    functional = not callee.endswith("Sequential")
    if any(_is_mode_layer(facts, c) for c in calls) or (functional and facts.scope_of(assign.site) in scopes_with_mode_layers):
        return f"line {assign.site.line}"
    return ""


def _imported(facts, text) -> bool:
    head = text.partition(".")[0]
    return head in facts.imports or head in facts.relative_imports


def _imported_model(model, name: str) -> str:
    """A model made at module level in another project file and imported here (`from nets import net`)."""
    assign = model.imported_assign(name)
    if assign is None:
        return ""
    origin = model.facts.relative_imports.get(name) or model.facts.imports.get(name)
    other = load_module(model.facts.path, origin.rpartition(".")[0], name in model.facts.relative_imports)
    if other is None:
        return ""
    where = _made_with_mode(other, assign, _mode_scopes(other))
    if not where:
        return ""
    module = os.path.splitext(os.path.basename(other.facts.path))[0]
    return where if where.startswith("`") else f"`{name}` from `{module}`, {where}"


def _mode_scopes(model) -> set[int]:
    if "TAP403.scopes" not in model.memo:
        facts = model.facts
        model.memo["TAP403.scopes"] = {facts.scope_of(c.site) for c in _mode_calls_of(model)}
    return model.memo["TAP403.scopes"]


def _held(model, name: str, site, depth: int = 0) -> list[str] | None:
    """For each value `name` may hold at `site`, where its mode-dependent layer is ("" for none);
    None when unknown. A parameter holds what the calls of its function in this file pass."""
    facts = model.facts
    assigns = model.value_assigns(name, site)
    if not assigns:
        imported = _imported_model(model, name) if "." not in name else ""
        return [imported] if imported else None
    found = []
    for assign in assigns:
        if assign.kind == "param":
            fn = model.functions.get(facts.scope_of(assign.site))
            arguments = model.arguments_for(fn, assign.target) if fn is not None and depth < MAX_PARAMETER_DEPTH else None
            if not arguments:
                return None
            for call, value in arguments:
                inner = _held(model, value.text, call.site, depth + 1) if value.kind in ("name", "attribute") else None
                if inner is None:
                    return None
                found += inner
        else:
            found.append(_made_with_mode(model, assign, _mode_scopes(model)))
    return found


def _trained_by(facts, spans, tape, model) -> bool:
    """Whether `tape`'s gradient is asked for the variables of `model`."""
    if not tape.name:
        return False
    for gradient in facts.tape_calls(tape, GRADIENT_METHODS):
        for use in spans.uses_in((gradient.site.order, gradient.end_order)):
            if variable_owner(use.name) == model:
                return True
            for assign in facts.reaching_assigns(use.name, gradient.site):  # variables = model.trainable_variables
                if any(variable_owner(inner.name) == model for inner in spans.uses_in(assign.span)):
                    return True
    return False


def _model_of(model, call) -> str:
    """Where the called model's mode-dependent layer is defined, or "" when it has none we know of
    (or it may be one of several models, not all of them with one)."""
    facts = model.facts
    text = call.func.text
    if text == "self":
        owner = facts.enclosing_class(call.site)
        if owner is None:
            return ""
        return _definitions(model).get(owner.name, "") or _forwards_training(model, owner)
    if text in BUILTIN_CALLS or facts.imports.get(text.partition(".")[0], "").split(".")[0] in LIBRARIES:
        return ""
    held = _held(model, text, call.site)
    return held[0] if held and all(held) else ""


def _forwards_training(model, klass) -> str:
    """"its `call` passes `training` on to `self.backbone` (line 9)": the model's own `call` takes
    `training` and hands it to a sublayer, so the author made it behave differently in training.
    "" otherwise."""
    fn = model.method_of_block(klass, "call")
    if fn is None:
        return ""
    for flag, inner in _passed_on(model, fn):
        if flag == "training" and inner.func.text:
            return f"its `call` passes `training` on to `{inner.func.text}` (line {inner.site.line})"
    return ""


def _mode_calls(model) -> dict[str, list]:
    """Calls of the file that give `training=True` or `training=False` as a literal, by callee text."""
    if "TAP403.mode_calls" not in model.memo:
        found: dict[str, list] = {}
        for call in model.facts.calls:
            value = call.keywords.get("training")
            if value is not None and isinstance(value.value, bool) and call.func.text:
                found.setdefault(call.func.text, []).append(call)
        model.memo["TAP403.mode_calls"] = found
    return model.memo["TAP403.mode_calls"]


def _same_model(model, call, other) -> bool:
    """Whether two calls written with the same name call the same model: `self.x` in one class, a
    name bound by the same assignments (a parameter: of the same function)."""
    facts = model.facts
    text = call.func.text
    if text.startswith("self."):
        return facts.enclosing_class(call.site) is facts.enclosing_class(other.site) is not None
    if "." in text:
        return False
    mine, theirs = model.value_assigns(text, call.site), model.value_assigns(text, other.site)
    return bool(mine) and [id(a) for a in mine] == [id(a) for a in theirs]


def _called_with(model, call, mode: bool, trained_by=None):
    """Another call of the same model that gives `training=<mode>` (inside a tape that trains it,
    when `trained_by(call)` is given), or None: what the code itself says of the model's modes.
    Not an alternative to this call (the other branch of an `if`, or of a conditional expression
    on the same line: `self(x, training=True) if takes_flag else self(x)`)."""
    for other in _mode_calls(model).get(call.func.text, ()):
        if other is call or other.keywords["training"].value is not mode or not _same_model(model, call, other):
            continue
        if other.site.line == call.site.line or _alternatives(model.facts, call, other):
            continue
        if trained_by is None or trained_by(other):
            return other
    return None


def _alternatives(facts, call, other) -> bool:
    """The two calls sit in different branches of one `if`/`elif`/`else` statement."""
    mine = set(facts.chain(call.site.block))
    for block_id in facts.chain(other.site.block):
        block = facts.blocks[block_id]
        if block.kind in ("if", "else") and block_id not in mine:
            siblings = [b.id for b in facts.blocks if b.parent == block.parent and b.kind in ("if", "else")]
            if any(sibling in mine for sibling in siblings):
                return True
    return False


def _helper_in_a_tape(facts, model, spans, call, name) -> str:
    """", in `forward`, which the tape at line N calls": the model call is in a function (a method
    of the same class for `self.` names) that a tape training that model calls. "" otherwise."""
    fn = model.functions.get(facts.scope_of(call.site))
    if fn is None:
        return ""
    for caller in model.callers(fn):
        if name.startswith("self.") and model.functions.get(facts.scope_of(caller.site)) is not None \
                and model.functions[facts.scope_of(caller.site)].owner is not fn.owner:
            continue  # another class's `self`
        for tape in facts.tapes:
            if facts.records(tape, caller.site) and _trained_by(facts, spans, tape, name):
                return f", in `{fn.qualname}`, which the tape calls at line {caller.site.line},"
    return ""


def _flags(model, call) -> list[str]:
    """The keywords that set the mode of the called model: `training`, or the flag a local model's
    `call` passes on as `training=` under its own name (`def call(self, x, is_training=False)`)."""
    fn = model.resolve(call)
    if fn is None:
        return ["training"]
    flags = {flag for flag, _ in _passed_on(model, fn)}
    return sorted(flags - {"training"}) or ["training"]


def _passed_on(model, fn):
    """(parameter, call) for each call in `fn` that gives one of `fn`'s parameters as `training=`."""
    for inner in model.calls_in_scope(fn.block.id):
        value = inner.keywords.get("training")
        if value is not None and value.kind == "name" and value.text in fn.params:
            yield value.text, inner


def _training_arg(model, call, flags):
    """The argument the call gives for the mode, by keyword or by position, or None."""
    training = call.arg(1, "training")
    if training is not None or flags == ["training"]:
        return training
    fn = model.resolve(call)
    positional = fn.params[1:] if fn.bound else fn.params
    for flag in flags:
        if flag in call.keywords:
            return call.keywords[flag]
        index = positional.index(flag)
        if index < len(call.args):
            return call.args[index]
    return None


def _validating(facts, call) -> bool:
    """The call is in a validation step (`val_step`, `test_step`, `evaluate...`) that records no tape,
    and not in a loop (Monte Carlo dropout samples repeatedly, on purpose)."""
    function = facts.blocks[facts.scope_of(call.site)]
    return (
        function.kind == "function"
        and VALIDATION_STEP.fullmatch(function.name) is not None
        and not any(facts.scope_of(t.site) == function.id for t in facts.tapes)
        and not facts.loops_between(None, call.site)
    )


def _sublayer_calls(model):
    """Inside the `call(self, ..., training=...)` of a Keras layer or model: a sublayer's `call` run
    directly (`self.layer.call(x)`, which skips Keras's `__call__`, so the `training` of the call
    context never reaches it), and a sublayer given a literal `training=True` (in training mode
    whatever this call is asked: at inference and validation too)."""
    facts = model.facts
    if TEST_FILE.fullmatch(os.path.basename(facts.path)):
        return  # tests pin a layer's mode on purpose, to check what Keras does with it
    for fn in model.functions.values():
        if fn.name == "call" and fn.owner is not None and "training" not in fn.params and model.is_keras(fn.owner):
            yield from _training_from_kwargs(model, fn)
        if fn.name != "call" or fn.owner is None or "training" not in fn.params or not model.is_keras(fn.owner):
            continue
        calls = model.calls_in_scope(fn.block.id)
        for call in calls:
            if call.site.in_comprehension:
                continue
            text = call.func.text
            receiver = text.rpartition(".")[0]
            if text.endswith(".call") and receiver.startswith("self.") and receiver.count(".") == 1:
                passed_elsewhere = any(  # `if 'training' in args: ...call(x, training=training) else: ...call(x)`
                    other.func.text == text and "training" in other.keywords for other in calls
                )
                if "training" not in call.keywords and not passed_elsewhere \
                        and not any(key == -1 for key, _, _ in call.arg_spans):
                    yield report(
                        facts, call.site, CODE,
                        f"`{text}(...)` runs the sublayer's `call` directly, skipping Keras's `__call__`: the "
                        f"`training` that `{fn.qualname}` receives never reaches `{receiver}`, so its "
                        "Dropout/BatchNormalization layers always behave as at inference",
                        f"Call `{receiver}(..., training=training)` (or pass `training=training` to its `call`).",
                    )
                continue
            value = call.keywords.get("training")
            if value is None or value.value is not True or not text or text.startswith("super"):
                continue  # `super().call(x, training=True)`: Monte Carlo dropout, on purpose
            if _guarded_by_training(facts, model, call, fn):
                continue
            yield report(
                facts, call.site, CODE,
                f"`{text or 'this call'}` is given `training=True` inside `{fn.qualname}`, whatever the `training` "
                f"that `{fn.qualname}` receives: its dropout and batch-norm layers run in training mode at "
                "inference and validation too",
                "Pass the flag on: `training=training`.",
            )


def _training_from_kwargs(model, fn):
    """A layer's `call(self, inputs, **kwargs)` that reads `kwargs.get("training")`: Keras 3 passes
    `training` only to a `call` whose signature names it (`Layer._call_has_training_arg`), so the
    value read is always the default, whatever mode the layer runs in."""
    facts = model.facts
    for call in model.calls_in_scope(fn.block.id):
        receiver, _, method = call.func.text.rpartition(".")
        if method not in ("get", "pop") or not receiver or receiver != fn.block.kwargs or not call.args:
            continue
        key = call.args[0]
        if key.kind != "constant" or key.value != "training":
            continue
        finding = report(
            facts, call.site, CODE,
            f"`{fn.qualname}` reads `training` from `**{receiver}`, but Keras 3 passes `training` only to a "
            f"`call` whose signature names it: `{call.func.text}(\"training\")` is always its default here, "
            "so what it drives (Dropout, BatchNormalization, noise) never switches to training mode",
            f"Add `training=None` to the signature: `def call(self, inputs, training=None, **{receiver}):`.",
        )
        # Keras 2 passes `training` to a `call` that takes `**kwargs`: silent there
        yield dataclasses.replace(finding, details={"keras2": None})
        return
    # `if "training" in kwargs: del kwargs["training"]` (a wrapper deciding what to pass on)
    for compare in facts.compares:
        if compare.operator not in ("in", "not in") or facts.scope_of(compare.site) != fn.block.id:
            continue
        key, holder = compare.left, compare.right
        if key is None or key.kind != "constant" or key.value != "training":
            continue
        if holder is None or holder.kind != "name" or not holder.text or holder.text != fn.block.kwargs:
            continue  # `"training" in inputs`, `in mask`: another parameter may be a dict of anything
        finding = report(
            facts, compare.site, CODE,
            f"`{fn.qualname}` looks for `training` in `**{holder.text}` (`\"training\" {compare.operator} "
            f"{holder.text}`), but Keras 3 passes `training` only to a `call` whose signature names it, even when "
            "the caller gives `training=True` explicitly: the test always finds it missing, so the mode never "
            "reaches what this `call` runs (Dropout, BatchNormalization)",
            f"Add `training=None` to the signature: `def call(self, inputs, training=None, **{holder.text}):`, and "
            "pass it on.",
        )
        yield dataclasses.replace(finding, details={"keras2": None})
        return


def _guarded_by_training(facts, model, call, fn) -> bool:
    """Whether an `if`/`else` around the call, inside `fn`, tests `training` (or the call is only
    reached that way): then `training=True` there is the flag passed on."""
    block = facts.blocks[call.site.block]
    while block is not None and block.id != fn.block.id:
        if block.kind in ("if", "else") and block.test_span != (0, 0):
            if any(use.name == "training" for use in model.spans.uses_in(block.test_span)):
                return True
        block = facts.blocks[block.parent] if block.parent is not None else None
    return False


def check(facts):
    model = model_of(facts)
    spans = spans_of(facts)
    yield from _sublayer_calls(model)
    if not _definitions(model) and not _mode_scopes(model) and not facts.imports and not facts.relative_imports:
        return
    recorded = [c for c in facts.calls if model.recording(c.site)]
    # functions a tape runs: a model called there without the flag is trained too
    under_tape = {fn.block.id for fn in map(model.resolve, recorded) if fn is not None}
    for call in facts.calls:
        if call.func.kind not in ("name", "attribute") or call.site.in_comprehension:
            continue
        if not (call.keywords or len(call.args) > 1 or facts.scope_of(call.site) in under_tape
                or model.recording(call.site)):
            continue  # not trained, and no mode given: nothing to say
        where = _model_of(model, call)
        name = call.func.text
        if not where:
            # what the code itself says: the same model called with a literal `training=` elsewhere
            training = call.arg(1, "training")
            if training is None and name in _mode_calls(model):
                tapes = model.recording(call.site)
                # weaker evidence, so stricter: every tape recording it trains it (not the critic
                # called for the generator's loss while the critic's tape also records)
                if tapes and all(_trained_by(facts, spans, t, name) for t in tapes):
                    # not from the same tape: `critic(s, training=True)` beside `critic(s2)` for a
                    # bootstrap target is two passes chosen on purpose
                    other = _called_with(model, call, True,
                                         lambda other: not any(facts.records(t, other.site) for t in tapes))
                    if other is not None:
                        yield report(
                            facts, call.site, CODE,
                            f"`{name}` is trained here without `training=True`, though line {other.site.line} calls "
                            "it with `training=True`: Keras runs it in inference mode here, so its dropout is off "
                            "and its batch-norm statistics do not update",
                            f"Call `{name}(..., training=True)` inside the tape, as line {other.site.line} does.",
                        )
            elif training is not None and training.value is True and _validating(facts, call):
                function = facts.blocks[facts.scope_of(call.site)]
                trained = lambda other: any(  # noqa: E731
                    _trained_by(facts, spans, t, name) for t in model.recording(other.site)
                )
                other = _called_with(model, call, True, trained)
                if other is not None:
                    yield report(
                        facts, call.site, CODE,
                        f"`{name}` is called with `training=True` in `{function.name}`, a validation step, as in "
                        f"the training step at line {other.site.line}: its Dropout/BatchNormalization layers run in "
                        "training mode, so validation results become random and batch-norm statistics learn from "
                        "validation data",
                        f"Call `{name}(..., training=False)` when validating.",
                    )
            continue
        flags = _flags(model, call)
        flag = flags[0]
        training = _training_arg(model, call, flags)
        if training is None:
            tapes = model.recording(call.site)
            trained = any(_trained_by(facts, spans, t, name) for t in tapes)
            through = "" if trained or tapes else _helper_in_a_tape(facts, model, spans, call, name)
            if (trained or through) and where.startswith("its `call`"):
                yield report(
                    facts, call.site, CODE,
                    f"`{name}` is trained here{through} without `{flag}=True`, though {where.replace('its', 'its own', 1)}: "
                    "Keras runs it in inference mode, so the dropout and batch-norm layers it hands `training` to "
                    "behave as at inference (no dropout, statistics never updated)",
                    f"Call `{name}(..., {flag}=True)` inside the tape.",
                )
            elif trained or through:
                yield report(
                    facts, call.site, CODE,
                    f"`{name}` has Dropout/BatchNormalization layers ({where}) and is trained here{through} "
                    f"without `{flag}=True`: Keras runs it in inference mode, so dropout is off and batch-norm "
                    "statistics never update",
                    f"Call `{name}(..., {flag}=True)` inside the tape.",
                )
        elif training.value is True:
            function = facts.blocks[facts.scope_of(call.site)]
            if _validating(facts, call):
                yield report(
                    facts, call.site, CODE,
                    f"`{name}` has Dropout/BatchNormalization layers ({where}) and is called with "
                    f"`{flag}=True` in `{function.name}`: validation results become random and "
                    "batch-norm statistics learn from validation data",
                    f"Call `{name}(..., {flag}=False)` when validating.",
                )

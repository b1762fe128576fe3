'''# TAP403 missing-training-flag

## What it does
Finds the models whose definition contains a layer that behaves differently in
training and inference (`Dropout` and its variants, `GaussianNoise`,
`BatchNormalization`): a class that builds one, a function that builds a model
with one, a `keras.Sequential([...])` holding one. The definition may be in
another file of the same lint run (`from models import Net`). Then it flags:
- a call of such a model inside the tape that trains it (the tape's gradient is
  asked for its variables) without `training=True`;
- a call with `training=True` inside a validation step (`val_step`,
  `test_step`, `evaluate...`) that records no tape.

A frozen model on the tape (a distillation teacher, the discriminator in the
generator's step) and `training=False` written on purpose (fine-tuning with
frozen batch norm) are not flagged, nor repeated `training=True` calls in a loop
(Monte Carlo dropout).

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
from tapecheck.rules._common import keras_member, report

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
TRAINING_TRUE = re.compile(rb"training\s*=\s*True")


def screen(source: bytes) -> bool:
    """A model trained under a tape, or one called with `training=True` (however spaced)."""
    return b"GradientTape" in source or TRAINING_TRUE.search(source) is not None


VALIDATION_STEP = re.compile(r"(val|valid|validation|validate|eval|evaluate|evaluation|test)_step|(val|valid|validate|eval|evaluate)(_\w+)?")

VALID = [
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


def _local_definitions(facts) -> dict[str, str]:
    """Classes (and model-building functions) of this file with a mode-dependent layer."""
    mode_calls = [c for c in facts.calls if _is_mode_layer(facts, c)]
    if not mode_calls:
        return {}
    model_calls = [c for c in facts.calls if _is_model_class(facts, c)]
    found = {}
    for block in facts.blocks:
        if block.kind not in ("class", "function"):
            continue
        holds = lambda call: block.id in facts.chain(call.site.block)  # noqa: E731
        if any(holds(c) for c in mode_calls) and (block.kind == "class" or any(holds(c) for c in model_calls)):
            found.setdefault(block.name, f"`{block.name}`, line {block.line}")
    for block in facts.blocks:  # subclasses of such a class
        if block.kind == "class" and block.name not in found and any(base in found for base in block.bases):
            found[block.name] = f"`{block.name}`, line {block.line}"
    return found


def _definitions(model) -> dict[str, str]:
    """`_local_definitions` of a file's model, worked out once per file."""
    if "TAP403.definitions" not in model.memo:
        model.memo["TAP403.definitions"] = _local_definitions(model.facts)
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
        model.memo["TAP403.scopes"] = {facts.scope_of(c.site) for c in facts.calls if _is_mode_layer(facts, c)}
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
        return _definitions(model).get(owner.name, "") if owner is not None else ""
    if text in BUILTIN_CALLS or facts.imports.get(text.partition(".")[0], "").split(".")[0] in LIBRARIES:
        return ""
    held = _held(model, text, call.site)
    return held[0] if held and all(held) else ""


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
    facts = model.facts
    flags = set()
    for inner in model.spans.calls:
        if facts.scope_of(inner.site) == fn.block.id:
            value = inner.keywords.get("training")
            if value is not None and value.kind == "name" and value.text in fn.params:
                flags.add(value.text)
    return sorted(flags - {"training"}) or ["training"]


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


def check(facts):
    model = model_of(facts)
    spans = spans_of(facts)
    if not _definitions(model) and not _mode_scopes(model) and not facts.imports and not facts.relative_imports:
        return
    recorded = [c for c in facts.calls if any(facts.records(t, c.site) for t in facts.tapes)]
    # functions a tape runs: a model called there without the flag is trained too
    under_tape = {fn.block.id for fn in map(model.resolve, recorded) if fn is not None}
    for call in facts.calls:
        if call.func.kind not in ("name", "attribute") or call.site.in_comprehension:
            continue
        if not (call.keywords or len(call.args) > 1 or facts.scope_of(call.site) in under_tape
                or any(facts.records(t, call.site) for t in facts.tapes)):
            continue  # not trained, and no mode given: nothing to say
        where = _model_of(model, call)
        if not where:
            continue
        flags = _flags(model, call)
        flag = flags[0]
        training = _training_arg(model, call, flags)
        name = call.func.text
        if training is None:
            tapes = [t for t in facts.tapes if facts.records(t, call.site)]
            trained = any(_trained_by(facts, spans, t, name) for t in tapes)
            through = "" if trained or tapes else _helper_in_a_tape(facts, model, spans, call, name)
            if trained or through:
                yield report(
                    facts, call.site, CODE,
                    f"`{name}` has Dropout/BatchNormalization layers ({where}) and is trained here{through} "
                    f"without `{flag}=True`: Keras runs it in inference mode, so dropout is off and batch-norm "
                    "statistics never update",
                    f"Call `{name}(..., {flag}=True)` inside the tape.",
                )
        elif training.value is True:
            function = facts.blocks[facts.scope_of(call.site)]
            if (
                function.kind == "function"
                and VALIDATION_STEP.fullmatch(function.name)
                and not any(facts.scope_of(t.site) == function.id for t in facts.tapes)
                and not facts.loops_between(None, call.site)
            ):
                yield report(
                    facts, call.site, CODE,
                    f"`{name}` has Dropout/BatchNormalization layers ({where}) and is called with "
                    f"`{flag}=True` in `{function.name}`: validation results become random and "
                    "batch-norm statistics learn from validation data",
                    f"Call `{name}(..., {flag}=False)` when validating.",
                )

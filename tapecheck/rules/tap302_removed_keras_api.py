'''# TAP302 removed-keras-api

## What it does
Flags calls that Keras 3 (the Keras of TensorFlow 2.16 and later) removed but
that old training loops and tutorials still make:
- `metric.reset_states()` on a Keras metric (now `reset_state()`);
- `lr=` passed to a Keras optimizer (now `learning_rate=`);
- `decay=` passed to a Keras optimizer (now a learning-rate schedule);
- `tf.keras.optimizers.legacy.*` optimizers;
- `optimizer.get_gradients(...)` and `optimizer.minimize(...)` (use a
  `tf.GradientTape` and `apply_gradients`);
- `keras.backend.set_learning_phase(...)` (pass `training=` to the model);
- `optimizer.lr`, read or assigned (now `learning_rate`), also `self.lr` in an optimizer
  subclass, `lr=` passed to `super().__init__` there, and `optimizers[i].lr` on a list of
  Keras optimizers (or `self.optimizer[i].lr` in a model compiled with one);
- an optimizer subclass implementing OptimizerV2's hooks (`_resource_apply_dense`,
  `_create_slots`...) instead of `update_step`: Keras 3 never calls them;
- `model.fit_generator`, `evaluate_generator`, `predict_generator`, `predict_classes`,
  `predict_proba` (now `fit`, `evaluate`, `predict`);
- saving to paths Keras 3 refuses: `model.save_weights(path)` where the path does not end
  in `.weights.h5` (TensorFlow checkpoints such as `"ckpt/model"` or `"cp.ckpt"`, and
  `.h5`), `model.save(path)` without `.keras` or `.h5` (a SavedModel folder, also with
  `save_format=`: to a `.keras` or `.h5` file Keras 3 only warns about it),
  `model.load_weights` of a TensorFlow checkpoint, and a `ModelCheckpoint` whose file
  name does not end as its `save_weights_only` needs. A call inside
  `with self.assertRaises(...)` or `pytest.raises(...)` (a test of the error) is left alone;
- `compile(optimizer=[opt1, opt2])` on a Keras model, a list or tuple of optimizers (one
  per part of a wide-and-deep model, applied by its own `train_step`): Keras 2's
  `compile` mapped over a nested structure of optimizers; Keras 3.15 takes one and
  raises `ValueError: Could not interpret optimizer identifier: [<...Adam object...>,
  ...]` (measured).

A model is known as such when the name is bound to a Keras model (a `Sequential`, a
functional `Model`, a subclass of one, `load_model`, an application, or a function
that returns one, also from another module), `self` in a Keras Model subclass, or
`self.model` in a callback. A path is judged when it is written there, bound once to a
string, an f-string or `os.path.join(...)`; anything else is not judged.

## Why is this bad?
Each one fails only when the line runs: `AttributeError: 'Mean' object has no
attribute 'reset_states'` at the end of the first epoch, after the first
epoch's training time is spent; `ValueError: Argument(s) not recognized:
{'lr': ...}` when the optimizer is built; a `ValueError` ("The filename must end
in .weights.h5") from the checkpoint saved after the first epoch. Assigning
`optimizer.lr = x` fails silently: it sets a new Python attribute, and the
optimizer keeps its learning rate. `decay=` fails silently instead: Keras 3
logs "Argument `decay` is no longer supported and will be ignored" and trains at
a constant learning rate. Building a legacy optimizer raises
`ImportError`, and a `hasattr(tf.keras.optimizers, "legacy")` guard does not
help: Keras 3 keeps a `legacy` stub module whose optimizers only raise. An
optimizer subclass with OptimizerV2's hooks fails at the first `apply_gradients`
with `NotImplementedError` and an empty message when it derives from `Optimizer`;
derived from `SGD` or `Adam`, it silently runs the base class's update instead of
its own.

## Keras 2 projects
With `keras-version = "2"` in `[tool.tapecheck]` (or when not set, in a file
whose own code imports `tf_keras` or sets `TF_USE_LEGACY_KERAS`), the APIs Keras 2 has
are not reported: `reset_states()`, legacy optimizers (and `lr=` or
`get_gradients` on them). `optimizer.lr`, the `*_generator` methods and `predict_classes`, and saving to
TensorFlow checkpoints and SavedModel folders are Keras 2 APIs too, and not reported there.
`lr=` given to a Keras 2 optimizer of TensorFlow 2.11
or later is still reported: it is accepted with a logged warning and ignored,
so training runs with the default learning rate. `get_gradients` on such an
optimizer is still reported too (it has none: AttributeError).

## Example
```python
import tensorflow as tf

train_acc = tf.keras.metrics.SparseCategoricalAccuracy()
optimizer = tf.keras.optimizers.Adam(lr=1e-3)
for epoch in range(5):
    train_acc.reset_states()
```

## Use instead
```python
import tensorflow as tf

train_acc = tf.keras.metrics.SparseCategoricalAccuracy()
optimizer = tf.keras.optimizers.Adam(learning_rate=1e-3)
for epoch in range(5):
    train_acc.reset_state()
```

## Fix safety
The fix renames `reset_states()` to `reset_state()` and `lr=` to
`learning_rate=`. It is safe. Legacy optimizers and `get_gradients` have no
automatic fix.
'''

import dataclasses
import re

from tapecheck.model import model_of
from tapecheck.rules._common import flatten, is_keras_class, keras_member, metric_bindings, report, token_gap

# Its mistake raises an exception: findings inside a test that expects that error
# (`pytest.raises`, `assertRaises`) are left out, by the rule catalog.
RAISES = True
CODE = "TAP302"
NAME = "removed-keras-api"
SUMMARY = "an API Keras 3 removed (`reset_states()`, `lr=`, `decay=`, `optimizer.lr`, legacy optimizers, `fit_generator`, TF-format saving)"
PROBE = False
FIXABLE = True


LR_KEYWORD = re.compile(rb"\blr" + token_gap() + rb"=")
DECAY_KEYWORD = re.compile(rb"\bdecay" + token_gap() + rb"=")  # not `weight_decay=`, which Keras 3 has

# Each finding says, in `details`, which API it is about and what to report instead for a
# Keras 2 (tf_keras) project: `details["keras2"]` is None when Keras 2 has the API, else the
# Keras 2 message. The lint CLI chooses by `keras-version` (tapecheck/lint/config.py).
KERAS2_IGNORES_LR = (
    "Keras 2 optimizers (TensorFlow 2.11+, tf_keras) ignore `lr=`: only a warning is logged "
    "and training runs with the default learning rate"
)
KERAS2_NO_GET_GRADIENTS = "Keras 2 optimizers (TensorFlow 2.11+, tf_keras) have no `get_gradients()`: AttributeError"


def _with(finding, api: str, keras2: str | None):
    return dataclasses.replace(finding, details={"api": api, "keras2": keras2})


# The methods and the callback reported by name: a file that calls one spells it.
KERAS_NEEDLES = (b"fit_generator", b"evaluate_generator", b"predict_generator", b"predict_classes",
                 b"predict_proba", b"save_weights", b"load_weights", b"ModelCheckpoint")
LR_ATTRIBUTE = re.compile(rb"\." + token_gap() + rb"lr\b")  # `opt.lr`, even `opt. lr`, `(opt.  # c\n lr)`
SAVE_CALL = re.compile(rb"\." + token_gap() + rb"save" + token_gap(rb")") + rb"\(")
OPTIMIZER_LIST = re.compile(rb"optimizer" + token_gap() + rb"=" + token_gap() + rb"[\[(]")  # `compile(optimizer=[...])`


def screen(source: bytes) -> bool:
    """`reset_states`, `get_gradients`, or an optimizer given `lr`/`decay`, asked to `minimize` or
    taken from `legacy`; `.lr`, a model's removed methods, or saving."""
    if b"reset_states" in source or b"get_gradients" in source or b"set_learning_phase" in source:
        return True
    if b"_resource_apply_" in source or b"_create_slots" in source:
        return True
    if any(needle in source for needle in KERAS_NEEDLES):
        return True
    if b"lr" in source and LR_ATTRIBUTE.search(source) is not None:
        return True
    if b"save" in source and SAVE_CALL.search(source) is not None:
        return True
    if b"compile" in source and OPTIMIZER_LIST.search(source) is not None:
        return True
    return b"optimizers" in source and (
        b"legacy" in source or b"minimize" in source
        or LR_KEYWORD.search(source) is not None or DECAY_KEYWORD.search(source) is not None
    )


VALID = [
    # `lr` of items of a list not known to hold Keras optimizers (schedules of one's own), and
    # `learning_rate` of a list of optimizers
    """
import keras
class Schedules:
    def __init__(self, steps):
        self.stages = [Stage(lr=0.1) for _ in range(steps)]
        self.optimizers = [keras.optimizers.Ftrl(0.01), keras.optimizers.Adam(1e-3)]
    def rate(self, i):
        return self.stages[i].lr, self.optimizers[i].learning_rate
class Stage:
    def __init__(self, lr):
        self.lr = lr
""",
    # one optimizer to compile; a list of optimizers kept for a loop of one's own
    """
import keras
model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
optimizers = [keras.optimizers.Ftrl(1e-4), keras.optimizers.Adam(1e-3)]
""",
    # a wrapper of unknown origin (a library's own model may take a list), and a class whose
    # own `compile` takes the list
    """
import keras
import gplib
def fit(base, data):
    model = gplib.NatGradWrapper(base)
    model.compile(optimizer=[gplib.NaturalGradient(1.0), keras.optimizers.Adam(0.01)])
    model.fit(data)
class TwoOptimizerModel(keras.Model):
    def compile(self, optimizer, **kwargs):
        self.optimizers = list(optimizer)
        super().compile(optimizer=self.optimizers[0], **kwargs)
    def setup(self):
        self.compile(optimizer=[keras.optimizers.SGD(0.1), keras.optimizers.Adam()])
""",
    # code written for both Keras versions; a Keras 3 optimizer subclass done right
    """
import tensorflow as tf
class Scaled(tf.keras.optimizers.SGD):
    def __init__(self, learning_rate=0.1, scale=2.0):
        super().__init__(learning_rate=learning_rate)
        self.scale = scale
    def current(self):
        if hasattr(self, "learning_rate"):
            return self.learning_rate
        return self.lr
    def update_step(self, gradient, variable, learning_rate):
        variable.assign_sub(self.scale * learning_rate * gradient)
    def _resource_apply_dense(self, grad, var):
        return var.assign_sub(grad)
class Legacy(tf.keras.optimizers.legacy.Optimizer):
    def _resource_apply_dense(self, grad, var):
        return var.assign_sub(grad)
""",
    # stateful RNN layers still have reset_states() in Keras 3
    """
import keras
lstm = keras.layers.LSTM(8, stateful=True)
lstm.reset_states()
""",
    """
import tensorflow as tf
opt = tf.keras.optimizers.SGD(learning_rate=0.1, momentum=0.9)
""",
    # `minimize` of optimizers that are not Keras': TF 1's, SciPy's
    """
import scipy.optimize
import tensorflow as tf
opt = tf.compat.v1.train.GradientDescentOptimizer(0.1)
train_op = opt.minimize(loss)
optimizers = scipy.optimize
result = optimizers.minimize(lambda x: (x - 1.0) ** 2, 0.0)
""",
    # Keras 3's own decay: a schedule, or decoupled weight decay
    """
import keras
schedule = keras.optimizers.schedules.InverseTimeDecay(0.01, decay_steps=1, decay_rate=1e-4)
opt = keras.optimizers.SGD(learning_rate=schedule)
adamw = keras.optimizers.AdamW(learning_rate=1e-3, weight_decay=1e-4)
""",
    # a name that only looks like the Keras module: a list of the project's own metrics
    """
import tensorflow as tf
from project import losses
metrics = losses.tracked
class Tracker:
    def __init__(self):
        self.loss = metrics.Mean(name="loss")
    def reset(self):
        self.loss.reset_states()
opt = losses.optimizers.Adam(lr=1e-3)
""",
    # saving where Keras 3 allows it; saving objects that are not known to be Keras models
    """
import numpy as np
import tensorflow as tf
model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
model.save_weights("w.weights.h5")
model.save("m.keras")
best = tf.keras.callbacks.ModelCheckpoint("best-{epoch:02d}.keras", save_best_only=True)
weights = tf.keras.callbacks.ModelCheckpoint("w-{epoch}.weights.h5", save_weights_only=True)
checkpoint = tf.train.Checkpoint(model=model)
checkpoint.save("ckpt/model")
np.save("x.npy", np.zeros(3))
def keep(saver, name):
    saver.save_weights(name + ".h5")
    saver.save_weights("plain.h5")
model.save_weights(f"{weights_prefix}.h5")
for step in range(3):
    model.save_weights(f"runs/cp-{step}")  # what `step` formats to is not judged
""",
    # an `lr` of the project's own, and a generator method a class of the file defines
    """
import argparse
import keras
args = argparse.ArgumentParser().parse_args()
opt = keras.optimizers.Adam(learning_rate=args.lr)
opt.learning_rate = args.lr / 10
class Trainer:
    def __init__(self, lr):
        self.lr = lr
    def fit_generator(self, batches):
        return [b for b in batches]
Trainer(0.1).fit_generator([1, 2])
""",
]

INVALID = [
    # an item of a list of optimizers, read and assigned
    """
import keras
class TwoRates:
    def __init__(self):
        self.optimizers = [keras.optimizers.Ftrl(0.01), keras.optimizers.Adam(1e-3)]
    def current(self):
        return self.optimizers[1].lr.numpy()  # expect: TAP302
opts = (keras.optimizers.SGD(0.1), keras.optimizers.Adam(1e-3))
opts[0].lr = 0.01  # expect: TAP302
""",
    # a wide-and-deep model given one optimizer per part
    """
import tensorflow as tf
class WideDeep(tf.keras.Model):
    def compile(self, wide_lr=1e-4, deep_lr=1e-3):
        super().compile(optimizer=[tf.keras.optimizers.Ftrl(wide_lr), tf.keras.optimizers.Adam(deep_lr)], loss="bce")  # expect: TAP302
""",
    # a base model from another module of the project, and a functional model compiled with a tuple
    """
import keras
from project.models import BaseModel
class WideDeep(BaseModel):
    def compile(self, loss, wide_lr, deep_lr):
        super(BaseModel, self).compile(optimizer=[keras.optimizers.Ftrl(wide_lr), keras.optimizers.Adam(deep_lr)], loss=loss)  # expect: TAP302
inputs = keras.Input((3,))
model = keras.Model(inputs, keras.layers.Dense(1)(inputs))
model.compile(optimizer=(keras.optimizers.SGD(0.1), keras.optimizers.Adam()), loss="mse")  # expect: TAP302
""",
    # an optimizer subclass written for Keras 2: `lr=` to the base, `self.lr` read
    """
import tensorflow as tf
class SPSAAdam(tf.optimizers.Adam):
    def __init__(self, lr=0.01, delta=0.01):
        super(SPSAAdam, self).__init__(lr=lr)  # expect: TAP302
        self.delta = delta
    def step_size(self):
        return self.lr * self.delta  # expect: TAP302
""",
    # OptimizerV2's hooks on a Keras 3 optimizer: never called
    """
import tensorflow as tf
class Langevin(tf.optimizers.Optimizer):  # expect: TAP302
    def _create_slots(self, var_list):
        pass
    def _resource_apply_dense(self, grad, var):
        return var.assign_sub(self.learning_rate * grad)
""",
    # TensorFlow's short name is the Keras class itself
    """
import tensorflow as tf
opt = tf.optimizers.Adam(lr=1e-3)  # expect: TAP302
""",
    # saving where Keras 3 refuses: a model from a builder, handed to a trainer; a callback's path
    """
import os
import tensorflow as tf
def build():
    return tf.keras.Sequential([tf.keras.layers.Dense(1)])
class Trainer:
    def __init__(self, model, folder):
        self.model = model
        self.folder = folder
    def end_epoch(self, epoch):
        self.model.save_weights(os.path.join(self.folder, f"epoch_{epoch}.h5"))  # expect: TAP302
        self.model.save(os.path.join(self.folder, "exported"))  # expect: TAP302
checkpoint_path = "training_1/cp.ckpt"
callback = tf.keras.callbacks.ModelCheckpoint(checkpoint_path, save_weights_only=True)  # expect: TAP302
trainer = Trainer(build(), "runs")
trainer.model.load_weights(checkpoint_path)  # expect: TAP302
for step in range(3):
    trainer.model.save_weights(f"runs/cp-{step:04d}")  # expect: TAP302
""",
    # `lr` of a model's optimizer in a callback, and a generator method of a loaded model
    """
import keras
class Halve(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        self.model.optimizer.lr = self.model.optimizer.learning_rate / 2  # expect: TAP302
model = keras.models.load_model("m.keras")
model.fit_generator(batches, epochs=3)  # expect: TAP302
keras.backend.set_value(model.optimizer.lr, 0.1)  # expect: TAP302
""",
    # through a module alias, and a metric made in another module
    """
import tensorflow as tf
K = tf.keras.backend
K.set_learning_phase(1)  # expect: TAP302
""",
    """
import tensorflow as tf
class Trainer:
    def __init__(self, model):
        self.model = model
        self.optimizer = tf.keras.optimizers.SGD(lr=0.01)  # expect: TAP302
    def end_epoch(self):
        for metric in self.model.metrics:
            metric.reset_states()  # expect: TAP302
""",
    """
from tensorflow.keras.optimizers import legacy
opt = legacy.Adam(1e-3)  # expect: TAP302
""",
    # `minimize` of a TF 2 guide: Keras 3 optimizers have no such method
    """
import tensorflow as tf
w = tf.Variable(2.0)
opt = tf.keras.optimizers.SGD(learning_rate=0.1)
for _ in range(10):
    opt.minimize(lambda: w * w, var_list=[w])  # expect: TAP302
""",
    # a time-decay written for Keras 2: ignored by Keras 3, the rate stays 0.01
    """
import tensorflow as tf
class Trainer:
    def __init__(self, model, base_lr=0.01):
        self.model = model
        self.optimizer = tf.keras.optimizers.SGD(base_lr, momentum=0.9, decay=1e-4)  # expect: TAP302
""",
    # Keras modules bound to names by assignment, used in a trainer class
    """
import tensorflow as tf
metrics = tf.keras.metrics
optimizers = tf.keras.optimizers
class Tracker:
    def __init__(self):
        self.loss = metrics.Mean(name="loss")
        self.opt = optimizers.Adam(lr=1e-3)  # expect: TAP302
    def reset(self):
        self.loss.reset_states()  # expect: TAP302
""",
]


LEARNING_PHASE = frozenset(
    f"{root}backend.set_learning_phase" for root in ("keras.", "tensorflow.keras.", "tensorflow.compat.v1.keras.")
)


def _is_metric(facts, receiver, call, metrics) -> bool:
    if receiver in metrics:
        return True
    if "." not in receiver:
        imported = model_of(facts).imported_assign(receiver)  # a metric made in another module
        if imported is not None and imported.value is not None and is_keras_class(imported.value.callee, "metrics"):
            return True
    for assign in facts.reaching_assigns(receiver, call.site):
        iterable = assign.value
        if assign.kind != "for" or iterable is None:
            continue
        if iterable.text.endswith("metrics") or iterable.text.endswith("metrics_list"):
            return True
        if iterable.kind in ("list", "tuple") and flatten(iterable) and all(e.text in metrics for e in flatten(iterable)):
            return True
    return False


# A model's methods Keras 3 removed, and what to call instead.
GENERATOR_METHODS = {
    "fit_generator": "`fit` (it takes generators and `tf.data` datasets)",
    "evaluate_generator": "`evaluate` (it takes generators and `tf.data` datasets)",
    "predict_generator": "`predict` (it takes generators and `tf.data` datasets)",
    "predict_classes": "`np.argmax(model.predict(x), axis=-1)` (or `> 0.5` for one sigmoid output)",
    "predict_proba": "`predict`",
}
# The endings Keras 3 accepts: saving weights, saving a model, loading weights.
WEIGHTS_FILE = (".weights.h5",)
MODEL_FILE = (".keras", ".h5")
LOADABLE = (".weights.h5", ".keras", ".h5")
PATH_JOINS = frozenset({"os.path.join", "posixpath.join"})


def _path(pm, call, expr, depth: int = 0):
    """What is known of a path argument of `call`: (text, whole, last, line), or None.

    `text` is the whole path when `whole`, else what follows the last `{...}` of an f-string
    (`last`: the dotted name inside it, "" for another expression); `line`: where a name was
    bound to it (None: written in the call). A name counts when one binding of it reaches the
    call; `os.path.join(...)` by its last argument."""
    if expr is None or depth > 4:
        return None
    if expr.kind == "constant" and isinstance(expr.value, str):
        return expr.value, True, "", None
    if expr.kind == "fstring" and expr.value:
        return expr.value, expr.method == "literal", expr.receiver, None
    if expr.kind in ("name", "attribute") and expr.text:
        assigns = pm.assigns_of(expr.text, call.site)
        if len(assigns) != 1 or assigns[0].kind != "assign" or assigns[0].value is None:
            return None
        value = assigns[0].value
        if value.kind == "call":
            found = _joined(pm, pm.value_call(assigns[0]), depth + 1)
        else:
            found = _path(pm, call, value, depth + 1)
        return found if found is None or found[3] is not None else (*found[:3], assigns[0].site.line)
    if expr.kind == "call" and expr.func_text:
        span = call.span_of(expr)
        return _joined(pm, pm.call_at(span, expr) if span is not None else None, depth + 1)
    return None


def _joined(pm, joined, depth: int):
    """The path an `os.path.join(...)` call makes, by its last part (see `_path`), or None."""
    if joined is None or pm.resolved(joined.func.text, joined.site) not in PATH_JOINS or not joined.args:
        return None
    if len(joined.arg_spans) != len(joined.args):
        return None  # `*parts` or keywords: not one plain list of parts
    return _path(pm, joined, joined.args[-1], depth)


def _refused(path, endings) -> bool:
    """Whether Keras 3 refuses the path: it ends in none of `endings`. An f-string whose text after
    its last `{...}` could finish one of them (`{name}.h5` for `.weights.h5`) is not judged unless
    that `{...}` is a plain name with nothing of "weight" in it."""
    text, whole, last, _ = path
    if any(text.endswith(ending) for ending in endings):
        return False
    if whole:
        return True
    if any(ending.endswith(text) for ending in endings):
        return text.startswith(".") and bool(last) and "weight" not in last.lower()
    return True


def _shown(path) -> str:
    text, whole, _, line = path
    where = f" (set at line {line})" if line is not None else ""
    return f"`{text!r}`{where}" if whole else f"a path ending in `{text}`{where}"


def _keras_optimizer_at(facts, model, call) -> bool:
    """Every binding that may reach the receiver here makes a Keras optimizer (where none is
    known, every binding of that name in the file does). A name is not a type: the same name
    bound elsewhere to a `tf.compat.v1.train` optimizer, which has `minimize`, says nothing."""
    assigns = model.assigns_of(call.receiver, call.site) or [a for a in facts.assigns if a.target == call.receiver]
    for a in assigns:
        value = a.value
        if a.kind != "assign" or value is None or value.kind != "call" or not value.func_text:
            return False
        callee = model.resolved(value.func_text, a.site)
        if not is_keras_class(callee, "optimizers") or _is_legacy(callee):
            return False
    return bool(assigns)


def _is_legacy(callee: str) -> bool:
    return ".optimizers.legacy." in f"{callee}." and is_keras_class(callee, "optimizers")


# OptimizerV2's hooks: Keras 3 optimizers call `build` and `update_step`, never these.
OPTIMIZER_V2_HOOKS = ("_resource_apply_dense", "_resource_apply_sparse", "_create_slots", "_prepare_local")


def _optimizer_v2_hooks(facts, model):
    """A subclass of a Keras 3 optimizer that implements OptimizerV2's hooks and not `update_step`:
    Keras 3 never calls them (the base `Optimizer` raises NotImplementedError with an empty
    message; a concrete base such as `SGD` runs its own update instead, silently)."""
    first = {}  # class scope -> its first hook's def: one finding per class
    for assign in facts.assigns:
        if assign.kind == "def" and assign.target in OPTIMIZER_V2_HOOKS:
            first.setdefault(facts.scope_of(assign.site), assign)
    for scope, assign in first.items():
        name = assign.target
        klass = facts.blocks[scope]
        if klass.kind != "class":
            continue
        bases = [base for cls in model.bases(klass) for base in cls.bases]
        keras = [base for base in bases if is_keras_class(base, "optimizers") and not _is_legacy(base)]
        if not keras or model.method_of_block(klass, "update_step") is not None:
            continue
        abstract = keras_member(keras[0], "optimizers") == "Optimizer"
        made = next((a for a in facts.assigns if a.kind == "def" and a.target == klass.name
                     and a.site.line == klass.line), assign)
        yield _with(report(
            facts, made.site, CODE,
            f"`{klass.name}` subclasses a Keras 3 optimizer but implements `{name}` (line {assign.site.line}), "
            "an OptimizerV2 hook: Keras 3 optimizers never call it (they call "
            "`build` and `update_step`), so " + (
                "the first `apply_gradients` raises NotImplementedError, with an empty message"
                if abstract else f"the base class's own update runs instead, silently"),
            "Implement `build(self, variables)` and `update_step(self, gradient, variable, learning_rate)`; "
            "or, for Keras 2, subclass `tf.keras.optimizers.legacy.Optimizer`.",
        ), "optimizer-v2-hooks", None)


def check(facts):
    return _check(facts, model_of(facts))


def _compiles_optimizer_list(model, facts, call) -> bool:
    """`compile(optimizer=[...])` (a list or tuple literal, by keyword or first by position) on
    what is known to be a Keras model: a name holding one, `self` in a Model subclass, or
    `super().compile` there (or in a class deriving from an imported class, when the list
    builds Keras optimizers). A class of the file that defines its own `compile` is its own API."""
    if call.method != "compile" and not (call.func.kind == "super" and call.func.method == "compile"):
        return False
    given = call.arg(0, "optimizer")
    if given is None or given.kind not in ("list", "tuple"):
        return False
    if call.func.kind == "super":
        fn = model.functions.get(facts.scope_of(call.site))
        if fn is None or fn.owner is None:
            return False
        if model.is_model_class(fn.owner):
            return True
        # a base from another module (`class WideDeep(BaseModel)`): Keras optimizers in the list say it
        return (any(model.local_class(base) is None for base in fn.owner.bases)
                and any(item.kind == "call" and is_keras_class(model.resolved(item.func_text, call.site), "optimizers")
                        for item in given.elements if item.func_text))
    klass = model.self_class(call.receiver, call.site)
    if klass is not None:
        return model.is_model_class(klass) and all(
            model.method_of_block(cls, "compile") is None for cls in model.bases(klass))
    return model.holds_a_model(call.receiver, call.site)


def _check(facts, model):
    metrics = metric_bindings(facts)
    yield from _optimizer_v2_hooks(facts, model)
    optimizers = {}  # name -> whether a legacy optimizer is bound to it (any binding)
    for a in facts.assigns:
        if a.value is not None and a.value.kind == "call" and a.value.func_text:
            callee = model.resolved(a.value.func_text, a.site)  # `optimizers.Adam()` after `optimizers = tf.keras.optimizers`
            if is_keras_class(callee, "optimizers"):
                optimizers[a.target] = optimizers.get(a.target, False) or _is_legacy(callee)
    yield from _lr_attributes(facts, model, optimizers)
    defined = {block.name for block in facts.blocks if block.kind == "function"}
    for call in facts.calls:
        callee = model.resolved(call.func.text, call.site) if call.func.text else ""  # through `K = tf.keras.backend`
        saving = _saving(facts, model, call, callee)
        if saving is not None:
            yield saving
            continue
        if call.method in GENERATOR_METHODS and (
            model.holds_a_model(call.receiver, call.site)
            or (call.method not in defined and call.receiver.partition(".")[0] not in ("self", "cls")
                and model.binding(call.receiver, call.site) is None)
        ):
            yield _with(report(
                facts, call.site, CODE,
                f"`{call.func.text}()` was removed from Keras 3 models: AttributeError",
                f"Call {GENERATOR_METHODS[call.method]}.",
            ), call.method, None)
            continue
        if _compiles_optimizer_list(model, facts, call):
            yield _with(report(
                facts, call.site, CODE,
                f"`{call.func.text or 'super().compile'}(optimizer=[...])` is given a list of optimizers; a Keras 3 "
                "model takes one: ValueError (`Could not interpret optimizer identifier`)",
                "Keep the optimizers on the model yourself (`self.optimizers = [...]`), apply each part's "
                "gradients with its own in `train_step`, and compile with one (or none).",
            ), "compile-optimizer-list", None)
            continue
        if callee in LEARNING_PHASE:
            yield _with(report(
                facts, call.site, CODE,
                f"`{call.func.text}()` was removed in Keras 3 (`keras.backend.set_learning_phase`): AttributeError",
                "Pass `training=True`/`training=False` to the model call instead.",
            ), "set_learning_phase", None)
        elif call.method == "reset_states" and _is_metric(facts, call.receiver, call, metrics):
            yield _with(report(
                facts, call.site, CODE,
                f"`{call.receiver}.reset_states()` was removed from Keras 3 metrics: AttributeError",
                f"Call `{call.receiver}.reset_state()`.",
            ), "reset_states", None)
        elif _is_legacy(callee):
            yield _with(report(
                facts, call.site, CODE,
                f"`{call.func.text}`: Keras 3 has no legacy optimizers: building one raises ImportError, "
                'and a `hasattr(tf.keras.optimizers, "legacy")` guard does not help (the stub module exists)',
                "Use the optimizer of the same name in `keras.optimizers`.",
            ), "legacy-optimizer", None)
        elif ((is_keras_class(callee, "optimizers") and not _is_legacy(callee))
              or (call.func.kind == "super" and call.func.method == "__init__"
                  and _optimizer_class(model, call.site) is not None)) and "lr" in call.keywords:
            yield _with(report(
                facts, call.site, CODE,
                "Keras 3 optimizers reject `lr=`: ValueError: Argument(s) not recognized",
                "Pass `learning_rate=` instead.",
            ), "lr", KERAS2_IGNORES_LR)
        elif is_keras_class(callee, "optimizers") and "decay" in call.keywords:
            yield _with(report(
                facts, call.site, CODE,
                "Keras 3 optimizers ignore `decay=`: they log a warning and train at a constant learning rate",
                "Pass a schedule instead: `decay=d` stood for `lr / (1 + d * step)`, which is "
                "`learning_rate=keras.optimizers.schedules.InverseTimeDecay(lr, decay_steps=1, decay_rate=d)`.",
            ), "decay", None)  # Keras 2's new optimizers (2.11+): not measured here, silent
        elif call.method == "minimize" and call.receiver in optimizers and not optimizers[call.receiver] \
                and _keras_optimizer_at(facts, model, call):
            yield _with(report(
                facts, call.site, CODE,
                f"`{call.receiver}.minimize()` was removed from Keras 3 optimizers: AttributeError",
                "Compute the loss under `tf.GradientTape`, then "
                f"`{call.receiver}.apply_gradients(zip(tape.gradient(loss, variables), variables))`.",
            ), "minimize", None)  # Keras 2 optimizers have it
        elif call.method == "get_gradients" and call.receiver in optimizers:
            yield _with(report(
                facts, call.site, CODE,
                f"`{call.receiver}.get_gradients()` was removed from Keras 3 optimizers",
                "Compute gradients with `tf.GradientTape` and pass them to `apply_gradients`.",
            ), "get_gradients", None if optimizers[call.receiver] else KERAS2_NO_GET_GRADIENTS)


def _saving(facts, model, call, callee):
    """A finding for saving or loading to a path Keras 3 refuses, or None."""
    if keras_member(callee, "callbacks") == "ModelCheckpoint":
        weights_only = call.keywords.get("save_weights_only")
        if weights_only is not None and not isinstance(weights_only.value, bool):
            return None  # not a literal True/False
        only = weights_only is not None and weights_only.value
        path = _path(model, call, call.arg(0, "filepath"))
        endings = WEIGHTS_FILE if only else MODEL_FILE
        if path is None or not _refused(path, endings):
            return None
        need = "`.weights.h5` (with `save_weights_only=True`)" if only else "`.keras` (or `.h5`)"
        return _with(report(
            facts, call.site, CODE,
            f"`ModelCheckpoint` of {_shown(path)}: Keras 3 needs a file name ending in {need}: "
            "ValueError when the callback is made",
            "Name the file `....weights.h5` to save weights, `....keras` to save the model "
            "(`{epoch}` may stay in the name).",
        ), "checkpoint-path", None)
    method = call.method
    if method not in ("save_weights", "save", "load_weights") or not model.holds_a_model(call.receiver, call.site):
        return None
    save_format = call.keywords.get("save_format")
    if method == "save" and save_format is not None:
        if save_format.kind == "constant" and not save_format.value:
            return None  # `save_format=None`: not given
        path = _path(model, call, call.arg(0, "filepath"))
        if path is None or not _refused(path, MODEL_FILE):
            return None  # to a `.keras`/`.h5` file Keras 3 only warns; an unknown path: cannot tell
        return _with(report(
            facts, call.site, CODE,
            f"`{call.func.text}(..., save_format=...)`: Keras 3 removed `save_format`: ValueError",
            "Save to a file ending in `.keras`; for a TensorFlow SavedModel call `model.export(path)`.",
        ), "save-format", None)
    path = _path(model, call, call.arg(0, "filepath"))
    endings = {"save_weights": WEIGHTS_FILE, "save": MODEL_FILE, "load_weights": LOADABLE}[method]
    if path is None or not _refused(path, endings):
        return None
    if method == "save_weights":
        message = (f"`{call.func.text}()` to {_shown(path)}: Keras 3 saves weights only to a file whose "
                   "name ends in `.weights.h5` (no TensorFlow checkpoints, no plain `.h5`): ValueError")
        hint = "Name the file `....weights.h5`; for a TensorFlow checkpoint use `tf.train.Checkpoint(model=model).save(path)`."
    elif method == "save":
        message = (f"`{call.func.text}()` to {_shown(path)}: Keras 3 saves a model only to a `.keras` "
                   "(or `.h5`) file, not a SavedModel folder: ValueError")
        hint = "Save to `....keras`; for a TensorFlow SavedModel call `model.export(path)`."
    else:
        message = (f"`{call.func.text}()` of {_shown(path)}: Keras 3 loads weights only from `.weights.h5`, "
                   "`.keras` or `.h5` files, not TensorFlow checkpoints: ValueError")
        hint = "Load the `....weights.h5` file the model saved; for a checkpoint use `tf.train.Checkpoint(model=model).restore(path)`."
    return _with(report(facts, call.site, CODE, message, hint), f"{method}-path", None)


def _optimizer_class(model, site):
    """The class whose method holds `site` when it derives (through this file's classes) from a
    Keras optimizer that is not a legacy one, else None."""
    fn = model.functions.get(model.facts.scope_of(site))
    if fn is None or fn.owner is None or not fn.bound:
        return None
    bases = [base for cls in model.bases(fn.owner) for base in cls.bases]
    if any(is_keras_class(base, "optimizers") and not _is_legacy(base) for base in bases):
        return fn.owner
    return None


def _lr_receiver(model, optimizers, receiver: str, site) -> bool:
    """Whether `receiver` is a Keras (not legacy) optimizer: bound to one here, a model's
    `optimizer`, or `self` in a subclass of one that never sets or defines `lr` itself."""
    if receiver in optimizers:
        return not optimizers[receiver]
    owner, _, attribute = receiver.rpartition(".")
    if not owner and "." not in receiver:
        fn = model.functions.get(model.facts.scope_of(site))
        klass = _optimizer_class(model, site)
        return (klass is not None and fn.self_name == receiver and not model.attribute_assigns(klass, "lr")
                and model.method_of_block(klass, "lr") is None)
    return attribute == "optimizer" and bool(owner) and model.holds_a_model(owner, site)


def _feature_tested(model, site) -> bool:
    """Whether `site` is under an `if`/`else` whose test asks `hasattr(...)`/`getattr(...)`: code
    written for both Keras versions (`self.learning_rate if hasattr(self, "learning_rate") ...`)."""
    facts = model.facts
    scope = facts.scope_of(site)
    for block in facts.blocks:  # under such a test, or after one in the same function (an early return)
        if block.kind in ("if", "else") and block.test_span != (0, 0) and block.scope == scope \
                and block.line <= site.line:
            if any(call.func.text in ("hasattr", "getattr") for call in model.spans.calls_in(block.test_span)):
                return True
    return False


def _optimizer_list(model, facts, container: str, site) -> bool:
    """Whether `container` holds a list of Keras optimizers at `site`: bound only to list or
    tuple literals each of whose items builds one (`[keras.optimizers.Ftrl(...), Adam(...)]`),
    or a model's `self.optimizer` in a class that compiles itself with such a list (Keras 2)."""
    assigns = model.assigns_of(container, site)
    if assigns:
        return all(
            a.kind == "assign" and a.value is not None and a.value.kind in ("list", "tuple") and a.value.elements
            and all(item.kind == "call" and not _is_legacy(model.resolved(item.func_text, a.site))
                    and is_keras_class(model.resolved(item.func_text, a.site), "optimizers")
                    for item in a.value.elements)
            for a in assigns)
    head, _, attribute = container.partition(".")
    klass = model.self_class(head, site)
    if attribute != "optimizer" or klass is None:
        return False
    return any(_compiles_optimizer_list(model, facts, call)
               for fn in model.methods(klass) for call in model.calls_in_scope(fn.block.id))


def _item_lr_attributes(facts, model):
    """`opts[i].lr` on a list of Keras optimizers, read (AttributeError) or assigned (nothing changes)."""
    for container, attribute, site, stored in facts.item_attributes:
        if attribute != "lr" or _feature_tested(model, site) or not _optimizer_list(model, facts, container, site):
            continue
        if stored:
            yield _with(report(
                facts, site, CODE,
                f"`{container}[...].lr = ...` sets a new attribute on a Keras 3 optimizer: its learning rate "
                "does not change (no error, no warning)",
                f"Assign `{container}[...].learning_rate = ...`.",
            ), "lr-attribute", None)
        else:
            yield _with(report(
                facts, site, CODE,
                f"`{container}[...].lr`: Keras 3 optimizers have no `lr` attribute: AttributeError",
                f"Read `{container}[...].learning_rate`.",
            ), "lr-attribute", None)


def _lr_attributes(facts, model, optimizers):
    """`opt.lr` read (AttributeError) or assigned (a new attribute: the rate does not change)."""
    yield from _item_lr_attributes(facts, model)
    read_lines = set()
    for use in facts.uses:
        if ".lr" not in use.name:
            continue  # no part after the first is `lr` (asked before the split: most names are not)
        parts = use.name.split(".")
        if "lr" not in parts[1:] or _feature_tested(model, use.site):
            continue
        receiver = ".".join(parts[:parts.index("lr", 1)])
        if (use.site.line, receiver) in read_lines or not _lr_receiver(model, optimizers, receiver, use.site):
            continue
        read_lines.add((use.site.line, receiver))
        yield _with(report(
            facts, use.site, CODE,
            f"`{receiver}.lr`: Keras 3 optimizers have no `lr` attribute: AttributeError",
            f"Read `{receiver}.learning_rate` (assign to it, or call `{receiver}.learning_rate.assign(x)`).",
        ), "lr-attribute", None)
    for assign in facts.assigns:
        if not assign.target.endswith(".lr"):
            continue  # its last part is not `lr`
        receiver, _, attribute = assign.target.rpartition(".")
        if attribute != "lr" or not receiver or assign.kind not in ("assign", "augassign"):
            continue
        if (assign.site.line, receiver) in read_lines or not _lr_receiver(model, optimizers, receiver, assign.site):
            continue
        yield _with(report(
            facts, assign.site, CODE,
            f"`{receiver}.lr = ...` sets a new attribute on a Keras 3 optimizer: its learning rate "
            "does not change (no error, no warning)",
            f"Assign `{receiver}.learning_rate = ...`.",
        ), "lr-attribute", None)

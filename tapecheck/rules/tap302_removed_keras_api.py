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
- `keras.backend.set_learning_phase(...)` (pass `training=` to the model).

## Why is this bad?
Each one fails only when the line runs: `AttributeError: 'Mean' object has no
attribute 'reset_states'` at the end of the first epoch, after the first
epoch's training time is spent; `ValueError: Argument(s) not recognized:
{'lr': ...}` when the optimizer is built. `decay=` fails silently instead: Keras 3
logs "Argument `decay` is no longer supported and will be ignored" and trains at
a constant learning rate. Building a legacy optimizer raises
`ImportError`, and a `hasattr(tf.keras.optimizers, "legacy")` guard does not
help: Keras 3 keeps a `legacy` stub module whose optimizers only raise.

## Keras 2 projects
With `keras-version = "2"` in `[tool.tapecheck]` (or when not set, for a project
that imports `tf_keras` or mentions `TF_USE_LEGACY_KERAS`), the APIs Keras 2 has
are not reported: `reset_states()`, legacy optimizers (and `lr=` or
`get_gradients` on them). `lr=` given to a Keras 2 optimizer of TensorFlow 2.11
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

from tapecheck.lint.model import model_of
from tapecheck.rules._common import flatten, is_keras_class, metric_bindings, report

CODE = "TAP302"
NAME = "removed-keras-api"
SUMMARY = "a call Keras 3 removed (`reset_states()`, `lr=`, `decay=`, legacy optimizers)"
PROBE = False
FIXABLE = True


LR_KEYWORD = re.compile(rb"\blr\s*=")
DECAY_KEYWORD = re.compile(rb"\bdecay\s*=")  # not `weight_decay=`, which Keras 3 has

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


def screen(source: bytes) -> bool:
    """`reset_states`, `get_gradients`, or an optimizer given `lr`/`decay`, asked to `minimize` or
    taken from `legacy`."""
    if b"reset_states" in source or b"get_gradients" in source or b"set_learning_phase" in source:
        return True
    return b"optimizers" in source and (
        b"legacy" in source or b"minimize" in source
        or LR_KEYWORD.search(source) is not None or DECAY_KEYWORD.search(source) is not None
    )


VALID = [
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
]

INVALID = [
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


def _is_legacy(callee: str) -> bool:
    return ".optimizers.legacy." in f"{callee}." and is_keras_class(callee, "optimizers")


def check(facts):
    metrics = metric_bindings(facts)
    model = model_of(facts)
    optimizers = {}  # name -> whether a legacy optimizer is bound to it (any binding)
    for a in facts.assigns:
        if a.value is not None and a.value.kind == "call" and a.value.func_text:
            callee = model.resolved(a.value.func_text, a.site)  # `optimizers.Adam()` after `optimizers = tf.keras.optimizers`
            if is_keras_class(callee, "optimizers"):
                optimizers[a.target] = optimizers.get(a.target, False) or _is_legacy(callee)
    for call in facts.calls:
        callee = model.resolved(call.func.text, call.site) if call.func.text else ""  # through `K = tf.keras.backend`
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
        elif is_keras_class(callee, "optimizers") and "lr" in call.keywords:
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
        elif call.method == "minimize" and call.receiver in optimizers and not optimizers[call.receiver]:
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

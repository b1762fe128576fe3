'''# TAP702 loss-arguments-reversed

## What it does
Flags a Keras loss called with the model's prediction first and the labels second:
`loss_fn(predictions, labels)`. Keras losses take `(y_true, y_pred)`, the other way
round from PyTorch's `(input, target)`. It looks at:

- the `keras.losses` classes and functions whose two arguments play different
  roles (the cross-entropies, focal cross-entropies, KL divergence, Poisson, the
  hinge losses, MAPE), called in place or through a name that holds an instance;
  `keras.backend`/`keras.ops` cross-entropies (`target, output`); the
  `tf.nn.*_cross_entropy_with_logits` ops given both by position (`labels, logits`);
- `model.compiled_loss(y, y_pred)` and Keras's `compute_loss(x, y, y_pred)`.

The prediction is known by one of two kinds of evidence: the first argument is
the output of a model of the file (`model(x)`, `self(x)`, `model.predict(x)`, in
place or through the one binding of a name) while the second is plainly data (made
from parameters, loop targets and TensorFlow ops, or a `tf.ones_like`/`zeros_like`);
or the first argument is named as a prediction (`pred`, `preds`, `predictions`,
`logits`, `y_pred`, `y_hat`, `probs`, or ending so: `fake_logits`) and the second as
labels (`y`, `labels`, `y_true`, `targets`, `gt`, or ending so).

## Why is this bad?
The loss is computed with the roles of the two tensors swapped, and what happens
depends on the loss. Measured on TensorFlow 2.21 (a binary classifier on 512
points, 200 Adam steps): with `BinaryCrossentropy(from_logits=True)` the labels are
read as logits and the model's logits as targets, so the loss has no minimum (it
ends at -89) and training never learns the negatives: accuracy 0.45, a true
cross-entropy of 22.6, against 1.00 and 0.026 the right way round. With a
probability `BinaryCrossentropy` the model still moves the right way, but the loss
it reports is that of clipped labels, 0.26 where the true cross-entropy is 0.019:
anything that compares or schedules on it (early stopping, choosing the worst
augmentation, attributions) reads a wrong number. `SparseCategoricalCrossentropy`
swapped raises `ValueError: Argument output must have rank (ndim) target.ndim - 1`,
an error about ranks far from its cause. A GAN's `bce(fake_logits, tf.zeros_like(fake_logits))`
with `from_logits=True` has a zero gradient: the discriminator never learns on fakes.

## Example
```python
import tensorflow as tf

model = tf.keras.Sequential([tf.keras.layers.Dense(64, activation="relu"), tf.keras.layers.Dense(10)])
loss_object = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
optimizer = tf.keras.optimizers.Adam()

@tf.function
def train_step(images, labels):
    with tf.GradientTape() as tape:
        predictions = model(images, training=True)
        loss = loss_object(predictions, labels)
    gradients = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(gradients, model.trainable_variables))
```

## Use instead
```python
import tensorflow as tf

model = tf.keras.Sequential([tf.keras.layers.Dense(64, activation="relu"), tf.keras.layers.Dense(10)])
loss_object = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
optimizer = tf.keras.optimizers.Adam()

@tf.function
def train_step(images, labels):
    with tf.GradientTape() as tape:
        predictions = model(images, training=True)
        loss = loss_object(labels, predictions)
    gradients = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(gradients, model.trainable_variables))
```

## Where it stays silent
Losses whose value does not change when the arguments swap (mean squared and
absolute error, Huber, log-cosh, cosine similarity, MSLE); arguments given by
keyword (`y_true=`, `labels=`); a callee that is not visibly a Keras loss (a
function of the project, a parameter, a loss object of another module: its own
signature decides); two model outputs (distillation, `kld(teacher(x), student(x))`);
a second argument made by a call that is not a TensorFlow op (it may be a
prediction too); a first argument named as labels.
'''

from __future__ import annotations

from tapecheck.model import keras_member, model_of
from tapecheck.rules._common import report

CODE = "TAP702"
NAME = "loss-arguments-reversed"
SUMMARY = "a Keras loss called as (prediction, labels): Keras losses take (y_true, y_pred)"
TRIGGERS = (b"rossentropy", b"ross_entropy", b"Divergence(", b"divergence(", b"kld(", b"KLD(", b"inge(",
            b"oisson(", b"ercentageError(", b"percentage_error(", b"mape(", b"MAPE(", b"compiled_loss",
            b"compute_loss")

# the Keras losses whose value changes when y_true and y_pred swap
ASYMMETRIC_CLASSES = frozenset({
    "BinaryCrossentropy", "CategoricalCrossentropy", "SparseCategoricalCrossentropy",
    "BinaryFocalCrossentropy", "CategoricalFocalCrossentropy", "KLDivergence", "Poisson", "Hinge",
    "SquaredHinge", "CategoricalHinge", "MeanAbsolutePercentageError",
})
ASYMMETRIC_FUNCTIONS = frozenset({
    "binary_crossentropy", "categorical_crossentropy", "sparse_categorical_crossentropy",
    "binary_focal_crossentropy", "categorical_focal_crossentropy", "kl_divergence", "kld", "KLD",
    "kullback_leibler_divergence", "poisson", "hinge", "squared_hinge", "categorical_hinge",
    "mean_absolute_percentage_error", "mape", "MAPE",
})
BACKEND_FUNCTIONS = frozenset({"binary_crossentropy", "categorical_crossentropy", "sparse_categorical_crossentropy",
                               "binary_focal_crossentropy", "categorical_focal_crossentropy"})
TF_LOGITS_LOSSES = frozenset({
    "tensorflow.nn.softmax_cross_entropy_with_logits", "tensorflow.nn.sparse_softmax_cross_entropy_with_logits",
    "tensorflow.nn.sigmoid_cross_entropy_with_logits", "tensorflow.nn.weighted_cross_entropy_with_logits",
})

PREDICTION_NAMES = frozenset({"pred", "preds", "prediction", "predictions", "y_pred", "ypred", "y_hat", "yhat",
                              "logits", "probs", "probabilities"})
PREDICTION_ENDINGS = ("_pred", "_preds", "_prediction", "_predictions", "_logits", "_probs")
LABEL_NAMES = frozenset({"y", "labels", "label", "y_true", "ytrue", "targets", "target", "gt", "ground_truth",
                         "y_batch", "batch_labels", "labels_batch", "one_hot_labels"})
LABEL_ENDINGS = ("_labels", "_label", "_true", "_targets", "_target", "_gt")

# ops whose result does not depend on their argument's values: labels made from a prediction's shape
LIKE_OPS = frozenset({"ones_like", "zeros_like", "fill", "full_like", "ones", "zeros", "shape"})
DATA_ROOTS = ("tensorflow.", "numpy.", "keras.ops.", "keras.utils.", "tensorflow.keras.utils.", "tf_keras.utils.")
FORWARD_PASSTHROUGH = frozenset({"squeeze", "reshape", "cast", "identity", "sigmoid", "softmax"})
MAX_DEPTH = 3

VALID = [
    # the second argument is read from self (a teacher's output may be a prediction):
    # the analysis cannot tell which side is the labels
    """
import tensorflow as tf

class Distiller:
    def __init__(self):
        self.student = tf.keras.Sequential([tf.keras.layers.Dense(10, activation="softmax")])
        self.kl = tf.keras.losses.KLDivergence()
        self.soft_targets = None

    def step(self, x):
        with tf.GradientTape() as tape:
            student_probs = self.student(x, training=True)
            teacher_probs = self.soft_targets
            loss = self.kl(student_probs, teacher_probs)
        return tape.gradient(loss, self.student.trainable_variables)
""",
    # the labels first
    """
import tensorflow as tf
model = tf.keras.Sequential([tf.keras.layers.Dense(10)])
loss_object = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
def train_step(images, labels):
    with tf.GradientTape() as tape:
        predictions = model(images, training=True)
        loss = loss_object(labels, predictions)
    return tape.gradient(loss, model.trainable_variables)
""",
    # a symmetric loss: swapping changes nothing
    """
import tensorflow as tf
model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
mse = tf.keras.losses.MeanSquaredError()
def step(x, y):
    pred = model(x)
    return mse(pred, y)
""",
    # distillation: the teacher's output is the target
    """
import tensorflow as tf
teacher = tf.keras.Sequential([tf.keras.layers.Dense(10, activation="softmax")])
student = tf.keras.Sequential([tf.keras.layers.Dense(10, activation="softmax")])
kld = tf.keras.losses.KLDivergence()
def distill(x):
    return kld(teacher(x), student(x))
""",
    # a project loss function: its own order decides
    """
import tensorflow as tf
model = tf.keras.Sequential([tf.keras.layers.Dense(10)])
def loss_fn(logits, labels):
    return tf.keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
def step(x, y):
    logits = model(x)
    return loss_fn(logits, y)
""",
    # keywords say which is which
    """
import tensorflow as tf
bce = tf.keras.losses.BinaryCrossentropy()
def d_loss(real_out, fake_out):
    return bce(y_true=tf.ones_like(real_out), y_pred=real_out) + bce(y_true=tf.zeros_like(fake_out), y_pred=fake_out)
""",
    # the second argument comes from another network: unknown, maybe a prediction
    """
import tensorflow as tf
model = tf.keras.Sequential([tf.keras.layers.Dense(10, activation="softmax")])
cce = tf.keras.losses.CategoricalCrossentropy()
def consistency(x, augment, ema_predict):
    p = model(augment(x))
    return cce(p, ema_predict(x))
""",
]

INVALID = [
    # the tutorial loop with the arguments the PyTorch way round
    """
import tensorflow as tf
model = tf.keras.Sequential([tf.keras.layers.Dense(64, activation="relu"), tf.keras.layers.Dense(10)])
loss_object = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
optimizer = tf.keras.optimizers.Adam()
def train_step(images, labels):
    with tf.GradientTape() as tape:
        predictions = model(images, training=True)
        loss = loss_object(predictions, labels)  # expect: TAP702
    gradients = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(gradients, model.trainable_variables))
""",
    # a GAN discriminator loss: the labels made from the output's shape
    """
import tensorflow as tf
bce = tf.keras.losses.BinaryCrossentropy(from_logits=True)
class GAN:
    def __init__(self):
        self.discriminator = tf.keras.Sequential([tf.keras.layers.Dense(1)])
    def d_loss(self, real, fake):
        real_logits = self.discriminator(real, training=True)
        fake_logits = self.discriminator(fake, training=True)
        real_loss = bce(real_logits, tf.ones_like(real_logits))  # expect: TAP702
        fake_loss = bce(fake_logits, tf.zeros_like(fake_logits))  # expect: TAP702
        return real_loss + fake_loss
""",
    # a loss helper with prediction and label names
    """
import tensorflow as tf
def classification_loss(logits, labels):
    return tf.reduce_mean(tf.keras.losses.binary_crossentropy(logits, labels, from_logits=True))  # expect: TAP702
""",
    # the compiled loss, in an attribution helper
    """
import tensorflow as tf
def integrated_gradients(model, inputs, labels):
    with tf.GradientTape() as tape:
        tape.watch(inputs)
        logits = model(inputs)
        loss = model.compiled_loss(logits, labels)  # expect: TAP702
    return tape.gradient(loss, inputs)
""",
]


def _last(text: str) -> str:
    return text.rsplit(".", 1)[-1].lower()


def _named_prediction(expr) -> bool:
    if expr.kind not in ("name", "attribute") or not expr.text:
        return False
    name = _last(expr.text)
    return name in PREDICTION_NAMES or name.endswith(PREDICTION_ENDINGS)


def _named_labels(expr) -> bool:
    if expr.kind not in ("name", "attribute") or not expr.text:
        return False
    name = _last(expr.text)
    return name in LABEL_NAMES or name.endswith(LABEL_ENDINGS)


def _loss_called(model, call):
    """For a call of a Keras loss whose arguments play different roles: (its name as the message says
    it, the index of y_true among the positional arguments); None otherwise."""
    func = call.func
    if func.kind == "call":  # `tf.keras.losses.BinaryCrossentropy()(p, y)`
        callee = model.resolved(func.func_text, call.site) if func.func_text else ""
        member = keras_member(callee, "losses")
        return (member, 0) if member in ASYMMETRIC_CLASSES else None
    if func.kind not in ("name", "attribute") or not func.text:
        return None
    method = call.method
    if method == "compiled_loss":
        return "compiled_loss", 0
    if method == "compute_loss":
        receiver = call.func.text.rsplit(".", 1)[0]
        if model.holds_a_model(receiver, call.site):
            return "compute_loss", 1
        return None
    callee = model.resolved(func.text, call.site)
    if callee in TF_LOGITS_LOSSES:
        return callee.rsplit(".", 1)[-1], 0
    member = keras_member(callee, "losses") or keras_member(callee, "metrics")
    if member in ASYMMETRIC_FUNCTIONS:
        return member, 0
    member = keras_member(callee, "backend") or keras_member(callee, "ops")
    if member in BACKEND_FUNCTIONS:
        return member, 0
    if member or keras_member(callee, "losses"):
        return None
    # a name holding an instance of a Keras loss class: every binding of it makes one
    names = {member for member, _ in model.loss_constructions(func.text, call.site) or ()}
    return (names.pop(), 0) if len(names) == 1 and names <= ASYMMETRIC_CLASSES else None


def _forward_call(model, facts, call, expr, depth: int = 0):
    """The model call whose output `expr` is (in place, through a pass-through op, or through the one
    binding of a name in this scope); None when that is not in view."""
    if depth > MAX_DEPTH:
        return None
    made = None
    if expr.kind == "call":
        span = call.span_of(expr)
        made = model.call_at(span, expr) if span is not None else None
    elif expr.kind == "name" and expr.text:
        reaching = facts.reaching_assigns(expr.text, call.site)
        if len(reaching) != 1 or model.guarded(reaching[0].site, facts.scope_of(call.site)):
            return None
        made = model.value_call(reaching[0])
    if made is None or made.func.kind not in ("name", "attribute") or not made.func.text:
        return None
    runner = made.func.text
    if made.method == "predict":
        runner = runner.rsplit(".", 1)[0]
    elif made.method in FORWARD_PASSTHROUGH or _last(runner) in FORWARD_PASSTHROUGH:
        callee = model.resolved(runner, made.site)
        if callee.startswith(DATA_ROOTS) and made.args:
            return _forward_call(model, facts, made, made.args[0], depth + 1)
        return None
    if runner == "self" or model.holds_a_model(runner, made.site):
        return made
    return None


def _plain_data(model, facts, call, expr, depth: int = 0) -> bool:
    """Whether `expr` is plainly data, not a prediction: names with no binding in this scope
    (parameters, globals), loop targets, unpackings, and values made from them by TensorFlow or
    NumPy ops; a `*_like` of anything."""
    if depth > MAX_DEPTH:
        return False
    if expr.kind == "constant":
        return type(expr.value) is not float  # a float (`bce(pred, 1.0)`) is not read as data, as before floats were read
    if expr.kind == "subscript":
        return True  # `batch[1]`
    if expr.kind == "attribute":
        return not expr.text.startswith("self.")  # `batch.labels`; an attribute of self may be a prediction
    if expr.kind == "name" and expr.text:
        return _name_is_data(model, facts, expr.text, call.site, depth)
    if expr.kind == "call":
        span = call.span_of(expr)
        made = model.call_at(span, expr) if span is not None else None
        return made is not None and _data_op(model, facts, made, depth + 1)
    return False


def _name_is_data(model, facts, name: str, site, depth: int) -> bool:
    """Whether every binding of `name` that reaches `site` in its scope is plain data (none: a
    parameter or a global)."""
    for assign in facts.reaching_assigns(name, site):
        if assign.kind in ("for", "param"):
            continue  # `for images, labels in dataset`
        if assign.kind != "assign" or assign.value is None:
            return False
        if assign.value.kind == "attribute" and assign.value.text.startswith("self."):
            return False  # `y = self.outputs`: as `self.outputs` itself, it may be a prediction
        if assign.value.kind in ("subscript", "attribute", "tuple"):
            continue  # `y = batch[1]`, `y = data.labels`
        if not _made_from_data(model, facts, assign, depth + 1):
            return False
    return True


def _made_from_data(model, facts, assign, depth: int) -> bool:
    value = assign.value
    if value.kind == "call":
        made = model.value_call(assign)
        return made is not None and _data_op(model, facts, made, depth)
    if value.kind == "name":
        return depth <= MAX_DEPTH and _name_is_data(model, facts, value.text, assign.site, depth)
    return value.kind == "constant" and type(value.value) is not float  # as `_plain_data`


def _data_op(model, facts, made, depth: int) -> bool:
    """A TensorFlow/NumPy op over plain data, or a `*_like` op (its values do not depend on its input)."""
    if not made.func.text:
        return False
    callee = model.resolved(made.func.text, made.site)
    if not callee.startswith(DATA_ROOTS):
        return False
    if _last(callee) in LIKE_OPS:
        return True
    arguments = list(made.args) + list(made.keywords.values())
    return all(_plain_data(model, facts, made, argument, depth) for argument in arguments)


def check(facts):
    model = model_of(facts)
    for call in facts.calls:
        if call.spread or len(call.args) < 2 or call.site.in_comprehension:
            continue
        loss = _loss_called(model, call)
        if loss is None:
            continue
        name, first = loss
        if len(call.args) < first + 2:
            continue
        given_true, given_pred = call.args[first], call.args[first + 1]
        if _named_labels(given_true) or model.expects_error(call.site.line):
            continue
        forward = _forward_call(model, facts, call, given_true)
        if forward is not None:
            if _forward_call(model, facts, call, given_pred) is not None \
                    or not _plain_data(model, facts, call, given_pred):
                continue
            if given_true.kind == "name":
                what = f"`{given_true.text}` (line {forward.site.line}: the output of `{forward.func.text}`)"
            else:
                what = f"the output of `{forward.func.text}`"
        elif _named_prediction(given_true) and _named_labels(given_pred):
            what = f"`{given_true.text}`"
        else:
            continue
        label = _text(given_pred)
        pred = _text(given_true)
        shown = "the loss" if call.func.kind == "call" else f"`{call.func.text}`"
        order = "(x, y, y_pred)" if name == "compute_loss" else "(labels, logits)" if "with_logits" in name \
            else "(y_true, y_pred)"
        yield report(
            facts, call.site, CODE,
            f"{shown} is given {what} first and `{label}` second, but {name} takes {order}: the prediction is "
            "read as the labels and the labels as the prediction, so the loss is computed with their roles "
            "swapped (a from_logits cross-entropy reads the labels as logits and stops learning, a sparse one "
            "raises a rank error, a probability one reports a wrong value)",
            f"Pass the labels first: {_fixed(call, name, first, label, pred)}.",
            details={"loss": name, "y_true": pred, "y_pred": label},
        )


def _text(expr) -> str:
    return expr.text if expr.text else "its second argument"


def _fixed(call, name: str, first: int, label: str, pred: str) -> str:
    head = "loss" if call.func.kind == "call" else call.func.text
    before = "x, " if first == 1 else ""
    more = ", ..." if len(call.args) > first + 2 or call.keywords else ""
    return f"`{head}({before}{label}, {pred}{more})`"

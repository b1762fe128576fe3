'''# TAP111 logits-probabilities-mismatch

## What it does
Flags a cross-entropy that expects probabilities given a tensor the same
function treats as logits, and one that expects logits given probabilities:

- `binary_crossentropy`, `categorical_crossentropy`,
  `sparse_categorical_crossentropy` (the `keras.losses` functions, `keras.ops` and
  `keras.backend` ones, and the `keras.losses` classes) with `from_logits` left
  False, given a tensor that the same function also hands to `tf.nn.softmax`,
  `tf.sigmoid` (any spelling) or `log_softmax`;
- the same losses given the output of a model of the project whose last layer
  is visibly a `Dense` without activation: a `Sequential([...])` literal, built
  here or returned by a builder function, that nothing `.add`s to, or a subclassed
  `Model` (of this file or one it imports) whose `call` returns `self.<layer>(...)`
  on every path, that layer being such a `Dense`;
- the same losses handed together with such a model to one call: `model.compile(loss=...)`
  (a loss object, function or name such as `"sparse_categorical_crossentropy"`), or a
  trainer's constructor given the model first and `loss=` (`EnasTrainer(net, loss=...)`,
  what a library trainer computes as `loss(y, model(x))`);
- a loss that expects logits (`from_logits=True`, `tf.nn.*_cross_entropy_with_logits`)
  given the output of an explicit `softmax` or `sigmoid`.

## Why is this bad?
With `from_logits=False` Keras reads its input as probabilities: Keras 3 clips it
to [1e-7, 1 - 1e-7] before the log (and `categorical_crossentropy` first divides
by its sum). Logits below 0 or above 1 are clipped flat, so their gradient is
zero: those pixels or classes stop training, and the ones that still train are
pushed by a wrong loss. The other way round, a softmax fed to `from_logits=True`
is squashed a second time: even a perfect prediction scores
`log(1 + (n - 1) / e)` for n classes (0.31 for two, 1.46 for ten, measured), and the
gradients are small. Nothing raises.
Measured on TensorFlow 2.21 (fixture `segmentation_logits_bce`, a two-class
per-pixel head trained on cross-entropy plus dice, 50 Adam steps): with
`binary_crossentropy` on its logits, 83% of the logits get no gradient from the
cross-entropy at the start, and training ends at a pixel accuracy of 0.936 and a
softmax cross-entropy of 0.399; the twin with `softmax_cross_entropy_with_logits`
reaches 0.985 and 0.132. A four-class `Dense` head scored with
`SparseCategoricalCrossentropy()` (fixture `classifier_linear_head_loss`) is stuck at
an accuracy of 0.508 from step 50 to step 200; with `from_logits=True` it reaches
1.000 in 100 steps. A subclassed four-class network handed to a trainer's constructor
with `loss=SparseCategoricalCrossentropy(reduction="sum")` (fixture
`search_trainer_linear_head`, 150 SGD steps) ends at an accuracy of 0.648 and a
cross-entropy of 0.95; with `from_logits=True`, 0.977 and 0.20.

## Example
```python
import tensorflow as tf

def segmentation_losses(logits, labels):
    bce = tf.reduce_mean(tf.keras.losses.binary_crossentropy(labels, logits))
    dice = dice_loss(tf.nn.softmax(logits, axis=-1), labels)
    return bce, dice
```

## Use instead
```python
import tensorflow as tf

def segmentation_losses(logits, labels):
    bce = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(labels=labels, logits=logits))
    dice = dice_loss(tf.nn.softmax(logits, axis=-1), labels)
    return bce, dice
```

## Where it stays silent
Only local evidence counts: the same name with the same binding, in the same
function, given both to the loss and to a softmax/sigmoid (not a second loss that
reads it as logits: tests compute both settings on one tensor);
or a name bound once to a `softmax`/`sigmoid` call (or that call written in place)
given to a logits loss. Silent when `from_logits` is not a literal (a setting), when
either call is under an `if`/`else`/`try` (a branch that picks one reading), for
`log_softmax` outputs given as logits (they are valid logits), and for a model's
output whose last activation the project does not show (a parameter, a functional
model, a library model, a subclassed model whose `call` may return anything but one
linear `Dense` layer's output, or binds it under an `if`, a `Sequential` given a list
built elsewhere or `.add`ed to): it may end in a softmax. A trainer is trusted to
compute `loss(y, model(x))` only when it is given the model as its first argument
and the loss as `loss=`, and is not a Keras or TensorFlow class, nor a trainer of the
project that calls a softmax or sigmoid (it may hand the loss probabilities).
'''

from __future__ import annotations

from tapecheck.model import Function, Klass, keras_member, line_at, method_of, model_of
from tapecheck.rules._common import report

CODE = "TAP111"
NAME = "logits-probabilities-mismatch"
SUMMARY = "a probability cross-entropy given logits, or a logits one given probabilities"
TRIGGERS = (b"crossentropy", b"cross_entropy", b"Crossentropy")

PROBABILITY_LOSSES = frozenset({"binary_crossentropy", "categorical_crossentropy", "sparse_categorical_crossentropy",
                                "binary_focal_crossentropy", "categorical_focal_crossentropy"})
PROBABILITY_CLASSES = frozenset({"BinaryCrossentropy", "CategoricalCrossentropy", "SparseCategoricalCrossentropy",
                                 "BinaryFocalCrossentropy", "CategoricalFocalCrossentropy"})
TF_LOGITS_LOSSES = frozenset({
    "tensorflow.nn.softmax_cross_entropy_with_logits", "tensorflow.nn.sparse_softmax_cross_entropy_with_logits",
    "tensorflow.nn.sigmoid_cross_entropy_with_logits", "tensorflow.nn.weighted_cross_entropy_with_logits",
    "tensorflow.compat.v2.nn.softmax_cross_entropy_with_logits",
    "tensorflow.compat.v2.nn.sparse_softmax_cross_entropy_with_logits",
    "tensorflow.compat.v2.nn.sigmoid_cross_entropy_with_logits",
})
# functions whose input is logits; those marked True return probabilities
ACTIVATIONS = {
    "tensorflow.nn.softmax": True, "tensorflow.math.softmax": True, "tensorflow.nn.sigmoid": True,
    "tensorflow.sigmoid": True, "tensorflow.math.sigmoid": True,
    "tensorflow.nn.log_softmax": False, "tensorflow.math.log_softmax": False, "tensorflow.math.log_sigmoid": False,
}
KERAS_ACTIVATIONS = {"softmax": True, "sigmoid": True, "log_softmax": False, "log_sigmoid": False}

VALID = [
    # a Sequential that ends in a softmax, and one whose last layer is added later
    """
import tensorflow as tf
clf = tf.keras.Sequential([tf.keras.layers.Dense(64, activation="relu"), tf.keras.layers.Dense(10, "softmax")])
net = tf.keras.Sequential([tf.keras.layers.Dense(10)])
net.add(tf.keras.layers.Softmax())
loss_fn = tf.keras.losses.SparseCategoricalCrossentropy()
def losses(x, y):
    return loss_fn(y, clf(x)), loss_fn(y, net(x))
""",
    # the logits to the logits loss, their softmax to the dice term
    """
import tensorflow as tf
def losses(logits, labels):
    ce = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(labels=labels, logits=logits))
    dice = tf.reduce_mean(tf.nn.softmax(logits) * labels)
    return ce + dice
""",
    # from_logits=True for the logits, the probabilities for the metric
    """
import tensorflow as tf
loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
def step(model, x, y):
    logits = model(x, training=True)
    probs = tf.nn.softmax(logits)
    return loss_fn(y, logits), tf.reduce_max(probs, axis=-1)
""",
    # probabilities to a probability loss
    """
import tensorflow as tf
def loss_of(logits, y):
    probs = tf.sigmoid(logits)
    return tf.keras.losses.binary_crossentropy(y, probs)
""",
    # a setting decides, and each branch reads the tensor one way
    """
import tensorflow as tf
def loss_of(out, y, from_logits):
    if from_logits:
        probs = tf.nn.softmax(out)
    else:
        probs = out
    return tf.keras.losses.categorical_crossentropy(y, probs)
""",
    # a test of both settings on one tensor
    """
import numpy as np
from keras import ops
def test_categorical_crossentropy():
    target = np.array([[0.0, 1.0], [1.0, 0.0]])
    output = np.array([[0.3, 0.6], [0.8, 0.1]])
    with_probabilities = ops.categorical_crossentropy(target, output, from_logits=False)
    with_logits = ops.categorical_crossentropy(target, output, from_logits=True)
    return with_probabilities, with_logits
""",
    # log_softmax outputs are valid logits
    """
import tensorflow as tf
def loss_of(scores, y):
    log_probs = tf.nn.log_softmax(scores)
    return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=log_probs)
""",
    # a subclassed model that applies a softmax on one path; a trainer told the outputs are logits
    """
import tensorflow as tf
class Net(tf.keras.Model):
    def __init__(self):
        super().__init__()
        self.head = tf.keras.layers.Dense(10)
    def call(self, x, training=None):
        x = self.head(x)
        if not training:
            x = tf.nn.softmax(x)
        return x
net = Net()
net.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy())
trainer = Trainer(Net(), loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
""",
    # a trainer of the project that applies the softmax itself before the loss
    """
import tensorflow as tf
class Net(tf.keras.Model):
    def __init__(self):
        super().__init__()
        self.head = tf.keras.layers.Dense(10)
    def call(self, x):
        return self.head(x)
class Trainer:
    def __init__(self, model, loss):
        self.model, self.loss = model, loss
    def step(self, x, y):
        return self.loss(y, tf.nn.softmax(self.model(x)))
net = Net()
trainer = Trainer(net, loss=tf.keras.losses.SparseCategoricalCrossentropy())
""",
    # a model output whose activation is not in view: it may end in a softmax
    """
import tensorflow as tf
def step(model, x, y):
    out = model(x)
    return tf.keras.losses.categorical_crossentropy(y, out)
""",
]

INVALID = [
    # the loss handed to a trainer beside a metric of the same class: reported at the loss
    """
import keras
from nni.nas.tensorflow.enas import EnasTrainer
class Net(keras.Model):
    def __init__(self):
        super().__init__()
        self.hidden = keras.layers.Dense(16, activation="relu")
        self.out = keras.layers.Dense(10)
    def call(self, x):
        return self.out(self.hidden(x))
net = Net()
trainer = EnasTrainer(net,
                      metrics=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      loss=keras.losses.SparseCategoricalCrossentropy())  # expect: TAP111
""",
    # a from-scratch classifier: a linear last layer, the loss object left at from_logits=False
    """
import tensorflow as tf
def build_classifier(num_classes):
    return tf.keras.Sequential([
        tf.keras.layers.Dense(64, activation="relu"),
        tf.keras.layers.Dense(num_classes),
    ])
model = build_classifier(10)
loss_object = tf.keras.losses.SparseCategoricalCrossentropy()
optimizer = tf.keras.optimizers.Adam()
def train_step(x, y):
    with tf.GradientTape() as tape:
        logits = model(x, training=True)
        loss = loss_object(y, logits)  # expect: TAP111
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss
""",
    # a subclassed network ending in a linear Dense, handed with a probability loss to a trainer
    """
import tensorflow as tf
from tensorflow.keras.losses import SparseCategoricalCrossentropy
class Net(tf.keras.Model):
    def __init__(self):
        super().__init__()
        self.fc1 = tf.keras.layers.Dense(120, activation="relu")
        self.fc2 = tf.keras.layers.Dense(10)
    def call(self, x):
        x = self.fc1(x)
        x = self.fc2(x)
        return x
net = Net()
trainer = EnasTrainer(
    net,
    loss=SparseCategoricalCrossentropy(reduction="sum"),  # expect: TAP111
    optimizer=tf.keras.optimizers.SGD(0.01),
)
""",
    # the same network compiled with a loss name that expects probabilities
    """
import tensorflow as tf
class Brain(tf.keras.Model):
    def __init__(self, actions):
        super().__init__()
        self.hidden = tf.keras.layers.Dense(32, activation="relu")
        self.logits = tf.keras.layers.Dense(actions)
    def call(self, x):
        return self.logits(self.hidden(x))
class Agent:
    def __init__(self):
        self.brain = Brain(5)
        self.brain.compile(loss="categorical_crossentropy", optimizer="adam")  # expect: TAP111
""",
    # a segmentation loss helper: the logits to binary_crossentropy, their softmax to the dice term
    """
import tensorflow as tf
def partial_losses(predict, target):
    n_classes = predict.shape[-1]
    flat_logits = tf.reshape(predict, [tf.shape(predict)[0], -1, n_classes])
    flat_labels = tf.reshape(target, [tf.shape(predict)[0], -1, n_classes])
    crossentropy = tf.reduce_mean(tf.keras.backend.binary_crossentropy(output=flat_logits, target=flat_labels))  # expect: TAP111
    dice = tf.reduce_mean(1 - tf.keras.activations.softmax(flat_logits, axis=-1) * flat_labels)
    return crossentropy, dice
""",
    # a loss object with the default from_logits, and the same tensor through a sigmoid for the metric
    """
import tensorflow as tf
class Trainer:
    def __init__(self, model):
        self.model = model
        self.loss_fn = tf.keras.losses.BinaryCrossentropy()
    def step(self, x, y):
        logits = self.model(x, training=True)
        loss = self.loss_fn(y, logits)  # expect: TAP111
        accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.round(tf.sigmoid(logits)), y), tf.float32))
        return loss, accuracy
""",
    # the reverse: a softmax given to a loss that applies one itself
    """
import tensorflow as tf
loss_fn = tf.keras.losses.CategoricalCrossentropy(from_logits=True)
def step(model, x, y):
    probs = tf.nn.softmax(model(x, training=True))
    return loss_fn(y, probs)  # expect: TAP111
""",
    """
import tensorflow as tf
def loss_of(logits, labels):
    return tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=tf.sigmoid(logits))  # expect: TAP111
""",
]


def _literal(expr):
    """True/False for a literal, None for anything else (a setting: unknown)."""
    if expr is None:
        return False
    if expr.kind in ("constant", "name") and isinstance(expr.value, bool):
        return expr.value
    return None


def _activation(model, call, callee=None):
    """For a call of a softmax/sigmoid/log_softmax: (its input expression, whether it returns
    probabilities); else None. `callee`: `model.resolved` of the called name, when known."""
    if not call.func.text:
        return None
    if callee is None:
        callee = model.resolved(call.func.text, call.site)
    probabilities = ACTIVATIONS.get(callee)
    if probabilities is None:
        member = keras_member(callee, "activations") or keras_member(callee, "ops")
        probabilities = KERAS_ACTIVATIONS.get(member)
    if probabilities is None:
        return None
    return call.arg(0, "logits" if "logits" in call.keywords else "x"), probabilities


def _loss_kind(model, call, callee=None):
    """For a cross-entropy call: (the prediction argument, "probabilities"/"logits"); else None.
    `callee`: `model.resolved` of the called name, when known."""
    func = call.func
    if func.kind == "call":  # `tf.keras.losses.BinaryCrossentropy()(y, p)`
        callee = model.resolved(func.func_text, call.site) if func.func_text else ""
        return _instance_kind(keras_member(callee, "losses") if callee else "", func.keywords, call)
    if not func.text:
        return None
    if callee is None:
        callee = model.resolved(func.text, call.site)
    if callee in TF_LOGITS_LOSSES:
        return call.arg(1, "logits"), "logits"
    member = keras_member(callee, "losses") or keras_member(callee, "metrics")
    keyword = "y_pred"
    if not member:
        member = keras_member(callee, "backend") or keras_member(callee, "ops")
        keyword = "output"
    if member in PROBABILITY_LOSSES:
        logits = _literal(call.arg(2, "from_logits"))
        if logits is None:
            return None  # a setting: unknown
        return call.arg(1, keyword), "logits" if logits else "probabilities"
    # a Keras loss object called: `loss_fn(y, p)`
    kinds = set()
    for member, value in model.loss_constructions(func.text, call.site) or ():
        found = _instance_kind(member, value.keywords, call)
        if found is None:
            return None
        kinds.add(found[1])
    if len(kinds) != 1:
        return None
    return call.arg(1, "y_pred"), kinds.pop()


def _instance_kind(member: str, keywords, call):
    """For a cross-entropy class of `keras.losses` made with a literal `from_logits`: (the prediction
    argument of `call`, "probabilities"/"logits"); else None."""
    if member not in PROBABILITY_CLASSES:
        return None
    logits = _literal(keywords.get("from_logits"))
    if logits is None:
        return None
    return call.arg(1, "y_pred"), "logits" if logits else "probabilities"


def check(facts):
    model = model_of(facts)
    by_scope: dict[int, list] = {}
    for call in facts.calls:
        if call.site.in_comprehension:
            continue
        scope = facts.scope_of(call.site)
        callee = model.resolved(call.func.text, call.site) if call.func.text else None  # asked once for both
        loss = _loss_kind(model, call, callee)
        if loss is not None and loss[0] is not None:
            by_scope.setdefault(scope, []).append(("loss", call, loss[0], loss[1]))
            continue
        activation = _activation(model, call, callee)
        if activation is not None and activation[0] is not None:
            by_scope.setdefault(scope, []).append(("activation", call, activation[0], activation[1]))
    for call in facts.calls:
        if call.keywords.get("loss") is not None or method_of(call) == "compile":
            yield from _handed_together(model, facts, call)
    for scope, events in by_scope.items():
        for kind, call, argument, expects in events:
            if kind != "loss" or model.guarded(call.site, scope):
                continue
            if expects == "probabilities":
                found = list(_logits_given(model, facts, scope, call, argument, events))
                yield from found or _linear_output_given(model, facts, scope, call, argument)
            else:
                yield from _probabilities_given(model, facts, scope, call, argument, events)


def _name(call) -> str:
    return call.func.text.rsplit(".", 1)[-1] if call.func.text else "the loss"


def _logits_given(model, facts, scope, call, argument, events):
    """A probability loss given a name that another call of the scope reads as logits."""
    if argument.kind != "name" or not argument.text:
        return
    binding = facts.reaching_assigns(argument.text, call.site)
    if not binding:
        return
    for kind, other, other_argument, _ in events:
        if other is call or other_argument.kind != "name" or other_argument.text != argument.text:
            continue
        if kind != "activation":
            continue  # a second loss reading it as logits is no evidence: tests compare both settings
        if model.guarded(other.site, scope) or facts.reaching_assigns(argument.text, other.site) != binding:
            continue
        how = f"`{_name(other)}({argument.text}...)`"
        yield report(
            facts, call.site, CODE,
            f"`{argument.text}` is given to `{_name(call)}`, which expects probabilities (`from_logits` is False), "
            f"while line {other.site.line} treats the same tensor as logits ({how}): Keras clips the input to "
            "[1e-7, 1 - 1e-7], so every logit outside that range gets no gradient and the loss is not the "
            "cross-entropy of the model's predictions",
            "Give the loss the logits with `from_logits=True` (or `tf.nn.*_cross_entropy_with_logits`), "
            "or give it the probabilities (the softmax/sigmoid of the logits).",
            details={"tensor": argument.text, "expects": "probabilities"},
        )
        return


def _probabilities_given(model, facts, scope, call, argument, events):
    """A logits loss given the output of a softmax/sigmoid (in place, or through one binding)."""
    made = None
    if argument.kind == "call":
        span = call.span_of(argument)
        inner = model.call_at(span, argument) if span is not None else None
        made = inner
    elif argument.kind == "name" and argument.text:
        binding = facts.reaching_assigns(argument.text, call.site)
        if len(binding) == 1 and binding[0].kind == "assign" and binding[0].value is not None \
                and binding[0].value.kind == "call" and not model.guarded(binding[0].site, scope):
            made = model.value_call(binding[0])
    if made is None:
        return
    activation = _activation(model, made)
    if activation is None or not activation[1]:
        return
    what = argument.text if argument.kind == "name" else "its input"
    yield report(
        facts, call.site, CODE,
        f"`{_name(call)}` expects logits, but {'`' + what + '` is' if argument.kind == 'name' else 'it is given'} "
        f"the output of `{_name(made)}` (line {made.site.line}): the loss applies its own softmax/sigmoid on top, "
        "so the probabilities are squashed twice, the loss cannot reach its minimum and its gradients are small",
        f"Give `{_name(call)}` the logits (the input of `{_name(made)}`), or use the loss with "
        "`from_logits=False` on the probabilities.",
        details={"tensor": what, "expects": "logits"},
    )


def _activates(model, call) -> bool:
    """Whether the trainer `call` makes or runs is code of the project that calls a softmax or a
    sigmoid somewhere (it may hand the loss probabilities, not the model's outputs)."""
    target = model.binding(call.func.text, call.site) if call.func.text else None
    if not isinstance(target, (Klass, Function)):
        return False
    owner, block = target.model, target.block
    return any(block.id in owner.facts.chain(c.site.block) and (_activation(owner, c) or (None, False))[1]
               for c in owner.facts.calls)


def _handed_together(model, facts, call):
    """A model and a probability loss handed to one call: `model.compile(loss=...)`, or a trainer's
    constructor given the model first and `loss=` (`EnasTrainer(net, loss=SparseCategoricalCrossentropy())`),
    when the model's last layer is visibly a `Dense` without activation."""
    if method_of(call) == "compile":
        holder = call.receiver
        loss = call.arg(1, "loss")
    else:
        callee = model.resolved(call.func.text, call.site) if call.func.text else ""
        if not callee or callee.partition(".")[0] in ("keras", "tensorflow", "tf_keras"):
            return
        if _activates(model, call):
            return
        loss = call.keywords.get("loss")
        first = call.arg(0, "model")
        holder = first.text if first is not None and first.kind in ("name", "attribute") else ""
    if loss is None or not holder:
        return
    where = call.site
    if loss.kind == "constant":
        if method_of(call) != "compile" or loss.value not in PROBABILITY_LOSSES:
            return
        what = f"`loss=\"{loss.value}\"`"
    elif loss.kind == "call":
        member = keras_member(model.resolved(loss.func_text, call.site), "losses") if loss.func_text else ""
        if member not in PROBABILITY_CLASSES or _literal(loss.keywords.get("from_logits")) is not False:
            return
        span = call.span_of(loss)  # the loss's own call, not an earlier one of the same class (a metric)
        made = model.call_at(span, loss) if span is not None else None
        where = made.site if made is not None else where
        what = f"`{member}()`"
    elif loss.kind in ("name", "attribute") and loss.text:
        resolved = model.resolved(loss.text, call.site)
        if keras_member(resolved, "losses") in PROBABILITY_LOSSES:
            what = f"`{loss.text}`"
        else:
            made = model.loss_constructions(loss.text, call.site)
            if not made or any(member not in PROBABILITY_CLASSES or _literal(value.keywords.get("from_logits")) is not False
                               for member, value in made):
                return
            what = f"`{loss.text}` (a `{made[0][0]}`)"
    else:
        return
    head = _linear_head(model, holder, call.site)
    if head is None:
        return
    dense, path = head
    to = f"`{holder}.compile`" if method_of(call) == "compile" else f"`{call.func.text}` with `{holder}`"
    yield report(
        facts, where, CODE,
        f"{what} expects probabilities (`from_logits` is False), and it is handed to {to}, whose last layer is a "
        f"`Dense` without activation ({line_at(path, dense.site.line, facts.path)}): its outputs are logits. Keras reads them as "
        "probabilities clipped to [1e-7, 1 - 1e-7], so every logit outside that range gets no gradient and the "
        "loss is not the cross-entropy of the model's predictions",
        f"Make the loss with `from_logits=True`, or end `{holder}` with a softmax/sigmoid activation.",
        details={"tensor": holder, "expects": "probabilities"},
    )


SEQUENTIAL = frozenset({"keras.Sequential", "tensorflow.keras.Sequential", "tf_keras.Sequential"})
MAX_DEPTH = 4


def _linear_output_given(model, facts, scope, call, argument):
    """A probability loss given the output of a model of this file whose last layer is visibly a
    `Dense` without activation (a `Sequential` literal, here or returned by a builder)."""
    if argument.kind == "call":
        span = call.span_of(argument)
        forward = model.call_at(span, argument) if span is not None else None
    elif argument.kind == "name" and argument.text:
        binding = facts.reaching_assigns(argument.text, call.site)
        if len(binding) != 1 or model.guarded(binding[0].site, scope):
            return
        forward = model.value_call(binding[0])
    else:
        return
    if forward is None or forward.func.kind not in ("name", "attribute") or not forward.func.text:
        return
    head = _linear_head(model, forward.func.text, forward.site)
    if head is None:
        return
    dense, path = head
    runner = forward.func.text
    given = f"`{argument.text}` (line {forward.site.line}: the output of `{runner}`)" if argument.kind == "name" \
        else f"the output of `{runner}`"
    yield report(
        facts, call.site, CODE,
        f"{given} is given to `{_name(call)}`, which expects probabilities (`from_logits` is False), but the last "
        f"layer of `{runner}` is a `Dense` without activation ({line_at(path, dense.site.line, facts.path)}): its outputs are "
        "logits. "
        "Keras reads them as probabilities clipped to [1e-7, 1 - 1e-7], so every logit outside that range gets "
        "no gradient",
        f"Pass `from_logits=True` to `{_name(call)}`, or end `{runner}` with a softmax/sigmoid activation.",
        details={"tensor": argument.text or runner, "expects": "probabilities"},
    )


def _linear_head(model, name: str, site, depth: int = 0):
    """(the `Dense(...)` call, without activation, that ends every model `name` may hold at `site`, the
    path of the file it is in); or None (unknown, another last layer, or a model of the file that
    something `.add`s to)."""
    if depth > MAX_DEPTH:
        return None
    assigns = model.assigns_of(name, site)
    if not assigns or any(a.kind != "assign" for a in assigns):
        return None
    tail = name.rsplit(".", 1)[-1]
    if any(c.method in ("add", "pop") and c.receiver.rsplit(".", 1)[-1] == tail for c in model.facts.calls):
        return None  # layers added later: the last one is not in view
    found = None
    for assign in assigns:
        made = model.value_call(assign)
        dense = _ends_linear(model, made, depth) if made is not None else None
        if dense is None:
            return None
        found = found or dense
    return found


def _linear_dense(model, call):
    """`call` when it makes a `Dense` layer without activation (none given, `None` or "linear")."""
    callee = model.resolved(call.func.text, call.site) if call.func.text else ""
    if keras_member(callee, "layers") != "Dense" or len(call.args) > 1:
        return None  # another layer; `Dense(10, "softmax")`
    activation = call.keywords.get("activation")
    if activation is not None and not (activation.kind == "name" and activation.text == "None") \
            and not (activation.kind == "constant" and activation.value == "linear"):
        return None
    return call


def _ends_linear(model, call, depth: int):
    """(the linear `Dense` call that ends the model `call` makes, the path of its file), or None."""
    callee = model.resolved(call.func.text, call.site) if call.func.text else ""
    if callee in SEQUENTIAL or keras_member(callee, "models") == "Sequential":
        layers = call.arg(0, "layers")
        if layers is None or layers.kind not in ("list", "tuple") or not layers.elements:
            return None
        last = layers.elements[-1]
        if last.kind != "call" or keras_member(last.callee, "layers") != "Dense":
            return None
        inner = [c for c in model.spans.calls_in((call.site.order, call.end_order)) if c.func.text == last.func_text]
        dense = _linear_dense(model, inner[-1]) if inner else None
        return (dense, model.facts.path) if dense is not None else None
    made = model.binding(call.func.text, call.site) if call.func.kind in ("name", "attribute") else None
    if isinstance(made, Klass):
        return _class_ends_linear(made, depth + 1)
    if not isinstance(made, Function) or made.bound or made.model is not model or call.func.kind != "name":
        return None
    returned = model.returned_calls(made)
    if not returned:
        return None
    heads = [_ends_linear(model, inner, depth + 1) for inner in returned]
    return heads[0] if all(head is not None for head in heads) else None


def _class_ends_linear(klass, depth: int):
    """For a subclassed Keras model of the project: every `return` of its `call` gives the output of
    one `self.<layer>(...)` (in place, or through the one binding of the name it returns), and every
    `self.<layer> = ...` of the class makes a `Dense` without activation (or a model that ends in one)."""
    owner = klass.model
    if depth > MAX_DEPTH or not owner.is_model_class(klass.block):
        return None
    fn = owner.method(klass, "call")
    if fn is None or not fn.bound or fn.model is not owner:
        return None
    heads = owner.returned_calls(fn)
    if heads is None:
        names = owner.returned_names(fn)
        if not names:
            return None
        heads = []
        for name, site in names:
            reaching = owner.facts.reaching_assigns(name, site)
            made = owner.value_call(reaching[0]) if len(reaching) == 1 else None
            if made is None or owner.guarded(reaching[0].site, fn.block.id):
                return None
            heads.append(made)
    found = None
    for head in heads:
        self_name, dot, attribute = head.func.text.partition(".")
        if head.func.kind != "attribute" or self_name != fn.self_name or not dot or "." in attribute:
            return None
        assigns = owner.attribute_assigns(klass.block, attribute)
        if not assigns:
            return None
        for assign, _ in assigns:
            made = owner.value_call(assign)
            if made is None:
                return None
            dense = _linear_dense(owner, made)
            ends = (dense, owner.facts.path) if dense is not None else _ends_linear(owner, made, depth + 1)
            if ends is None:
                return None
            found = found or ends
    return found

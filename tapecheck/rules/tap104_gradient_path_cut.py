'''# TAP104 gradient-path-cut

## What it does
Follows the values computed inside a tape's `with` block from the sources (the
model, the variables asked for) to the gradient target (the loss). It flags the
place where every path is cut by an operation that has no gradient: `.numpy()`,
a NumPy call (`np.mean`, `np.array`...), `float()`, `int()`, `round()`, a
comparison (`pred > 0.5`, a hard mask), `tf.cast` to an integer or boolean
dtype, `argmax`/`argmin`/`round`/`floor`/`ceil`, or a Python `if` on a tensor
that picks a constant, or `model.predict(x)` (Keras runs the model in its own
loop and returns NumPy: only where `model` is known to be a Keras model, or the
call passes a keyword only Keras's `predict` takes, such as `verbose=0`; a
`predict` method of a class of your own is followed, or left alone); and `tf.sign`, whose gradient is zero rather than None:
the weights behind it never move, and nothing warns.

The program model follows the path into the functions the tape calls: a helper
of the file or of another module of the project (`from losses import focal`), a
method through `self`, the `call` of a local Keras `Layer` or `Model`, a loss
given to `compile()` and a subclassed model trained by `fit()`. The finding is
on the line of the cut, and says how the tape reaches it; a cut in another file
is reported at the call here that leads to it.

It also flags a term of a sum (`cls_loss + reg_loss`, `loss += penalty`) that
depends on the sources only through such a cut while another term keeps them
live: a multi-head loss whose regression term goes through NumPy. Nothing fails;
that term adds a constant, and the weights only it reaches (that head) get None.
A cut factor of a product (per-example weights computed with NumPy) and a cut
term of a sum that subtracts (`target - q`, `r + gamma * q_next - q`: a TD target
computed with `predict` or NumPy) are constants by design and are not flagged. And a `keras.layers.Lambda` inside a
`Sequential([...])` (made here or by a builder function) whose function cuts
(`Lambda(lambda t: tf.round(t))`): the layers before it get None and never train;
a straight-through `t + tf.stop_gradient(tf.round(t) - t)` is clean.

A Keras layer's own weight (`add_weight`, `tf.Variable`) that reaches the output
of its `call` only through such a cut (`tf.matmul(x, tf.sign(self.kernel))`, in
`call` or a method it calls) is flagged too: whatever trains the layer, that
weight never moves. And `tf.stop_gradient` when it is the only path from the
sources to the loss (the prediction stopped instead of the target): every
gradient is None.

It stays silent when another path still carries the gradient (labels made with
`argmax`, an action sampled with `np.random.choice`, indices for `tf.gather`),
on purpose cuts beside a live path (`tf.stop_gradient` on a target, a
`Lambda(tf.stop_gradient)` freezing the layers before it, weights made with
`trainable=False` or an integer dtype), static shapes (`np.prod(x.shape)`),
`tf.experimental.numpy`, and values computed before the tape (DQN targets) or
after it (`loss.numpy()` for a progress print).

## Why is this bad?
The tape records TensorFlow operations on tensors. A NumPy array or a Python
float is a new constant with no history; an integer tensor, an `argmax` or a
branch taken by Python has no derivative. When the loss depends on the model
only through such a step, `tape.gradient` returns `None` for every variable
(or zeros), `apply_gradients` raises "No gradients provided for any variable",
and nothing in the message points at the line that cut the path.

## Example
```python
import numpy as np
import tensorflow as tf

def train_step(model, optimizer, x, y):
    with tf.GradientTape() as tape:
        probs = model(x, training=True)
        loss = np.mean((probs.numpy() - y) ** 2)
    grads = tape.gradient(loss, model.trainable_variables)  # all None
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
```

## Use instead
```python
import tensorflow as tf

def train_step(model, optimizer, x, y):
    with tf.GradientTape() as tape:
        probs = model(x, training=True)
        loss = tf.reduce_mean(tf.square(probs - y))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    print("loss", float(loss))  # after the tape: fine
```
'''

from __future__ import annotations


from dataclasses import replace

from tapecheck.model import VARIABLE_CLASSES, WEIGHT_METHODS, method_of, model_of, prefixes
from tapecheck.rules._common import compiles_a_loss, defines_call, report

CODE = "TAP104"
NAME = "gradient-path-cut"
SUMMARY = "inside the tape, every path from the sources to the loss goes through an op without gradient"
PROBE = True


def screen(source: bytes) -> bool:
    """A tape here, a loss given to `compile` (Keras records it on its own tape), or a layer's
    `call` beside a weight it makes (`add_weight`, `Variable`)."""
    if b"GradientTape" in source or compiles_a_loss(source):
        return True
    return (b"add_weight" in source or b"Variable" in source) and defines_call(source)

HINT = (
    "Keep the path from the model to the loss in TensorFlow ops that have gradients "
    "(no .numpy(), NumPy, float() or argmax); compute logging values after the tape."
)
TERM_HINT = (
    "Compute that term with TensorFlow ops on the tensors the tape recorded; if it is meant to "
    "train nothing, say so with `tf.stop_gradient`."
)
LAYER_HINT = (
    "Give the Lambda layer a function with a gradient; to round or binarise on the forward pass "
    "only, pass the gradient straight through: `x + tf.stop_gradient(tf.round(x) - x)`."
)
STOP_HINT = (
    "Keep a path from the model to the loss outside `tf.stop_gradient`: stop the target "
    "(`tf.stop_gradient(target)`), not the prediction, or do not ask this loss for gradients."
)
SOURCES = "sources"


PREDICT_HINT = (
    "Call the model itself inside the tape (`model(x, training=True)`): `.predict()` runs it in "
    "its own loop, outside the tape, and returns a NumPy array."
)


def _hint(cut) -> str:
    if cut.deliberate:
        return STOP_HINT
    return PREDICT_HINT if cut.what.endswith((".predict()`", ".predict_on_batch()`")) else HINT

VALID = [
    # a sum over a comprehension whose variable shadows a cut name outside it: the `x` summed is
    # each of `outs`, not `tf.round(out)`
    """
import tensorflow as tf
def step(model, xs, opt):
    with tf.GradientTape() as tape:
        out = model(xs, training=True)
        x = tf.round(out)
        outs = model(xs, training=True)
        loss = tf.add_n([out + x for x in outs])
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
    return x
""",
    # DQN: the target is computed from the same network without a gradient, on purpose
    """
import numpy as np
import tensorflow as tf
def train_step(model, opt, states, actions, rewards, next_states, gamma=0.99):
    with tf.GradientTape() as tape:
        targets = rewards + gamma * np.max(model.predict(next_states, verbose=0), axis=1)
        q = tf.reduce_sum(model(states, training=True) * tf.one_hot(actions, 4), axis=1)
        loss = tf.reduce_mean(tf.square(targets - q))
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
""",
    # a TD error whose bootstrap term is read through NumPy: a semi-gradient target, on purpose
    """
import tensorflow as tf
def critic_step(critic, opt, s, a, r, s2, gamma=0.99):
    with tf.GradientTape() as tape:
        q = critic([s, a], training=True)
        td = r + gamma * critic([s2, a]).numpy() - q
        loss = tf.reduce_mean(td ** 2)
    opt.apply_gradients(zip(tape.gradient(loss, critic.trainable_variables), critic.trainable_variables))
""",
    # a weight binarised with a straight-through gradient, a fixed one rounded, an integer counter
    """
import tensorflow as tf
class BinaryDense(tf.keras.layers.Layer):
    def build(self, input_shape):
        self.w = self.add_weight(shape=(input_shape[-1], 4))
        self.scale = self.add_weight(shape=(), trainable=False)
        self.seen = self.add_weight(shape=(), dtype="int64", initializer="zeros")
    def call(self, x):
        w = self.w + tf.stop_gradient(tf.sign(self.w) - self.w)
        return tf.matmul(x, w) * tf.round(self.scale) + tf.cast(self.seen, tf.float32)
class PenalizedSign(tf.keras.layers.Layer):
    # the weight's only gradient may come from the penalty it adds (if the loop reads .losses)
    def build(self, input_shape):
        self.w = self.add_weight(shape=(input_shape[-1], 4))
    def call(self, x):
        self.add_loss(tf.reduce_sum(tf.square(self.w)))
        return tf.matmul(x, tf.sign(self.w))
""",
    # stop_gradient beside a live path: a SimSiam/BYOL target, and a Lambda layer that freezes
    # the backbone on purpose (the head still trains)
    """
import tensorflow as tf
def similarity(p, z):
    return -tf.reduce_mean(tf.reduce_sum(tf.math.l2_normalize(p, -1) * tf.math.l2_normalize(tf.stop_gradient(z), -1), -1))
class SimSiam:
    def __init__(self, encoder, predictor, opt):
        self.encoder, self.predictor, self.opt = encoder, predictor, opt
    def step(self, a, b):
        with tf.GradientTape() as tape:
            za, zb = self.encoder(a, training=True), self.encoder(b, training=True)
            loss = similarity(self.predictor(za), zb) / 2 + similarity(self.predictor(zb), za) / 2
        variables = self.encoder.trainable_variables + self.predictor.trainable_variables
        grads = tape.gradient(loss, variables)
        self.opt.apply_gradients(zip(grads, variables))
def frozen(backbone):
    model = tf.keras.Sequential([backbone, tf.keras.layers.Lambda(tf.stop_gradient), tf.keras.layers.Dense(2)])
    model.compile(optimizer="adam", loss="mse")
    return model
""",
    # a Lambda layer rounding with a straight-through gradient
    """
import tensorflow as tf
from tensorflow import keras
def ste_round(t):
    return t + tf.stop_gradient(tf.round(t) - t)
model = keras.Sequential([keras.layers.Dense(4), keras.layers.Lambda(ste_round), keras.layers.Dense(1)])
opt = keras.optimizers.Adam()
def step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
""",
    # per-example weights computed through NumPy multiply the loss: constants by design;
    # a term the code means to keep constant says so with stop_gradient
    """
import numpy as np
import tensorflow as tf
def train_step(model, opt, x, y):
    with tf.GradientTape() as tape:
        pred = model(x, training=True)
        weights = tf.constant(np.exp(-np.abs(pred.numpy() - y)))
        loss = tf.reduce_mean(weights * tf.square(pred - y)) + tf.stop_gradient(tf.reduce_mean(pred))
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
""",
    # a penalty over the variables, element by element, and a NumPy copy made only to log
    """
import tensorflow as tf
def step(model, opt, x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
        loss += 1e-4 * tf.add_n([tf.nn.l2_loss(v) for v in model.trainable_variables])
        norms = [float(tf.norm(v).numpy()) for v in model.trainable_variables]
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
    return norms
""",
    # DQN: the targets come from the target network before the tape, with numpy
    """
import numpy as np
import tensorflow as tf
def dqn_step(q_net, target_net, opt, s, a, r, s2, done, gamma=0.99):
    next_q = target_net(s2).numpy()
    target = r + gamma * np.max(next_q, axis=1) * (1.0 - done)
    with tf.GradientTape() as tape:
        q = tf.reduce_sum(q_net(s) * tf.one_hot(a, 4), axis=1)
        loss = tf.reduce_mean(tf.square(target - q))
    grads = tape.gradient(loss, q_net.trainable_variables)
    opt.apply_gradients(zip(grads, q_net.trainable_variables))
""",
    # double DQN inside the tape: argmax picks the action, the value path is intact
    """
import tensorflow as tf
def ddqn_step(q_net, target_net, opt, s, a, r, s2):
    with tf.GradientTape() as tape:
        best = tf.argmax(q_net(s2), axis=1)
        next_q = tf.gather(target_net(s2), best, batch_dims=1)
        q = tf.gather(q_net(s), a, batch_dims=1)
        loss = tf.reduce_mean(tf.square(tf.stop_gradient(r + 0.99 * next_q) - q))
    grads = tape.gradient(loss, q_net.trainable_variables)
    opt.apply_gradients(zip(grads, q_net.trainable_variables))
""",
    # distillation: teacher outputs through numpy are labels, the student path is intact
    """
import numpy as np
import tensorflow as tf
def distill_step(student, teacher, opt, x, temperature=4.0):
    with tf.GradientTape() as tape:
        soft = tf.nn.softmax(np.asarray(teacher(x, training=False)) / temperature)
        logits = student(x, training=True)
        loss = tf.reduce_mean(tf.keras.losses.KLDivergence()(soft, tf.nn.softmax(logits / temperature)))
    grads = tape.gradient(loss, student.trainable_variables)
    opt.apply_gradients(zip(grads, student.trainable_variables))
""",
    # pseudo-labels by argmax (FixMatch): labels, the logits carry the gradient
    """
import tensorflow as tf
def fixmatch_step(model, opt, weak, strong):
    with tf.GradientTape() as tape:
        pseudo = tf.argmax(tf.stop_gradient(model(weak, training=True)), axis=-1)
        logits = model(strong, training=True)
        loss = tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(pseudo, logits, from_logits=True))
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
""",
    # REINFORCE: the action is sampled with numpy from the probabilities
    """
import numpy as np
import tensorflow as tf
def reinforce_step(policy, opt, state, reward):
    with tf.GradientTape() as tape:
        probs = policy(state)
        action = np.random.choice(4, p=probs.numpy()[0])
        log_prob = tf.math.log(probs[0, action])
        loss = -log_prob * reward
    grads = tape.gradient(loss, policy.trainable_variables)
    opt.apply_gradients(zip(grads, policy.trainable_variables))
    return action
""",
    # numpy on static shapes, tf.experimental.numpy, and the loss printed after the tape
    """
import numpy as np
import tensorflow as tf
import tensorflow.experimental.numpy as tnp
def step(model, opt, x, y):
    with tf.GradientTape() as tape:
        pred = model(x, training=True)
        scale = np.sqrt(float(pred.shape[-1]))
        loss = tnp.mean(tnp.square(pred - y)) / scale
        n = int(tf.shape(pred)[0])
        loss = loss / tf.cast(n, tf.float32)
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
    print("loss", loss.numpy(), "acc", np.mean(np.argmax(pred.numpy(), 1) == y))
""",
    # WGAN-GP: the gradient penalty through a nested tape
    """
import tensorflow as tf
def critic_step(critic, opt, real, fake):
    eps = tf.random.uniform([tf.shape(real)[0], 1])
    mixed = eps * real + (1.0 - eps) * fake
    with tf.GradientTape() as tape:
        with tf.GradientTape() as gp_tape:
            gp_tape.watch(mixed)
            score = critic(mixed, training=True)
        grads = gp_tape.gradient(score, mixed)
        norm = tf.sqrt(tf.reduce_sum(tf.square(grads), axis=1))
        penalty = tf.reduce_mean(tf.square(norm - 1.0))
        loss = tf.reduce_mean(critic(fake, training=True)) - tf.reduce_mean(critic(real, training=True)) + 10.0 * penalty
    opt.apply_gradients(zip(tape.gradient(loss, critic.trainable_variables), critic.trainable_variables))
""",
    # a mask from the labels, and a gate chosen by a comparison on the prediction: the values flow
    """
import tensorflow as tf
def step(model, x, y):
    with tf.GradientTape() as tape:
        pred = model(x, training=True)
        mask = tf.cast(y > 0, tf.float32)
        leaky = tf.where(pred > 0, pred, 0.01 * pred)
        loss = tf.reduce_sum(mask * tf.square(leaky - y))
    return tape.gradient(loss, model.trainable_variables)
""",
    # accuracy computed inside the tape for logging only
    """
import tensorflow as tf
def step(model, opt, x, y):
    with tf.GradientTape() as tape:
        logits = model(x, training=True)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
        acc = tf.reduce_mean(tf.cast(tf.argmax(logits, -1) == y, tf.float32))
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
    return acc
""",
]

INVALID = [
    # `predict` inside the tape: Keras runs the model outside it and returns NumPy
    """
import tensorflow as tf
class Trainer:
    def step(self, x, y):
        with tf.GradientTape() as tape:
            pred = self.model.predict(x, verbose=0)  # expect: TAP104
            loss = self.loss_fn(y, pred)
        grads = tape.gradient(loss, self.model.trainable_variables)
        self.opt.apply_gradients(zip(grads, self.model.trainable_variables))
""",
    # a layer's own weight reaches its output only through tf.sign: zero gradient, never moves
    """
import tensorflow as tf
class BinaryDense(tf.keras.layers.Layer):
    def __init__(self, units):
        super().__init__()
        self.units = units
    def build(self, input_shape):
        self.w = self.add_weight(shape=(input_shape[-1], self.units))
    def call(self, x):
        return tf.matmul(x, tf.sign(self.w))  # expect: TAP104
""",
    # stop_gradient on the prediction itself, in a trainer's helper: every gradient is None
    # ("No gradients provided for any variable" from apply_gradients)
    """
import tensorflow as tf
def smooth_targets(pred, y, eps=0.1):
    return tf.stop_gradient(pred) * eps + y * (1 - eps)  # expect: TAP104
class Trainer:
    def __init__(self, model):
        self.model = model
        self.opt = tf.keras.optimizers.SGD(0.1)
    def step(self, x, y):
        with tf.GradientTape() as tape:
            pred = self.model(x, training=True)
            loss = tf.reduce_mean(smooth_targets(pred, y) ** 2)
        grads = tape.gradient(loss, self.model.trainable_variables)
        self.opt.apply_gradients(zip(grads, self.model.trainable_variables))
""",
    # a trainer's own method (not a Keras class) picks labels from the model it keeps
    """
import tensorflow as tf
class Trainer:
    def __init__(self, model):
        self.model = model
        self.opt = tf.keras.optimizers.Adam()
    def predict_labels(self, x):
        return tf.cast(tf.argmax(self.model(x, training=True), axis=-1), tf.float32)  # expect: TAP104
    def step(self, x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(self.predict_labels(x) - y))
        grads = tape.gradient(loss, self.model.trainable_variables)
        self.opt.apply_gradients(zip(grads, self.model.trainable_variables))
""",
    # a Lambda layer that rounds, inside a Sequential: the layers before it never train
    """
import tensorflow as tf
from tensorflow import keras
model = keras.Sequential([keras.layers.Dense(4), keras.layers.Lambda(lambda t: tf.round(t)), keras.layers.Dense(1)])  # expect: TAP104
opt = keras.optimizers.Adam()
def step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
""",
    # one term of a multi-head loss through NumPy: that head never trains
    """
import numpy as np
import tensorflow as tf
def train_step(model, opt, x, y_cls, y_reg):
    with tf.GradientTape() as tape:
        logits, reg = model(x, training=True)
        cls_loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y_cls, logits))
        loss = cls_loss + tf.constant(np.mean((reg.numpy() - y_reg) ** 2))  # expect: TAP104
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
""",
    # a copy of the variables through NumPy into new variables, inside the tape
    """
import tensorflow as tf
def meta_step(model, opt, x, y):
    with tf.GradientTape() as tape:
        fast = [tf.Variable(w.numpy()) for w in model.trainable_variables]  # expect: TAP104
        loss = tf.reduce_mean(tf.square(tf.matmul(x, fast[0]) + fast[1] - y))
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
""",
    # the cut in a subclass's call, on what the base class's call (through super()) returns
    """
import tensorflow as tf
class Scores(tf.keras.layers.Layer):
    def __init__(self):
        super().__init__()
        self.dense = tf.keras.layers.Dense(3)
    def call(self, x):
        return tf.nn.softmax(self.dense(x))
class Labels(Scores):
    def call(self, x):
        return tf.cast(tf.argmax(super().call(x), axis=-1), tf.float32)  # expect: TAP104
head = Labels()
def step(x, y, opt):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(head(x) - y))
    grads = tape.gradient(loss, head.trainable_variables)
    opt.apply_gradients(zip(grads, head.trainable_variables))
""",
    # a lambda given to compile() as the loss, rounding the prediction
    """
import tensorflow as tf
model = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(1)])
model.compile(optimizer="adam", loss=lambda y_true, y_pred: tf.reduce_mean(tf.round(y_pred) - y_true))  # expect: TAP104
""",
    # a lambda kept as the loss, taking the error through NumPy
    """
import numpy as np
import tensorflow as tf
loss_fn = lambda y, p: tf.reduce_mean(np.abs(y - p))  # expect: TAP104
def train_step(model, opt, x, y):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
""",
    # tf.sign: a zero gradient, not None; the weights never move and nothing warns
    """
import tensorflow as tf
def step(model, opt, x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(tf.sign(model(x, training=True)) - y))  # expect: TAP104
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
""",
    # the cut is in a helper the tape calls: reported there, with the path
    """
import numpy as np
import tensorflow as tf
def log_cosh(error):
    return np.log(np.cosh(error))  # expect: TAP104
def robust_loss(y_true, y_pred):
    return tf.reduce_mean(log_cosh(y_pred - y_true))
def step(model, opt, x, y):
    with tf.GradientTape() as tape:
        loss = robust_loss(y, model(x, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
""",
    # a loss given to compile(): fit records it on its own tape
    """
import tensorflow as tf
def star_error(y_true, y_pred):
    return tf.reduce_mean(tf.abs(tf.round(y_pred) - y_true))  # expect: TAP104
model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
model.compile(optimizer="adam", loss=star_error)
""",
    # a subclassed model whose call rounds its output, trained by fit
    """
import keras
import tensorflow as tf
class Counter(keras.Model):
    def __init__(self):
        super().__init__()
        self.d = keras.layers.Dense(1)
    def call(self, x):
        return tf.round(self.d(x))  # expect: TAP104
net = Counter()
net.compile(optimizer="adam", loss="mse")
net.fit(features, counts, epochs=3)
""",
    # a hard mask by comparison: a bool has no gradient
    """
import tensorflow as tf
def hard_dice(y_true, y_pred):
    hard = tf.cast(y_pred > 0.5, tf.float32)  # expect: TAP104
    return 1.0 - 2.0 * tf.reduce_sum(y_true * hard) / (tf.reduce_sum(y_true + hard) + 1.0)
def step(model, x, y):
    with tf.GradientTape() as tape:
        loss = hard_dice(y, tf.sigmoid(model(x, training=True)))
    return tape.gradient(loss, model.trainable_variables)
""",
    # accuracy used as the loss
    """
import tensorflow as tf
def step(model, opt, x, y):
    with tf.GradientTape() as tape:
        logits = model(x, training=True)
        hits = tf.cast(tf.equal(tf.argmax(logits, axis=-1), y), tf.float32)  # expect: TAP104
        loss = 1.0 - tf.reduce_mean(hits)
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
""",
    # a Python float of the prediction
    """
import tensorflow as tf
w = tf.Variable(2.0)
with tf.GradientTape() as tape:
    y = w * 3.0
    loss = float(y) ** 2  # expect: TAP104
g = tape.gradient(loss, [w])
""",
    # a cast to int
    """
import tensorflow as tf
def step(model, x, target):
    with tf.GradientTape() as tape:
        count = tf.cast(model(x), tf.int32)  # expect: TAP104
        loss = tf.reduce_sum(tf.square(tf.cast(count, tf.float32) - target))
    return tape.gradient(loss, model.trainable_variables)
""",
    # a Python `if` on the prediction picks a constant loss
    """
import tensorflow as tf
def step(model, x):
    with tf.GradientTape() as tape:
        score = tf.reduce_mean(model(x))
        if score > 0.5:  # expect: TAP104
            loss = 1.0
        else:
            loss = 0.0
    return tape.gradient(loss, model.trainable_variables)
""",
    # a numpy round trip in a Keras train_step override
    """
import numpy as np
import keras
import tensorflow as tf
class Net(keras.Model):
    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            pred = self(x, training=True)
            loss = tf.constant(np.mean(np.square(pred.numpy() - y)))  # expect: TAP104
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        return {"loss": loss}
""",
]


def _tape_flow(model, tape, call, roots):
    """The flow of the gradient target from the sources, over the assignments the tape recorded."""

    def origin_of(name):
        return {SOURCES} if not roots.isdisjoint(prefixes(name)) else set()

    return model.tape_flow(tape, call, origin_of)


def _in(cut, fn_name: str, path: str) -> str:
    """"`np.log()` in `weighted_loss` (line 9)" for a cut inside a function ("line 9 of losses.py" elsewhere)."""
    return f"{cut.what} in `{cut.function or fn_name}` ({cut.at(path)})"


def _has(cut) -> str:
    if cut.deliberate:
        return "stops the gradient"
    return "has a zero gradient" if cut.zero else "has no gradient"


def _consequence(cut, gradient: str) -> str:
    if cut.zero:
        return f"{gradient} returns zeros for every variable: the weights never move, and nothing warns"
    return f"{gradient} returns None for every variable"


def _where(facts, cut, fallback):
    """The site to report: the cut itself, or, for a cut in another file, the call here that reaches it."""
    if cut.file and cut.file != facts.path:
        return cut.entry or fallback
    return cut.site


def check(facts):
    model = model_of(facts)
    reported = set()
    for call, tape in model.gradient_calls():
        target = call.arg(0, "target")
        if not tape.with_blocks or not tape.name or target is None or target.kind != "name":
            continue
        roots, _ = model.gradient_roots(call, tape)
        if not roots:
            continue
        flow = _tape_flow(model, tape, call, roots).get(target.text)
        cut = flow.only_cut(SOURCES) if flow is not None else None
        if cut is None:
            term = flow.cut_term(SOURCES) if flow is not None else None
            if term is not None and _where(facts, term, call.site) not in reported:
                reported.add(_where(facts, term, call.site))
                yield report(facts, _where(facts, term, call.site), CODE, _term_message(term, target.text, tape, call, facts.path),
                             LAYER_HINT if term.layer else TERM_HINT,
                             _details(term, facts.path, gradient_line=call.site.line, part="layer" if term.layer else "term"))
            continue
        if _where(facts, cut, call.site) in reported:
            continue
        reported.add(_where(facts, cut, call.site))
        consequence = _consequence(cut, f"`{tape.name}.gradient` (line {call.site.line})")
        if not cut.function:
            message = (
                f"{cut.what} {_has(cut)}, and `{target.text}` depends on the sources only through it: "
                + consequence
            )
        else:
            message = (
                f"{_in(cut, '', facts.path)} {_has(cut)}, and `{target.text}` depends on the sources only "
                f"through it; the tape reaches it through {cut.path(facts.path)}: " + consequence
            )
        yield report(facts, _where(facts, cut, call.site), CODE, message, _hint(cut),
                     _details(cut, facts.path, gradient_line=call.site.line))
    yield from _compiled(model, reported)
    yield from _untrainable_weights(model, reported)


def _details(cut, path: str, **where) -> dict:
    """What the finding's message says, for tools: the op, whether its gradient is zero, the call
    path from the traced scope (function, line of its call, file), and the call it explains."""
    return {
        "op": cut.what, "zero": cut.zero,
        "call_path": [[name, line, file or path] for name, line, file in cut.calls],
        **where,
    }


def _term_message(cut, target: str, tape, call, path: str) -> str:
    where = cut.what if not cut.function else _in(cut, "", path)
    if cut.layer:
        return (
            f"{where} {_has(cut)}, and it is the function of {cut.layer}: `{tape.name}.gradient` "
            f"(line {call.site.line}) gets None for every layer before it, which never trains"
        )
    through = f", which the tape reaches through {cut.path(path)}" if cut.calls else ""
    return (
        f"{where} {_has(cut)}, and one term of the sum that makes `{target}` depends on the sources only "
        f"through it{through}: that term adds a constant, so `{tape.name}.gradient` (line {call.site.line}) "
        "gets nothing from it, and the weights that only it reaches (a head, a branch) get None"
    )


def _cut_of(model, fn, origin, call, reported):
    """The cut through which `fn`'s return depends on `origin` only, and the site to report it at
    (the call here, for a cut in another file); None when there is none or it was reported."""
    summary = model.summary(fn)
    cut = summary.returns.only_cut(origin) if summary is not None else None
    if cut is None:
        return None
    if fn.model is not model and not cut.file:
        cut = replace(cut, file=fn.model.facts.path)
    site = _where(model.facts, cut, call.site)
    if site in reported:
        return None
    reported.add(site)
    return cut, site


def _compiled(model, reported):
    """Losses given to `compile` and subclassed models trained by `fit`: Keras records them on its own tape."""
    facts = model.facts
    for compile_call, fn, y_pred in model.compiled_losses():
        found = _cut_of(model, fn, y_pred, compile_call, reported)
        if found is None:
            continue
        cut, site = found
        through = f" through {cut.path(facts.path)}" if cut.calls else ""
        yield report(
            facts, site, CODE,
            f"{_in(cut, fn.qualname, facts.path)} {_has(cut)}, and the loss `{fn.qualname}` depends on `{y_pred}` only "
            f"through it{through}: `fit` runs it as the loss given to `compile` (line {compile_call.site.line}), "
            + ("every gradient is zero and the weights never move, silently" if cut.zero else
               "every gradient is None and training fails with \"No gradients provided for any variable\""),
            _hint(cut), _details(cut, facts.path, compile_line=compile_call.site.line, loss=fn.qualname),
        )
    for call in model.spans.calls:
        if method_of(call) != "fit" or not call.receiver:
            continue
        fn = model.resolve_instance_method(call.receiver, call.site, "call")
        if fn is None or not fn.bound or not model.is_keras(fn.owner):
            continue
        step = model.resolve_instance_method(call.receiver, call.site, "train_step")
        if step is not None and not _runs_call(model, step):
            continue  # fit runs the override, which never runs `call`: a cut there is not in fit's gradients
        found = _cut_of(model, fn, fn.self_name, call, reported)
        if found is None:
            continue
        cut, site = found
        yield report(
            facts, site, CODE,
            f"{_in(cut, fn.qualname, facts.path)} {_has(cut)}, and `{fn.owner.name}.call` depends on the layer's variables "
            f"only through it: `fit` (line {call.site.line}) gets None for every gradient of `{call.receiver}`",
            _hint(cut), _details(cut, facts.path, fit_line=call.site.line),
        )



def _runs_call(model, step) -> bool:
    """Whether a `train_step` override runs the model's `call`: `self(x)` or `self.call(x)` in its
    body (a cut in a `call` used only elsewhere, to make display images, is not in fit's gradients)."""
    me = step.self_name
    return bool(me) and any(c.func.text in (me, f"{me}.call", f"{me}.__call__")
                            for c in model.calls_in_scope(step.block.id))


def _weights(model, klass) -> dict[str, object]:
    """`self.<name>` weights a Keras layer makes in its own methods (`add_weight`, `tf.Variable`),
    trainable as far as the call says: name -> the assignment."""
    found: dict[str, object] = {}
    for fn in model.methods(klass):
        if not fn.self_name:
            continue
        for assign in model.assigns_in(fn.block.id):
            head, _, name = assign.target.partition(".")
            value = assign.value
            if head != fn.self_name or not name or "." in name or value is None or value.kind != "call":
                continue
            if value.method not in WEIGHT_METHODS and value.callee not in VARIABLE_CLASSES:
                continue
            trainable = value.keywords.get("trainable")
            if trainable is not None and trainable.value is not True:
                continue  # trainable=False, or a flag: not a weight that should train
            dtype = value.keywords.get("dtype")
            if dtype is not None and not ("float" in (dtype.text or str(dtype.value or ""))):
                continue  # an integer or bool weight (a counter, a mask) has no gradient to miss
            found.setdefault(name, assign)
    return found


def _untrainable_weights(model, reported):
    """A Keras layer's own weight that reaches the output of its `call` only through a cut
    (`tf.matmul(x, tf.sign(self.kernel))`): whatever trains the layer, that weight never moves."""
    facts = model.facts
    penalized = None  # classes whose methods call add_loss: a penalty may train the weight another way
    for klass in model.classes.values():
        if not model.is_keras(klass):
            continue
        call_fn = next((fn for fn in model.methods(klass) if fn.name == "call" and fn.self_name), None)
        if call_fn is None:
            continue
        if penalized is None:
            penalized = {id(facts.enclosing_class(c.site)) for c in model.spans.calls if method_of(c) == "add_loss"}
        if id(klass) in penalized:
            continue
        summary = model.summary(call_fn)
        if summary is None:
            continue
        for name, assign in _weights(model, klass).items():
            cut = summary.returns.only_cut(f"{call_fn.self_name}.{name}")
            if cut is None or cut.deliberate or (cut.file and cut.file != facts.path):
                continue
            site = cut.site
            if site in reported:
                continue
            reported.add(site)
            through = f", which `call` reaches through {cut.path(facts.path)}" if cut.calls else ""
            gradient = "a zero gradient" if cut.zero else "a None gradient"
            yield report(
                facts, site, CODE,
                f"{_in(cut, call_fn.qualname, facts.path)} {_has(cut)}, and the layer's weight `self.{name}` "
                f"(line {assign.site.line}) reaches the output of `{call_fn.qualname}` only through it{through}: "
                f"whatever trains `{klass.name}`, `self.{name}` gets {gradient} and never moves",
                WEIGHT_HINT, _details(cut, facts.path, weight=name, layer=klass.name),
            )


WEIGHT_HINT = (
    "To binarise or round a weight on the forward pass only, pass its gradient straight through: "
    "`w + tf.stop_gradient(tf.sign(w) - w)`; a weight meant to stay fixed is made with trainable=False."
)

'''# TAP104 gradient-path-cut

## What it does
Follows the values computed inside a tape's `with` block from the sources (the
model, the variables asked for) to the gradient target (the loss). It flags the
place where every path is cut by an operation that has no gradient: `.numpy()`,
a NumPy call (`np.mean`, `np.array`...), `float()`, `int()`, `round()`,
`tf.cast` to an integer or boolean dtype, `argmax`/`argmin`/`round`, or a Python
`if` on a tensor that picks a constant.

It stays silent when another path still carries the gradient (labels made with
`argmax`, an action sampled with `np.random.choice`, indices for `tf.gather`),
on purpose cuts (`tf.stop_gradient`), static shapes (`np.prod(x.shape)`),
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

import re
from dataclasses import dataclass

from tapecheck.lint.facts import Site
from tapecheck.rules._common import report
from tapecheck.rules._flow import (
    METADATA_CALLS, call_span, callee_of, is_metadata, method_of, prefixes, spans_of, variable_owner, within,
)

CODE = "TAP104"
NAME = "gradient-path-cut"
SUMMARY = "inside the tape, every path from the sources to the loss goes through an op without gradient"
PROBE = True
TRIGGERS = (b"GradientTape",)

NO_GRADIENT_OPS = frozenset(
    {
        "tensorflow.argmax", "tensorflow.argmin", "tensorflow.math.argmax", "tensorflow.math.argmin",
        "tensorflow.round", "tensorflow.math.round",
        "keras.ops.argmax", "keras.ops.argmin", "keras.ops.round",
    }
)
CASTS = frozenset({"tensorflow.cast", "tensorflow.dtypes.cast", "keras.ops.cast"})
PYTHON_CASTS = frozenset({"float", "int", "round"})
INTEGER_DTYPE = re.compile(r"(u?int(8|16|32|64)|bool)")
# Calls through which nothing flows, by design or because the result is metadata.
STOP_CALLS = frozenset({"tensorflow.stop_gradient", "keras.ops.stop_gradient", "print", "tensorflow.print"}) | METADATA_CALLS
# Calls that take indices or draw samples: a cut value used there is a choice, not a value.
INDEX_CALLS = frozenset(
    {
        "tensorflow.gather", "tensorflow.gather_nd", "tensorflow.one_hot", "tensorflow.boolean_mask",
        "tensorflow.nn.embedding_lookup", "tensorflow.random.categorical", "tensorflow.range",
        "keras.ops.take", "keras.ops.take_along_axis", "keras.ops.one_hot",
    }
)

VALID = [
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


@dataclass(slots=True)
class Flow:
    live: bool = False  # depends on the sources through ops with gradients
    cut: Site | None = None  # where a path from the sources was cut, if one was
    what: str = ""


def _describe(call) -> str:
    method = method_of(call)
    if method == "numpy" and not call.args:
        return "`.numpy()`"
    return f"`{call.func.text}()`"


def _cuts(facts, call) -> bool:
    """Whether this call returns a value with no gradient back to its inputs."""
    callee = callee_of(facts, call)
    if method_of(call) == "numpy" and not call.args and not callee.startswith(("numpy", "tensorflow")):
        return True
    if callee.startswith("numpy.") and not callee.startswith("numpy.random."):
        return True
    if call.func.kind == "name" and call.func.text in PYTHON_CASTS and call.func.text not in facts.imports:
        return True
    if callee in NO_GRADIENT_OPS:
        return True
    if callee in CASTS:
        dtype = call.arg(1, "dtype")
        if dtype is not None:
            text = dtype.text.rsplit(".", 1)[-1] if dtype.text else str(dtype.value or "")
            return bool(INTEGER_DTYPE.fullmatch(text))
    return False


def _source_roots(facts, spans, call, tape) -> set[str]:
    """The objects whose variables are asked for: `model` for `model.trainable_variables`."""
    target = call.arg(0, "target")
    roots: set[str] = set()
    for use in spans.uses_in(call_span(call)):
        if use.name == f"{tape.name}.{call.method}" or (target is not None and use.name == target.text):
            continue
        roots.add(variable_owner(use.name) or use.name)
        for assign in facts.reaching_assigns(use.name, call.site):
            for inner in spans.uses_in(assign.span):  # variables = gen.trainable_variables + ...
                if variable_owner(inner.name):
                    roots.add(variable_owner(inner.name))
    return roots


class _Tracer:
    """Walks the assignments recorded by one tape, in order, keeping a Flow per name."""

    def __init__(self, facts, tape, roots):
        self.facts, self.tape, self.roots = facts, tape, roots
        self.spans = spans_of(facts)
        self.state: dict[str, Flow] = {}

    def _known(self, name: str) -> Flow | None:
        for prefix in prefixes(name):
            if prefix in self.state:
                return self.state[prefix]
        return None

    def _live(self, name: str) -> bool:
        if any(name == root or name.startswith(root + ".") for root in self.roots):
            return True
        known = self._known(name)
        return known is not None and known.live

    def judge(self, assign) -> Flow:
        facts = self.facts
        calls = self.spans.calls_in(assign.span)
        stopped = [call_span(c) for c in calls if callee_of(facts, c) in STOP_CALLS]
        indexed = [call_span(c) for c in calls if callee_of(facts, c) in INDEX_CALLS or callee_of(facts, c).startswith("numpy.random.")]
        cutters = [
            c for c in calls
            if _cuts(facts, c) and not any(within(c.site.order, s) for s in stopped + indexed)
        ]
        flow = Flow()
        for use in self.spans.uses_in(assign.span):
            order = use.site.order
            if is_metadata(use.name) or any(within(order, s) for s in stopped):
                continue
            cutting = [c for c in cutters if within(order, call_span(c))]
            live = self._live(use.name)
            if cutting and live:
                if flow.cut is None:
                    innermost = max(cutting, key=lambda c: c.site.order)
                    flow.cut, flow.what = innermost.site, _describe(innermost)
                continue
            if live:
                flow.live = True
            known = self._known(use.name)
            if known is not None and known.cut is not None and flow.cut is None:
                if not any(within(order, s) for s in indexed):
                    flow.cut, flow.what = known.cut, known.what
        if not flow.live and flow.cut is None:
            self._picked_by_if(assign, flow)
        return flow

    def _picked_by_if(self, assign, flow: Flow) -> None:
        """A value that does not depend on the sources, chosen by an `if` on one that does."""
        for block_id in reversed(self.facts.chain(assign.site.block)):
            block = self.facts.blocks[block_id]
            if block_id in self.tape.with_blocks:
                return
            if block.kind in ("if", "else") and block.test_span != (0, 0):
                for use in self.spans.uses_in(block.test_span):
                    if not is_metadata(use.name) and self._live(use.name):
                        flow.cut, flow.what = use.site, "a Python `if` on a tensor"
                        return

    def run(self, until: int) -> dict[str, Flow]:
        facts = self.facts
        scope = facts.blocks[self.tape.with_blocks[0]].scope
        assigns = [
            a for a in facts.assigns
            if a.kind in ("assign", "augassign") and a.span != (0, 0) and a.site.order < until
            and facts.scope_of(a.site) == scope and facts.records(self.tape, a.site)
        ]
        for assign in sorted(assigns, key=lambda a: a.site.order):
            flow = self.judge(assign)
            previous = self.state.get(assign.target)
            if previous is not None and assign.site.block not in self.tape.with_blocks:
                # a conditional rebinding: either value may hold
                flow.live = flow.live or previous.live
                if flow.cut is None:
                    flow.cut, flow.what = previous.cut, previous.what
            self.state[assign.target] = flow
        return self.state


def check(facts):
    spans = spans_of(facts)
    for call, tape in facts.gradient_calls():
        target = call.arg(0, "target")
        if not tape.with_blocks or not tape.name or target is None or target.kind != "name":
            continue
        roots = _source_roots(facts, spans, call, tape)
        if not roots:
            continue
        flow = _Tracer(facts, tape, roots).run(call.site.order).get(target.text)
        if flow is None or flow.live or flow.cut is None:
            continue
        yield report(
            facts, flow.cut, CODE,
            f"{flow.what} has no gradient, and `{target.text}` depends on the sources only through it: "
            f"`{tape.name}.gradient` (line {call.site.line}) returns None for every variable",
            "Keep the path from the model to the loss in TensorFlow ops that have gradients "
            "(no .numpy(), NumPy, float() or argmax); compute logging values after the tape.",
        )

'''# TAP701 arguments-out-of-order

## What it does
Flags a call to a function of your project (this file, or a module it imports)
that passes, by position, a variable named like *another* parameter of that
function: `critic_loss(q_values, rewards, discounts, target_q_values)` for
`def critic_loss(q_values, target_q_values, rewards, discounts)`, or
`focal_loss(gt, pr, self.alpha, self.gamma)` for `def focal_loss(gt, pr, gamma,
alpha)`. Also a variable passed before the parameter bearing its name while the
call passes nothing there (`build(model_fn, lr, clip_norm)` for `def
build(model_fn, lr, l2=0.0, clip_norm=None)`: an optional parameter skipped, or
one added to the signature after the call was written). The callee may be a name
bound to one project function or another in the branches of an `if`/`else`
(`build = a.build_sgd` / `build = a.build_adam`) when they all take the same
positional parameters.

## Why is this bad?
Python pairs positional arguments with parameters by position, never by name.
When a loss helper or a builder takes four tensors of one shape, nothing fails:
the rewards are used as target Q-values, the focal loss's `gamma` gets `alpha`'s
value, a boolean flag becomes a regularization strength. Training runs and
converges to the wrong thing, and the call reads as if it were right.

## Example
```python
import tensorflow as tf

def n_step_critic_loss(q_values, target_q_values, rewards, discounts):
    targets = rewards + discounts * tf.stop_gradient(target_q_values)
    return tf.reduce_mean(tf.square(targets - q_values))

def critic_step(critic, target_critic, optimizer, obs, next_obs, rewards, discounts):
    target_q_values = target_critic(next_obs)
    with tf.GradientTape() as tape:
        q_values = critic(obs, training=True)
        loss = n_step_critic_loss(q_values, rewards, discounts, target_q_values)
    grads = tape.gradient(loss, critic.trainable_variables)
    optimizer.apply_gradients(zip(grads, critic.trainable_variables))
```

## Use instead
```python
import tensorflow as tf

def n_step_critic_loss(q_values, target_q_values, rewards, discounts):
    targets = rewards + discounts * tf.stop_gradient(target_q_values)
    return tf.reduce_mean(tf.square(targets - q_values))

def critic_step(critic, target_critic, optimizer, obs, next_obs, rewards, discounts):
    target_q_values = target_critic(next_obs)
    with tf.GradientTape() as tape:
        q_values = critic(obs, training=True)
        loss = n_step_critic_loss(q_values, target_q_values=target_q_values, rewards=rewards,
                                  discounts=discounts)
    grads = tape.gradient(loss, critic.trainable_variables)
    optimizer.apply_gradients(zip(grads, critic.trainable_variables))
```

Pass arguments whose order is easy to get wrong by keyword.

## Where it stays silent
Only in training code: a call to a loss helper (a function named `...loss...`), to a
function that opens a `GradientTape` (a training step, or a builder of one) from a file
that names an optimizer (it sets up that training), a call the tape records, or one made by `call`/`__call__`/`train_step`/`compute_loss` of a
Keras layer, model or loss: library code reorders parameters on purpose
(`assert_greater(x, y)` written as `assert_less(y, x)`). Only
functions whose definition is in the linted files, called by their name, by
`self.method(...)` or through an imported module; only arguments that are plain
names, attributes (`self.gamma` is read as `gamma`) or subscripts (`rewards[agent]`),
and only two or more arguments each named like another's parameter (a swap, a
rotation), or one whose own parameter gets nothing from the call: one name alone in
another place is often a choice of words. A name that may hold functions with different
parameters, or something unknown in one branch, is not judged. A call that names the
swapped pair the other way round elsewhere in the same function (`sim(z1, z2) +
sim(z2, z1)`, a symmetric loss) and a function calling itself are deliberate.
'''

from __future__ import annotations

import re

from tapecheck.model import Function, line_at, model_of
from tapecheck.rules._common import report

CODE = "TAP701"
NAME = "arguments-out-of-order"
SUMMARY = "a variable passed by position to a project function whose parameter there has another name, and which names it elsewhere"


# Training code, as `_training_code` reads it: a callee named `...loss...`, a tape recording (the
# word `tape` is in every file that makes or names one), a callee that opens a tape called from a
# file naming an optimizer, or a training method of a class. Each part searched from a literal: the
# case-blind words in a lowered copy (`bytes.lower` folds ASCII only, as `(?i)` on bytes does), then
# `def` (one pattern `(?i:loss|tape|optimizer)|def...`, starting with an alternation, was tried at
# every byte: 0.71 s of the screen on tensorflow+keras).
TRAINING_WORDS = (b"loss", b"tape", b"optimizer")
TRAINING_DEF = re.compile(rb"def\s+(?:call|__call__|train_step|test_step|compute_loss)\b")


def screen(source: bytes) -> bool:
    """A file with training code (TRAINING_WORDS, TRAINING_DEF) that defines or imports a function."""
    if b"def " not in source and b"import" not in source:
        return False
    lowered = source.lower()
    return any(word in lowered for word in TRAINING_WORDS) or TRAINING_DEF.search(source) is not None


VALID = [
    # one name alone in another place: a choice of words (the keys' length is the mask's input length)
    """
import tensorflow as tf
def causal_mask(batch_size, input_length, output_length):
    return tf.linalg.band_part(tf.ones((batch_size, output_length, input_length)), -1, 0)
class Decoder(tf.keras.layers.Layer):
    def call(self, x, cache):
        total_length = tf.shape(cache)[1]
        input_length = tf.shape(x)[1]
        return causal_mask(tf.shape(x)[0], total_length, input_length)
""",
    # in the declared order, by keyword, or with other names
    """
import tensorflow as tf
def critic_loss(q_values, target_q_values, rewards, discounts):
    return tf.reduce_mean(tf.square(rewards + discounts * target_q_values - q_values))
def step(q_values, target_q_values, rewards, discounts, q, t):
    a = critic_loss(q_values, target_q_values, rewards, discounts)
    b = critic_loss(q_values, rewards=rewards, discounts=discounts, target_q_values=target_q_values)
    return a + b + critic_loss(q, t, rewards, discounts)
""",
    # a symmetric loss: both orders, on purpose
    """
import tensorflow as tf
def similarity_loss(z1, z2):
    return -tf.reduce_mean(tf.reduce_sum(z1 * tf.stop_gradient(z2), axis=-1))
def simsiam(p1, p2, z1, z2):
    return similarity_loss(z1, z2) / 2 + similarity_loss(z2, z1) / 2
""",
    # a builder picked by `if`/`else` among functions whose parameters differ: not judged
    """
import tensorflow as tf
def build_sgd_step(model, learning_rate, clip_norm=None):
    opt = tf.keras.optimizers.SGD(learning_rate)
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
        grads = tape.gradient(loss, model.trainable_variables)
        if clip_norm is not None:
            grads, _ = tf.clip_by_global_norm(grads, clip_norm)
        opt.apply_gradients(zip(grads, model.trainable_variables))
    return step
def build_adam_step(model, learning_rate, clip_norm=None, l2=0.0):
    return build_sgd_step(model, learning_rate, clip_norm)
def make_step(model, name, learning_rate, clip_norm):
    if name == "sgd":
        build = build_sgd_step
    else:
        build = build_adam_step
    return build(model, learning_rate, clip_norm)
""",
    # a function that opens a tape, called from a file that names no optimizer: not training set-up
    """
import tensorflow as tf
def saliency(model, images, target_class=None, labels=None):
    images = tf.convert_to_tensor(images)
    with tf.GradientTape() as tape:
        tape.watch(images)
        scores = model(images)
        picked = tf.gather(scores, target_class, axis=1, batch_dims=1) if target_class is not None else scores
    return tape.gradient(picked, images)
def explain(model, images, labels):
    return saliency(model, images, labels)  # the labels are the classes to explain
""",
    # a function that swaps its own arguments (canonical order)
    """
def pair_distance(a, b):
    if id(a) > id(b):
        return pair_distance(b, a)
    return abs(a - b)
""",
]

INVALID = [
    """
import tensorflow as tf
def critic_loss(q_values, target_q_values, rewards, discounts):
    return tf.reduce_mean(tf.square(rewards + discounts * target_q_values - q_values))
def step(critic, obs, target_q_values, rewards, discounts):
    with tf.GradientTape() as tape:
        q_values = critic(obs, training=True)
        loss = critic_loss(q_values, rewards, discounts, target_q_values)  # expect: TAP701
    return tape.gradient(loss, critic.trainable_variables)
""",
    # a loss class handing its own settings to the functional form
    """
import tensorflow as tf
def focal_loss(gt, pr, gamma=2.0, alpha=0.25):
    pr = tf.clip_by_value(pr, 1e-7, 1.0 - 1e-7)
    return -tf.reduce_mean(gt * alpha * tf.pow(1.0 - pr, gamma) * tf.math.log(pr))
class FocalLoss(tf.keras.losses.Loss):
    def __init__(self, alpha=0.25, gamma=2.0):
        super().__init__()
        self.alpha, self.gamma = alpha, gamma
    def call(self, gt, pr):
        return focal_loss(gt, pr, self.alpha, self.gamma)  # expect: TAP701
""",
    # a builder picked by `if`/`else`: its third parameter is `l2`, and `clip_norm` is skipped
    """
import tensorflow as tf
def build_sgd_step(model, learning_rate, l2=0.0, clip_norm=None):
    opt = tf.keras.optimizers.SGD(learning_rate)
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
            loss += l2 * tf.add_n([tf.reduce_sum(tf.square(w)) for w in model.trainable_variables])
        grads = tape.gradient(loss, model.trainable_variables)
        if clip_norm is not None:
            grads, _ = tf.clip_by_global_norm(grads, clip_norm)
        opt.apply_gradients(zip(grads, model.trainable_variables))
    return step
def build_adam_step(model, learning_rate, l2=0.0, clip_norm=None):
    opt = tf.keras.optimizers.Adam(learning_rate)
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    return step
def make_step(model, name, learning_rate, clip_norm):
    if name == "sgd":
        build = build_sgd_step
    else:
        build = build_adam_step
    return build(model, learning_rate, clip_norm)  # expect: TAP701
""",
]


def _ordinal(index: int) -> str:
    number = index + 1
    suffix = "th" if 10 <= number % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(number % 10, "th")
    return f"{number}{suffix}"


def _argument_name(expr) -> str:
    """`q` for a name `q`, `gamma` for `self.gamma` / `config.gamma`, `rewards` for
    `rewards[agent]`; "" otherwise."""
    if expr.kind in ("name", "subscript"):
        return expr.text
    if expr.kind == "attribute" and expr.text:
        return expr.text.rsplit(".", 1)[-1]
    return ""


def _positional(function: Function, call) -> tuple[str, ...]:
    """The parameters the call's positional arguments go to, in order (`self` left out)."""
    params = function.params[: function.block.positional]
    if function.bound and call.func.kind == "attribute":
        params = params[1:]
    return params


def _names_passed(call) -> list[str]:
    return [_argument_name(arg) for arg in call.args]


def _misplaced(call, function: Function):
    """(position, argument name, its own parameter's position) of the first argument passed at a
    position whose parameter has another name, while a positional parameter bears its name, and
    the argument passed at that parameter's position is misplaced too (a swap, or a longer
    cycle): two values each named like the other's parameter. One name alone is often a choice
    of words (`compute_mask(batch, total_length, input_length)` for `(batch, input_length,
    output_length)`: the keys' length is the mask's input length). Unless the parameter bearing
    its name lies past the last argument, neither passed by keyword: then that parameter gets
    nothing from this call, while its value lands on an earlier one (`build(model_fn, rate,
    clip_norm)` for `(model_fn, rate, l2=0.0, clip_norm=None)`: an optional parameter skipped, or
    one added to the signature after the call was written)."""
    if call.spread:
        return None  # `*args`: the positions are unknown
    positional = _positional(function, call)
    names = _names_passed(call)

    def own_position(index):
        name = names[index] if index < len(names) else ""
        if index >= len(positional) or not name or name == positional[index] or name in call.keywords:
            return None
        return positional.index(name) if name in positional else None

    for index in range(len(names)):
        own = own_position(index)
        if own is None:
            continue
        if own >= len(names):
            return index, names[index], own  # its own parameter gets nothing: an optional one skipped
        if own_position(own) is None:
            continue
        return index, names[index], own
    return None


def _swapped_back(model, call, index: int, own: int, function: Function) -> bool:
    """Another call of the same function in the same scope passes the two names the other way
    round: a symmetric expression, on purpose."""
    names = _names_passed(call)
    if not (0 <= own < len(names)):
        return False
    first, second = names[index], names[own]
    facts = model.facts
    scope = facts.scope_of(call.site)
    for other in facts.calls:
        if other is call or other.func.text != call.func.text or facts.scope_of(other.site) != scope:
            continue
        passed = _names_passed(other)
        if own < len(passed) and index < len(passed) and passed[index] == second and passed[own] == first:
            return True
    return False


def _names_an_optimizer(model) -> bool:
    """Whether a name read or bound in this file says `optimizer` (`optimizer_fn`, `self.optimizer`,
    `optimizer_name`): the file sets up training. (The screen's `optimizer` is then in its bytes.)"""
    memo = model.memo.get("tap701-optimizer")
    if memo is None:
        facts = model.facts
        names = [use.name for use in facts.uses] + [assign.target for assign in facts.assigns]
        memo = model.memo["tap701-optimizer"] = any("optimizer" in (name or "").lower() for name in names)
    return memo


TRAINING_METHODS = frozenset({"call", "__call__", "train_step", "test_step", "compute_loss"})


def _training_code(model, call, function: Function) -> bool:
    """Where an argument given to the wrong parameter trains the wrong thing, and where swaps on
    purpose are rare: a loss helper (`...loss...`), a call the tape records, or a method of a
    Keras layer, model or loss that runs in training. Library code that reorders its own
    parameters (`assert_greater(x, y)` as `assert_less(y, x)`) is none of these. A function that
    opens a tape (a training step, or a builder of one) counts where this file names an optimizer:
    it sets up the training that function runs."""
    if "loss" in function.name.lower():
        return True
    facts = model.facts
    if function.model is not None and function.model.opens_tape(function.block.id) and _names_an_optimizer(model):
        return True  # it trains a model on a tape (a training step, or a builder of one), set up here
    if facts.recording(call.site):
        return True
    klass = facts.enclosing_class(call.site)
    enclosing = model.functions.get(facts.scope_of(call.site))
    return (klass is not None and enclosing is not None and enclosing.name in TRAINING_METHODS
            and (model.is_keras(klass, "layers") or model.is_keras(klass, "losses")))


def _callee(model, call) -> tuple[Function | None, tuple[Function, ...]]:
    """The function the call runs, and the others it may run: a name bound to one function or
    another in the branches of an `if`/`else` (`build = a.build_sgd` / `build = a.build_adam`)
    is judged when every one of them is a function of the project with the same positional
    parameters, in the same order (their defaults cannot be compared: the first stands for all)."""
    function = model.binding(call.func.text, call.site)
    if isinstance(function, Function):
        return function, ()
    if function is not None or call.func.kind != "name":
        return None, ()
    candidates = model.candidates(call.func.text, call.site)
    if not candidates or len(candidates) < 2 or not all(isinstance(c, Function) for c in candidates):
        return None, ()
    first = candidates[0]
    if any(_positional(c, call) != _positional(first, call) or c.label for c in candidates):
        return None, ()
    return first, candidates[1:]


def check(facts):
    model = model_of(facts)
    for call in facts.calls:
        if len(call.args) < 2 or call.func.kind not in ("name", "attribute") or not call.func.text:
            continue
        function, others = _callee(model, call)
        if function is None or function.label or function.block.positional < 2:
            continue
        if facts.scope_of(call.site) == function.block.id and function.model is model:
            continue  # the function calling itself
        if not _training_code(model, call, function):
            continue
        found = _misplaced(call, function)
        if found is None:
            continue
        index, name, own = found
        if _swapped_back(model, call, index, own, function):
            continue
        positional = _positional(function, call)
        here = positional[index]
        argument = call.args[index]
        written = f"{argument.text}[...]" if argument.kind == "subscript" else argument.text or name
        defined = line_at(function.model.facts.path, function.block.line, facts.path)
        if others:
            defined += ("; `" + call.func.text + "` may also be " + ", ".join(f"`{o.qualname}`" for o in others)
                        + ", whose parameters there are the same")
        yield report(
            facts, call.site, CODE,
            f"`{written}` is passed as the {_ordinal(index)} positional argument of `{function.qualname}` "
            f"(defined at {defined}), whose parameter there is `{here}`, and `{name}` is its "
            f"{_ordinal(own)} parameter: "
            "Python pairs positional arguments by position, so the values go to the wrong parameters",
            f"Pass these arguments by keyword (`{function.name}(..., {name}={written}, {here}=...)`), "
            "or reorder them to match the definition.",
        )

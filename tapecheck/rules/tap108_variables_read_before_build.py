'''# TAP108 variables-read-before-build

## What it does
Flags `model.trainable_variables` (or `trainable_weights`) read and kept, on `self` or in a
name later given to `tape.gradient` or `apply_gradients`, right after the model was
constructed and before anything could have built it, when the model is a subclassed Keras
`Model` or `Layer` of the project whose weights wait for its first call: its `__init__`
makes layers such as `Dense` (or a `Sequential` without `keras.Input`), or it has a
`build` that makes weights.

## Why is this bad?
A subclassed model makes its weights when it is first called. Read before that, the list
is empty, or holds only the parts already built (a `Sequential` opened with `keras.Input`):
it is a plain Python list, and it does not grow when the model builds later. Measured on
TF 2.21 / Keras 3.15: an unbuilt critic's `trainable_variables` is `[]`, `tape.gradient`
returns `[]` and `apply_gradients(zip([], []))` raises `ValueError: not enough values to
unpack (expected 2, got 0)`; an actor whose body is a `Sequential` with an `Input` and
whose `mu` and `log_std` heads are `Dense` layers keeps 2 of its 6 variables, and those
heads never move, silently. (`model.build(input_shape)` does not help a model without a
`build` of its own: it still has no variables.)

## Example
```python
import tensorflow as tf

class Critic(tf.keras.Model):
    def __init__(self):
        super().__init__()
        self.hidden = tf.keras.layers.Dense(64, activation="relu")
        self.q = tf.keras.layers.Dense(1)

    def call(self, x):
        return self.q(self.hidden(x))

class Agent:
    def __init__(self):
        self.critic = Critic()
        self.critic_params = self.critic.trainable_variables  # [] here
        self.optimizer = tf.keras.optimizers.Adam(1e-3)

    def update(self, x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(self.critic(x) - y))
        grads = tape.gradient(loss, self.critic_params)
        self.optimizer.apply_gradients(zip(grads, self.critic_params))
```

## Use instead
```python
class Agent:
    def __init__(self, obs_dim):
        self.critic = Critic()
        self.critic(tf.zeros((1, obs_dim)))  # build the weights first
        self.critic_params = self.critic.trainable_variables
        self.optimizer = tf.keras.optimizers.Adam(1e-3)

    def update(self, x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(self.critic(x) - y))
        grads = tape.gradient(loss, self.critic_params)
        self.optimizer.apply_gradients(zip(grads, self.critic_params))
```
or read `self.critic.trainable_variables` inside the training step, after the forward pass.

## Where it stays silent
A model that anything may have built before the read: called, `build()`-ed, handed to a
function, or (for `self.model`) after any method of `self` is called; a class whose
`__init__` calls the model or its layers, or `build`; a functional model, a `Sequential`
(opened with `keras.Input` or not: not a subclass of the project), a library model; a model
bound to a parameter or made elsewhere; a list kept but never given to `gradient` or
`apply_gradients`.
'''

from __future__ import annotations

from tapecheck.model import GRADIENT_METHODS, Klass, model_of
from tapecheck.rules._common import report

CODE = "TAP108"
NAME = "variables-read-before-build"
SUMMARY = ("a subclassed Keras model's `trainable_variables` read and kept before the model is built: "
           "the list is empty or partial, and what is missing never trains")
TRIGGERS = (b"trainable_variables", b"trainable_weights")

ATTRIBUTES = ("trainable_variables", "trainable_weights")
APPLIES = GRADIENT_METHODS | {"apply_gradients"}
HINT = ("Build the model first (call it once on a sample batch), or read `trainable_variables` in the "
        "training step, after the forward pass.")

VALID = [
    # built by a forward pass before the read; read in the step after the forward pass
    """
import tensorflow as tf
class Critic(tf.keras.Model):
    def __init__(self):
        super().__init__()
        self.q = tf.keras.layers.Dense(1)
    def call(self, x):
        return self.q(x)
class Agent:
    def __init__(self, obs_dim):
        self.critic = Critic()
        self.critic(tf.zeros((1, obs_dim)))
        self.params = self.critic.trainable_variables
        self.optimizer = tf.keras.optimizers.Adam()
    def update(self, x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(self.critic(x))
        self.optimizer.apply_gradients(zip(tape.gradient(loss, self.params), self.params))
def train(ds):
    model = Critic()
    optimizer = tf.keras.optimizers.Adam()
    for x in ds:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(model(x))
        variables = model.trainable_variables
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
""",
    # a Sequential opened with Input is built; a class whose __init__ builds itself
    """
import tensorflow as tf
class Actor(tf.keras.Model):
    def __init__(self, obs_dim):
        super().__init__()
        self.net = tf.keras.layers.Dense(8)
        self.build((None, obs_dim))
    def build(self, shape):
        self.net.build(shape)
    def call(self, x):
        return self.net(x)
def train(ds, obs_dim):
    actor = Actor(obs_dim)
    net = tf.keras.Sequential([tf.keras.Input((obs_dim,)), tf.keras.layers.Dense(4)])
    variables = actor.trainable_variables + net.trainable_variables
    optimizer = tf.keras.optimizers.Adam()
    for x in ds:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(net(actor(x)))
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
""",
    # kept, but only counted: never given to gradient or apply_gradients
    """
import tensorflow as tf
class Critic(tf.keras.Model):
    def __init__(self):
        super().__init__()
        self.q = tf.keras.layers.Dense(1)
    def call(self, x):
        return self.q(x)
class Agent:
    def __init__(self):
        self.critic = Critic()
        self.before = len(self.critic.trainable_variables)
""",
]

INVALID = [
    """
import tensorflow as tf
class Critic(tf.keras.Model):
    def __init__(self):
        super().__init__()
        self.hidden = tf.keras.layers.Dense(64, activation="relu")
        self.q = tf.keras.layers.Dense(1)
    def call(self, x):
        return self.q(self.hidden(x))
class Agent:
    def __init__(self):
        self.critic = Critic()
        self.critic_params = self.critic.trainable_variables  # expect: TAP108
        self.optimizer = tf.keras.optimizers.Adam(1e-3)
    @tf.function
    def update(self, x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(self.critic(x) - y))
        grads = tape.gradient(loss, self.critic_params)
        self.optimizer.apply_gradients(zip(grads, self.critic_params))
""",
    # a local list, given to the tape and the optimizer in the loop
    """
import tensorflow as tf
class Encoder(tf.keras.layers.Layer):
    def build(self, input_shape):
        self.w = self.add_weight(shape=(input_shape[-1], 8))
    def call(self, x):
        return tf.matmul(x, self.w)
def train(dataset):
    encoder = Encoder()
    variables = encoder.trainable_weights  # expect: TAP108
    optimizer = tf.keras.optimizers.SGD(0.1)
    for x in dataset:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(encoder(x))
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
""",
]


def check(facts):
    model = model_of(facts)
    groups: dict[tuple[str, int], list] = {}  # `a.trainable_variables + b.trainable_variables`: one finding
    for use in facts.uses:
        owner, _, attribute = use.name.rpartition(".")
        if attribute not in ATTRIBUTES or not owner or owner.count(".") > 1:
            continue
        kept = _kept_in(model, use)
        if kept is None:
            continue
        made = _made_unbuilt(model, owner, use)
        if made is not None:
            groups.setdefault((kept, use.site.line), []).append((use, owner, attribute, *made))
    for (kept, _), reads in groups.items():
        use = reads[0][0]
        read = " and ".join(f"`{owner}.{attribute}`" for _, owner, attribute, _, _ in reads)
        owners = {owner: f"`{owner}` (a `{klass.block.name}`, made at line {assign.site.line})"
                  for _, owner, _, assign, klass in reads}
        unbuilt = " and ".join(owners.values())
        yield report(
            facts, use.site, CODE,
            f"{read} {'is' if len(reads) == 1 else 'are'} read at line {use.site.line} and kept in `{kept}`, but "
            f"{unbuilt} {'has' if len(owners) == 1 else 'have'} not been built yet: a subclassed model makes its weights at "
            "its first call, so the list is empty or misses the layers built then, and those weights never train "
            "(an empty list makes `apply_gradients` raise ValueError: not enough values to unpack)",
            HINT,
        )


def _kept_in(model, use) -> str | None:
    """The name or `self.` attribute an assignment keeps the list in (`params = m.trainable_variables`,
    also within a sum), when that name is then given to a `gradient` or `apply_gradients` call."""
    facts = model.facts
    scope = facts.scope_of(use.site)
    holder = next((a for a in facts.assigns_in_scope(scope)
                   if a.kind == "assign" and a.span[0] < use.site.order <= a.span[1]), None)
    if holder is None or use.site.in_comprehension:
        return None
    if any(c.site.order < use.site.order <= c.end_order for c in model.spans.calls_in(holder.span)):
        return None  # read inside a call (`len(m.trainable_variables)`): not the list itself
    target = holder.target
    head, dot, rest = target.partition(".")
    fn = model.functions.get(scope)
    if dot:
        if fn is None or not fn.bound or head != fn.self_name or "." in rest:
            return None
        places = [f.block.id for f in model.functions.values() if f.owner is fn.owner and f.self_name == head]
    else:
        places = [scope]
    for call in facts.calls:
        if call.method not in APPLIES:
            continue
        if not any(p in facts.chain(call.site.block) for p in places):
            continue
        if not dot and call.site.order <= holder.site.order:
            continue
        if any(u.name == target for u in model.spans.uses_in((call.site.order, call.end_order))):
            return target
    return None


def _made_unbuilt(model, owner: str, use):
    """(the assignment that made `owner`, its class) when every binding of `owner` reaching the read
    is, in the same function, the construction of a project class that builds lazily, and nothing
    between that construction and the read may have built it."""
    facts = model.facts
    scope = facts.scope_of(use.site)
    reaching = facts.reaching_assigns(owner, use.site)
    if len(reaching) != 1:
        return None
    assign = reaching[0]
    if assign.kind != "assign" or assign.value is None or assign.value.kind != "call" or facts.scope_of(assign.site) != scope:
        return None
    made = model.binding(assign.value.func_text, assign.site)
    if not isinstance(made, Klass) or not made.model.builds_lazily(made.block):
        return None
    fn = model.functions.get(scope)
    self_name = fn.self_name if fn is not None and fn.bound else ""
    head = owner.partition(".")[0]
    window = (assign.site.order, use.site.order - 1)
    for call in model.spans.calls_in(window):
        text = call.func.text
        if text == owner or text.startswith(f"{owner}.") or call.receiver == owner:
            return None  # called, built, fitted, loaded
        if head == self_name and (call.receiver == self_name or text == self_name):
            return None  # a method of the object may build it
    for other in model.spans.uses_in(window):
        if other.name.rpartition(".")[2] in ATTRIBUTES:
            continue  # another read of its variables builds nothing
        if other.name == owner or other.name.startswith(f"{owner}."):
            return None  # handed on, or read otherwise: something may build it
    return assign, made

'''# TAP105 regularization-losses-dropped

## What it does
Flags a custom training step (a `GradientTape` loop, or a Keras `train_step`
override) that trains a model with regularization, a `kernel_regularizer=`,
`bias_regularizer=` or `activity_regularizer=` on one of its layers, or an
`add_loss(...)` in its definition, while the loss it differentiates never adds
the model's `losses`.

The program model finds the model behind the variables asked for
(`model.trainable_variables`, `self.trainable_variables`, `self.model...`): a
Sequential or functional model built in the file (also by a builder function), an
instance of a Keras `Layer`/`Model` subclass of this file or of another module of
the project, with the layers it makes. A model it cannot see (a parameter, one
loaded or imported from a library) is not reported. The step is clean when it,
or a helper it calls, reads `model.losses` (`sum(model.losses)`,
`tf.add_n(self.losses)`), or when it goes through `self.compute_loss(...)`
(Keras 3 adds the losses there) or `compiled_loss(...)`.

## Why is this bad?
A layer's regularizer does not change its output: it adds its penalty to the
model's `losses` list, and `fit` adds that list to the loss. A custom loop that
differentiates only the data loss trains without the weight decay or the
activity penalty the model was designed with. Nothing fails and nothing warns:
the weights simply grow larger than they would under `fit`, and the model
overfits the way it was regularized not to.

## Example
```python
import tensorflow as tf

model = tf.keras.Sequential([
    tf.keras.Input((8,)),
    tf.keras.layers.Dense(32, activation="relu", kernel_regularizer=tf.keras.regularizers.L2(1e-3)),
    tf.keras.layers.Dense(1),
])
optimizer = tf.keras.optimizers.Adam()

@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(y - model(x, training=True)))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss
```

## Use instead
```python
import tensorflow as tf

model = tf.keras.Sequential([
    tf.keras.Input((8,)),
    tf.keras.layers.Dense(32, activation="relu", kernel_regularizer=tf.keras.regularizers.L2(1e-3)),
    tf.keras.layers.Dense(1),
])
optimizer = tf.keras.optimizers.Adam()

@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(y - model(x, training=True))) + sum(model.losses)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss
```

`sum(model.losses)` is `0` for a model without penalties, where `tf.add_n` of an
empty list raises.

## Fix safety
With `--fix --unsafe-fixes`, the fix adds `+ sum(<model>.losses)` to the
assignment of the loss inside the tape (`self.losses` in a `train_step`,
`self.model.losses` in a trainer, the model's own name in a loop), wrapping the
value in parentheses where `+` would bind differently. It is made only where it
is unambiguous: the differentiated loss is a name, bound by exactly one plain
assignment inside the tape's `with` block, and the model is a plain (dotted)
name. It is unsafe (applied only with `--unsafe-fixes`): it changes what is
trained, which is the point, and the loss the step returns or logs now includes
the penalties (as `fit`'s does); a loop that adds them by hand in a helper the
linter cannot follow would add them twice.
'''

from __future__ import annotations

from tapecheck.model import Function, Instance, Klass, call_span, line_at, method_of, model_of, variable_owner
from tapecheck.rules._common import report

CODE = "TAP105"
NAME = "regularization-losses-dropped"
SUMMARY = "a custom loop trains a model with regularizers (or `add_loss`) without adding `model.losses` to the loss"
PROBE = True
FIXABLE = True

HINT = "Add the model's penalties to the loss inside the tape: `loss += sum(model.losses)` (`tf.add_n` raises on an empty list)."


def screen(source: bytes) -> bool:
    """The rule needs a tape made here and an `apply_gradients` in the step that uses it."""
    return b"GradientTape" in source and b"apply_gradients" in source


MAX_DEPTH = 6  # helpers, builders and sub-layers followed
LIBRARY_ROOTS = ("tensorflow", "keras", "tf_keras")
# Calls through which Keras (or the user's base class) may add the losses: unknown, so clean.
ADDS_LOSSES_CALLS = frozenset({"compute_loss", "compiled_loss", "get_losses_for"})

VALID = [
    # the penalties are added in a loss helper the step calls
    """
import tensorflow as tf
model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1, kernel_regularizer="l2")])
opt = tf.keras.optimizers.SGD(0.1)
def total_loss(y, pred):
    return tf.reduce_mean(tf.square(y - pred)) + tf.add_n(model.losses)
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = total_loss(y, model(x, training=True))
    opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
""",
    # a train_step override through Keras 3's compute_loss, which adds self.losses
    """
import keras
import tensorflow as tf
class Net(keras.Model):
    def __init__(self):
        super().__init__()
        self.dense = keras.layers.Dense(1, kernel_regularizer=keras.regularizers.L2(1e-3))
    def call(self, x):
        return self.dense(x)
    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            pred = self(x, training=True)
            loss = self.compute_loss(x=x, y=y, y_pred=pred)
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        return {"loss": loss}
""",
    # no regularizer on this model (`None` is none), and a model given as a parameter is unknown
    """
import tensorflow as tf
model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1, kernel_regularizer=None)])
opt = tf.keras.optimizers.SGD(0.1)
def fit_loop(net, ds):
    for x, y in ds:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(y - net(x, training=True)))
        opt.apply_gradients(zip(tape.gradient(loss, net.trainable_variables), net.trainable_variables))
for x, y in [(tf.ones((2, 4)), tf.ones((2, 1)))]:
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(y - model(x, training=True)))
    opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
""",
    # a GAN: only the discriminator is regularized, and its step adds its losses
    """
import tensorflow as tf
gen = tf.keras.Sequential([tf.keras.Input((2,)), tf.keras.layers.Dense(4)])
disc = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1, kernel_regularizer="l2")])
g_opt, d_opt = tf.keras.optimizers.Adam(), tf.keras.optimizers.Adam()
def step(z, real):
    with tf.GradientTape() as g_tape, tf.GradientTape() as d_tape:
        fake = gen(z, training=True)
        g_loss = -tf.reduce_mean(disc(fake, training=True))
        d_loss = tf.reduce_mean(disc(fake, training=True)) - tf.reduce_mean(disc(real, training=True))
        d_loss += sum(disc.losses)
    g_opt.apply_gradients(zip(g_tape.gradient(g_loss, gen.trainable_variables), gen.trainable_variables))
    d_opt.apply_gradients(zip(d_tape.gradient(d_loss, disc.trainable_variables), disc.trainable_variables))
""",
    # Keras 2's compiled_loss given the losses; a regularizer chosen by a flag is not certain
    """
import tensorflow as tf
class Net(tf.keras.Model):
    def __init__(self):
        super().__init__()
        self.dense = tf.keras.layers.Dense(1, kernel_regularizer="l2")
    def call(self, x):
        return self.dense(x)
    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            loss = self.compiled_loss(y, self(x, training=True), regularization_losses=self.losses)
        self.optimizer.apply_gradients(zip(tape.gradient(loss, self.trainable_variables), self.trainable_variables))
        return {"loss": loss}
def build(decay):
    model = tf.keras.Sequential([tf.keras.Input((4,))])
    if decay:
        model.add(tf.keras.layers.Dense(1, kernel_regularizer=tf.keras.regularizers.L2(decay)))
    else:
        model.add(tf.keras.layers.Dense(1))
    return model
model = build(0.0)
opt = tf.keras.optimizers.SGD(0.1)
def step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(y - model(x, training=True)))
    opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
""",
]

INVALID = [    # a trainer over a subclassed model whose layer has an activity regularizer
    """
import keras
import tensorflow as tf
class Encoder(keras.Model):
    def __init__(self):
        super().__init__()
        self.code = keras.layers.Dense(8, activity_regularizer=keras.regularizers.L1(1e-4))
    def call(self, x):
        return self.code(x)
class Trainer:
    def __init__(self):
        self.model = Encoder()
        self.optimizer = keras.optimizers.Adam()
    @tf.function
    def train_step(self, x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(self.model(x, training=True) - x[:, :8]))
        grads = tape.gradient(loss, self.model.trainable_variables)  # expect: TAP105
        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
""",
    # a train_step override of a model that calls add_loss
    """
import keras
import tensorflow as tf
class Sparse(keras.Model):
    def __init__(self):
        super().__init__()
        self.dense = keras.layers.Dense(4)
    def call(self, x):
        h = self.dense(x)
        self.add_loss(1e-3 * tf.reduce_sum(tf.abs(h)))
        return h
    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(y - self(x, training=True)))
        grads = tape.gradient(loss, self.trainable_variables)  # expect: TAP105
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        return {"loss": loss}
""",
    # a functional model from a builder function
    """
import tensorflow as tf
from tensorflow import keras
def build(l2=1e-4):
    inputs = keras.Input((16,))
    x = keras.layers.Dense(32, activation="relu", kernel_regularizer=keras.regularizers.l2(l2))(inputs)
    return keras.Model(inputs, keras.layers.Dense(1)(x))
model = build()
optimizer = keras.optimizers.Adam()
def train(ds, epochs):
    for _ in range(epochs):
        for x, y in ds:
            with tf.GradientTape() as tape:
                loss = keras.losses.mean_squared_error(y, model(x, training=True))
            grads = tape.gradient(loss, model.trainable_variables)  # expect: TAP105
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
""",
    # a Sequential model grown with add(), trained at module level; the regularizer is a module name
    """
import tensorflow as tf
decay = tf.keras.regularizers.L2(1e-4)
model = tf.keras.Sequential()
model.add(tf.keras.Input((4,)))
model.add(tf.keras.layers.Dense(1, bias_regularizer=decay))
opt = tf.keras.optimizers.SGD(0.1)
for x, y in [(tf.ones((2, 4)), tf.ones((2, 1)))]:
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(y - model(x, training=True)))
    grads = tape.gradient(loss, model.trainable_variables)  # expect: TAP105
    opt.apply_gradients(zip(grads, model.trainable_variables))
""",
]

# -- where the model has regularization ------------------------------------------------------


def _is_regularizer_key(key: str) -> bool:
    return key == "regularizer" or key.endswith("_regularizer")


def _library(facts, dotted: str) -> bool:
    return facts.resolve(dotted).split(".")[0] in LIBRARY_ROOTS


def _bound_value(pm, name: str, site):
    """The one plain assignment that gives `name` its value at `site` (here, in an enclosing
    function, or at module level), or None."""
    assigns = pm.assigns_reaching(name, site)
    return assigns[0] if len(assigns) == 1 and assigns[0].kind == "assign" else None


def _regularizer_value(pm, expr, site, depth: int = 0) -> bool:
    """A regularizer for sure: "l2", `regularizers.L2(...)`, or a name bound to one. `None`, parameters: no."""
    if expr is None or depth > MAX_DEPTH:
        return False
    if expr.kind == "constant":
        return isinstance(expr.value, str) and bool(expr.value.strip())
    if expr.kind == "call":
        callee = expr.callee or pm.facts.resolve(expr.func_text)
        return "regularizers." in callee and _library(pm.facts, expr.func_text or callee)
    if expr.kind == "name" and expr.text and expr.text not in ("None", "True", "False"):
        bound = _bound_value(pm, expr.text, site)
        return bound is not None and _regularizer_value(pm, bound.value, bound.site, depth + 1)
    return False


def _guarded(pm, call) -> bool:
    """Made on some runs only (an `if` other than `if __name__ == "__main__":`)."""
    facts = pm.facts
    scope = facts.scope_of(call.site)
    for block_id in facts.chain(call.site.block):
        block = facts.blocks[block_id]
        if block.scope != scope or block.kind not in ("if", "else", "except", "match"):
            continue
        if block.kind == "if" and any(u.name == "__name__" for u in pm.spans.uses_in(block.test_span)):
            continue
        return True
    return False


def _penalty(pm, call):
    """(line, text, file) when this call regularizes the layer or model it makes or runs in."""
    if _guarded(pm, call):
        return None
    for key, value in call.keywords.items():
        if _is_regularizer_key(key) and _regularizer_value(pm, value, call.site):
            return (call.site.line, f"`{call.func.text}(..., {key}=...)`", pm.facts.path)
    if method_of(call) == "add_loss" and call.args:
        return (call.site.line, f"`{call.func.text}(...)`", pm.facts.path)
    return None


class _Search:
    """Regularization in what a model is built from; each class and function looked at once."""

    def __init__(self):
        self.seen: set = set()

    def calls(self, pm, calls, depth):
        for call in calls:
            found = _penalty(pm, call)
            if found:
                return found
            if not call.func.text or depth >= MAX_DEPTH:
                continue
            target = pm.binding(call.func.text, call.site)
            if isinstance(target, Klass):
                found = self.klass(target, depth + 1)
            elif isinstance(target, Function) and target.owner is None:
                found = self.function(target, depth + 1)
            else:
                found = None
            if found:
                return found
        return None

    def klass(self, klass: Klass, depth):
        pm = klass.model
        key = ("class", pm.facts.path, klass.block.id)
        if key in self.seen:
            return None
        self.seen.add(key)
        methods = {fn.block.id for cls in pm.bases(klass.block) for fn in pm.methods(cls)}
        calls = [c for c in pm.spans.calls if pm.facts.scope_of(c.site) in methods]
        return self.calls(pm, calls, depth)

    def function(self, fn: Function, depth):
        """A model builder: what its returned values are made from."""
        pm = fn.model
        key = ("function", pm.facts.path, fn.block.id)
        if key in self.seen:
            return None
        self.seen.add(key)
        facts = pm.facts
        for exit_ in facts.exits:
            if exit_.kind == "return" and exit_.span != (0, 0) and facts.scope_of(exit_.site) == fn.block.id:
                found = self.value(pm, exit_.span, exit_.site, depth)
                if found:
                    return found
        return None

    def value(self, pm, span, site, depth):
        """A value, the calls it is made of, and (through the names it reads) the values before it."""
        facts = pm.facts
        found = self.calls(pm, pm.spans.calls_in(span), depth)
        if found:
            return found
        for use in pm.spans.uses_in(span):
            if use.name.startswith("self.") or use.name in ("None", "True", "False"):
                continue
            name = use.name.split(".")[0]
            for assign in pm.assigns_here(name, use.site):
                key = ("assign", facts.path, assign.site)
                if key in self.seen or assign.span == (0, 0):
                    continue
                self.seen.add(key)
                found = self.value(pm, assign.span, assign.site, depth) or self.added(pm, name, assign, depth)
                if found:
                    return found
        return None

    def added(self, pm, name, assign, depth):
        """`model.add(Dense(..., kernel_regularizer=...))`, `model.add_loss(...)` after `model = ...`."""
        facts = pm.facts
        scope = facts.scope_of(assign.site)
        later = [
            c for c in pm.calls_in_scope(scope)
            if c.receiver == name and c.method in ("add", "add_loss") and c.site.order > assign.site.order
        ]
        for call in later:
            found = _penalty(pm, call) or self.calls(pm, pm.spans.calls_in(call_span(call)), depth)
            if found:
                return found
        return None


def _regularization_of(pm, root: str, site):
    """Where the model `root` (at `site`) is regularized: (line, text, file), or None (none, or unknown)."""
    search = _Search()
    klass = pm.self_class(root, site)
    if klass is not None and pm.is_keras(klass):
        return search.klass(Klass(klass, pm), 0)
    target = pm.binding(root, site)
    if isinstance(target, Instance):
        return search.klass(target.klass, 0)
    if target is not None:
        return None
    if "." in root:  # `self.model`: the one `self.model = ...` in the methods of the class
        assigns = pm.assigns_of(root, site, bases=False)
        assign = assigns[0] if len(assigns) == 1 and assigns[0].kind == "assign" else None
    else:
        assign = _bound_value(pm, root, site)
    if assign is None or assign.value is None or assign.value.kind != "call":
        return None
    return search.value(pm, assign.span, assign.site, 0) or search.added(pm, root, assign, 0)


# -- whether the step adds the losses ---------------------------------------------------------


def _reads_losses(facts, use) -> bool:
    owner, _, last = use.name.rpartition(".")
    if last == "losses" and owner:
        return not _library(facts, owner)
    return "get_losses_for" in use.name.split(".")


def _adds_losses(pm, scopes, depth: int = 0, seen=None) -> bool:
    """Whether these scopes (or a function of the project they call) read `.losses` or let Keras add them."""
    seen = set() if seen is None else seen
    facts = pm.facts
    for use in pm.spans.uses:
        if facts.scope_of(use.site) in scopes and _reads_losses(facts, use):
            return True
    for call in pm.spans.calls:
        if facts.scope_of(call.site) not in scopes:
            continue
        if method_of(call) in ADDS_LOSSES_CALLS or call.func.text in ADDS_LOSSES_CALLS:
            return True
        if depth >= MAX_DEPTH:
            continue
        callee = pm.resolve(call)
        if callee is None or (callee.model.facts.path, callee.block.id) in seen:
            continue
        seen.add((callee.model.facts.path, callee.block.id))
        if _adds_losses(callee.model, {callee.block.id}, depth + 1, seen):
            return True
    return False


def _step_scopes(pm, scope: int) -> set[int]:
    """The step's scope, and every method of its class (a trainer may add the penalties in any of them)."""
    fn = pm.functions.get(scope)
    if fn is None or fn.owner is None:
        return {scope}
    return {f.block.id for f in pm.methods(fn.owner)} | {scope}


def _unknown_helper(pm, tape, root: str, scope: int) -> bool:
    """Inside the tape, a call the model cannot follow that is given the model, or a method of it,
    or a use of its variables (a penalty written by hand): it may add the penalties."""
    facts = pm.facts
    head = root.split(".")[0]
    for use in pm.spans.uses:
        if facts.scope_of(use.site) != scope or not facts.records(tape, use.site):
            continue
        if variable_owner(use.name) == root:
            return True
    for call in pm.spans.calls:
        if facts.scope_of(call.site) != scope or not facts.records(tape, call.site):
            continue
        if call.func.text == root or pm.resolve(call) is not None:
            continue
        if call.receiver and (call.receiver == root or call.receiver.startswith(root + ".")):
            return True
        for use in pm.spans.uses_in(call_span(call)):
            if use.context == "argument" and use.name in (root, head):
                return True  # `penalty(model)`, `helper(self, x)`
    return False


def check(facts):
    pm = model_of(facts)
    applies = {facts.scope_of(c.site) for c in facts.calls if method_of(c) == "apply_gradients"}
    adds_losses: dict[int, bool] = {}  # per step scope: read once, whatever the roots and tapes
    for call, tape in pm.gradient_calls():
        scope = facts.scope_of(call.site)
        target = call.arg(0, "target")
        if scope not in applies or not tape.with_blocks or not tape.name or target is None:
            continue
        if call.arg(1, "sources") is None:
            continue
        _, owners = pm.gradient_roots(call, tape)  # the models whose variables are asked for
        for root in sorted(owners):
            found = _regularization_of(pm, root, call.site)
            if found is None:
                continue
            if scope not in adds_losses:
                adds_losses[scope] = _adds_losses(pm, _step_scopes(pm, scope))
            if adds_losses[scope] or _unknown_helper(pm, tape, root, scope):
                continue
            line, text, file = found
            yield report(
                facts, call.site, CODE,
                f"`{root}` has regularization ({text} at {line_at(file, line, facts.path)}), but the loss "
                f"`{target.text or 'given'}` differentiated here never adds `{root}.losses`: `fit` would add the "
                "penalties, this step silently trains without them",
                HINT, details={"model": root, "regularization_line": line, "file": file},
            )
            break


# -- the fix (`--fix --unsafe-fixes`) ---------------------------------------------------------
# Where `+ sum(...)` can go without parentheses: `a + b`, `f(x)`, `x.y`, `x[0]`, a name.
_PLAIN_OPERATORS = ("Add", "Subtract", "Multiply", "Divide", "FloorDivide", "Modulo", "MatrixMultiply", "Power")


def fix(tree, finding):
    """Add `+ sum(<model>.losses)` to the one assignment of the differentiated loss inside the tape.

    `tree` is `tapecheck.lint.fixes._Tree` (libcst nodes with positions, and the facts);
    None where the edit would be a guess.
    """
    from tapecheck.findings import Edit, Fix

    cst, facts = tree.cst, tree.facts
    call = tree.fact_call(finding)
    root = finding.details.get("model", "")
    if call is None or not root or not all(part.isidentifier() for part in root.split(".")):
        return None
    tape = next((t for c, t in facts.gradient_calls() if c is call), None)
    target = call.arg(0, "target")
    if tape is None or target is None or target.kind != "name" or not target.text:
        return None
    assigns = facts.reaching_assigns(target.text, call.site)
    if len(assigns) != 1 or assigns[0].kind != "assign" or not facts.records(tape, assigns[0].site):
        return None
    site = assigns[0].site
    nodes = [n for n in tree.nodes_at(cst.Assign, site.line, site.col)
             if len(n.targets) == 1 and isinstance(n.targets[0].target, cst.Name)
             and n.targets[0].target.value == target.text]
    if len(nodes) != 1:
        return None
    value = nodes[0].value
    penalty = f"sum({root}.losses)"
    (line, col), (end_line, end_col) = tree.start(value), tree.end(value)
    plain = isinstance(value, (cst.Call, cst.Name, cst.Attribute, cst.Subscript)) or (
        isinstance(value, cst.BinaryOperation) and type(value.operator).__name__ in _PLAIN_OPERATORS)
    if plain:
        edits = (Edit(end_line, end_col, end_line, end_col, f" + {penalty}"),)
    else:
        edits = (Edit(line, col, line, col, "("), Edit(end_line, end_col, end_line, end_col, f") + {penalty}"))
    return Fix(f"Add `{penalty}` to `{target.text}`", edits, safe=False)

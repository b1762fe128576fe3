'''# TAP101 target-outside-tape

## What it does
Checks that the target of `tape.gradient(target, sources)` (the loss) is
computed while the tape records: inside its `with tf.GradientTape() as tape:`
block. It flags a target assigned before or after the block, a loss topped up
after the block (`loss += l2`), and a target expression written into the
`gradient` call itself (`tape.gradient(a + b, ...)`) when that call is outside
the block.

It also flags a loss computed inside the block from a forward pass that ran
before it: the prediction made before `with tf.GradientTape()` in the same
function (reported where it is made), or passed in by a caller of the step
function that ran the model itself (reported at that call). In a `train_step`
override, Keras's own `self.compute_loss(...)` (or `compiled_loss`) counts as a
loss of `y` and `y_pred`, not as a forward pass. Values computed
before the tape on purpose (a DQN's targets from another network) are fine: some
path from the model must stay inside the tape.

## Why is this bad?
A tape only knows the operations it watched. The last operation that produced
the target happened outside the tape, so the tape cannot connect the target to
any source: in TensorFlow 2.21 `tape.gradient` then returns `None` for *every*
source, not just for the part added late. Keras only warns later that
"Gradients do not exist for variables", and the model silently stops learning.

## Example
```python
import tensorflow as tf

w = tf.Variable(1.0)
b = tf.Variable(2.0)
x = tf.constant(2.0)
with tf.GradientTape() as tape:
    y = w * x
z = y + b
grads = tape.gradient(z, [w, b])  # [None, None]
```

## Use instead
```python
import tensorflow as tf

w = tf.Variable(1.0)
b = tf.Variable(2.0)
x = tf.constant(2.0)
with tf.GradientTape() as tape:
    y = w * x
    z = y + b
grads = tape.gradient(z, [w, b])  # [2.0, 1.0]
```
'''

from tapecheck.model import Tracer, model_of, prefixes
from tapecheck.rules._common import flatten, report

CODE = "TAP101"
NAME = "target-outside-tape"
SUMMARY = "the gradient target is computed outside the tape's `with` block"
PROBE = True
TRIGGERS = (b"GradientTape",)
# At the same `gradient` call, "the target is computed outside the tape" is also why a source
# is "used only outside" it: one cause, one finding.
SUBSUMES = ("TAP102",)

# Method calls that only fetch an already computed value: no new tensor op.
CONTAINER_METHODS = frozenset({"get", "pop", "popitem", "setdefault", "copy"})

VALID = [
    # the loss built in a helper called inside the block
    """
import tensorflow as tf
def train_step(model, x, y, loss_fn, opt):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
""",
    # gradient asked inside the block, of an inline sum
    """
import tensorflow as tf
def step(model, x):
    with tf.GradientTape() as tape:
        a, b = model(x)
        grads = tape.gradient(a + b, model.trainable_variables)
    return grads
""",
    # an alias of the loss after the block is the same recorded tensor
    """
import tensorflow as tf
def step(model, x):
    with tf.GradientTape() as tape:
        total = model(x)
    loss = total
    return tape.gradient(loss, model.trainable_variables)
""",
    # DQN: the target values are computed before the tape on purpose; the loss is inside
    """
import tensorflow as tf
def step(q_net, target_net, s, a, r, s2, gamma, opt):
    target = r + gamma * tf.reduce_max(target_net(s2), axis=1)
    with tf.GradientTape() as tape:
        q = tf.reduce_sum(q_net(s) * tf.one_hot(a, 4), axis=1)
        loss = tf.reduce_mean(tf.square(target - q))
    grads = tape.gradient(loss, q_net.trainable_variables)
    opt.apply_gradients(zip(grads, q_net.trainable_variables))
""",
    # the loss comes in as a parameter: nothing to see
    """
import tensorflow as tf
def grads_of(tape, loss, variables):
    return tape.gradient(loss, variables)
""",
    # a `compute_loss` of the model's own, which runs the model itself inside the tape
    """
import tensorflow as tf
class Denoiser(tf.keras.Model):
    def __init__(self):
        super().__init__()
        self.dense = tf.keras.layers.Dense(4)
    def compute_loss(self, x, y, y_pred):
        return tf.reduce_mean(tf.square(self.dense(x) - y))
    def train_step(self, data):
        x, y = data
        y_pred = self(x, training=True)
        with tf.GradientTape() as tape:
            loss = self.compute_loss(x, y, y_pred)
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        return {"loss": loss}
""",
]

INVALID = [
    # mixed precision: the losses scaled after the tape closed, in a dict
    """
import tensorflow as tf
def step(model, opt, x, y, loss_fn, mixed_precision):
    with tf.GradientTape() as tape:
        losses = {"loss": loss_fn(y, model(x, training=True))}
    if mixed_precision:
        losses = {k: opt.get_scaled_loss(v) for k, v in losses.items()}
        grads = opt.get_unscaled_gradients(tape.gradient(losses["loss"], model.trainable_variables))  # expect: TAP101
    else:
        grads = tape.gradient(losses["loss"], model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
""",
    # a `train_step` override: the prediction before the tape, Keras's `compute_loss` inside
    """
import tensorflow as tf
class Net(tf.keras.Model):
    def __init__(self):
        super().__init__()
        self.dense = tf.keras.layers.Dense(1)
    def call(self, x):
        return self.dense(x)
    def train_step(self, data):
        x, y = data
        y_pred = self(x, training=True)  # expect: TAP101
        with tf.GradientTape() as tape:
            loss = self.compute_loss(x=x, y=y, y_pred=y_pred)
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        return {"loss": loss}
""",
    # the forward pass before the tape, the loss inside it
    """
import tensorflow as tf
def train_step(model, opt, loss_fn, x, y):
    pred = model(x, training=True)  # expect: TAP101
    with tf.GradientTape() as tape:
        loss = loss_fn(y, pred)
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
""",
    # the caller runs the model and passes the prediction in
    """
import tensorflow as tf
model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
def step(pred, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(pred - y))
    return tape.gradient(loss, model.trainable_variables)
for x, y in batches:
    step(model(x), y)  # expect: TAP101
""",
    # a loss changed after the tape on one branch only: None gradients whenever it runs
    """
import tensorflow as tf
def step(model, x, l2):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(model(x))
    if l2:
        loss = loss + l2 * tf.add_n([tf.nn.l2_loss(v) for v in model.trainable_variables])
    return tape.gradient(loss, model.trainable_variables)  # expect: TAP101
""",
    """
import tensorflow as tf
def train_step(model, x, y, opt):
    with tf.GradientTape() as tape:
        pred = model(x, training=True)
        loss = tf.reduce_mean(tf.square(y - pred))
    loss += 1e-4 * tf.add_n([tf.nn.l2_loss(v) for v in model.trainable_variables])
    grads = tape.gradient(loss, model.trainable_variables)  # expect: TAP101
    opt.apply_gradients(zip(grads, model.trainable_variables))
""",
    """
import tensorflow as tf
def step(model, x):
    with tf.GradientTape() as tape:
        a, b = model(x)
    return tape.gradient(a + b, model.trainable_variables)  # expect: TAP101
""",
    """
from tensorflow import GradientTape as GT
def step(model, x, loss_fn):
    tape = GT()
    with tape:
        out = model(x)
    loss = loss_fn(out)
    return tape.gradient(loss, model.trainable_variables)  # expect: TAP101
""",
]


def _computes(value) -> bool:
    """Whether evaluating `value` runs a TensorFlow-visible op (not a plain alias)."""
    if value is None:
        return False
    if value.kind == "binop":
        return True
    return value.kind == "call" and value.method not in CONTAINER_METHODS


def check(facts):
    yield from _target_outside(facts)
    yield from _forward_pass_outside(facts)


SOURCES = "sources"


def _forward_pass_outside(facts):
    """The loss is inside the tape, but the forward pass it uses ran before the tape (here,
    or in the caller that passed the prediction in): the tape has no path to the model."""
    model = model_of(facts)
    for call, tape in model.gradient_calls():
        target = call.arg(0, "target")
        if not tape.with_blocks or not tape.name or target is None or target.kind != "name":
            continue
        if not facts.records(tape, call.site) and not any(
            facts.records(tape, a.site) for a in model.assigns_on_every_path(target.text, call.site)
        ):
            continue  # the target itself is outside: `_target_outside` says so
        _, owners = model.gradient_roots(call, tape)
        if not owners:
            continue  # sources named one by one: TAP102 judges where they are used

        def from_sources(name):
            return not owners.isdisjoint(prefixes(name))

        before = model.flow_before(tape, lambda name: {SOURCES} if from_sources(name) else set())
        scope = facts.scope_of(tape.site)
        fn = model.functions.get(scope)
        params = set(fn.params) if fn is not None else set()
        inside = {a.target for a in model.assigns_in(scope) if facts.records(tape, a.site)}
        keras_losses = _keras_loss_methods(model, fn)

        def origin_of(name, inside=inside, before=before, params=params, keras_losses=keras_losses):
            if name in keras_losses:
                return set()  # Keras's own loss of (y, y_pred): what it reads of the model is its penalties
            if from_sources(name):
                return {SOURCES}
            head = name.partition(".")[0]
            if head in inside:
                return set()
            flow = before.get(head)
            if flow is not None and SOURCES in flow.live:
                return {f"before:{head}"}
            if flow is None and head in params:
                return {f"param:{head}"}
            return set()

        state = model.tape_flow(tape, call, origin_of)
        flow = state.get(target.text)
        if flow is not None and SOURCES in flow.live:
            term = _term_made_before(model, tape, call, target.text, state, origin_of)
            if term is not None:
                name, made, total = term
                yield report(
                    facts, made.site, CODE,
                    f"`{name}` is computed from the model here, before the `with` block of `{tape.name}` "
                    f"(line {facts.blocks[tape.with_blocks[0]].line}), and added to `{target.text}` inside it "
                    f"(line {total.site.line}): the tape never recorded how `{name}` was made, so its term adds "
                    f"a constant and `{tape.name}.gradient` (line {call.site.line}) gets nothing from it",
                    f"Compute `{name}` inside the `with` block of `{tape.name}`.",
                )
            continue
        if flow is None or SOURCES in flow.cuts:
            continue
        label = tape.name
        block_line = facts.blocks[tape.with_blocks[0]].line
        for origin in sorted(flow.live):
            kind, _, name = origin.partition(":")
            if kind == "before":
                made = model.assigns_on_every_path(name, tape.site)
                if not made:
                    continue
                penalties = any(use.name in keras_losses and facts.records(tape, use.site) for use in facts.uses)
                yield report(
                    facts, made[-1].site, CODE,
                    f"`{name}` is computed from the model here, before the `with` block of `{label}` "
                    f"(line {block_line}), and `{target.text}` depends on the model only through it: the tape "
                    f"never recorded the forward pass, so `{label}.gradient` (line {call.site.line}) "
                    "returns None for every variable" + (
                        " (if the model has regularizers, only the penalties `compute_loss` adds reach those weights)"
                        if penalties else ""),
                    f"Run the forward pass inside the `with` block of `{label}`.",
                )
                break
            if kind == "param" and fn is not None:
                caller = _caller_passing_the_model(model, fn, name, owners, scope)
                if caller is None:
                    continue
                yield report(
                    facts, caller.site, CODE,
                    f"this call passes `{name}` to `{fn.qualname}` already computed from the model, outside the "
                    f"`with` block of `{label}` (line {block_line}) that uses it: the tape never recorded the "
                    f"forward pass, so `{label}.gradient` (line {call.site.line}) returns None for every variable",
                    f"Pass the inputs and run the model inside the `with` block of `{label}`.",
                )
                break


def _term_made_before(model, tape, call, target, state, origin_of):
    """A term of the sum that makes the target inside the tape (`loss = w_loss + lam * gp`, no term
    subtracted) that depends on the model only through a value computed before the tape: (that
    value's name, its binding before the tape, the sum's assignment), or None."""
    facts = model.facts
    inside = [a for a in model.assigns_on_every_path(target, call.site) if facts.records(tape, a.site)]
    if len(inside) != 1 or inside[0].kind != "assign" or inside[0].value is None or inside[0].value.kind != "binop":
        return None
    total = inside[0]
    whole = [terms for terms in model.sums_in(total.span) if terms[0][0] == total.span[0] and terms[-1][1] == total.span[1]]
    if len(whole) != 1 or (whole[0][0][0], whole[0][-1][1]) in model.differences:
        return None
    tracer = Tracer(model, origin_of, boundary=tuple(tape.with_blocks))
    tracer.state = dict(state)
    fn = model.functions.get(facts.scope_of(tape.site))
    own = f"param:{fn.self_name}" if fn is not None and fn.self_name else None  # `self.lambda_ * gp`
    for term in whole[0]:
        flow = tracer.judge(term)
        before = sorted(origin for origin in flow.live if origin.startswith("before:"))
        if SOURCES in flow.live or flow.cuts or len(before) != 1 or any(
                origin != own for origin in flow.live if not origin.startswith("before:")):
            continue
        name = before[0].partition(":")[2]
        made = model.assigns_on_every_path(name, tape.site)
        if len(made) == 1 and made[0].kind == "assign":
            return name, made[0], total
    return None


KERAS_LOSS_METHODS = ("compute_loss", "compiled_loss")


def _keras_loss_methods(model, fn) -> frozenset:
    """`self.compute_loss`, `self.compiled_loss` in a method of a Keras Model subclass that does not
    define them: Keras's loss of `(y, y_pred)` plus the model's penalties, not a forward pass."""
    if fn is None or not fn.bound or fn.owner is None or not model.is_model_class(fn.owner):
        return frozenset()
    own = {method.name for cls in model.bases(fn.owner) for method in model.methods(cls)}
    return frozenset(f"{fn.self_name}.{name}" for name in KERAS_LOSS_METHODS if name not in own)


def _caller_passing_the_model(model, fn, param, owners, scope):
    """A call of `fn` whose argument for `param` runs a model that `fn` asks gradients of (the same
    global name in both places), outside any tape there."""
    facts = model.facts
    local = {a.target for a in model.assigns_in(scope)}
    shared = {o for o in owners if o.partition(".")[0] not in local}
    if not shared:
        return None
    for caller in model.callers(fn):
        for key, start, end in caller.arg_spans:
            uses = model.spans.uses_in((start, end))
            if not uses or model.parameter(caller, fn, uses[0].site.order) != param:
                continue
            if any(not shared.isdisjoint(prefixes(u.name)) for u in uses):
                if not facts.recording(caller.site):
                    return caller
    return None


def _computed_by_comprehension(model, assign) -> bool:
    """`scaled = {k: opt.get_scaled_loss(v) for k, v in losses.items()}`: a comprehension whose
    elements are computed by a call (not only picked from a container)."""
    value = assign.value
    if value is None or value.kind != "other" or not model.comprehensions_in(assign.span):
        return False
    return any(c.method not in CONTAINER_METHODS | {"items", "keys", "values"} and c.func.text not in ("zip", "enumerate", "range")
               for c in model.spans.calls_in(assign.span) if c.site.in_comprehension)


def _target_outside(facts):
    model = model_of(facts)
    for call, tape in model.gradient_calls():
        target = call.arg(0, "target")
        block_line = facts.blocks[tape.with_blocks[0]].line if tape.with_blocks else tape.site.line
        label = tape.name or "the tape"
        for element in flatten(target):
            if element.kind == "name" or (element.kind == "subscript" and element.text and "." not in element.text):
                # `loss`, or `losses["total"]` of a dict rebuilt after the tape
                reaching = model.assigns_on_every_path(element.text, call.site)
                outside = [
                    a for a in reaching
                    if not facts.records(tape, a.site) and a.kind in ("assign", "augassign")
                    and (_computes(a.value) or _computed_by_comprehension(model, a))
                ]
                # a value changed after the tape started is never recorded, even if only on one branch;
                # one made before the tape matters only when no binding inside it may hold
                late = [a for a in outside if a.site.order > tape.site.order]
                if not late and (not outside or len(outside) != len(reaching)):
                    continue
                last = (late or outside)[-1]
                when = "before" if last.site.order < tape.site.order else "after"
                yield report(
                    facts, call.site, CODE,
                    f"`{element.text}` is computed at line {last.site.line}, {when} the `with` block of "
                    f"`{label}` (line {block_line}): the tape never recorded it, so every gradient is None",
                    f"Compute `{element.text}` inside the `with` block of `{label}`.",
                )
            elif element.kind in ("binop", "call") and _computes(element) and not facts.records(tape, call.site):
                if tape.with_blocks:
                    yield report(
                        facts, call.site, CODE,
                        f"the gradient target is computed in this call, outside the `with` block of `{label}` "
                        f"(line {block_line}): the tape never recorded it, so every gradient is None",
                        "Compute the target inside the `with` block and pass the result.",
                    )

'''# TAP409 tf-function-given-another-optimizer

## What it does
Flags a call that hands a second, not yet built optimizer to a `tf.function` that applies
gradients with the optimizer it is given: the function was already traced with a first
optimizer (an earlier call on the same path), directly or through helpers that pass the
optimizer on (`fit_one_epoch(model, optimizer, ...)` calling `train_step(..., optimizer)`).
The usual shapes: a freeze phase then an unfreeze phase, each with its own `Adam`, both
trained by one module-level `@tf.function` step; a GAN whose two nets are trained by one
`@tf.function` step called with the generator's and then the discriminator's optimizer.

## Why is this bad?
A Keras optimizer makes its variables (the iteration count, Adam's moments) at its first
`apply_gradients`. Given another Python object, the `tf.function` traces again, and the
new trace must make the second optimizer's variables; TensorFlow allows a `tf.function` to
make variables only on its first trace. Measured on TensorFlow 2.21 / Keras 3.15, at the
first step with the second optimizer: `ValueError: tf.function only supports singleton
tf.Variables created on the first call` (`Creating variables on a non-first call to a
function decorated with tf.function` when the first optimizer made none). Every Keras
optimizer makes variables there except `SGD` without momentum: a plain `SGD` second trains
on, and so does the same step given the first optimizer again (a phase that only unfreezes
layers).

## Example
```python
import tensorflow as tf

@tf.function
def train_step(model, optimizer, x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss

def fit(model, x, y):
    warmup = tf.keras.optimizers.Adam(1e-3)
    train_step(model, warmup, x, y)
    finetune = tf.keras.optimizers.Adam(1e-5)
    train_step(model, finetune, x, y)
```

## Use instead
```python
import tensorflow as tf

def make_train_step():
    @tf.function
    def train_step(model, optimizer, x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss
    return train_step

def fit(model, x, y):
    warmup = tf.keras.optimizers.Adam(1e-3)
    make_train_step()(model, warmup, x, y)
    finetune = tf.keras.optimizers.Adam(1e-5)
    make_train_step()(model, finetune, x, y)
```

A new `tf.function` per optimizer (as above), or each optimizer built before the step first
runs with it (`finetune.build(model.trainable_variables)`: its variables then exist, and the
new trace makes none).

## Where it stays silent
When the second optimizer makes no variables (`SGD` without momentum) or may not (`SGD`
given a momentum whose value is not read), when the
`tf.function` is made anew for each optimizer (defined inside another function),
when an optimizer is built (`.build(...)`) anywhere in the file, when which optimizer a call
passes is not known for certain (a parameter nothing in the file fills, a name bound on some
paths only, an attribute), when the two calls never both run (the two branches of one
`if`/`else`, two functions), and when the two arguments are one optimizer object.
'''

from __future__ import annotations

from tapecheck.model import TF_FUNCTIONS, is_keras_class, keras_member, model_of
from tapecheck.rules._common import names_tf_function, report

# Its mistake raises an exception: findings inside a test that expects that error are left out.
RAISES = True
CODE = "TAP409"
NAME = "tf-function-given-another-optimizer"
SUMMARY = ("a `tf.function` step that applies gradients is called with a second optimizer: the new trace must "
           "create that optimizer's variables, and TensorFlow raises `tf.function only supports singleton tf.Variables`")
APPLY_METHODS = frozenset({"apply_gradients", "minimize", "apply"})
MAX_DEPTH = 3  # helpers between the call that names the optimizer and the traced step


def screen(source: bytes) -> bool:
    """An update (`apply_gradients`, `.minimize(`, `.apply(`) and a `tf.function` decorator, spelled
    any way the file's imports allow."""
    if b"apply_gradients" not in source and b".minimize(" not in source and b".apply(" not in source:
        return False
    return names_tf_function(source, decorator=True)


VALID = [
    # the same optimizer in both phases
    """
import tensorflow as tf
@tf.function
def step(model, opt, x):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model(x, training=True))
    opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
def main(model, x):
    opt = tf.keras.optimizers.Adam()
    step(model, opt, x)
    model.layers[0].trainable = True
    step(model, opt, x)
""",
    # a plain SGD second: it makes no variables, so the new trace makes none
    """
import tensorflow as tf
@tf.function
def step(model, opt, x):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model(x, training=True))
    opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
def main(model, x):
    warmup = tf.keras.optimizers.Adam(1e-3)
    step(model, warmup, x)
    decay = tf.keras.optimizers.SGD(1e-4)
    step(model, decay, x)
""",
    # an SGD second whose momentum is 0.0: it makes no momentum variables either
    """
import tensorflow as tf
@tf.function
def step(model, opt, x):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model(x, training=True))
    opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
def main(model, x):
    warmup = tf.keras.optimizers.Adam(1e-3)
    step(model, warmup, x)
    plain = tf.keras.optimizers.SGD(1e-4, momentum=0.0)
    step(model, plain, x)
""",
    # one optimizer or the other, never both
    """
import tensorflow as tf
@tf.function
def step(model, opt, x):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model(x, training=True))
    opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
def main(model, x, fast):
    if fast:
        step(model, tf.keras.optimizers.Adam(1e-2), x)
    else:
        step(model, tf.keras.optimizers.SGD(1e-3), x)
""",
    # each optimizer built before the step traces with it
    """
import tensorflow as tf
@tf.function
def step(model, opt, x):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model(x, training=True))
    opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
def main(gen, disc, x):
    g_opt = tf.keras.optimizers.Adam()
    d_opt = tf.keras.optimizers.Adam()
    d_opt.build(disc.trainable_variables)
    g_opt.build(gen.trainable_variables)
    step(gen, g_opt, x)
    step(disc, d_opt, x)
""",
    # a new tf.function for each phase
    """
import tensorflow as tf
def make_step():
    @tf.function
    def step(model, opt, x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(model(x, training=True))
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    return step
def main(model, x):
    first = tf.keras.optimizers.Adam()
    make_step()(model, first, x)
    second = tf.keras.optimizers.SGD()
    make_step()(model, second, x)
""",
]

INVALID = [
    # a freeze phase and an unfreeze phase, each with its own optimizer, through a helper
    """
import tensorflow as tf
@tf.function
def train_step(x, y, net, optimizer):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(net(x, training=True) - y))
    grads = tape.gradient(loss, net.trainable_variables)
    optimizer.apply_gradients(zip(grads, net.trainable_variables))
    return loss
def fit_one_epoch(net, optimizer, batches):
    for x, y in batches:
        train_step(x, y, net, optimizer)
def main(net, batches):
    optimizer = tf.keras.optimizers.Adam(1e-3)
    for epoch in range(10):
        fit_one_epoch(net, optimizer, batches)
    net.trainable = True
    optimizer = tf.keras.optimizers.Adam(1e-4)
    for epoch in range(10, 20):
        fit_one_epoch(net, optimizer, batches)  # expect: TAP409
""",
    # a warm-up with Adam, then SGD with momentum: its momentum variables are made by the new trace
    """
import tensorflow as tf
@tf.function
def step(model, opt, x):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model(x, training=True))
    opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
def main(model, x):
    warmup = tf.keras.optimizers.Adam(1e-3)
    step(model, warmup, x)
    finetune = tf.keras.optimizers.SGD(1e-4, momentum=0.9)
    step(model, finetune, x)  # expect: TAP409
""",
    # a GAN's two nets trained by one traced step
    """
import tensorflow as tf
gen_opt = tf.keras.optimizers.Adam(2e-4)
disc_opt = tf.keras.optimizers.Adam(2e-4)
@tf.function
def update(net, opt, loss_fn, batch):
    with tf.GradientTape() as tape:
        loss = loss_fn(batch)
    opt.apply_gradients(zip(tape.gradient(loss, net.trainable_variables), net.trainable_variables))
def train(gen, disc, g_loss, d_loss, data):
    for batch in data:
        update(disc, disc_opt, d_loss, batch)
        update(gen, gen_opt, g_loss, batch)  # expect: TAP409
""",
]


class Passed:
    """One way an optimizer reaches the traced step: the call, in the scope where the optimizer is
    bound, that hands it on (`call`), the binding that made it (`made`), and the calls from that one
    to the step (`path`, outermost first)."""

    __slots__ = ("call", "made", "path")

    def __init__(self, call, made, path):
        self.call, self.made, self.path = call, made, path


def _optimizer_class(model, assign) -> str:
    """The Keras optimizer class a binding makes (`Adam`), or ""."""
    value = assign.value
    if assign.kind != "assign" or value is None or value.kind != "call" or not value.func_text:
        return ""
    for callee in (value.callee, model.resolved(value.func_text, assign.site)):
        if is_keras_class(callee, "optimizers") and ".schedules." not in callee:
            return keras_member(callee, "optimizers")
    return ""


def _makes_variables(model, assign) -> bool | None:
    """Whether the optimizer a binding makes creates variables at its first `apply_gradients`.
    Measured on Keras 3.15: every optimizer does (slots, accumulators, a loss scale) except `SGD`
    without momentum, which makes none. None when it cannot be told (`SGD(momentum=rate)`)."""
    if _optimizer_class(model, assign) != "SGD":
        return True
    call = model.value_call(assign)
    momentum = call.arg(1, "momentum") if call is not None else None
    if momentum is None:
        return False
    if momentum.kind == "constant" and type(momentum.value) in (int, float):
        return momentum.value != 0  # `momentum=0.9` makes a momentum variable, `momentum=0.0` none
    return None


def _passed(model, fn, param, depth=0):
    """Every way an optimizer reaches `param` of `fn`, or None when one of them is not known for
    certain (then the rule says nothing)."""
    pairs = model.arguments_for(fn, param)
    if not pairs or depth > MAX_DEPTH:
        return None
    found = []
    for call, value in pairs:
        if value.kind != "name" or not value.text:
            return None  # an attribute, an inline constructor, an expression: not followed
        assigns = model.assigns_on_every_path(value.text, call.site)
        if len(assigns) != 1:
            assigns = model.assigns_reaching(value.text, call.site)
            if len(assigns) != 1 or not model.made_once(assigns[0]):
                return None  # bound on some paths only, or several may hold
        assign = assigns[0]
        if assign.kind == "param":
            outer = model.functions.get(model.facts.scope_of(call.site))
            inner = _passed(model, outer, value.text, depth + 1) if outer is not None else None
            if inner is None:
                return None
            found.extend(Passed(p.call, p.made, p.path + (call,)) for p in inner)
        elif _optimizer_class(model, assign):
            found.append(Passed(call, assign, (call,)))
        else:
            return None
    return found


def _runs_before(model, first, second) -> bool:
    """`first` runs before `second` in one run of their scope: the same scope, earlier, and every
    suite that holds `first` and not `second` is one that runs (a `with`, a loop, an `if` on a
    constant such as `if True:`), not a branch that may be skipped."""
    facts = model.facts
    if facts.scope_of(first) != facts.scope_of(second) or first.order >= second.order:
        return False
    if model.exclusive(first, second):
        return False
    second_chain = set(facts.chain(second.block))
    for block_id in facts.chain(first.block):
        if block_id in second_chain:
            continue
        block = facts.blocks[block_id]
        if block.kind in ("with", "for", "while"):
            continue
        if block.kind == "if" and block.test_span != (0, 0) and not model.spans.calls_in(block.test_span) \
                and all(use.name == "True" for use in model.spans.uses_in(block.test_span)):
            continue  # `if True:` (or a number): a constant test
        return False
    return True


def _traced_steps(model):
    """Functions decorated with `tf.function`, with the scope whose run makes the traced object: a
    module-level function is one object for the whole run, a nested one is one per run of its scope."""
    facts = model.facts
    for fn in model.functions.values():
        if fn.owner is not None or not set(fn.block.decorators) & TF_FUNCTIONS or fn.block.parent is None:
            continue
        holder = facts.blocks[fn.block.parent]
        if any(facts.blocks[b].kind in ("for", "while") for b in _suites_up_to(facts, holder)):
            continue  # defined in a loop: a new traced function each turn
        yield fn, holder.scope


def _suites_up_to(facts, block):
    """The suites from the scope that owns `block` down to it (the scope itself left out)."""
    chain = facts.chain(block.id)
    return chain[chain.index(block.scope) + 1:] if block.scope in chain else []


def _sees_one_object(facts, scope, call) -> bool:
    """Whether a call runs inside one run of `scope` (the scope whose run made the traced
    function): in it, or in a function nested in it."""
    return scope in facts.chain(call.site.block)


def _built(model) -> set[str]:
    """Names whose optimizer is built explicitly somewhere in the file (`opt.build(variables)`)."""
    return {call.receiver for call in model.facts.calls if call.method == "build" and call.receiver}


def check(facts):
    model = model_of(facts)
    built = None
    for fn, scope in _traced_steps(model):
        for apply in model.calls_in_scope(fn.block.id):
            if apply.method not in APPLY_METHODS or apply.receiver not in fn.params:
                continue
            if apply.method == "apply" and not apply.args:
                continue
            assigns = model.assigns_of(apply.receiver, apply.site)
            if len(assigns) != 1 or assigns[0].kind != "param":
                continue  # rebound in the step
            passed = _passed(model, fn, apply.receiver)
            if not passed or not all(_sees_one_object(facts, scope, p.call) for p in passed):
                continue
            if built is None:
                built = _built(model)
            if any(p.made.target in built for p in passed):
                continue
            finding = _second(model, passed)
            if finding is None:
                continue
            first, second = finding
            yield _report(model, fn, apply, first, second)
            break


def _second(model, passed):
    """(the first way, the later way) when a call hands on another optimizer after a call that
    handed one on has run, in the same scope; None otherwise."""
    for later in passed:
        if not _makes_variables(model, later.made):
            continue  # plain SGD makes no variables: its trace makes none either
        for earlier in passed:
            if earlier.made is later.made or earlier.made.site == later.made.site:
                continue
            if _runs_before(model, earlier.call.site, later.call.site):
                return earlier, later
    return None


def _through(way) -> str:
    """For the message: the calls between the one that names the optimizer and the step
    (`, handed on by `train_step(...)` at line 44`), or nothing when it calls the step itself."""
    inner = way.path[1:]
    if not inner:
        return ""
    said = ", then ".join(f"`{c.func.text}(...)` at line {c.site.line}" for c in inner)
    return f", handed on by {said}"


def _error(model, first) -> str:
    """The error TensorFlow 2.21 raises: its text depends on whether the first trace made variables."""
    if _makes_variables(model, first) is False:
        return "`ValueError: Creating variables on a non-first call to a function decorated with tf.function`"
    return "`ValueError: tf.function only supports singleton tf.Variables created on the first call`"


def _report(model, fn, apply, first, second):
    facts = model.facts
    name = fn.name
    made_first, made_second = first.made, second.made
    return report(
        facts, second.call.site, CODE,
        f"`{name}` is a `tf.function` (line {fn.block.line}) that runs `{apply.receiver}.{apply.method}(...)` "
        f"(line {apply.site.line}) with the optimizer it is given. It first runs with `{made_first.target}` "
        f"made at line {made_first.site.line} (`{first.call.func.text}(...)` at line {first.call.site.line}); "
        f"this call hands it `{made_second.target}`, another optimizer made at line {made_second.site.line}"
        f"{_through(second)}. A new object makes `{name}` trace again, and that trace must create "
        "the new optimizer's variables (its moments, accumulators or momentum): TensorFlow allows variables only "
        f"on a `tf.function`'s first trace, so it raises {_error(model, made_first)}",
        f"Make a new `tf.function` for each optimizer (define `{name}` inside a function that returns it, and "
        f"call that once per phase), or build each optimizer before `{name}` first runs with it: "
        f"`{made_second.target}.build(<the model>.trainable_variables)`.",
        details={"function": name, "first": made_first.site.line, "second": made_second.site.line},
    )

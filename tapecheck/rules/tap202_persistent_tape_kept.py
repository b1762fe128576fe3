'''# TAP202 persistent-tape-kept

## What it does
Flags a tape made with `persistent=True` that is asked for gradients only
once, and a persistent tape made at module level (a script or a notebook) that
is never deleted.

## Why is this bad?
A persistent tape keeps every intermediate tensor of the forward pass alive
until the tape itself goes away, so that it can be asked again. Asked once, it
only costs memory (and on the GPU, batch size). At module level nothing ever
releases it: the activations of the last step stay pinned for the rest of the
run.

## Example
```python
import tensorflow as tf

def train_step(model, x, y, loss_fn, opt):
    with tf.GradientTape(persistent=True) as tape:
        loss = loss_fn(y, model(x, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
```

## Use instead
```python
import tensorflow as tf

def train_step(model, x, y, loss_fn, opt):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
```

## Fix safety
For a tape asked for gradients once, the fix drops `persistent=True`. It is
safe: the single call gives the same gradients. For a module-level tape that
is never deleted, the fix adds `del tape` after the statement holding its last
use, when that statement is in the block that made the tape and the name is
not read anywhere else.
'''

from tapecheck.model import GRADIENT_METHODS, TF_FUNCTIONS
from tapecheck.rules._common import report

CODE = "TAP202"
NAME = "persistent-tape-kept"
SUMMARY = "a persistent tape is used once, or never released at module level"
PROBE = True
FIXABLE = True
TRIGGERS = (b"GradientTape",)

VALID = [
    # persistent inside tf.function: the tape lives only while tracing; a kept tape released
    """
import tensorflow as tf
@tf.function
def step(model, x):
    with tf.GradientTape(persistent=True) as tape:
        y = model(x)
        z = y * 2.0
    return tape.gradient(y, model.trainable_variables), tape.gradient(z, model.trainable_variables)
class Probe:
    def record(self, model, x):
        with tf.GradientTape(persistent=True) as tape:
            y = model(x)
        self.tape = tape
        return y
    def done(self):
        g = self.tape.gradient(self.tape, [])
        self.tape = None
        return g
""",
    # one call, asked once per head in a loop: persistence is needed
    """
import tensorflow as tf
def per_head(model, heads, x):
    with tf.GradientTape(persistent=True) as tape:
        features = model(x)
        losses = [tf.reduce_mean(head(features)) for head in heads]
    grads = []
    for loss in losses:
        grads.append(tape.gradient(loss, model.trainable_variables))
    del tape
    return grads
""",
    # two calls: persistence is needed
    """
import tensorflow as tf
def two_heads(model, x):
    with tf.GradientTape(persistent=True) as tape:
        a, b = model(x)
    ga = tape.gradient(a, model.trainable_variables)
    gb = tape.gradient(b, model.trainable_variables)
    return ga, gb
""",
    # gradient inside the block so that recording goes on (higher order)
    """
import tensorflow as tf
def second(x):
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = x ** 3
        dy = tape.gradient(y, x)
        z = dy * 2.0
    return z
""",
    # handed to a helper: it may ask again
    """
import tensorflow as tf
def f(model, x, helper):
    with tf.GradientTape(persistent=True) as tape:
        y = model(x)
    g = tape.gradient(y, model.trainable_variables)
    return helper(tape, g)
""",
    # jacobian without pfor needs a persistent tape
    """
import tensorflow as tf
def jac(f, x):
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = f(x)
    return tape.jacobian(y, x, experimental_use_pfor=False)
""",
]

INVALID = [
    # a persistent tape kept on the trainer after the step
    """
import tensorflow as tf
class Trainer:
    def step(self, model, x):
        with tf.GradientTape(persistent=True) as tape:
            a, b = model(x)
        ga = tape.gradient(a, model.trainable_variables)
        gb = tape.gradient(b, model.trainable_variables)
        self.last_tape = tape  # expect: TAP202
        return ga, gb
""",
    # tapes collected in a list, one per batch
    """
import tensorflow as tf
history = []
def step(model, x):
    with tf.GradientTape(persistent=True) as tape:
        y = model(x)
        z = tf.reduce_sum(y)
    history.append(tape)  # expect: TAP202
    return tape.gradient(y, model.trainable_variables), tape.gradient(z, model.trainable_variables)
""",
    """
import tensorflow as tf
x = tf.Variable(3.0)
with tf.GradientTape(persistent=True) as tape:  # expect: TAP202
    y = x * x
    z = y * y
dz_dx = tape.gradient(z, x)
dy_dx = tape.gradient(y, x)
""",
]



def _needs_persistence(facts, tape, call) -> bool:
    if call.method != "gradient":
        pfor = call.keywords.get("experimental_use_pfor")
        if pfor is not None and pfor.value is not True:
            return True  # the while-loop jacobian asks the tape many times
    return facts.records(tape, call.site)  # asked mid-recording so that recording goes on


def _kept(facts, tape):
    """Where a persistent tape is handed to something that outlives the step: `self.x = tape`,
    `tapes.append(tape)`, `tapes[k] = tape`. (site, holder's name, how to say it) or None."""
    scope = facts.scope_of(tape.site)
    for assign in facts.assigns:
        value = assign.value
        if (assign.kind == "assign" and value is not None and value.kind == "name" and value.text == tape.name
                and assign.target.startswith("self.") and facts.scope_of(assign.site) == scope
                and facts.tape_for(tape.name, assign.site) is tape):
            return assign.site, assign.target, f"`{assign.target}`"
    for store in facts.stores:
        value = store.value
        if value.kind == "name" and value.text == tape.name and facts.scope_of(store.site) == scope \
                and facts.tape_for(tape.name, store.site) is tape:
            return store.site, store.target, f"the container `{store.target}`"
    for call in facts.calls:
        if call.method in ("append", "add", "insert", "setdefault") and call.args and facts.scope_of(call.site) == scope:
            last = call.args[-1]
            if last.kind == "name" and last.text == tape.name and facts.tape_for(tape.name, call.site) is tape:
                return call.site, call.receiver, f"the container `{call.receiver}`"
    return None


def _released(facts, name: str) -> bool:
    """`del self.tape`, `self.tape = None` or a container cleared somewhere in the file."""
    if any(d.target == name for d in facts.deletes):
        return True
    if any(a.target == name and a.value is not None and a.value.kind == "name" and a.value.text == "None"
           for a in facts.assigns):
        return True
    return any(c.receiver == name and c.method in ("clear", "pop", "popitem", "remove") for c in facts.calls)


def check(facts):
    for tape in facts.tapes:
        if tape.persistent is True and tape.name and "." not in tape.name:
            kept = _kept(facts, tape)
            scope = facts.blocks[facts.scope_of(tape.site)]
            if kept is not None and not set(scope.decorators) & TF_FUNCTIONS and not _released(facts, kept[1]):
                site, _, holder = kept
                yield report(
                    facts, site, CODE,
                    f"persistent `{tape.name}` (line {tape.site.line}) is kept in {holder}: the object keeps the "
                    "tape, and every tensor it recorded, alive after the step",
                    "Keep the gradients, not the tape; or `del` it (or set it to None) when done.",
                )
                continue
        if tape.persistent is not True or not tape.name or "." in tape.name or facts.tape_escapes(tape):
            continue
        calls = facts.tape_calls(tape, GRADIENT_METHODS)
        label = f"`{tape.name}`"
        if (
            len(calls) == 1
            and not calls[0].site.in_comprehension
            and not facts.loops_between(tape.site, calls[0].site)
            and not _needs_persistence(facts, tape, calls[0])
        ):
            yield report(
                facts, tape.site, CODE,
                f"{label} is persistent but asked for gradients only once (line {calls[0].site.line}): "
                "it holds every intermediate tensor for nothing",
                "Drop `persistent=True`.",
            )
            continue
        scope = facts.blocks[facts.scope_of(tape.site)]
        deleted = any(d.target == tape.name and d.site.order > tape.site.order for d in facts.deletes)
        # a later tape bound to the same name drops this one (a notebook's next cell reusing `tape`)
        deleted = deleted or any(
            other.name == tape.name and other.site.order > tape.site.order
            and facts.scope_of(other.site) == facts.scope_of(tape.site) for other in facts.tapes)
        if scope.kind == "module" and not deleted:
            yield report(
                facts, tape.site, CODE,
                f"persistent {label} is made at module level and never deleted: "
                "it keeps the recorded tensors alive for the rest of the run",
                f"`del {tape.name}` after its last gradient call.",
            )

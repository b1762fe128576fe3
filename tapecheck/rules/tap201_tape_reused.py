'''# TAP201 tape-reused

## What it does
Flags a second `gradient`, `jacobian` or `batch_jacobian` call on a tape made
without `persistent=True`: two calls in a row, a call inside a loop (or a
comprehension) over a tape made outside it. Calls made by the helpers the tape is
handed to count (`apply_grads(tape, loss_a)` after `tape.gradient(loss_b)`), and so
does a helper that asks the tape once per item of a loop or a comprehension
(`[tape.gradient(loss, variables) for loss in losses]`): the finding is on the call
that hands the tape over.

## Why is this bad?
A non-persistent tape frees what it recorded as soon as it computes one set of
gradients. The second call raises `RuntimeError: A non-persistent
GradientTape can only be used to compute one set of gradients (or
jacobians)`, inside `tf.function` while tracing, which is far from where the
mistake is. Multi-task and GAN loops hit this when they ask one tape for the
gradients of two losses.

## Example
```python
import tensorflow as tf

def train_step(encoder, head_a, head_b, x, opt):
    with tf.GradientTape() as tape:
        features = encoder(x, training=True)
        loss_a = tf.reduce_mean(head_a(features, training=True))
        loss_b = tf.reduce_mean(head_b(features, training=True))
    grads_a = tape.gradient(loss_a, head_a.trainable_variables)
    grads_b = tape.gradient(loss_b, head_b.trainable_variables)  # RuntimeError
    opt.apply_gradients(zip(grads_a, head_a.trainable_variables))
    opt.apply_gradients(zip(grads_b, head_b.trainable_variables))
```

## Use instead
```python
import tensorflow as tf

def train_step(encoder, head_a, head_b, x, opt):
    with tf.GradientTape(persistent=True) as tape:
        features = encoder(x, training=True)
        loss_a = tf.reduce_mean(head_a(features, training=True))
        loss_b = tf.reduce_mean(head_b(features, training=True))
    grads_a = tape.gradient(loss_a, head_a.trainable_variables)
    grads_b = tape.gradient(loss_b, head_b.trainable_variables)
    del tape
    opt.apply_gradients(zip(grads_a, head_a.trainable_variables))
    opt.apply_gradients(zip(grads_b, head_b.trainable_variables))
```

## Fix safety
The fix adds `persistent=True` to the tape (or turns `persistent=False` into
`True`) and, when the tape's last use is a plain statement in the suite that
made it, adds `del tape` after that statement. It is safe: the code no longer
raises, and computes the same gradients.
'''

from tapecheck.model import model_of
from tapecheck.rules._common import report

# Its mistake raises an exception: findings inside a test that expects that error
# (`pytest.raises`, `assertRaises`) are left out, by the rule catalog.
RAISES = True
CODE = "TAP201"
NAME = "tape-reused"
SUMMARY = "a non-persistent tape is asked for gradients twice"
PROBE = True
FIXABLE = True
TRIGGERS = (b"GradientTape",)

VALID = [
    # a new tape per loop iteration
    """
import tensorflow as tf
def fit(model, ds, opt, loss_fn):
    for x, y in ds:
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
""",
    # exclusive branches
    """
import tensorflow as tf
def step(model, x, first):
    with tf.GradientTape() as tape:
        loss = model(x)
    if first:
        return tape.gradient(loss, model.trainable_variables)
    else:
        return tape.gradient(loss, model.trainable_variables[:1])
""",
    # two tapes in one `with` (a GAN), one call each
    """
import tensorflow as tf
def gan_step(gen, disc, noise, real):
    with tf.GradientTape() as gen_tape, tf.GradientTape() as disc_tape:
        fake = gen(noise, training=True)
        g_loss = -tf.reduce_mean(disc(fake, training=True))
        d_loss = tf.reduce_mean(disc(fake, training=True)) - tf.reduce_mean(disc(real, training=True))
    g = gen_tape.gradient(g_loss, gen.trainable_variables)
    d = disc_tape.gradient(d_loss, disc.trainable_variables)
    return g, d
""",
    # a helper that asks the tape only on some calls, or only logs it: cannot tell, stay silent
    """
import tensorflow as tf
def maybe_grads(tape, loss, variables, enabled):
    if enabled:
        return tape.gradient(loss, variables)
    return None
def describe(tape):
    print("tape", id(tape))
def step(model, x):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(model(x, training=True))
    describe(tape)
    g = tape.gradient(loss, model.trainable_variables)
    extra = maybe_grads(tape, loss, model.trainable_variables, False)
    return g, extra
""",
    # a persistent tape handed to a helper twice
    """
import tensorflow as tf
def grads_of(tape, loss, model):
    return tape.gradient(loss, model.trainable_variables)
def step(a, b, x):
    with tf.GradientTape(persistent=True) as tape:
        la = tf.reduce_mean(a(x, training=True))
        lb = tf.reduce_mean(b(x, training=True))
    ga = grads_of(tape, la, a)
    gb = grads_of(tape, lb, b)
    del tape
    return ga, gb
""",
    # a persistent tape handed to a helper that asks it once per loss
    """
import tensorflow as tf
def per_task(tape, losses, variables):
    return [tape.gradient(loss, variables) for loss in losses]
def step(model, x, ys):
    with tf.GradientTape(persistent=True) as tape:
        outs = model(x, training=True)
        losses = [tf.reduce_mean(tf.square(o - y)) for o, y in zip(outs, ys)]
    grads = per_task(tape, losses, model.trainable_variables)
    del tape
    return grads
""",
    # the same name bound to a fresh tape
    """
import tensorflow as tf
def two(model, x):
    with tf.GradientTape() as tape:
        a = model(x)
    ga = tape.gradient(a, model.trainable_variables)
    with tf.GradientTape() as tape:
        b = model(x * 2.0)
    gb = tape.gradient(b, model.trainable_variables)
    return ga, gb
""",
    # a test that asks a non-persistent tape twice on purpose, expecting the RuntimeError
    """
import pytest
import tensorflow as tf
def test_second_gradient_raises():
    w = tf.Variable(2.0)
    with tf.GradientTape() as tape:
        loss = w * w
    tape.gradient(loss, w)
    with pytest.raises(RuntimeError, match="non-persistent"):
        tape.gradient(loss, w)
""",
]

INVALID = [
    # the second `gradient` is asked in a helper the step hands the tape to
    """
import tensorflow as tf
def apply_grads(tape, loss, model, opt):
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
def train_step(encoder, head_a, head_b, x, opt_a, opt_b):
    with tf.GradientTape() as tape:
        features = encoder(x, training=True)
        loss_a = tf.reduce_mean(head_a(features, training=True))
        loss_b = tf.reduce_mean(head_b(features, training=True))
    apply_grads(tape, loss_a, head_a, opt_a)
    apply_grads(tape, loss_b, head_b, opt_b)  # expect: TAP201
""",
    # one call of a helper asks the tape in a loop: once per task
    """
import tensorflow as tf
def per_task(tape, losses, variables):
    grads = []
    for loss in losses:
        grads.append(tape.gradient(loss, variables))
    return grads
def step(model, x, ys):
    with tf.GradientTape() as tape:
        outs = model(x, training=True)
        losses = [tf.reduce_mean(tf.square(o - y)) for o, y in zip(outs, ys)]
    return per_task(tape, losses, model.trainable_variables)  # expect: TAP201
""",
    # a trainer's method, asked through another method
    """
import tensorflow as tf
class Trainer:
    def _grads(self, tape, loss):
        return tape.gradient(loss, self.model.trainable_variables)
    def _clipped(self, grad_tape, loss):
        grads = self._grads(grad_tape, loss)
        return [tf.clip_by_norm(g, 1.0) for g in grads]
    def step(self, x, y):
        with tf.GradientTape() as tape:
            out = self.model(x, training=True)
            loss = self.loss_fn(y, out)
            aux = tf.reduce_mean(out)
        main = tape.gradient(loss, self.model.trainable_variables)
        extra = self._clipped(tape, aux)  # expect: TAP201
        return main, extra
""",
    """
import tensorflow as tf
def per_variable(model, x):
    with tf.GradientTape() as tape:
        loss = model(x)
    return [tape.gradient(loss, v) for v in model.trainable_variables]  # expect: TAP201
""",
    """
import tensorflow as tf
def per_loss(model, x, losses):
    with tf.GradientTape() as tape:
        out = model(x)
        values = [f(out) for f in losses]
    grads = []
    for value in values:
        grads.append(tape.gradient(value, model.trainable_variables))  # expect: TAP201
    return grads
""",
]


def _asked(use) -> str:
    """`, in `apply_grads` (line 9)` for a use through a helper, else ""."""
    where = use.where()
    return f", {where}" if where else ""


def check(facts):
    model = model_of(facts)
    for tape in facts.tapes:
        if tape.persistent is not False or not tape.name:
            continue
        uses = model.tape_uses(tape)
        # `with tape:` entered again gives the tape a fresh recording
        reentries = [facts.blocks[b] for b in tape.with_blocks]
        label = f"`{tape.name}`"
        hint = f"Make {label} with `persistent=True` (and `del {tape.name}` after the last call), or ask for all gradients in one call."
        for index, use in enumerate(uses):
            call = use.call
            # loops that do not enter the tape again on each pass
            loops = [
                loop for loop in facts.loops_between(tape.site, call.site)
                if not any(loop in facts.chain(r.id) for r in reentries)
            ]
            if use.repeated:  # one call of a helper asks the tape in a loop or a comprehension
                yield report(
                    facts, call.site, CODE,
                    f"non-persistent {label} (made at line {tape.site.line}) is handed here to code that asks it "
                    f"for gradients {use.repeated}{_asked(use)}; the second pass raises RuntimeError",
                    hint,
                )
                continue
            repeats = model.repeats_in_comprehension(call.site)
            if repeats or (loops and not facts.exits_after(call.site)):
                where = "in a comprehension" if repeats and not loops else f"in the loop at line {facts.blocks[loops[0]].line}"
                yield report(
                    facts, call.site, CODE,
                    f"non-persistent {label} (made at line {tape.site.line}) is asked for gradients {where}{_asked(use)}; "
                    "the second pass raises RuntimeError",
                    hint,
                )
                continue
            for earlier in uses[:index]:
                if earlier.call is call or not facts.dominates(earlier.call.site, call.site):
                    continue
                if any(earlier.call.site.line < r.line <= call.site.line for r in reentries):
                    continue
                yield report(
                    facts, call.site, CODE,
                    f"non-persistent {label} already computed gradients at line {earlier.call.site.line}{_asked(earlier)}; "
                    + ("this second call raises RuntimeError" if not use.path else
                       f"this call asks it again{_asked(use)}, and raises RuntimeError"),
                    hint,
                )
                break

'''# TAP201 tape-reused

## What it does
Flags a second `gradient`, `jacobian` or `batch_jacobian` call on a tape made
without `persistent=True`: two calls in a row, a call inside a loop (or a
comprehension) over a tape made outside it.

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

from tapecheck.lint.facts import GRADIENT_METHODS
from tapecheck.rules._common import report

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
]

INVALID = [
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


def _exits_after(facts, call) -> bool:
    return any(e.site.block == call.site.block and e.site.order > call.site.order and e.kind != "continue" for e in facts.exits)


def check(facts):
    for tape in facts.tapes:
        if tape.persistent is not False or not tape.name:
            continue
        calls = facts.tape_calls(tape, GRADIENT_METHODS)
        # `with tape:` entered again gives the tape a fresh recording
        reentries = [facts.blocks[b] for b in tape.with_blocks]
        label = f"`{tape.name}`"
        for index, call in enumerate(calls):
            # loops that do not enter the tape again on each pass
            loops = [
                loop for loop in facts.loops_between(tape.site, call.site)
                if not any(loop in facts.chain(r.id) for r in reentries)
            ]
            if call.site.in_comprehension or (loops and not _exits_after(facts, call)):
                where = "in a comprehension" if call.site.in_comprehension and not loops else f"in the loop at line {facts.blocks[loops[0]].line}"
                yield report(
                    facts, call.site, CODE,
                    f"non-persistent {label} (made at line {tape.site.line}) is asked for gradients {where}: "
                    "the second pass raises RuntimeError",
                    f"Make {label} with `persistent=True` (and `del {tape.name}` after the last call), or ask for all gradients in one call.",
                )
                continue
            for earlier in calls[:index]:
                if not facts.dominates(earlier.site, call.site):
                    continue
                if any(earlier.site.line < r.line <= call.site.line for r in reentries):
                    continue
                yield report(
                    facts, call.site, CODE,
                    f"non-persistent {label} already computed gradients at line {earlier.site.line}: "
                    "this second call raises RuntimeError",
                    f"Make {label} with `persistent=True` (and `del {tape.name}` after the last call), or ask for all gradients in one call.",
                )
                break

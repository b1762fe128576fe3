'''# TAP401 grads-vars-mismatch

## What it does
Follows the gradients passed to `optimizer.apply_gradients(zip(grads, variables))`
back to the `tape.gradient(loss, sources)` call that made them, and flags the
call when `variables` is not the list the gradients were computed for: the
variables of another model (a GAN whose generator gradients are applied to the
discriminator), `model.variables` against `model.trainable_variables`, or a
literal list in another order or of another length.

## Why is this bad?
`zip` pairs the gradients and the variables by position and stops silently at
the shorter list. Gradients applied to the wrong variables either raise a shape
error deep inside the optimizer or, when the shapes happen to agree, silently
train the wrong weights: the loss goes nowhere and nothing says why. A shorter
list leaves the last variables untrained without a word.

## Example
```python
import tensorflow as tf

def gan_step(generator, discriminator, gen_opt, disc_opt, noise, real, loss_fns):
    with tf.GradientTape() as gen_tape, tf.GradientTape() as disc_tape:
        fake = generator(noise, training=True)
        gen_loss, disc_loss = loss_fns(discriminator(real, training=True), discriminator(fake, training=True))
    gen_grads = gen_tape.gradient(gen_loss, generator.trainable_variables)
    disc_grads = disc_tape.gradient(disc_loss, discriminator.trainable_variables)
    gen_opt.apply_gradients(zip(gen_grads, discriminator.trainable_variables))
    disc_opt.apply_gradients(zip(disc_grads, discriminator.trainable_variables))
```

## Use instead
```python
import tensorflow as tf

def gan_step(generator, discriminator, gen_opt, disc_opt, noise, real, loss_fns):
    with tf.GradientTape() as gen_tape, tf.GradientTape() as disc_tape:
        fake = generator(noise, training=True)
        gen_loss, disc_loss = loss_fns(discriminator(real, training=True), discriminator(fake, training=True))
    gen_grads = gen_tape.gradient(gen_loss, generator.trainable_variables)
    disc_grads = disc_tape.gradient(disc_loss, discriminator.trainable_variables)
    gen_opt.apply_gradients(zip(gen_grads, generator.trainable_variables))
    disc_opt.apply_gradients(zip(disc_grads, discriminator.trainable_variables))
```
'''

from __future__ import annotations

from tapecheck.rules._common import report
from tapecheck.lint.queries import call_span, callee_of, method_of, spans_of, variable_owner

CODE = "TAP401"
NAME = "grads-vars-mismatch"
SUMMARY = "`apply_gradients` pairs gradients with variables they were not computed for"
PROBE = True
TRIGGERS = (b"apply_gradients",)

# Two spellings of one list.
SAME_LIST = {"trainable_weights": "trainable_variables", "weights": "variables"}
# Calls that hand back the gradient list they were given, transformed element-wise.
PASS_THROUGH = frozenset({"tensorflow.clip_by_global_norm"})

VALID = [
    # the variables bound to a name once and used on both sides
    """
import tensorflow as tf
def step(encoder, head, opt, x, y, loss_fn):
    variables = encoder.trainable_variables + head.trainable_variables
    with tf.GradientTape() as tape:
        loss = loss_fn(y, head(encoder(x, training=True), training=True))
    grads = tape.gradient(loss, variables)
    grads, _ = tf.clip_by_global_norm(grads, 5.0)
    opt.apply_gradients(zip(grads, variables))
""",
    # an alias of the model, and the two spellings of the trainable list
    """
import tensorflow as tf
class Trainer:
    def step(self, x, y):
        model = self.model
        with tf.GradientTape() as tape:
            loss = self.loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_weights)
        grads_and_vars = zip(grads, self.model.trainable_variables)
        self.optimizer.apply_gradients(grads_and_vars)
""",
    # the textbook line fit
    """
import tensorflow as tf
w = tf.Variable(1.0)
b = tf.Variable(0.0)
opt = tf.keras.optimizers.SGD(learning_rate=0.1)
with tf.GradientTape() as tape:
    loss = (w * 2.0 + b - 1.0) ** 2
dw, db = tape.gradient(loss, [w, b])
opt.apply_gradients(zip([dw, db], [w, b]))
""",
]

INVALID = [
    """
import tensorflow as tf
def fit_line(x, y, opt):
    w = tf.Variable(1.0)
    b = tf.Variable(0.0)
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean((w * x + b - y) ** 2)
    grads = tape.gradient(loss, [w, b])
    opt.apply_gradients(zip(grads, [b, w]))  # expect: TAP401
""",
    """
import tensorflow as tf
def step(model, opt, x, y, loss_fn):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
    grads = tape.gradient(loss, model.variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))  # expect: TAP401
""",
]


def _first_zip(facts, spans, span):
    for call in spans.calls_in(span):
        if call.func.text == "zip" and "zip" not in facts.imports:
            return call
    return None


def _zip_for(facts, spans, apply):
    """The `zip(grads, variables)` call whose pairs `apply` receives."""
    pairs = apply.arg(0, "grads_and_vars")
    if pairs is None:
        return None
    if pairs.kind == "call":
        return _first_zip(facts, spans, call_span(apply))
    if pairs.kind == "name":
        reaching = facts.reaching_assigns(pairs.text, apply.site)
        if len(reaching) == 1 and reaching[0].value is not None and reaching[0].value.kind == "call":
            return _first_zip(facts, spans, reaching[0].span)
    return None


def _gradient_for(facts, spans, name, site, depth=0):
    """The `tape.gradient(...)` call whose result `name` holds at `site`, if one clearly does."""
    reaching = facts.reaching_assigns(name, site)
    if len(reaching) != 1 or depth > 3:
        return None
    calls = spans.calls_in(reaching[0].span)
    if not calls:
        return None
    first = calls[0]
    if method_of(first) == "gradient":
        return first
    if callee_of(facts, first) in PASS_THROUGH and first.args and first.args[0].kind == "name":
        return _gradient_for(facts, spans, first.args[0].text, reaching[0].site, depth + 1)
    return None


def _canonical(facts, text, site):
    """The dotted text with local aliases replaced: `model.x` after `model = self.model` -> `self.model.x`."""
    for _ in range(4):
        head, dot, rest = text.partition(".")
        reaching = facts.reaching_assigns(head, site)
        if len(reaching) != 1 or reaching[0].value is None or reaching[0].value.kind not in ("name", "attribute"):
            break
        text = reaching[0].value.text + dot + rest
        site = reaching[0].site
    owner, _, attribute = text.rpartition(".")
    if owner and attribute in SAME_LIST:
        text = f"{owner}.{SAME_LIST[attribute]}"
    return text


def _shape(facts, expr, site):
    """A comparable form of a variable list: a dotted text, a tuple of them, or None."""
    if expr is None:
        return None
    if expr.kind in ("name", "attribute"):
        return _canonical(facts, expr.text, site)
    if expr.kind in ("list", "tuple") and expr.elements and all(e.kind in ("name", "attribute") for e in expr.elements):
        return tuple(_canonical(facts, e.text, site) for e in expr.elements)
    return None


def _mismatch(asked, applied) -> str:
    """Why the two lists differ, or "" when they agree or cannot be compared."""
    if asked is None or applied is None or asked == applied:
        return ""
    if isinstance(asked, str) and isinstance(applied, str):
        if variable_owner(asked) and variable_owner(applied):
            return "another list of variables"
        return ""
    if isinstance(asked, tuple) and isinstance(applied, tuple):
        if sorted(asked) == sorted(applied):
            return "the same variables in another order"
        if len(asked) != len(applied):
            return f"a list of {len(applied)} variables, not {len(asked)}"
        return "other variables"
    return ""


def _text(shape) -> str:
    return shape if isinstance(shape, str) else "[" + ", ".join(shape) + "]"


def check(facts):
    spans = spans_of(facts)
    for apply in facts.calls:
        if method_of(apply) != "apply_gradients":
            continue
        zipped = _zip_for(facts, spans, apply)
        if zipped is None or len(zipped.args) != 2 or zipped.args[0].kind != "name":
            continue
        gradient = _gradient_for(facts, spans, zipped.args[0].text, zipped.site)
        if gradient is None:
            continue
        asked = _shape(facts, gradient.arg(1, "sources"), gradient.site)
        applied = _shape(facts, zipped.args[1], zipped.site)
        why = _mismatch(asked, applied)
        if why:
            yield report(
                facts, apply.site, CODE,
                f"`{zipped.args[0].text}` holds the gradients for `{_text(asked)}` (line {gradient.site.line}) "
                f"but is applied to `{_text(applied)}`, {why}: zip pairs them by position",
                f"Apply the gradients to the list they were computed for: `zip({zipped.args[0].text}, {_text(asked)})`.",
            )

'''# TAP401 grads-vars-mismatch

## What it does
Follows the gradients passed to `optimizer.apply_gradients(zip(grads, variables))`
back to the `tape.gradient(loss, sources)` call that made them, and flags the
call when `variables` is not the list the gradients were computed for: the
variables of another model (a GAN whose generator gradients are applied to the
discriminator), `model.variables` against `model.trainable_variables`, a
literal list in another order or of another length, or a sum of models' lists
in another order (`encoder + decoder` asked for, `decoder + encoder` applied).

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

from tapecheck.model import SAME_LIST, call_span, callee_of, method_of, model_of, spans_of, variable_owner
from tapecheck.rules._common import report

CODE = "TAP401"
NAME = "grads-vars-mismatch"
SUMMARY = "`apply_gradients` pairs gradients with variables they were not computed for"
PROBE = True
TRIGGERS = (b"apply_gradients",)

# Calls that hand back the gradient list they were given, transformed element-wise.
PASS_THROUGH = frozenset({"tensorflow.clip_by_global_norm"})
# Methods that do the same (a loss-scale optimizer's unscaling).
PASS_THROUGH_METHODS = frozenset({"get_unscaled_gradients"})
MAX_REWRITES = 8

VALID = [
    # two paths, each asking for the list that is applied
    """
import tensorflow as tf
def train_step(model, optimizer, loss_fn, x, y, mixed_precision):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
        if mixed_precision:
            loss = optimizer.get_scaled_loss(loss)
    if mixed_precision:
        scaled = tape.gradient(loss, model.trainable_variables)
        grads = optimizer.get_unscaled_gradients(scaled)
    else:
        grads = tape.gradient(loss, model.trainable_weights)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
""",
    # the same trainer applying the list it keeps for the generator
    """
import tensorflow as tf
class GAN:
    def __init__(self, gen, disc):
        self.gen, self.disc = gen, disc
        self.g_opt = tf.keras.optimizers.Adam()
        self.g_vars = gen.trainable_variables
    def step(self, noise):
        with tf.GradientTape() as g_tape:
            g_loss = -tf.reduce_mean(self.disc(self.gen(noise, training=True), training=True))
        g_grads = g_tape.gradient(g_loss, self.gen.trainable_variables)
        self.g_opt.apply_gradients(zip(g_grads, self.g_vars))
""",
    # a list kept on self from a parameter the class does not keep: cannot compare, silent
    """
import tensorflow as tf
class Trainer:
    def __init__(self, model, variables):
        self.model = model
        self.vars = variables
    def step(self, x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(self.model(x, training=True))
        grads = tape.gradient(loss, self.model.trainable_variables)
        self.opt.apply_gradients(zip(grads, self.vars))
""",
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
    # a sum of two models' lists asked for, and the same sum (other spellings) applied
    """
import tensorflow as tf
class Trainer:
    def step(self, x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(self.decoder(self.encoder(x, training=True), training=True) - x))
        params = self.encoder.trainable_weights + self.decoder.trainable_weights
        grads = tape.gradient(loss, params)
        self.opt.apply_gradients(zip(grads, self.encoder.trainable_variables + self.decoder.trainable_variables))
""",
    # a model's list plus a variable of its own, the same on both sides
    """
import tensorflow as tf
def step(model, scale, opt, x):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(model(x, training=True) * scale)
    grads = tape.gradient(loss, model.trainable_variables + [scale])
    opt.apply_gradients(zip(grads, model.trainable_variables + [scale]))
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
    # one path of two: the loss-scaled branch asks for the trainable list, both apply `variables`
    """
import tensorflow as tf
def train_step(model, optimizer, loss_fn, x, y, mixed_precision):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
        if mixed_precision:
            loss = optimizer.get_scaled_loss(loss)
    if mixed_precision:
        scaled = tape.gradient(loss, model.trainable_variables)
        grads = optimizer.get_unscaled_gradients(scaled)
    else:
        grads = tape.gradient(loss, model.variables)
    optimizer.apply_gradients(zip(grads, model.variables))  # expect: TAP401
""",
    # a GAN trainer that keeps each model's variable list on self, and applies the wrong one
    """
import tensorflow as tf
class GAN:
    def __init__(self, gen, disc):
        self.gen, self.disc = gen, disc
        self.g_opt = tf.keras.optimizers.Adam()
        self.g_vars = gen.trainable_variables
        self.d_vars = disc.trainable_variables
    def step(self, noise):
        with tf.GradientTape() as g_tape:
            fake = self.gen(noise, training=True)
            g_loss = -tf.reduce_mean(self.disc(fake, training=True))
        g_grads = g_tape.gradient(g_loss, self.gen.trainable_variables)
        self.g_opt.apply_gradients(zip(g_grads, self.d_vars))  # expect: TAP401
""",
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
    # the gradients of `encoder + decoder` applied to `decoder + encoder`
    """
import tensorflow as tf
class Trainer:
    def step(self, x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(self.decoder(self.encoder(x, training=True), training=True) - x))
        params = self.encoder.trainable_variables + self.decoder.trainable_variables
        grads = tape.gradient(loss, params)
        self.opt.apply_gradients(zip(grads, self.decoder.trainable_variables + self.encoder.trainable_variables))  # expect: TAP401
""",
]


def _first_zip(facts, spans, span):
    for call in spans.calls_in(span):
        if call.func.text == "zip" and "zip" not in facts.imports:
            return call
    return None


def _one_value(model, name, site):
    """The one plain assignment `name` holds at `site`, or None (a parameter, several, none)."""
    reaching = model.assigns_reaching(name, site)
    if len(reaching) != 1 or reaching[0].kind != "assign" or reaching[0].value is None:
        return None
    return reaching[0]


def _zip_for(model, spans, apply):
    """The `zip(grads, variables)` call whose pairs `apply` receives."""
    facts = model.facts
    pairs = apply.arg(0, "grads_and_vars")
    if pairs is None:
        return None
    if pairs.kind == "call":
        return _first_zip(facts, spans, call_span(apply))
    if pairs.kind == "name":
        assign = _one_value(model, pairs.text, apply.site)
        if assign is not None and assign.value.kind == "call":
            return _first_zip(facts, spans, assign.span)
    return None


def _gradients_for(model, spans, name, site, depth=0):
    """The `tape.gradient(...)` calls whose results `name` may hold at `site`, one per plain
    assignment reaching it (`if mixed_precision: grads = ... else: grads = ...`), or None unless
    every one of them is clearly such a result."""
    facts = model.facts
    reaching = model.assigns_on_every_path(name, site)
    if not reaching or depth > 3 or len(reaching) > 4:
        return None
    found = []
    for assign in reaching:
        if assign.kind != "assign" or assign.value is None:
            return None
        calls = spans.calls_in(assign.span)
        if not calls:
            return None
        first = calls[0]
        if method_of(first) == "gradient":
            found.append(first)
            continue
        passes = callee_of(facts, first) in PASS_THROUGH or method_of(first) in PASS_THROUGH_METHODS
        if not (passes and first.args and first.args[0].kind == "name"):
            return None
        inner = _gradients_for(model, spans, first.args[0].text, assign.site, depth + 1)
        if inner is None:
            return None
        found.extend(inner)
    return found


def _canonical(model, text, site):
    """The dotted text with aliases replaced, so that two spellings of one list compare equal:
    `model.x` after `model = self.model` is `self.model.x`; `self.d_vars`, set once to
    `disc.trainable_variables` in `__init__(self, gen, disc)` beside `self.disc = disc`, is
    `self.disc.trainable_variables`. None when a name on the way is unknown."""
    facts = model.facts
    for _ in range(MAX_REWRITES):
        head, dot, rest = text.partition(".")
        fn = model.functions.get(facts.scope_of(site))
        if fn is not None and fn.bound and head == fn.self_name and rest:
            attribute, dot2, tail = rest.partition(".")
            assigns = model.attribute_assigns(fn.owner, attribute)
            if len(assigns) != 1:
                break  # set in several places, or by the framework: as written
            assign, method = assigns[0]
            value = assign.value
            if assign.kind != "assign" or value is None or value.kind not in ("name", "attribute") or not value.text:
                break
            value_head = value.text.partition(".")[0]
            if value_head in method.params and value_head != method.self_name and "." not in value.text:
                break  # `self.disc = disc`: the attribute is the canonical name
            text, site = value.text + dot2 + tail, assign.site
            continue
        assign = _one_value(model, head, site)
        if assign is not None and assign.value.kind in ("name", "attribute") and assign.value.text:
            text, site = assign.value.text + dot + rest, assign.site
            continue
        if fn is not None and fn.bound and head in fn.params and head != fn.self_name:
            # a parameter of a method: the attribute the method keeps it in
            holders = {a.target for a in model.assigns_in(fn.block.id)
                       if a.kind == "assign" and a.value is not None and a.value.kind == "name"
                       and a.value.text == head and a.target.startswith(fn.self_name + ".")}
            if len(holders) != 1:
                return None
            text = holders.pop() + dot + rest
            continue
        break
    owner, _, attribute = text.rpartition(".")
    if owner and attribute in SAME_LIST:
        text = f"{owner}.{SAME_LIST[attribute]}"
    return text


def _sum_shape(model, span, site):
    """`enc.trainable_variables + dec.trainable_variables` spanning `span`: (SUM, each list's
    canonical text), or None unless every term is a model's variable list (by name or attribute)."""
    whole = [terms for terms in model.sums_in(span) if terms[0][0] == span[0] and terms[-1][1] == span[1]]
    if len(whole) != 1:
        return None
    lists = []
    for term in whole[0]:
        uses = model.spans.uses_in(term)
        if len(uses) != 1 or model.spans.calls_in(term):
            return None
        text = _canonical(model, uses[0].name, site)
        if text is None or not variable_owner(text):
            return None
        lists.append(text)
    return (SUM, *lists)


SUM = "+"  # first item of the shape of a sum of lists, which a list literal's never has


def _shape(model, expr, site, span=None):
    """A comparable form of a variable list: a dotted text, a tuple of them, (SUM, texts...) for
    a sum of lists (`span`: the order span of `expr`, when known), or None."""
    if expr is None:
        return None
    if expr.kind == "binop" and expr.method == "Add":
        return _sum_shape(model, span, site) if span is not None else None
    if expr.kind == "name":
        assign = _one_value(model, expr.text, site)
        if assign is not None and assign.value.kind == "binop" and assign.value.method == "Add":
            return _sum_shape(model, assign.span, assign.site)  # `params = enc.trainable_variables + ...`
    if expr.kind in ("name", "attribute"):
        return _canonical(model, expr.text, site)
    if expr.kind in ("list", "tuple") and expr.elements and all(e.kind in ("name", "attribute") for e in expr.elements):
        shapes = tuple(_canonical(model, e.text, site) for e in expr.elements)
        return None if None in shapes else shapes
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
        if (asked[0] == SUM) != (applied[0] == SUM):
            return ""  # a sum of lists against a literal list: not comparable item by item
        if sorted(asked) == sorted(applied):
            return "the same variables in another order"
        if asked[0] == SUM:
            return "other variables"
        if len(asked) != len(applied):
            return f"a list of {len(applied)} variables, not {len(asked)}"
        return "other variables"
    return ""


def _written(expr, shape) -> str:
    """"`self.d_vars` (that is `self.disc.trainable_variables`)" when an alias was followed."""
    text = _text(shape)
    if expr.kind in ("name", "attribute") and expr.text != text:
        return f"`{expr.text}` (that is `{text}`)"
    return f"`{text}`"


def _text(shape) -> str:
    if isinstance(shape, str):
        return shape
    if shape[0] == SUM:
        return " + ".join(shape[1:])
    return "[" + ", ".join(shape) + "]"


def check(facts):
    model = model_of(facts)
    spans = spans_of(facts)
    for apply in facts.calls:
        if method_of(apply) != "apply_gradients":
            continue
        zipped = _zip_for(model, spans, apply)
        if zipped is None or len(zipped.args) != 2 or zipped.args[0].kind != "name":
            continue
        gradients = _gradients_for(model, spans, zipped.args[0].text, zipped.site)
        if not gradients:
            continue
        applied = _shape(model, zipped.args[1], zipped.site, zipped.arg_span(1, ""))
        for gradient in gradients:
            asked = _shape(model, gradient.arg(1, "sources"), gradient.site, gradient.arg_span(1, "sources"))
            why = _mismatch(asked, applied)
            if not why:
                continue
            path = " on the path through that line" if len(gradients) > 1 else ""
            yield report(
                facts, apply.site, CODE,
                f"`{zipped.args[0].text}` holds the gradients for `{_text(asked)}` (line {gradient.site.line}){path} "
                f"but is applied to {_written(zipped.args[1], applied)}, {why}: zip pairs them by position",
                f"Apply the gradients to the list they were computed for: `zip({zipped.args[0].text}, {_text(asked)})`.",
            )
            break

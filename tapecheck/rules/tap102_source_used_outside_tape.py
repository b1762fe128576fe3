'''# TAP102 source-used-outside-tape

## What it does
Checks each source named in `tape.gradient(target, [w, b])`: it flags a source
that the `with` block of the tape never touches and that the function uses
only in computations outside the block.

## Why is this bad?
The tape records operations, not values. If `b` enters the computation after
the block closed (or before it opened), no recorded operation reads `b`, and
its gradient is `None`: that variable never trains. A well-known textbook
prints `[2.0, None]` for this mistake; TensorFlow 2.21 even returns
`[None, None]`, because the target is then usually outside the tape too
(see TAP101).

## Example
```python
import tensorflow as tf

w = tf.Variable(1.0)
b = tf.Variable(2.0)
x = tf.constant(3.0)
with tf.GradientTape() as tape:
    y = w * x
shifted = y + b
grads = tape.gradient(y, [w, b])  # [3.0, None]: b is never used on the tape
```

## Use instead
```python
import tensorflow as tf

w = tf.Variable(1.0)
b = tf.Variable(2.0)
x = tf.constant(3.0)
with tf.GradientTape() as tape:
    y = w * x + b
grads = tape.gradient(y, [w, b])  # [3.0, 1.0]
```
'''

from tapecheck.model import VARIABLE_CLASSES, model_of
from tapecheck.rules._common import flatten, report

CODE = "TAP102"
NAME = "source-used-outside-tape"
SUMMARY = "a gradient source is used only outside the tape's `with` block"
PROBE = True
TRIGGERS = (b"GradientTape",)

# Calls that may take a source without computing with it.
HARMLESS_CALLEES = frozenset({"print", "zip", "len", "id", "repr", "str", "isinstance"})

VALID = [
    # the source is read inside the tape through a lambda that closes over it
    """
import tensorflow as tf
b = tf.Variable(1.0)
w = tf.Variable(2.0)
scale = lambda x: x * b
with tf.GradientTape() as tape:
    y = scale(w * 3.0)
print(b + 1.0)
g = tape.gradient(y, [w, b])
""",
    # the attribute is read in another method, which the tape may run: cannot tell, stay silent
    """
import tensorflow as tf
class Affine:
    def __init__(self):
        self.w = tf.Variable(1.0)
        self.b = tf.Variable(0.0)
    def forward(self, x):
        return self.w * x + self.b
    def step(self, x):
        with tf.GradientTape() as tape:
            y = self.forward(x)
        shifted = y + self.b
        return tape.gradient(y, [self.w, self.b])
""",
    # another function's own `b` says nothing about this one
    """
import tensorflow as tf
def other(x):
    b = 3.0
    return x * b
def f(x):
    w = tf.Variable(1.0)
    b = tf.Variable(0.0)
    with tf.GradientTape() as tape:
        y = w * x + b
    return tape.gradient(y, [w, b])
""",
    # the source is read inside a helper defined in the same file: cannot tell, stay silent
    """
import tensorflow as tf
b = tf.Variable(1.0)
def model(x):
    return x * b
with tf.GradientTape() as tape:
    y = model(2.0)
print(y + b)
g = tape.gradient(y, [b])
""",
    # the source is used inside the block
    """
import tensorflow as tf
def f(x):
    w = tf.Variable(1.0)
    b = tf.Variable(0.0)
    with tf.GradientTape() as tape:
        y = w * x + b
    z = y + b
    return tape.gradient(y, [w, b])
""",
    # the source is passed to something before the tape: it may be read through it
    """
import tensorflow as tf
def f(layer, x):
    b = tf.Variable(0.0)
    layer.attach(b)
    with tf.GradientTape() as tape:
        y = layer(x)
    z = y + b
    return tape.gradient(y, [b])
""",
]

INVALID = [
    # a trainer's bias, added after the tape closed
    """
import tensorflow as tf
class LinearTrainer:
    def __init__(self):
        self.w = tf.Variable(1.0)
        self.b = tf.Variable(0.0)
        self.opt = tf.keras.optimizers.SGD(0.1)
    def step(self, x, y_true):
        with tf.GradientTape() as tape:
            y = self.w * x
            loss = tf.reduce_mean((y - y_true) ** 2)
        prediction = y + self.b
        grads = tape.gradient(loss, [self.w, self.b])  # expect: TAP102
        self.opt.apply_gradients(zip(grads, [self.w, self.b]))
        return prediction
""",
    """
import tensorflow as tf
def fit_line(x, y_true):
    w = tf.Variable(1.0)
    b = tf.Variable(0.0)
    with tf.GradientTape() as tape:
        y = w * x
        loss = tf.reduce_mean((y - y_true) ** 2)
    y = y + b
    return tape.gradient(loss, [w, b])  # expect: TAP102
""",
]


def _inside_call(call, site):
    return call.site.line <= site.line <= call.end_line and call.site.order <= site.order


def _known_binding(model, source, site) -> bool:
    """The source is bound here by plain assignments (not a parameter, a loop variable, an import)."""
    head, _, attribute = source.partition(".")
    if attribute:
        klass = model.self_class(head, site)
        assigns = [a for a, _ in model.attribute_assigns(klass, attribute)] if klass is not None else []
    else:
        assigns = model.assigns_reaching(source, site)
    return bool(assigns) and all(a.kind == "assign" and _made_here(a.value) for a in assigns)


def _made_here(value) -> bool:
    """The value is made by a TensorFlow call (`tf.Variable(0.0)`, `tf.constant(x)`): the name is
    the only way to it. A list gathered from objects (`net.trainable_variables`, `enc.weights +
    dec.weights`, `list(...)`, a helper's result) holds variables the tape records through calls
    of those objects, which the name never shows: the model cannot tell, so no finding."""
    return value is not None and value.kind == "call" and (
        value.callee.startswith("tensorflow.") or value.callee in VARIABLE_CLASSES)


def check(facts):
    model = model_of(facts)
    harmless_calls = [c for c in facts.calls if c.func.text in HARMLESS_CALLEES or c.method in ("apply_gradients", "gradient")]
    for call, tape in model.gradient_calls():
        if not tape.with_blocks:
            continue
        for source in flatten(call.arg(1, "sources")):
            if source.kind not in ("name", "attribute") or not _known_binding(model, source.text, call.site):
                continue
            reads = model.reads(source.text, call.site)
            if reads is None:
                continue  # read in another function too: maybe on the tape, through it
            outside = []
            silent = False
            for use in reads:
                if any(facts.inside(use.site, bid) for bid in tape.with_blocks):
                    silent = True  # used on the tape
                    break
                if any(_inside_call(c, use.site) for c in harmless_calls):
                    continue
                if use.context != "compute":
                    silent = True  # handed to something we cannot follow
                    break
                outside.append(use)
            if silent or not outside:
                continue
            label = tape.name or "the tape"
            yield report(
                facts, call.site, CODE,
                f"source `{source.text}` is used only outside the `with` block of `{label}` "
                f"(line {outside[0].site.line}): the tape never saw it, so its gradient is None",
                f"Use `{source.text}` inside the `with` block of `{label}`, or drop it from the sources.",
            )

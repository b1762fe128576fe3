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

from tapecheck.rules._common import flatten, report

CODE = "TAP102"
NAME = "source-used-outside-tape"
SUMMARY = "a gradient source is used only outside the tape's `with` block"
PROBE = True
TRIGGERS = (b"GradientTape",)

# Calls that may take a source without computing with it.
HARMLESS_CALLEES = frozenset({"print", "zip", "len", "id", "repr", "str", "isinstance"})

VALID = [
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


def _uses_by_scope(facts, name):
    by_scope = {}
    for use in facts.uses:
        if use.name == name or use.name.startswith(name + "."):
            by_scope.setdefault(facts.scope_of(use.site), []).append(use)
    return by_scope


def _inside_call(facts, site, call):
    return call.site.line <= site.line <= call.end_line and call.site.order <= site.order


def check(facts):
    harmless_calls = [c for c in facts.calls if c.func.text in HARMLESS_CALLEES or c.method in ("apply_gradients", "gradient")]
    for call, tape in facts.gradient_calls():
        if not tape.with_blocks:
            continue
        scope = facts.scope_of(call.site)
        for source in flatten(call.arg(1, "sources")):
            if source.kind != "name":
                continue
            reaching = facts.reaching_assigns(source.text, call.site)
            if not reaching or any(a.kind != "assign" for a in reaching):
                continue  # a parameter, a loop variable...: we do not know what it holds
            by_scope = _uses_by_scope(facts, source.text)
            if set(by_scope) != {scope}:
                continue  # read in another function too: maybe on the tape, through it
            outside = []
            silent = False
            for use in by_scope[scope]:
                if any(facts.inside(use.site, bid) for bid in tape.with_blocks):
                    silent = True  # used on the tape
                    break
                if any(_inside_call(facts, use.site, c) for c in harmless_calls):
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

'''# TAP407 iterator-consumed-twice

## What it does
Flags a second pass over a one-shot iterator: a name bound to `zip(...)`, `map(...)` or
`filter(...)`, or the pairs parameter of an `apply_gradients` method (callers pass
`zip(grads, variables)`) that is named `grads_and_vars`, belongs to an optimizer subclass,
or is a wrapper handing pairs on to another `apply_gradients`, that the same run of the code iterates twice with no
`list(...)`/`tuple(...)` rebinding it in between: two `for` loops or comprehensions over it,
`list(...)`, `tuple(...)`, `sorted(...)`, `zip(*pairs)`, unpacking (`a, b = pairs`), or handing
it to `apply_gradients`; also one such pass inside a loop that the iterator was made
outside of. The finding is at the second pass.

## Why is this bad?
In Python 3 `zip`, `map` and `filter` return iterators: the first pass uses them up and every
later pass sees nothing, without an error. An optimizer wrapper that splits
`grads_and_vars` into two groups with two comprehensions puts every pair into the first
group and none into the second: those variables never train. Measured on TensorFlow 2.21 /
Keras 3.15 (a two-layer MLP, 50 SGD steps, a wrapper giving the last layer its own
optimizer): the last layer's kernel and bias moved by 0.0 and the 50th step's loss was
0.509, against 0.121 with `grads_and_vars = list(grads_and_vars)` first (both from 18.94). Without the wrapper's `if head:`
guard, the second optimizer's `apply_gradients([])` raises `ValueError: not enough values
to unpack (expected 2, got 0)`.

## Example
```python
import tensorflow as tf

class SplitOptimizer:
    def __init__(self, body_optimizer, head_optimizer, head_variables):
        self.body_optimizer = body_optimizer
        self.head_optimizer = head_optimizer
        self.head_paths = {v.path for v in head_variables}

    def apply_gradients(self, grads_and_vars):
        body = [(g, v) for g, v in grads_and_vars if v.path not in self.head_paths]
        head = [(g, v) for g, v in grads_and_vars if v.path in self.head_paths]
        if body:
            self.body_optimizer.apply_gradients(body)
        if head:
            self.head_optimizer.apply_gradients(head)
```

## Use instead
```python
import tensorflow as tf

class SplitOptimizer:
    def __init__(self, body_optimizer, head_optimizer, head_variables):
        self.body_optimizer = body_optimizer
        self.head_optimizer = head_optimizer
        self.head_paths = {v.path for v in head_variables}

    def apply_gradients(self, grads_and_vars):
        grads_and_vars = list(grads_and_vars)
        body = [(g, v) for g, v in grads_and_vars if v.path not in self.head_paths]
        head = [(g, v) for g, v in grads_and_vars if v.path in self.head_paths]
        if body:
            self.body_optimizer.apply_gradients(body)
        if head:
            self.head_optimizer.apply_gradients(head)
```

## Where it stays silent
Where the name is rebound before the second pass (`grads_and_vars = list(grads_and_vars)`),
where the two passes are on exclusive paths (the two branches of an `if`/`else`, or the first
ends its branch with a `return`/`raise`/`break`/`continue`), where a loop that holds the only
pass ends with a `break`/`return` after it, and where the name is only handed to code whose
use of it is unknown (a helper of the user's own, `any(...)`, `enumerate(...)`). A class of
one's own whose `apply_gradients(self, gradients)` takes a list of gradients (no optimizer
base, no pairs handed on) is not read as taking a `zip`.
'''

from __future__ import annotations

from tapecheck.model import model_of
from tapecheck.rules._common import calls_builtin, report

CODE = "TAP407"
NAME = "iterator-consumed-twice"
SUMMARY = "a `zip`/`map`/`filter` iterator (or `apply_gradients`'s `grads_and_vars`) iterated twice: the second pass sees nothing"


def screen(source: bytes) -> bool:
    """What `_iterator_bindings` reads: a call of the builtin `zip`, `map` or `filter` by its bare
    name (`pairs = zip(grads, variables)`), or an `apply_gradients` (a method taking the pairs)."""
    return b"apply_gradients" in source or any(calls_builtin(source, name) for name in (b"zip", b"map", b"filter"))


ITERATORS = frozenset({"zip", "map", "filter"})
# Builtins that run through their whole argument.
CONSUMERS = frozenset({"list", "tuple", "set", "frozenset", "sorted", "dict", "sum", "min", "max"})
LOOPS = frozenset({"for", "while"})

VALID = [
    # materialised once, then read twice
    """
class SplitOptimizer:
    def __init__(self, a, b, names):
        self.a, self.b, self.names = a, b, names
    def apply_gradients(self, grads_and_vars):
        grads_and_vars = list(grads_and_vars)
        first = [(g, v) for g, v in grads_and_vars if v.name in self.names]
        rest = [(g, v) for g, v in grads_and_vars if v.name not in self.names]
        self.a.apply_gradients(first)
        self.b.apply_gradients(rest)
""",
    # one pass only, and one pass per branch of an if/else
    """
def step(opt, grads, variables, clip):
    pairs = zip(grads, variables)
    if clip:
        pairs_clipped = [(g * 0.5, v) for g, v in pairs]
        opt.apply_gradients(pairs_clipped)
    else:
        opt.apply_gradients(pairs)
""",
    # the first pass ends its branch with a return
    """
def total(values, skip):
    squares = map(lambda x: x * x, values)
    if skip:
        print(list(squares))
        return 0
    return sum(squares)
""",
    # a zip made anew on each pass of the loop
    """
def train(opt, model, batches, tape_fn):
    for batch in batches:
        grads = tape_fn(model, batch)
        pairs = zip(grads, model.trainable_variables)
        opt.apply_gradients(pairs)
""",
    # a class of one's own whose apply_gradients takes a list of gradients, not pairs
    """
class Worker:
    def __init__(self, variables):
        self.variables = variables
    def apply_gradients(self, gradients):
        norms = [abs(g) for g in gradients]
        for index, g in enumerate(list(gradients)):
            self.variables[index].assign_sub(0.1 * g)
        return norms
""",
    # a list of pairs, not an iterator; and an override that materialises into another name
    """
class Logged:
    def __init__(self, inner):
        self.inner = inner
    def apply_gradients(self, grads_and_vars):
        pairs = tuple(grads_and_vars)
        for g, v in pairs:
            print(v.name)
        return self.inner.apply_gradients(pairs)
""",
]

INVALID = [
    """
class SplitOptimizer:
    def __init__(self, a, b, names):
        self.a, self.b, self.names = a, b, names
    def apply_gradients(self, grads_and_vars):
        first = [(g, v) for g, v in grads_and_vars if v.name in self.names]
        rest = [(g, v) for g, v in grads_and_vars if v.name not in self.names]  # expect: TAP407
        self.a.apply_gradients(first)
        self.b.apply_gradients(rest)
""",
    # logged, then handed on: the optimizer gets an empty iterator
    """
import tensorflow as tf
opt = tf.keras.optimizers.Adam()
def step(model, x):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model(x, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    pairs = zip(grads, model.trainable_variables)
    for g, v in pairs:
        tf.print(v.name, tf.norm(g))
    opt.apply_gradients(pairs)  # expect: TAP407
""",
    # unzipped for clipping, then the consumed iterator is forwarded
    """
import keras
class Clipping(keras.optimizers.SGD):
    def apply_gradients(self, grads_and_vars):
        grads, variables = zip(*grads_and_vars)
        print(len(grads))
        return super().apply_gradients(grads_and_vars)  # expect: TAP407
""",
    # made once, iterated at every epoch
    """
def fit(model, xs, ys, epochs, train_step):
    batches = zip(xs, ys)
    for epoch in range(epochs):
        for x, y in batches:  # expect: TAP407
            train_step(model, x, y)
""",
]


def _whole(model, span, use) -> bool:
    """Whether the events in `span` are `use` alone (the expression is the bare name)."""
    return model.spans.uses_in(span) == [use] and not model.spans.calls_in(span)


def _pass_kind(model, facts, use, calls_at, for_targets):
    """How `use` (a bare read of the name) runs through it: a description, or "" when it does not."""
    order = use.site.order
    if use.context not in ("other", "argument"):
        return ""  # an operand, a subscript's value: not a pass over the name
    if use.site.in_comprehension:
        for comprehension in _around(facts, order):
            first = comprehension.fors[0][1] if comprehension.fors else None
            if first is not None and first[0] < order <= first[1] and _whole(model, first, use):
                return "a comprehension"
        return ""
    if use.context == "other":
        target = for_targets.get(order + 1)
        if target is not None and facts.blocks[target.site.block].kind == "for" \
                and facts.blocks[target.site.block].parent == use.site.block:
            return "a `for` loop"
        for assign in model.assigns_in(facts.scope_of(use.site)):
            if assign.kind == "assign" and assign.value is None and assign.span[0] < order <= assign.span[1]:
                return "unpacking" if _whole(model, assign.span, use) else ""
        return ""
    if use.context != "argument":
        return ""
    for call in calls_at.get(order, ()):
        for key, start, end in call.arg_spans:
            if not (start < order <= end) or not _whole(model, (start, end), use):
                continue
            if key == -1:
                return f"`{call.func.text or call.func.method}(*{use.name})`" if call.func.kind != "super" else ""
            argument = call.passed(key)
            if argument is None or argument.kind != "name":
                return ""
            if call.func.kind == "name" and call.func.text in CONSUMERS and key == 0:
                return f"`{call.func.text}(...)`"
            method = call.method or (call.func.method if call.func.kind == "super" else "")
            if method == "apply_gradients" and key in (0, "grads_and_vars"):
                return "`apply_gradients(...)`"
            return ""
    return ""


def _around(facts, order):
    """The comprehensions whose span holds `order`."""
    return [c for c in facts.comprehensions if c.span[0] < order <= c.span[1]]


def _iterator_bindings(model, facts):
    """(assign, what) for each name bound to a one-shot iterator: `pairs = zip(...)`, and the
    first argument of a method `apply_gradients(self, grads_and_vars)`."""
    shadowed = {name for name in ITERATORS if model.assigns_named(name)}
    for assign in facts.assigns:
        value = assign.value
        if (assign.kind == "assign" and value is not None and value.kind == "call" and "." not in assign.target
                and value.func_text in ITERATORS and value.func_text not in shadowed
                and value.callee == value.func_text):
            yield assign, f"a `{value.func_text}(...)` iterator (line {assign.site.line})"
    for fn in model.functions.values():
        if fn.name != "apply_gradients" or not fn.bound or len(fn.params) < 2:
            continue
        param = fn.params[1]
        if not _takes_pairs(model, fn, param):
            continue
        found = [a for a in model.assigns_named_in(fn.block.id, param) if a.kind == "param"]
        if found:
            yield found[0], "the pairs `apply_gradients` is given (callers pass `zip(grads, variables)`, an iterator)"


def _takes_pairs(model, fn, param) -> bool:
    """Whether a method `apply_gradients(self, param)` takes (gradient, variable) pairs the way an
    optimizer's does: its parameter is called `grads_and_vars`, its class derives from an optimizer
    (`keras.optimizers.Optimizer`, `tf.compat.v1.train.Optimizer`), or it hands pairs on to
    another `apply_gradients` (a wrapper). A class of one's own taking a list of gradients is not."""
    if param == "grads_and_vars":
        return True
    if any("optimizer" in base.lower() for cls in model.bases(fn.owner) for base in cls.bases):
        return True
    return any(c.method == "apply_gradients" or (c.func.kind == "super" and c.func.method == "apply_gradients")
               for c in model.calls_in_scope(fn.block.id))


def _exits_between(facts, first, second) -> bool:
    """A `return`/`raise`/`break`/`continue` after `first`, before `second`, in a suite that holds
    `first` but not `second`: the path through the first pass ends before the second."""
    apart = set(facts.chain(first.block)) - set(facts.chain(second.block))
    return any(e.site.block in apart and first.order < e.site.order < second.order for e in facts.exits)


def _loop_repeats(facts, binding, site):
    """A loop of the scope holding `site` but not the binding, that a `break`/`return` after the
    pass does not end: the pass runs again on the next turn."""
    for loop in facts.loops_between(binding.site, site):
        if not any(e.site.order > site.order and e.kind != "continue" and facts.inside(e.site, loop)
                   and facts.scope_of(e.site) == facts.scope_of(site) for e in facts.exits):
            return loop
    return None


def check(facts):
    model = model_of(facts)
    bindings = list(_iterator_bindings(model, facts))
    if not bindings:
        return
    for_targets = {}
    for assign in facts.assigns:
        if assign.kind == "for":
            for_targets.setdefault(assign.site.order, assign)
    calls_at: dict[int, list] = {}
    for call in facts.calls:
        for key, start, end in call.arg_spans:
            for use in model.spans.uses_in((start, end)):
                calls_at.setdefault(use.site.order, []).append(call)
    names = {binding.target for binding, _ in bindings}
    reads: dict[str, list] = {}
    for use in facts.uses:
        if use.name in names:
            reads.setdefault(use.name, []).append(use)
    for binding, what in bindings:
        name, scope = binding.target, facts.scope_of(binding.site)
        passes = []
        for use in sorted(reads.get(name, ()), key=lambda u: u.site.order):
            if use.name != name or use.site.order <= binding.site.order or facts.scope_of(use.site) != scope:
                continue
            if model.assigns_on_every_path(name, use.site) != [binding]:
                continue
            if use.site.in_comprehension and model.repeats_in_comprehension(use.site):
                continue
            kind = _pass_kind(model, facts, use, calls_at, for_targets)
            if kind:
                passes.append((use, kind))
        reported = False
        for index, (use, kind) in enumerate(passes):
            for earlier, earlier_kind in passes[:index]:
                if model.exclusive(earlier.site, use.site) or _exits_between(facts, earlier.site, use.site):
                    continue
                yield report(
                    facts, use.site, CODE,
                    f"`{name}`, {what}, was already run through by {earlier_kind} at line {earlier.site.line}; "
                    f"this second pass ({kind}) sees nothing, silently: the pairs or items it should handle "
                    "are skipped",
                    f"Materialise it once before the first pass: `{name} = list({name})`.",
                )
                reported = True
                break
            if reported:
                break
        if reported:
            continue
        for use, kind in passes:
            loop = _loop_repeats(facts, binding, use.site)
            if loop is not None:
                yield report(
                    facts, use.site, CODE,
                    f"`{name}`, {what}, is run through by {kind} inside the loop at line "
                    f"{facts.blocks[loop].line}; the first turn uses it up and every later turn sees nothing",
                    f"Make it a list once (`{name} = list({name})`), or make the iterator inside the loop.",
                )
                break

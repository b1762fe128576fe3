"""`tf.data` datasets: whether a `.map(fn)` maps over a `tf.data` dataset, and which function of
the file it traces.

`Dataset.map` traces its function once into a graph (as `tf.function` does): TAP501 (Python side
effects run only while tracing) and TAP402 (state made in the traced function) ask these. Like the
rules, nothing here imports libcst or TensorFlow.
"""

from __future__ import annotations

from tapecheck.model.objects import Function
from tapecheck.model.queries import callee_of, method_of

# `tf.data.Dataset` methods that return a dataset: `ds = ds.shuffle(...)` keeps `ds` a dataset.
DATASET_METHODS = frozenset({
    "batch", "cache", "concatenate", "filter", "flat_map", "interleave", "map", "padded_batch",
    "prefetch", "ragged_batch", "rebatch", "repeat", "shard", "shuffle", "skip", "take",
    "unbatch", "with_options", "apply", "enumerate", "ignore_errors", "rejection_resample",
})
# The annotation of a parameter that says it holds a dataset (`def prepare(ds: tf.data.Dataset)`).
DATASET_TYPES = frozenset({"tensorflow.data.Dataset", "tensorflow.data.DatasetV2"})
# Rebindings, chained methods, returns and callers followed back to the `tf.data` call. Each
# (name, place) is worked out once per file (memoized), so cost stays linear; the bound keeps
# Python's stack safe on pathological code, where a cut-off answer errs towards silence.
MAX_DATASET_STEPS = 40


def dataset_map(model, call) -> bool:
    """`<a tf.data dataset>.map(fn)`: the object mapped over comes from a `tf.data` call, through
    dataset methods (`ds = ds.shuffle(8)`, `...from_tensor_slices(x).batch(4)`) and the callers
    that pass it in (`prepare(tf.data.Dataset.range(8))`), or is a parameter annotated
    `tf.data.Dataset`. Anything else (a pandas `Series.map`, a parameter nothing here passes) is not
    read as a dataset."""
    return method_of(call) == "map" and _receiver_is_dataset(model, call, 0)


def mapped_function(model, arg, site) -> Function | None:
    """The function of this file `ds.map(arg)` traces: `augment` (a function, a method through
    `self`, a lambda bound to a name), or `Augmenter.__call__` for `ds.map(Augmenter(0.1))` and for
    `ds.map(augment)` after `augment = Augmenter(0.1)` (an instance of a class of this file, called
    on each element)."""
    if arg.kind in ("name", "attribute"):
        bound = model.binding(arg.text, site)
        if isinstance(bound, Function) and bound.model is model:
            return bound
    constructor = arg.func_text if arg.kind == "call" else ""
    if arg.kind == "name":
        reaching = model.facts.reaching_assigns(arg.text, site)
        if len(reaching) == 1 and reaching[0].value is not None and reaching[0].value.kind == "call":
            constructor = reaching[0].value.func_text
    klass = model.local_class(constructor) if constructor else None
    if klass is None:
        return None
    return next((fn for fn in model.methods(klass) if fn.name == "__call__" and fn.self_name), None)


def _receiver_is_dataset(model, call, depth: int) -> bool:
    if depth > MAX_DATASET_STEPS:
        return False
    if call.receiver:
        return _holds_dataset(model, call.receiver, call.site, depth + 1)
    # a chain (`tf.data.Dataset.from_tensor_slices(x).shuffle(8).map(f)`): the calls it is made on
    return any(_yields_dataset(model, inner, depth + 1)
               for inner in model.spans.calls_in((call.site.order, call.first_arg)))


def _yields_dataset(model, call, depth: int) -> bool:
    """`call` makes a dataset: a `tf.data` call, a dataset method of one, or a function (of this
    file or of another module) whose every `return` gives one (`ds = make_dataset(x)`)."""
    if depth > MAX_DATASET_STEPS:
        return False
    if callee_of(model.facts, call).startswith("tensorflow.data."):
        return True
    if method_of(call) in DATASET_METHODS and _receiver_is_dataset(model, call, depth):
        return True
    fn = model.resolve(call)
    if fn is None:
        return False
    owner = fn.model or model  # a function of another module is read in its own file's model
    key = ("returns a dataset", fn.block.id)
    known = owner.memo.get(key)
    if known is None:
        owner.memo[key] = False  # while it is worked out: a recursive function
        returned = owner.returned_calls(fn)
        known = owner.memo[key] = bool(returned) and all(_yields_dataset(owner, made, depth + 1) for made in returned)
    return known


def _holds_dataset(model, name: str, site, depth: int) -> bool:
    """Some binding of `name` that may hold at `site` (`self.x` set in any method) is a dataset:
    a call making one, or a parameter every caller here passes one for."""
    key = ("holds a dataset", name, site.order)
    known = model.memo.get(key)
    if known is not None:
        return known
    model.memo[key] = False  # while it is worked out: `ds = ds.shuffle(8)` reads its own name
    found = depth <= MAX_DATASET_STEPS and any(
        _binds_dataset(model, assign, depth) for assign in model.assigns_of(name, site)
    )
    model.memo[key] = found
    return found


def _binds_dataset(model, assign, depth: int) -> bool:
    if assign.kind == "param":
        if assign.annotation and model.resolved(assign.annotation, assign.site) in DATASET_TYPES:
            return True
        fn = model.functions.get(assign.site.block)
        passed = model.arguments_for(fn, assign.target) if fn is not None else None
        return bool(passed) and all(_is_dataset_argument(model, caller, argument, depth + 1) for caller, argument in passed)
    made = model.value_call(assign)
    return made is not None and _yields_dataset(model, made, depth + 1)


def _is_dataset_argument(model, caller, argument, depth: int) -> bool:
    """What `caller` passes as `argument` is a dataset: a name holding one, or a call making one."""
    if argument.kind == "name":
        return _holds_dataset(model, argument.text, caller.site, depth)
    span = caller.span_of(argument) if argument.kind == "call" else None
    made = model.call_at(span, argument) if span is not None else None
    return made is not None and _yields_dataset(model, made, depth)


def mapped_functions(model, arg, site) -> list[Function]:
    """Every function of this file `ds.map(arg)` may trace: `mapped_function`'s, a lambda written
    there (`ds.map(lambda e: prepare(e, True))`), or each lambda a name may hold there
    (`fn = lambda e: prepare(e, True)` in one branch, `lambda e: prepare(e, False)` in the other).
    Empty when unknown (any binding that reaches the name is something else)."""
    found = mapped_function(model, arg, site)
    if found is not None:
        return [found]
    scope = model.facts.scope_of(site)
    if arg.kind == "lambda":
        fn = model.lambda_at(arg.value, scope)
        return [fn] if fn is not None else []
    if arg.kind != "name":
        return []
    facts = model.facts
    # the bindings before the site (none need dominate it: one in each branch of an `if`)
    bound = [a for a in facts.assigns_in_scope(scope) if a.target == arg.text and a.site.order < site.order]
    lambdas = [model.lambda_at(a.value.value, scope) for a in bound
               if a.kind == "assign" and a.value is not None and a.value.kind == "lambda"]
    if not lambdas or len(lambdas) != len(bound) or None in lambdas:
        return []
    return lambdas

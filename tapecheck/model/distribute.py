"""What the distribution rules share: which strategies mirror variables, which functions a
`strategy.run` runs, and which calls build a Keras model (directly, or by a local builder).

TAP601 (a loss averaged per replica) and TAP602 (a model built outside the strategy's
scope) ask these; TAP404 asks whether the file distributes at all. They are queries on
the program model (`tapecheck.model`): like the rules, nothing here imports libcst
or TensorFlow.
"""

from __future__ import annotations

from tapecheck.model.keras import keras_member
from tapecheck.model.objects import Function, Klass
from tapecheck.model.queries import callee_of, method_of

# Strategies whose replicas each run the step on a part of the batch, with mirrored variables.
STRATEGIES = frozenset(
    {
        "tensorflow.distribute.MirroredStrategy",
        "tensorflow.distribute.MultiWorkerMirroredStrategy",
        "tensorflow.distribute.experimental.MultiWorkerMirroredStrategy",
    }
)
KERAS_MODEL_CLASSES = ("keras.Model", "keras.Sequential", "tensorflow.keras.Model", "tensorflow.keras.Sequential")
MODEL_PACKAGES = ("models", "applications", "layers")  # a call of a class of these makes a model or layer
INPUTS = frozenset({"Input", "InputLayer"})
FUNCTIONAL = frozenset({"Model", "Functional"})
MAX_MODEL_BUILDERS = 2  # builder functions followed by `makes_keras_model`
MAX_VARIABLE_BUILDERS = 1  # by `builds_variables`


# -- strategies -----------------------------------------------------------------------------
def makes_strategy(facts) -> bool:
    """A Mirrored strategy is built somewhere in the file."""
    return any(callee_of(facts, call) in STRATEGIES for call in facts.calls)


def distributes(facts) -> bool:
    """The file calls `tf.distribute` or enters some `.scope()`: state may be made under a strategy."""
    return any(callee_of(facts, call).startswith("tensorflow.distribute.") or method_of(call) == "scope"
               for call in facts.calls)


def all_calls(model, name: str, site, test) -> bool:
    """Every binding of `name` at `site` (a name, or `self.x` set in the methods of its own class)
    is a call that `test(call)` accepts; False when there is none or one is not a call."""
    calls = model.value_calls(name, site, bases=False)
    return calls is not None and all(test(call) for call in calls)


def mirrored(model, name: str, site) -> bool:
    """`name` holds a Mirrored strategy made in this file, whichever of its bindings holds."""
    return all_calls(model, name, site, lambda call: callee_of(model.facts, call) in STRATEGIES)


def strategy_steps(model):
    """(the Function of this file given to a Mirrored `strategy.run(fn, ...)`, the run call), for
    each such call: the step every replica runs (a function, `self.train_step`, a name bound to one)."""
    for call in model.spans.calls:
        if method_of(call) != "run" or not call.receiver or not mirrored(model, call.receiver, call.site):
            continue
        fn_expr = call.arg(0, "fn")
        if fn_expr is None or fn_expr.kind not in ("name", "attribute") or not fn_expr.text:
            continue
        fn = model.binding(fn_expr.text, call.site)
        if isinstance(fn, Function) and fn.model is model:
            yield fn, call


# -- models and their builders -----------------------------------------------------------------
def returns_made_by(model, fn: Function, made, bare: bool = False) -> bool:
    """Whether every `return` of the local function `fn` gives a value `made(call)` accepts: a call
    returned whole (`return keras.Sequential(...)`), or one name (or `self.x`) each binding of which
    is such a call (`net = keras.Model(i, o)` ... `return net`). A bare `return` makes it False, or,
    with `bare`, is passed over; at least one `return` with a value is needed."""
    facts = model.facts
    returns = [e for e in facts.exits if e.kind == "return" and facts.scope_of(e.site) == fn.block.id]
    if bare:
        returns = [e for e in returns if e.span != (0, 0)]
    if not returns or any(e.span == (0, 0) for e in returns):
        return False
    for exit_ in returns:
        whole = model.whole_call(exit_.span)
        if whole is not None:
            if made(whole):
                continue
            return False
        uses = model.spans.uses_in(exit_.span)
        if len(uses) != 1 or not all_calls(model, uses[0].name, exit_.site, made):
            return False
    return True


def makes_keras_model(model, call, depth: int = 0) -> bool:
    """The call makes a Keras model or layer: a class of Keras's models, applications or layers, a
    local subclass of `Layer`/`Model`, or a local builder function that returns one of those."""
    facts = model.facts
    callee = callee_of(facts, call)
    if any(keras_member(callee, package) for package in MODEL_PACKAGES) or callee in KERAS_MODEL_CLASSES:
        return True
    made = model.binding(call.func.text, call.site) if call.func.kind == "name" else None
    if isinstance(made, Klass):
        return model.is_keras(made, "layers")
    fn = model.resolve(call)
    if fn is None or fn.model is not model or depth > MAX_MODEL_BUILDERS:
        return False
    return returns_made_by(model, fn, lambda inner: makes_keras_model(model, inner, depth + 1), bare=True)


def builds_variables(model, call, depth: int = 0) -> bool:
    """The call makes a Keras model whose variables exist once it is made: a functional
    `Model(inputs, outputs)`, a `Sequential` that starts with an `Input`, or a local builder
    function (not a method, one that opens no `.scope()`) that returns one of those."""
    facts = model.facts
    callee = callee_of(facts, call)
    member = keras_member(callee, "models") or (callee.rsplit(".", 1)[-1] if callee in KERAS_MODEL_CLASSES else "")
    if member in FUNCTIONAL:
        return len(call.args) + len({"inputs", "outputs"} & set(call.keywords)) >= 2
    if member == "Sequential":
        layers = call.arg(0, "layers")
        if layers is None or layers.kind != "list" or not layers.elements:
            return False
        first = layers.elements[0]
        return first.kind == "call" and first.func_text.rsplit(".", 1)[-1] in INPUTS and (
            keras_member(facts.resolve(first.func_text), "layers") in INPUTS
            or facts.resolve(first.func_text) in ("keras.Input", "tensorflow.keras.Input")
        )
    fn = model.resolve(call)
    if fn is None or fn.model is not model or depth > MAX_VARIABLE_BUILDERS or fn.owner is not None:
        return False
    if any(method_of(c) == "scope" and facts.scope_of(c.site) == fn.block.id for c in facts.calls):
        return False
    return returns_made_by(model, fn, lambda inner: builds_variables(model, inner, depth + 1))

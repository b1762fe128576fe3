"""The program model: what one file's functions, classes and names are, asked once, shared by every rule.

The facts (`tapecheck.lint.facts`) are events in source order. This layer answers the
questions the rules used to answer each on its own, by name matching in one scope:

- **Bindings**: what a name or a `self.` attribute refers to at a site: a function or
  class of this file, an instance of a class of this file, an alias of either, or
  unknown (a parameter, an import, anything else). Reaching definitions come from
  `FileFacts.reaching_assigns`; a name not bound in its function is looked up in the
  enclosing functions and then the module (closures and globals), and a `self.x` in
  every method of its class.
- **Calls**: `helper(x)`, `self.method(x)`, `obj.method(x)`, `model(x)` on an instance
  of a local Keras `Layer`/`Model` (its `call`), and local base classes.
- **Differentiable flow** (`Tracer`): which origins (the sources of a tape, the parameters
  of a function) a value depends on through ops with a gradient (`live`), and which only
  through a cut (`.numpy()`, NumPy, `float()`, argmax, integer casts), with the site of
  the cut and the call path to it.
- **Function summaries** (`summary`), computed once per function from its body and the
  summaries of the functions it calls (Pysa's model): how the return value depends on each
  parameter (live, cut with the op and line, or not at all), and which optimizers,
  metrics and variables it creates on every call. Recursion is bounded: a function met
  again while its own summary is being computed is unknown, and unknown is silent.

Nothing here imports libcst: rules query this model and stay plain Python.
"""

from __future__ import annotations

import functools

import os
import re
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field, replace

from tapecheck.lint.facts import GRADIENT_METHODS, LAMBDA, Block, Call, Compare, FileFacts, Site
from tapecheck.lint.queries import (
    METADATA_CALLS, MODEL_CLASSES, call_span, callee_of, is_metadata, method_of, prefixes, spans_of, variable_owner,
)

# -- what cuts a gradient path --------------------------------------------------------
NO_GRADIENT_OPS = frozenset(
    {
        "tensorflow.argmax", "tensorflow.argmin", "tensorflow.math.argmax", "tensorflow.math.argmin",
        "tensorflow.round", "tensorflow.math.round",
        "keras.ops.argmax", "keras.ops.argmin", "keras.ops.round",
        "tensorflow.floor", "tensorflow.math.floor", "tensorflow.math.ceil", "keras.ops.floor", "keras.ops.ceil",
    }
)
# Ops whose gradient is zero everywhere (not None): the weights behind them never move, silently.
ZERO_GRADIENT_OPS = frozenset({"tensorflow.sign", "tensorflow.math.sign", "keras.ops.sign"})
CASTS = frozenset({"tensorflow.cast", "tensorflow.dtypes.cast", "keras.ops.cast"})
PYTHON_CASTS = frozenset({"float", "int", "round"})
INTEGER_DTYPE = re.compile(r"(u?int(8|16|32|64)|bool)")
# Calls through which nothing flows, by design or because the result is metadata.
STOP_GRADIENT_CALLS = frozenset({"tensorflow.stop_gradient", "keras.ops.stop_gradient"})
# Methods of a Keras model that run it in their own loop and return NumPy arrays.
PREDICT_METHODS = frozenset({"predict", "predict_on_batch"})
# Reads inside these make no value the loss depends on: printing, shapes. A `stop_gradient` does
# make one, cut on purpose (a `deliberate` Cut): fine beside a live path, not as the only one.
STOP_CALLS = frozenset({"print", "tensorflow.print"}) | METADATA_CALLS
# Calls that take indices or draw samples: a cut value used there is a choice, not a value.
INDEX_CALLS = frozenset(
    {
        "tensorflow.gather", "tensorflow.gather_nd", "tensorflow.one_hot", "tensorflow.boolean_mask",
        "tensorflow.nn.embedding_lookup", "tensorflow.random.categorical", "tensorflow.range",
        "keras.ops.take", "keras.ops.take_along_axis", "keras.ops.one_hot",
    }
)
CONDITIONAL_BLOCKS = frozenset({"if", "else", "except", "match", "for", "while", "try", "finally"})
GUARD_BLOCKS = frozenset({"if", "else", "except", "match"})

# -- what makes state --------------------------------------------------------------------
VARIABLE_CLASSES = frozenset({
    "tensorflow.Variable", "keras.Variable", "tensorflow.keras.Variable",
    # the Keras backend's constructor (`K.variable`): a tf.Variable too
    "tensorflow.keras.backend.variable", "keras.backend.variable", "tf_keras.backend.variable",
})
KERAS_ROOTS = ("keras.", "tensorflow.keras.", "tf_keras.", "tensorflow.python.keras.")
WEIGHT_METHODS = frozenset({"add_weight", "add_variable"})  # `self.add_weight(...)`: a layer's weight
# `tf.function` under every name the rules resolve: a function decorated or wrapped by one is traced.
TF_FUNCTIONS = frozenset({"tensorflow.function", "tensorflow.compat.v2.function", "tensorflow.compat.v1.function"})
# `keras.models` functions that return a model (besides the classes `Model` and `Sequential`).
MODEL_FACTORIES = frozenset({"Model", "Sequential", "load_model", "clone_model", "model_from_json"})
MAX_ALIAS_DEPTH = 8
MAX_CALL_DEPTH = 40  # summaries computed inside one another; deeper calls are unknown


@functools.lru_cache(maxsize=8192)  # asked of the same few hundred names for every call of a file
def keras_member(dotted: str, package: str) -> str:
    """`Mean` for `keras.metrics.Mean` (any Keras flavour) when in `package`, else ""."""
    if "keras" not in dotted:
        return ""
    for root in KERAS_ROOTS:
        for middle in (f"{package}.", f"src.{package}.", f"api.{package}."):
            prefix = root + middle
            if dotted.startswith(prefix):
                return dotted[len(prefix):].rsplit(".", 1)[-1]
    return ""


def is_keras_class(dotted: str, package: str) -> bool:
    member = keras_member(dotted, package)
    return bool(member) and member[0].isupper()


def describe(call: Call) -> str:
    if method_of(call) == "numpy" and not call.args:
        return "`.numpy()`"
    return f"`{call.func.text}()`" if call.func.text else f"`.{method_of(call)}()`"


def cuts(facts: FileFacts, call: Call) -> bool:
    """Whether this call returns a value with no gradient back to its inputs."""
    callee = callee_of(facts, call)
    if method_of(call) == "numpy" and not call.args and not callee.startswith(("numpy", "tensorflow")):
        return True
    if callee.startswith("numpy.") and not callee.startswith("numpy.random."):
        return True
    if call.func.kind == "name" and call.func.text in PYTHON_CASTS and call.func.text not in facts.imports:
        return True
    if callee in NO_GRADIENT_OPS or callee in ZERO_GRADIENT_OPS:
        return True
    if callee in CASTS:
        dtype = call.arg(1, "dtype")
        if dtype is not None:
            text = dtype.text.rsplit(".", 1)[-1] if dtype.text else str(dtype.value or "")
            return bool(INTEGER_DTYPE.fullmatch(text))
    return False


# -- flows ----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Cut:
    """Where a gradient path was cut: the op's site, how to name it, and how it is reached."""

    site: Site
    what: str  # "`.numpy()`", "`np.log()`"
    function: str = ""  # the function holding the cut; "" when it is in the scope traced
    calls: tuple[tuple[str, int, str], ...] = ()  # from the traced scope inward: (callee, line of its call, file)
    file: str = ""  # the file holding the cut
    entry: Site | None = None  # the outermost call, in the scope traced
    zero: bool = False  # the op's gradient is zero (`tf.sign`), not None
    deliberate: bool = False  # `tf.stop_gradient`: a cut on purpose, a mistake only as the one path left
    layer: str = ""  # a cut in the function of a `Lambda` layer: "`Lambda` layer (line 3) of `model`"

    def through(self, callee: str, call: Site, file: str) -> "Cut":
        return replace(self, function=self.function or callee, calls=((callee, call.line, file), *self.calls),
                       file=self.file or file, entry=call)

    def path(self, reporting: str = "") -> str:
        """"`loss_fn` (called at line 31), then `weighted` (called at line 12)"; lines of other files name them."""
        return ", then ".join(
            f"`{name}` (called at {where(file, line, reporting)})" for name, line, file in self.calls
        )

    def at(self, reporting: str = "") -> str:
        return where(self.file, self.site.line, reporting)


def where(file: str, line: int, reporting: str) -> str:
    """"line 9", or "line 9 of losses.py" for a line of another file."""
    if not file or os.path.abspath(file) == os.path.abspath(reporting or file):
        return f"line {line}"
    return f"line {line} of {os.path.basename(file)}"


class Flow:
    """The origins a value depends on: `live` through ops with gradients, `cuts` through a cut.
    `partial`: origins that reach the value live, and also through a term of a sum that depends
    on them only through a cut (that term adds a constant: what only it reaches never trains)."""

    __slots__ = ("live", "cuts", "partial")

    def __init__(self, live=(), cuts=None, partial=None):
        self.live: set[str] = set(live)
        self.cuts: dict[str, Cut] = dict(cuts or {})
        self.partial: dict[str, Cut] = dict(partial or {})

    def copy(self) -> "Flow":
        return Flow(self.live, self.cuts, self.partial)

    def empty(self) -> bool:
        return not self.live and not self.cuts

    def merge(self, other: "Flow") -> None:
        self.live |= other.live
        for origin, cut in other.cuts.items():
            self.cuts.setdefault(origin, cut)
        for origin, cut in other.partial.items():
            self.partial.setdefault(origin, cut)

    def cut_all(self, cut: Cut) -> None:
        for origin in self.live:
            self.cuts[origin] = cut
        self.live.clear()
        self.partial.clear()  # the whole value is cut now: that is what matters

    def only_cut(self, origin: str) -> Cut | None:
        """The cut, when `origin` reaches this value only through one."""
        return None if origin in self.live else self.cuts.get(origin)

    def cut_term(self, origin: str) -> Cut | None:
        """The cut of a term of a sum that `origin` reaches only through it, while the value as a
        whole depends on `origin` live."""
        return self.partial.get(origin) if origin in self.live else None


# -- the model's objects -------------------------------------------------------------------
@dataclass(slots=True)
class Function:
    block: Block
    params: tuple[str, ...]
    owner: Block | None  # the class, for a method
    bound: bool  # a method that takes `self` (not a staticmethod)
    model: "ProgramModel" = None  # the model of the file that defines it
    label: str = ""  # a lambda: the name it is bound to (`self.loss_fn`), for messages

    @property
    def name(self) -> str:
        return self.block.name

    @property
    def qualname(self) -> str:
        if self.label:
            return self.label
        return f"{self.owner.name}.{self.block.name}" if self.owner is not None else self.block.name

    @property
    def self_name(self) -> str:
        return self.params[0] if self.bound and self.params else ""


@dataclass(frozen=True, slots=True)
class Klass:
    """A class defined in a linted file (this one, or one it imports)."""

    block: Block
    model: "ProgramModel"


@dataclass(frozen=True, slots=True)
class Instance:
    klass: Klass


@dataclass(frozen=True, slots=True)
class ModuleRef:
    model: "ProgramModel"


@dataclass(frozen=True, slots=True)
class Creation:
    """State made on every call of a function: where, what kind, and through which calls."""

    site: Site
    kind: str  # optimizer, metric, variable
    text: str  # the constructor as written
    function: str
    calls: tuple[tuple[str, int], ...] = ()
    file: str = ""  # set when made in another file than the one asking
    entry: Site | None = None  # then: the call, in the file asking, that leads there


@dataclass(frozen=True, slots=True)
class TapeUse:
    """A use of a tape's recording: `tape.gradient(...)` itself, or a call handing the tape to a
    function that asks it for gradients (`path`: the calls to that `gradient`, outermost first)."""

    call: Call
    path: tuple[tuple[str, int], ...] = ()  # (function, line of the call it makes next)
    file: str = ""  # set when the `gradient` call is in another file
    repeated: str = ""  # how one such call asks the tape more than once ("in the loop at line 5 of losses.py")

    def where(self) -> str:
        """"in `apply_grads` (line 9)", with the functions between when there are (`gradient` asked in
        `_grads`, reached through `_clipped`); "" for a direct call. Lines of other files name them."""
        if not self.path:
            return ""
        function, line = self.path[-1]
        place = f"line {line}" + (f" of {os.path.basename(self.file)}" if self.file else "")
        between = "" if self.file else ", ".join(f"`{name}` (line {at})" for name, at in self.path[:-1])
        return f"in `{function}` ({place})" + (f", called from {between}" if between else "")


@dataclass(slots=True)
class Summary:
    returns: Flow = field(default_factory=Flow)  # origins: parameter names
    creates: list[Creation] = field(default_factory=list)
    # parameter -> the calls down to a `gradient` asked of it on every call (a tape handed in)
    gradients: dict[str, tuple[tuple[str, int], ...]] = field(default_factory=dict)
    # parameter -> how one call asks it for gradients more than once ("in the loop at line 5")
    repeated: dict[str, str] = field(default_factory=dict)


class ProgramModel:
    """The semantic model of one file. Build it with `model_of(facts)`."""

    def close(self) -> None:
        """Drop what the model built. Its functions and classes refer back to it: cycles that
        only the garbage collector would free, and a lint runs with it paused. The engine closes
        the model of a file it has linted; models of other files (`load_module`) stay open."""
        self.__dict__.clear()

    def __init__(self, facts: FileFacts):
        self.facts = facts
        self.spans = spans_of(facts)
        self.functions: dict[int, Function] = {}
        self.classes: dict[int, Block] = {}
        self._defs: dict[tuple[str, int, int], Block] = {}  # (name, line, scope) -> function/class block
        self._lambda_lines: dict[tuple[int, int], int] = {}  # (line, scope) -> lambdas written there
        self._summaries: dict[int, Summary | None] = {}
        self._compares: list = []
        self._compare_orders: list[int] | None = None
        self._sums: list = []
        self._sum_starts: list[int] | None = None
        self._attributes: dict[tuple[int, str], object] = {}
        self._assigns_by_scope: dict[int, list] = {}
        self._uses_by_head: dict[str, list] | None = None
        self._callers: dict[int, list] | None = None
        self._calls_by_name: dict[str, list] = {}
        self._methods: dict[int, list] | None = None
        self._attribute_assigns: dict[tuple[int, str], list] = {}
        self._assigns_by_name: dict[str, list] | None = None  # assigns_named
        self._call_graph: dict[int, dict[int, int]] | None = None  # call_graph
        self.memo: dict = {}  # what a rule derives once per file (keyed by the rule's own names)
        self._uses_by_attribute: dict[str, list] | None = None
        self.differences = frozenset(facts.differences)  # the order spans of the sums that subtract a term
        params: dict[int, list[str]] = {}
        for assign in facts.assigns:
            self._assigns_by_scope.setdefault(facts.scope_of(assign.site), []).append(assign)
            if assign.kind == "param":
                params.setdefault(assign.site.block, []).append(assign.target)
        for block in facts.blocks:
            if block.kind not in ("function", "class"):
                continue
            parent_scope = facts.blocks[block.parent].scope if block.parent is not None else 0
            self._defs[(block.name, block.line, parent_scope)] = block
            if block.name == LAMBDA:
                self._lambda_lines[(block.line, parent_scope)] = self._lambda_lines.get((block.line, parent_scope), 0) + 1
            if block.kind == "class":
                self.classes[block.id] = block
                continue
            owner = facts.blocks[block.parent] if block.parent is not None else None
            owner = owner if owner is not None and owner.kind == "class" else None
            static = any(d.rsplit(".", 1)[-1] == "staticmethod" for d in block.decorators)
            self.functions[block.id] = Function(
                block, tuple(params.get(block.id, ())), owner, owner is not None and not static, self
            )

    def sums_in(self, span: tuple[int, int]) -> list:
        """The sums (their terms' order spans) whose first term starts within an order span."""
        if self._sum_starts is None:
            self._sums = sorted(self.facts.sums, key=lambda terms: terms[0][0])
            self._sum_starts = [terms[0][0] for terms in self._sums]
        start, end = span
        low, high = bisect_left(self._sum_starts, start), bisect_right(self._sum_starts, end)
        return [terms for terms in self._sums[low:high] if terms[-1][1] <= end]

    def comprehensions_in(self, span: tuple[int, int]) -> list:
        """The comprehensions that lie within an order span."""
        start, end = span
        return [c for c in self.facts.comprehensions if start <= c.span[0] and c.span[1] <= end] \
            if self.facts.comprehensions else []

    def compares_in(self, span: tuple[int, int]) -> list:
        """The comparisons whose events lie in an order span."""
        if self._compare_orders is None:
            self._compares = sorted(self.facts.compares, key=lambda c: c.site.order)
            self._compare_orders = [c.site.order for c in self._compares]
        start, end = span
        return self._compares[bisect_right(self._compare_orders, start): bisect_right(self._compare_orders, end)]

    # -- classes --------------------------------------------------------------------------
    def local_class(self, dotted: str) -> Block | None:
        """The class of this file a base or constructor name (`Net`, resolved) refers to."""
        found = [b for b in self.classes.values() if b.name == dotted and self.facts.blocks[b.parent].kind == "module"]
        return found[-1] if found else None

    def bases(self, klass: Block, depth: int = 0):
        """`klass` and its local base classes, nearest first."""
        yield klass
        if depth > MAX_ALIAS_DEPTH:
            return
        for base in klass.bases:
            local = self.local_class(base)
            if local is not None and local is not klass:
                yield from self.bases(local, depth + 1)

    def method(self, klass: "Klass", name: str) -> Function | None:
        """The method `name` of a class, found in it or its local bases."""
        return klass.model.method_of_block(klass.block, name)

    def methods(self, klass: Block) -> list[Function]:
        """The functions defined in the body of `klass` (not its bases'), in source order."""
        if self._methods is None:
            self._methods = {}
            for fn in self.functions.values():
                if fn.owner is not None:
                    self._methods.setdefault(fn.owner.id, []).append(fn)
        return self._methods.get(klass.id, [])

    def method_of_block(self, klass: Block, name: str) -> Function | None:
        for cls in self.bases(klass):
            for fn in self.methods(cls):
                if fn.name == name:
                    return fn
        return None

    def is_keras(self, klass: Block | Klass, package: str = "layers") -> bool:
        """A subclass of a Keras Layer or Model (package "layers"), Loss ("losses"), Metric ("metrics")."""
        if isinstance(klass, Klass):
            return klass.model.is_keras(klass.block, package)
        for cls in self.bases(klass):
            for base in cls.bases:
                if package == "layers" and (is_keras_class(base, "layers") or is_keras_class(base, "models")
                                            or base in ("keras.Model", "tensorflow.keras.Model", "keras.Layer",
                                                        "tensorflow.Module", "tensorflow.keras.Sequential")):
                    return True
                if package != "layers" and is_keras_class(base, package):
                    return True
        return False

    def is_model_class(self, klass: Block | Klass) -> bool:
        """A subclass of a Keras `Model` (or `Sequential`), through the local classes it derives from."""
        if isinstance(klass, Klass):
            return klass.model.is_model_class(klass.block)
        return any(base in MODEL_CLASSES or is_keras_class(base, "models")
                   for cls in self.bases(klass) for base in cls.bases)

    def makes_a_model(self, call: Call, depth: int = 0) -> bool:
        """Whether `call` returns a Keras model: a model class (`keras.Sequential`, `keras.Model(inputs,
        outputs)`, a subclass of one in a linted file), `keras.models.load_model`, an application
        (`keras.applications.ResNet50`), or a function of a linted file each of whose returns is one."""
        if depth > MAX_ALIAS_DEPTH or not call.func.text:
            return False
        callee = self.resolved(call.func.text, call.site)
        if callee in MODEL_CLASSES or keras_member(callee, "models") in MODEL_FACTORIES \
                or is_keras_class(callee, "applications"):
            return True
        made = self.binding(call.func.text, call.site)
        if isinstance(made, Klass):
            return self.is_model_class(made)
        if isinstance(made, Function) and not made.bound and made.model is not None:
            other = made.model
            returned = other.returned_calls(made)
            if returned:
                return all(other.makes_a_model(inner, depth + 1) for inner in returned)
            names = other.returned_names(made)  # `model = keras.Model(inputs, outputs); return model`
            return bool(names) and all(other.holds_a_model(name, site, depth + 1) for name, site in names)
        return False

    def returned_names(self, fn: Function) -> list | None:
        """(name, site) for each `return` of `fn` that gives a plain name, or None when some `return`
        gives anything else (or there is none)."""
        facts = self.facts
        found = []
        for exit_ in facts.exits:
            if exit_.kind != "return" or facts.scope_of(exit_.site) != fn.block.id:
                continue
            uses = self.spans.uses_in(exit_.span) if exit_.span != (0, 0) else []
            if len(uses) != 1 or "." in uses[0].name or self.spans.calls_in(exit_.span):
                return None
            found.append((uses[0].name, uses[0].site))
        return found or None

    def holds_a_model(self, name: str, site: Site, depth: int = 0) -> bool:
        """Whether `name` is a Keras model at `site`: each binding of it (for `self.x`, every
        `self.x = ...` of the class) is a call that makes one (`makes_a_model`) or a name that holds
        one; a parameter, when every call of its function here passes one (`Trainer(build_model())`);
        `trainer.model` when `trainer` is an instance whose class sets `self.model` so; `self` in a method of a Keras Model subclass; `self.model` in a Keras callback (Keras sets
        it). False when unknown."""
        if depth > MAX_ALIAS_DEPTH or not name:
            return False
        # Each (name, place) is worked out once per file: callers of callers fan out, and a cut-off
        # answer (False while it is worked out: a cycle; False past the depth) errs towards silence.
        key = ("holds a model", name, site.order)
        known = self.memo.get(key)
        if known is None:
            self.memo[key] = False
            known = self.memo[key] = self._holds_a_model(name, site, depth)
        return known

    def _holds_a_model(self, name: str, site: Site, depth: int) -> bool:
        klass = self.self_class(name, site)
        if klass is not None:
            return self.is_model_class(klass)
        head, _, attribute = name.partition(".")
        if attribute == "model":
            klass = self.self_class(head, site)
            if klass is not None and any(is_keras_class(base, "callbacks")
                                         for cls in self.bases(klass) for base in cls.bases):
                return True
        if attribute and "." not in attribute and self.self_class(head, site) is None:
            owner = self.binding(head, site)  # `trainer.model` for `trainer = Trainer(build())`
            if isinstance(owner, Instance):
                other = owner.klass.model
                assigns = [assign for assign, _ in other.attribute_assigns(owner.klass.block, attribute)]
                return bool(assigns) and all(other._binds_a_model(assign, depth) for assign in assigns)
        assigns = self.assigns_of(name, site)
        return bool(assigns) and all(self._binds_a_model(assign, depth) for assign in assigns)

    def _binds_a_model(self, assign, depth: int) -> bool:
        value = assign.value
        if assign.kind == "param":
            fn = self.functions.get(self.facts.scope_of(assign.site))
            passed = self.arguments_for(fn, assign.target) if fn is not None else None
            return bool(passed) and all(self._is_a_model(call, argument, depth + 1) for call, argument in passed)
        if assign.kind != "assign" or value is None:
            return False
        if value.kind == "call":
            made = self.value_call(assign)
            return made is not None and self.makes_a_model(made, depth + 1)
        return value.kind in ("name", "attribute") and self.holds_a_model(value.text, assign.site, depth + 1)

    def _is_a_model(self, call: Call, argument, depth: int) -> bool:
        """Whether `argument`, passed by `call`, is a Keras model."""
        if argument.kind == "call":
            span = call.span_of(argument)
            made = self.call_at(span, argument) if span is not None else None
            return made is not None and self.makes_a_model(made, depth)
        return argument.kind in ("name", "attribute") and self.holds_a_model(argument.text, call.site, depth)

    # -- bindings ---------------------------------------------------------------------------
    def _definition(self, assign, scope: int):
        block = self._defs.get((assign.target, assign.site.line, scope))
        if block is None:
            return None
        if block.id in self.classes:
            return Klass(block, self)
        return self.functions.get(block.id)

    def _value_of(self, assign, depth: int):
        """What one binding binds: a Function, a class Block, an Instance, or None."""
        facts = self.facts
        if assign.kind == "def":
            return self._definition(assign, facts.scope_of(assign.site))
        value = assign.value
        if assign.kind != "assign" or value is None:
            return None
        if value.kind == "lambda":
            fn = self.lambda_at(value.value, facts.scope_of(assign.site))
            if fn is not None and not fn.label:
                fn.label = assign.target
            return fn
        if value.kind in ("name", "attribute") and value.text:
            return self.binding(value.text, assign.site, depth + 1)
        if value.kind == "call" and value.func_text:
            made = self.binding(value.func_text, assign.site, depth + 1)
            if isinstance(made, Klass):
                return Instance(made)
        return None

    def lambda_at(self, line: int, scope: int) -> Function | None:
        """The lambda written on `line` in `scope`, when it is the only one there."""
        found = self._defs.get((LAMBDA, line, scope))
        if found is None or self._lambda_lines.get((line, scope), 0) != 1:
            return None
        return self.functions.get(found.id)

    def binding(self, name: str, site: Site, depth: int = 0):
        """What `name` refers to at `site`: a Function, a class Block, an Instance, or None (unknown)."""
        if depth > MAX_ALIAS_DEPTH or not name:
            return None
        facts = self.facts
        if "." in name:
            head, _, attribute = name.partition(".")
            if "." in attribute:
                return None
            klass = self.self_class(head, site)
            if klass is not None:
                return self.method_of_block(klass, attribute) or self.attribute(klass, attribute, depth)
            owner = self.binding(head, site, depth + 1)
            if isinstance(owner, Instance):
                klass = owner.klass
                return self.method(klass, attribute) or klass.model.attribute(klass.block, attribute, depth)
            if isinstance(owner, ModuleRef):
                return owner.model.module_binding(attribute, depth + 1)
            return None
        scope = facts.scope_of(site)
        reaching = facts.reaching_assigns(name, site)
        if reaching:
            return self._one(reaching, depth)
        if any(a.target == name for a in self._assigns_by_scope.get(scope, ())):
            return None  # local to this function, bound later or on a path not seen: unknown
        scope = self._enclosing(scope)
        while scope is not None:
            found = [a for a in self._assigns_by_scope.get(scope, ()) if a.target == name]
            if found:  # read when the inner function runs, later: every binding may hold
                return self._one(found, depth) if all(a.kind in ("assign", "def") for a in found) else None
            scope = self._enclosing(scope)
        return self._imported(name, depth)

    def assigns_in(self, scope: int) -> list:
        """The bindings made in one scope (its own statements, not nested functions')."""
        return self._assigns_by_scope.get(scope, [])

    def assigns_reaching(self, name: str, site: Site) -> list:
        """The bindings of `name` that may hold at `site`: reaching ones in its scope, else every
        binding in the nearest enclosing scope that has one (a closure or a global is read later)."""
        facts = self.facts
        reaching = facts.reaching_assigns(name, site)
        if reaching:
            return reaching
        scope = facts.scope_of(site)
        if any(a.target == name for a in self._assigns_by_scope.get(scope, ())):
            return []
        scope = self._enclosing(scope)
        while scope is not None:
            found = [a for a in self._assigns_by_scope.get(scope, ()) if a.target == name]
            if found:
                return found
            scope = self._enclosing(scope)
        return []

    def _uses_named(self, head: str) -> list:
        """The uses whose dotted name starts with `head` (`b`, `b.assign`), in source order."""
        if self._uses_by_head is None:
            self._uses_by_head = {}
            for use in self.facts.uses:
                self._uses_by_head.setdefault(use.name.partition(".")[0], []).append(use)
        return self._uses_by_head.get(head, [])

    def _uses_of_attribute(self, attribute: str) -> list:
        """The uses that read `.<attribute>` of anything (`self.b`, `trainer.b.assign`)."""
        if self._uses_by_attribute is None:
            self._uses_by_attribute = {}
            for use in self.facts.uses:
                for part in set(use.name.split(".")[1:]):
                    self._uses_by_attribute.setdefault(part, []).append(use)
        return self._uses_by_attribute.get(attribute, [])

    def sees(self, scope: int, name: str, bound_in: int) -> bool:
        """Whether `name` read in `scope` is the binding made in scope `bound_in` (itself, or an
        enclosing function or the module whose name no nearer scope rebinds)."""
        while scope is not None:
            if scope == bound_in:
                return True
            if any(a.target == name for a in self._assigns_by_scope.get(scope, ())):
                return False
            scope = self._enclosing(scope)
        return False

    def reads(self, name: str, site: Site) -> list | None:
        """The reads of what `name` (a name, or `self.x` in a method) holds at `site`, all in the scope
        of `site`; None when it is read anywhere else too (a closure, another method, a function
        that sees the global): the rule cannot tell when those run."""
        facts = self.facts
        scope = facts.scope_of(site)
        head, _, attribute = name.partition(".")
        if attribute:
            if "." in attribute or self.self_class(head, site) is None:
                return None
            uses = self._uses_of_attribute(attribute)
            if any(facts.scope_of(u.site) != scope and not _value_unread(u.name, attribute) for u in uses):
                return None
            return [u for u in uses if u.name == name or u.name.startswith(name + ".")]
        assigns = self.assigns_reaching(name, site)
        if not assigns:
            return None
        bound_in = facts.scope_of(assigns[0].site)
        found = []
        for use in self._uses_named(name):
            where = facts.scope_of(use.site)
            if where == scope:
                found.append(use)
            elif self.sees(where, name, bound_in):
                return None
        return found

    def value_assigns(self, name: str, site: Site, depth: int = 0) -> list:
        """The bindings whose value `name` may hold at `site`, through aliases (`t = self.temperature`)
        and `self.` attributes set in any method of the class. Empty: unknown."""
        if depth > MAX_ALIAS_DEPTH:
            return []
        head, _, attribute = name.partition(".")
        if attribute and "." not in attribute:
            klass = self.self_class(head, site)
            if klass is None:
                return []
            assigns = [assign for assign, _ in self.attribute_assigns(klass, attribute)]
        elif attribute:
            return []
        else:
            assigns = self.assigns_reaching(name, site)
        out = []
        for assign in assigns:
            value = assign.value
            if assign.kind == "assign" and value is not None and value.kind in ("name", "attribute") and value.text:
                inner = self.value_assigns(value.text, assign.site, depth + 1)
                if not inner:
                    return []
                out += inner
            else:
                out.append(assign)
        return out

    def loop_rebinding(self, name: str, site: Site):
        """An assignment to `name` later in a loop holding `site`, in its scope: on the next pass
        `name` holds that value (`w = w - lr * g` inside the training loop)."""
        facts = self.facts
        scope = facts.scope_of(site)
        loops = facts.loops_between(None, site)
        for assign in self._assigns_by_scope.get(scope, ()):
            if assign.target == name and assign.site.order > site.order and assign.kind in ("assign", "augassign"):
                if any(facts.inside(assign.site, loop) for loop in loops):
                    return assign
        return None

    def resolved(self, dotted: str, site: Site) -> str:
        """`dotted` resolved through the file's imports and, when its head is a name the file
        binds by assignment (`metrics = tf.keras.metrics`, `K = tf.keras.backend`), through that
        alias (`alias_of`). The cheap answer first: most heads are imports or bound nowhere."""
        head = dotted.partition(".")[0]
        if head == dotted or head in self.facts.imports or head not in self._alias_heads():
            return self.facts.resolve(dotted)
        return self.alias_of(dotted, site)

    def _alias_heads(self) -> set[str]:
        """Names some assignment binds to a name or an attribute (`K = tf.keras.backend`)."""
        heads = self.memo.get("alias heads")
        if heads is None:
            heads = self.memo["alias heads"] = {
                a.target for a in self.facts.assigns
                if a.kind == "assign" and a.value is not None and a.value.kind in ("name", "attribute")
            }
        return heads

    def alias_of(self, dotted: str, site: Site) -> str:
        """`tensorflow.keras.backend.set_learning_phase` for `K.set_learning_phase` after
        `K = tf.keras.backend`: a dotted name with its head replaced by what every binding of the head
        names, resolved through the file's imports. The name itself when its head is no alias."""
        head, dot, rest = dotted.partition(".")
        assigns = self.assigns_reaching(head, site)
        texts = {a.value.text for a in assigns
                 if a.kind == "assign" and a.value is not None and a.value.kind in ("name", "attribute")}
        if len(texts) != 1 or len(assigns) != sum(1 for a in assigns if a.kind == "assign"):
            return self.facts.resolve(dotted)
        return self.facts.resolve(texts.pop() + dot + rest)

    def imported_assign(self, name: str):
        """The module-level binding, in the project file it comes from, of an imported name
        (`from training import train_acc`): an Assign of that file, or None."""
        facts = self.facts
        relative = name in facts.relative_imports
        origin = facts.relative_imports.get(name) or facts.imports.get(name)
        if not origin:
            return None
        module, _, attribute = origin.rpartition(".")
        other = load_module(facts.path, module, relative) if module else None
        if other is None:
            return None
        found = [a for a in other._assigns_by_scope.get(0, ()) if a.target == attribute]
        return found[0] if len(found) == 1 and found[0].kind == "assign" else None

    def module_binding(self, name: str, depth: int = 0):
        """What the module-level name `name` of this file is (for a file that imports it)."""
        if depth > MAX_ALIAS_DEPTH:
            return None
        found = [a for a in self._assigns_by_scope.get(0, ()) if a.target == name]
        if found:
            return self._one(found, depth) if all(a.kind in ("assign", "def") for a in found) else None
        return self._imported(name, depth)

    def _imported(self, name: str, depth: int):
        """A name imported from another file of the project: what it is there, or None."""
        facts = self.facts
        relative = name in facts.relative_imports
        origin = facts.relative_imports.get(name) or facts.imports.get(name)
        if not origin or depth > MAX_ALIAS_DEPTH:
            return None
        module, _, attribute = origin.rpartition(".")
        if module:
            other = load_module(facts.path, module, relative)
            if other is not None:
                return other.module_binding(attribute, depth + 1)
        other = load_module(facts.path, origin, relative)  # `import models`, `from . import losses`
        return ModuleRef(other) if other is not None else None

    def _one(self, assigns, depth: int):
        values = [self._value_of(a, depth) for a in assigns]
        first = values[0]
        return first if first is not None and all(v is first or v == first for v in values) else None

    def _enclosing(self, scope: int) -> int | None:
        """The scope whose names a function's body sees next (class bodies do not enclose methods)."""
        blocks = self.facts.blocks
        while True:
            parent = blocks[scope].parent
            if parent is None:
                return None
            scope = blocks[parent].scope
            if blocks[scope].kind != "class":
                return scope

    def self_class(self, head: str, site: Site) -> Block | None:
        """The class whose instance `head` is at `site`: the class of the method holding `site`,
        when `head` is that method's `self`. None in a function, a staticmethod, or for another name."""
        fn = self.functions.get(self.facts.scope_of(site))
        if fn is not None and fn.bound and fn.self_name == head:
            return fn.owner
        return None

    def attribute_assigns(self, klass: Block, attribute: str) -> list:
        """Every `self.<attribute> = ...` in the methods of `klass` and its local bases, with the method."""
        key = (klass.id, attribute)
        found = self._attribute_assigns.get(key)
        if found is None:
            found = []
            for cls in self.bases(klass):
                for fn in self.methods(cls):
                    if fn.bound:
                        target = f"{fn.self_name}.{attribute}"
                        found.extend((a, fn) for a in self._assigns_by_scope.get(fn.block.id, ()) if a.target == target)
            self._attribute_assigns[key] = found
        return list(found)

    def attribute(self, klass: Block, attribute: str, depth: int = 0):
        """What `self.<attribute>` holds in every method of `klass`: one value, or None."""
        key = (klass.id, attribute)
        if key in self._attributes:
            return self._attributes[key]
        self._attributes[key] = None  # while computing: unknown
        values = {}
        for assign, _ in self.attribute_assigns(klass, attribute):
            value = self._value_of(assign, depth + 1)
            values[id(value)] = value
        result = next(iter(values.values())) if len(values) == 1 else None
        self._attributes[key] = result
        return result

    # -- calls ------------------------------------------------------------------------------
    def resolve(self, call: Call) -> Function | None:
        """The function of this file a call runs, or None."""
        if call.func.kind == "super":
            return self._super_method(call)
        if call.func.kind not in ("name", "attribute") or not call.func.text:
            return None
        target = self.binding(call.func.text, call.site)
        if isinstance(target, Function):
            return target
        if isinstance(target, Instance):
            return self.method(target.klass, "call") or self.method(target.klass, "__call__")
        return None

    def _super_method(self, call: Call) -> Function | None:
        """`super().call(x)` in a method: the method of that name in the nearest local base class."""
        fn = self.functions.get(self.facts.scope_of(call.site))
        if fn is None or fn.owner is None or not fn.bound or not call.func.method:
            return None
        for base in list(self.bases(fn.owner))[1:]:
            for method in self.methods(base):
                if method.name == call.func.method:
                    return method
        return None

    def resolve_instance_method(self, name: str, site: Site, method: str) -> Function | None:
        """`Net.call` when `name` holds an instance of the local class `Net` at `site`."""
        target = self.binding(name, site)
        return self.method(target.klass, method) if isinstance(target, Instance) else None

    def parameter(self, call: Call, fn: Function, order: int) -> str | None:
        """The parameter of `fn` that receives the event at `order` of `call`; None: unknown.

        "" when the event is the called thing itself and `fn` takes no `self` for it."""
        bound_by_call = fn.bound and (
            call.func.kind in ("attribute", "super")
            or isinstance(self.binding(call.func.text, call.site), (Instance, Klass))  # `Net(x)` runs `__init__(self, x)`
        )
        if order <= call.first_arg:
            return fn.self_name if bound_by_call else ""
        positional = fn.params[1:] if bound_by_call else fn.params
        for key, start, end in call.arg_spans:
            if start < order <= end:
                if key == -1:
                    return None
                if isinstance(key, str):
                    return key if key in fn.params else None
                return positional[key] if key < len(positional) else None
        return None

    # -- summaries -------------------------------------------------------------------------
    def summary(self, fn: Function) -> Summary | None:
        """What a call of `fn` does; None while it is being computed (recursion: unknown)."""
        if fn.model is not self:
            return fn.model.summary(fn)
        key = fn.block.id
        if key in self._summaries:
            return self._summaries[key]
        if _depth[0] >= MAX_CALL_DEPTH:
            return None  # not memoised: asked again from a shallower caller, it is computed
        self._summaries[key] = None
        _depth[0] += 1
        try:
            summary = self._summarise(fn, key)
        finally:
            _depth[0] -= 1
        self._summaries[key] = summary
        return summary

    def _summarise(self, fn: Function, key: int) -> Summary:
        facts = self.facts
        params = set(fn.params)
        summary = Summary()
        self_name = fn.self_name

        def origin_of(name: str) -> set[str]:
            """A parameter; for `self.generator...`, also `self.generator`: what a call of this method
            does with each attribute of the object it is called on (see `Tracer._through_attributes`)."""
            head, dot, rest = name.partition(".")
            found = {head} & params
            if dot and head == self_name:
                found.add(f"{head}.{rest.partition('.')[0]}")
            return found

        tracer = Tracer(self, origin_of, hides=True)
        events = [a for a in self._assigns_by_scope.get(key, ()) if a.kind in ("assign", "augassign") and a.span != (0, 0)]
        events += [e for e in facts.exits if e.kind == "return" and e.span != (0, 0) and facts.scope_of(e.site) == key]
        for event in sorted(events, key=lambda e: e.site.order):
            if hasattr(event, "target"):
                tracer.assign(event, merge=event.site.block != key)
            else:
                summary.returns.merge(tracer.judge(event.span))
        for call in self.spans.calls:
            if facts.scope_of(call.site) != key or self.guarded(call.site, key):
                continue
            self._asks_gradients(fn, call, summary)  # in a comprehension too: as in a loop, once per item
            if call.site.in_comprehension:
                continue
            kind = self.state_kind(call)
            if kind:
                summary.creates.append(Creation(call.site, kind, call.func.text, fn.qualname))
                continue
            callee = self.resolve(call)
            if callee is not None and callee.name not in ("__init__", "build"):
                inner = self.summary(callee)
                if inner is not None:
                    other = callee.model is not self
                    summary.creates.extend(
                        Creation(c.site, c.kind, c.text, c.function, ((callee.qualname, call.site.line), *c.calls),
                                 c.file or (callee.model.facts.path if other else ""),
                                 call.site if other or c.entry else None)
                        for c in inner.creates
                    )
        return summary

    def _asks_gradients(self, fn: Function, call: Call, summary: Summary) -> None:
        """Note in `summary` a `gradient` asked of a parameter of `fn` by `call`, directly or by a
        callee, and whether one call of `fn` asks it more than once (in a loop or a comprehension)."""
        if call.method in GRADIENT_METHODS and call.receiver in fn.params:
            summary.gradients.setdefault(call.receiver, ((fn.qualname, call.site.line),))
            repeats = self._repeats(call)
            if repeats:
                summary.repeated.setdefault(call.receiver, repeats)
            return
        for param, path, _, repeated in self.handed_tapes(call, set(fn.params)):
            summary.gradients.setdefault(param, ((fn.qualname, call.site.line), *path))
            repeats = repeated or self._repeats(call)
            if repeats:
                summary.repeated.setdefault(param, repeats)

    def _repeats(self, call: Call) -> str:
        """"in a comprehension" / "in the loop at line 7" when `call` may run more than
        once per call of its function; "" otherwise (a loop it leaves right after, by `return`/`break`)."""
        facts = self.facts
        if call.site.in_comprehension:
            return "in a comprehension"
        loops = facts.loops_between(None, call.site)
        if not loops or facts.exits_after(call.site):
            return ""
        return f"in the loop at line {facts.blocks[loops[0]].line}"

    def handed_tapes(self, call: Call, names):
        """(name, path, file, repeated) for each of `names` that `call` hands, as a plain argument, to
        a function whose summary asks that parameter for gradients (`repeated`: Summary.repeated)."""
        if not names or not call.args and not call.keywords:
            return
        callee = None
        for key, _, end in call.arg_spans:
            value = call.passed(key)
            if value is None or value.kind != "name" or value.text not in names:
                continue
            if callee is None:
                callee = self.resolve(call)
                if callee is None:
                    return
                inner = self.summary(callee)
                if inner is None or not inner.gradients:
                    return
            param = self.parameter(call, callee, end)
            path = inner.gradients.get(param) if param else None
            if path:
                repeated = inner.repeated.get(param, "")
                if callee.model is not self and "line" in repeated and " of " not in repeated:
                    repeated += f" of {os.path.basename(callee.model.facts.path)}"  # a line of that file
                yield value.text, path, callee.model.facts.path if callee.model is not self else "", repeated

    def lambda_layer_cut(self, call: Call) -> Cut | None:
        """The cut in the function of a `keras.layers.Lambda` inside the `Sequential([...])` the called
        name holds (`keras.layers.Lambda(lambda t: tf.round(t))`), or None."""
        assigns = self.value_assigns(call.func.text, call.site)
        if len(assigns) != 1 or assigns[0].kind != "assign" or assigns[0].value is None:
            return None
        assign = assigns[0]
        key = ("lambda-layer", assign.site.order)
        if key in self.memo:
            return self.memo[key]
        self.memo[key] = found = None
        facts = self.facts
        span = None
        if _is_sequential(assign.value.callee):
            span = assign.span
        elif assign.value.kind == "call" and assign.value.func_text:  # `build_model()` returning one
            builder = self.binding(assign.value.func_text, assign.site)
            returned = self.returned_calls(builder) if isinstance(builder, Function) and builder.model is self else None
            if returned and len(returned) == 1 and _is_sequential(callee_of(facts, returned[0])):
                span = call_span(returned[0])
        if span is not None:
            for inner in self.spans.calls_in(span):
                if keras_member(callee_of(facts, inner), "layers") != "Lambda" or not inner.args:
                    continue
                layer_fn = inner.args[0]
                fn = None
                if layer_fn.kind == "lambda":
                    fn = self.lambda_at(layer_fn.value, facts.scope_of(inner.site))
                elif layer_fn.kind in ("name", "attribute"):
                    target = self.binding(layer_fn.text, inner.site)
                    fn = target if isinstance(target, Function) else None
                summary = self.summary(fn) if fn is not None and fn.params else None
                cut = summary.returns.only_cut(fn.params[0]) if summary is not None else None
                if cut is not None and not cut.zero and not cut.deliberate:  # Lambda(tf.stop_gradient): a freeze
                    if fn.model is not self and not cut.file:
                        cut = replace(cut, file=fn.model.facts.path)
                    found = replace(cut, layer=f"the `Lambda` layer (line {inner.site.line}) of `{assign.target}`")
                    break
        self.memo[key] = found
        return found

    def returned_calls(self, fn: Function) -> list | None:
        """The outermost call each `return` of `fn` returns (`return keras.Sequential([...])`), or None
        when some return is not a call (or there is none)."""
        facts = self.facts
        exits = [e for e in facts.exits if e.kind == "return" and facts.scope_of(e.site) == fn.block.id]
        found = []
        for exit_ in exits:
            calls = self.spans.calls_in(exit_.span) if exit_.span != (0, 0) else []
            outer = calls[0] if calls else None
            if outer is None or any(c.end_order > outer.end_order for c in calls):
                return None  # `return a(x) + b(x)`, `return model, opt`: not one call
            for use in self.spans.uses_in(exit_.span):
                inside = outer.site.order <= use.site.order <= outer.end_order
                if not inside and not outer.func.text.startswith(use.name):
                    return None
            found.append(outer)
        return found or None

    def tape_uses(self, tape) -> list[TapeUse]:
        """Each use of `tape`'s recording in its scope, in source order: its own `gradient`/`jacobian`
        calls, and the calls that hand it to a function asking it for gradients on every call."""
        facts = self.facts
        uses = [TapeUse(call) for call in facts.tape_calls(tape, GRADIENT_METHODS)]
        if tape.name and "." not in tape.name:
            scope = facts.scope_of(tape.site)
            for call in self.spans.calls:
                if call.method in GRADIENT_METHODS or facts.scope_of(call.site) != scope:
                    continue
                if not any(a.kind == "name" and a.text == tape.name for a in (*call.args, *call.keywords.values())):
                    continue
                if facts.tape_for(tape.name, call.site) is not tape:
                    continue
                for _, path, file, repeated in self.handed_tapes(call, {tape.name}):
                    uses.append(TapeUse(call, path, file, repeated))
                    break
        return sorted(uses, key=lambda use: use.call.site.order)

    def guarded(self, site: Site, outer: int) -> bool:
        """Inside an `if`/`else`/`except`/`case` between block `outer` and the site: on some passes only."""
        chain = self.facts.chain(site.block)
        start = chain.index(outer) if outer in chain else 0
        return any(self.facts.blocks[b].kind in GUARD_BLOCKS for b in chain[start:])

    def state_kind(self, call: Call) -> str:
        """optimizer, metric or variable when the call makes one, else ""."""
        callee = callee_of(self.facts, call)
        if callee in VARIABLE_CLASSES:
            return "variable"
        if is_keras_class(callee, "optimizers") and ".schedules." not in callee:
            return "optimizer"
        if is_keras_class(callee, "metrics"):
            return "metric"
        if call.func.kind == "name":
            made = self.binding(call.func.text, call.site)
            if isinstance(made, Klass) and self.is_keras(made, "metrics"):
                return "metric"
        return ""

    # -- tapes -----------------------------------------------------------------------------
    def gradient_roots(self, call: Call, tape) -> tuple[set[str], set[str]]:
        """(roots, owners) of `tape.gradient(target, sources)`: the names the sources are read
        through (`model` for `model.trainable_variables`, `w` for `[w, b]`), and among them
        those that own variables (models, layers)."""
        facts = self.facts
        target = call.arg(0, "target")
        roots: set[str] = set()
        owners: set[str] = set()
        for use in self.spans.uses_in(call_span(call)):
            if use.name == f"{tape.name}.{call.method}" or (target is not None and use.name == target.text):
                continue
            owner = variable_owner(use.name)
            roots.add(owner or use.name)
            if owner:
                owners.add(owner)
            for assign in facts.reaching_assigns(use.name, call.site):
                for inner in self.spans.uses_in(assign.span):  # variables = gen.trainable_variables + ...
                    if variable_owner(inner.name):
                        roots.add(variable_owner(inner.name))
                        owners.add(variable_owner(inner.name))
        return roots, owners

    def tape_flow(self, tape, call: Call, origin_of) -> dict[str, Flow]:
        """The Flow of each name the tape's assignments bind, up to the `gradient` call."""
        facts = self.facts
        tracer = Tracer(self, origin_of, boundary=tuple(tape.with_blocks))
        scope = facts.blocks[tape.with_blocks[0]].scope
        assigns = [
            a for a in self._assigns_by_scope.get(scope, ())
            if a.kind in ("assign", "augassign") and a.span != (0, 0) and a.site.order < call.site.order
            and facts.records(tape, a.site)
        ]
        for assign in sorted(assigns, key=lambda a: a.site.order):
            tracer.assign(assign, merge=assign.site.block not in tape.with_blocks)
        return tracer.state

    def flow_before(self, tape, origin_of) -> dict[str, Flow]:
        """The Flow of each name bound in the tape's scope before the tape is made."""
        facts = self.facts
        tracer = Tracer(self, origin_of)
        scope = facts.scope_of(tape.site)
        assigns = [
            a for a in self._assigns_by_scope.get(scope, ())
            if a.kind in ("assign", "augassign") and a.span != (0, 0) and a.site.order < tape.site.order
        ]
        for assign in sorted(assigns, key=lambda a: a.site.order):
            tracer.assign(assign, merge=assign.site.block != scope)
        return tracer.state

    def callers(self, fn: Function):
        """The calls of this file that run `fn`."""
        if fn.model is not self:
            return []
        if self._callers is None:
            self._callers = {}  # function id -> its calls, worked out per function asked about
            self._calls_by_name = {}
            for call in self.spans.calls:
                self._calls_by_name.setdefault(call.func.text.rpartition(".")[2], []).append(call)
        found = self._callers.get(fn.block.id)
        if found is None:
            if fn.name == "__init__" and fn.owner is not None:  # `Trainer(model)` runs `Trainer.__init__`
                found = [c for c in self._calls_by_name.get(fn.owner.name, ())
                         if isinstance(made := self.binding(c.func.text, c.site), Klass) and made.block is fn.owner
                         and self.method(made, "__init__") is fn]
                self._callers[fn.block.id] = found
                return list(found)
            # a call names the function (`helper(x)`, `self.helper(x)`), or calls an instance (`net(x)` runs `call`)
            candidates = self.spans.calls if fn.name in ("call", "__call__") else self._calls_by_name.get(fn.name, ())
            found = self._callers[fn.block.id] = [c for c in candidates if self.resolve(c) is fn]
        return list(found)

    def arguments_for(self, fn: Function, param: str) -> list | None:
        """(call, argument) for each call of this file that runs `fn`: the expression it passes as
        `param`. None when nothing here calls `fn`, or a call passes `param` in a way we cannot
        read (`*args`, left to its default)."""
        calls = self.callers(fn)
        if not calls:
            return None
        found = []
        for call in calls:
            value = None
            for key, _, end in call.arg_spans:
                if key != -1 and self.parameter(call, fn, end) == param:
                    value = call.passed(key)
                    break
            if value is None:
                return None
            found.append((call, value))
        return found

    # -- what Keras runs for you ---------------------------------------------------------
    def compiled_losses(self):
        """(compile call, the function Keras calls as a loss, its `y_pred` parameter) for each loss given to `compile`."""
        for call in self.spans.calls:
            if method_of(call) != "compile":
                continue
            loss = call.arg(1, "loss")
            if loss is None:
                continue
            items = list(loss.elements) if loss.kind in ("list", "tuple") else [loss]
            for item in items:
                fn = None
                if item.kind in ("name", "attribute") and item.text:
                    target = self.binding(item.text, call.site)
                    if isinstance(target, Function):
                        fn = target
                    elif isinstance(target, Instance):
                        fn = self.method(target.klass, "call") or self.method(target.klass, "__call__")
                elif item.kind == "lambda":
                    fn = self.lambda_at(item.value, self.facts.scope_of(call.site))
                elif item.kind == "call" and item.func_text:
                    made = self.binding(item.func_text, call.site)
                    if isinstance(made, Klass):
                        fn = self.method(made, "call") or self.method(made, "__call__")
                if fn is None:
                    continue
                positional = fn.params[1:] if fn.bound else fn.params
                if len(positional) >= 2:
                    yield call, fn, positional[1]

    # -- queries the rules ask (one place for reaching definitions and `self.` attributes) -------
    def assigns_here(self, name: str, site: Site) -> list:
        """The bindings of `name` in the scope of `site` that may hold there (a parameter is one);
        [] when none reaches the site from its own scope. Closures and globals are not looked at
        (`assigns_reaching` does)."""
        return self.facts.reaching_assigns(name, site)

    def assign_here(self, name: str, site: Site):
        """The one binding of `name` in the scope of `site` that holds there, or None (none, or
        several may hold)."""
        found = self.facts.reaching_assigns(name, site)
        return found[0] if len(found) == 1 else None

    def assigns_named(self, name: str) -> list:
        """Every binding of `name` in the file, in any scope (parameters too), in the facts' order."""
        index = self._assigns_by_name
        if index is None:
            index = self._assigns_by_name = {}
            for assign in self.facts.assigns:
                index.setdefault(assign.target, []).append(assign)
        return index.get(name, [])

    def made_once(self, assign) -> bool:
        """Whether `assign` is the only binding of its name in the file (parameters aside), a plain
        assignment in no loop and under no `if`/`else`/`except`/`case` of its scope: one object,
        made once, whatever reads the name (a global, a closure) and whenever."""
        facts = self.facts
        return (assign.kind == "assign"
                and sum(1 for a in self.assigns_named(assign.target) if a.kind != "param") == 1
                and not facts.loops_between(None, assign.site)
                and not self.guarded(assign.site, facts.scope_of(assign.site)))

    def assigns_of(self, name: str, site: Site, bases: bool = True) -> list:
        """The bindings that may give `name` its value at `site`, one step (aliases not followed): for
        a name, `assigns_reaching`; for `self.x` in a method, every `self.x = ...` in the methods of
        its class and, unless `bases` is False, of its local base classes. [] when unknown."""
        if not name:
            return []
        head, _, attribute = name.partition(".")
        if not attribute:
            return self.assigns_reaching(name, site)
        klass = self.self_class(head, site) if "." not in attribute else None
        if klass is None:
            return []
        return [assign for assign, fn in self.attribute_assigns(klass, attribute) if bases or fn.owner is klass]

    def unaliased(self, dotted: str, site: Site, limit: int = MAX_ALIAS_DEPTH) -> str:
        """`self.gen.trainable_variables` for `gen.trainable_variables` after `gen = self.gen`: the head
        replaced by the name it is bound to, while one binding of it in its own scope holds at the site
        and binds another name (at most `limit` times). Closures and globals are not followed."""
        for _ in range(limit):
            head, dot, rest = dotted.partition(".")
            assign = self.assign_here(head, site)
            if assign is None or assign.value is None or assign.value.kind not in ("name", "attribute"):
                break
            dotted = assign.value.text + dot + rest
            site = assign.site
        return dotted

    def whole_call(self, span: tuple[int, int]) -> Call | None:
        """The call that is the whole expression spanning `span` (a value, an argument, what a
        `return` gives), or None (`f(x) + 1`, `(f(x), y)`, a name)."""
        calls = self.spans.calls_in(span)
        if not calls or calls[0].site.order != span[0] + 1:
            return None
        call = calls[0]
        if any(use.site.order > call.end_order for use in self.spans.uses_in(span)):
            return None
        if any(other.site.order > call.end_order for other in calls):
            return None
        return call

    def call_at(self, span: tuple[int, int], expr) -> Call | None:
        """The Call of the call expression `expr` (an argument, a value) that spans `span`, or None."""
        call = self.whole_call(span)
        return call if call is not None and call.func.text == expr.func_text else None

    def value_call(self, assign) -> Call | None:
        """The Call a plain assignment's value is (`model = keras.Sequential(...)`), or None."""
        value = assign.value
        if assign.kind != "assign" or value is None or value.kind != "call":
            return None
        return self.call_at(assign.span, value)

    def value_calls(self, name: str, site: Site, bases: bool = True) -> list | None:
        """The Call each binding of `name` at `site` (`assigns_of`) is; None when there is none or
        one binding is not a call."""
        calls = [self.value_call(assign) for assign in self.assigns_of(name, site, bases)]
        return calls if calls and all(call is not None for call in calls) else None

    def call_graph(self) -> dict[int, dict[int, int]]:
        """For each scope, the functions of this file its calls run (their block ids), each with the
        order of the first call that runs it. Every call is resolved once per file."""
        graph = self._call_graph
        if graph is None:
            graph = self._call_graph = {}
            for call in self.spans.calls:
                callee = self.resolve(call)
                if callee is not None and callee.model is self:
                    graph.setdefault(self.facts.scope_of(call.site), {}).setdefault(callee.block.id, call.site.order)
        return graph


class Tracer:
    """Follows assignments in order, keeping the Flow of each name from the given origins.

    `origin_of(name)` gives the origins a name stands for when nothing assigned it
    here (a tape's sources, a function's parameters)."""

    def __init__(self, model: ProgramModel, origin_of, boundary: tuple[int, ...] = (), hides: bool = False):
        # hides: a name bound here stands for its new value only (a parameter rebound), not its origin too
        self.model, self.origin_of, self.boundary, self.hides = model, origin_of, boundary, hides
        self.state: dict[str, Flow] = {}
        self._expanding: set = set()  # sums whose terms are being judged

    def known(self, name: str) -> Flow | None:
        for prefix in prefixes(name):
            if prefix in self.state:
                return self.state[prefix]
        return None

    def flow_of(self, name: str) -> Flow:
        known = self.known(name)
        flow = known.copy() if known is not None else Flow()
        if known is None or not self.hides:
            flow.live |= self.origin_of(name)
        for origin in flow.live:
            flow.cuts.pop(origin, None)
        return flow

    def assign(self, assign, merge: bool) -> Flow:
        flow = self.judge(assign.span)
        if flow.empty() and self.boundary:
            self._picked_by_if(assign, flow)
        previous = self.state.get(assign.target)
        if previous is None and merge:
            previous = Flow(self.origin_of(assign.target))  # a parameter rebound on some paths only
        if previous is not None and merge:
            flow.merge(previous)  # a conditional rebinding: either value may hold
        self.state[assign.target] = flow
        return flow

    def judge(self, span: tuple[int, int]) -> Flow:
        model = self.model
        facts = model.facts
        calls = model.spans.calls_in(span)
        compares = model.compares_in(span)
        if compares:  # a comparison cuts like a call that returns a bool: ordered with the calls
            calls = sorted([*calls, *compares], key=lambda c: c.site.order)
        flow = Flow()
        comprehensions = model.comprehensions_in(span)
        reads = [(use.name, use.site.order, None) for use in model.spans.uses_in(span)
                 if not comprehensions or not _iterated(comprehensions, use.site.order)]
        for call in calls:
            if isinstance(call, Compare):
                continue
            if call.func.kind == "super":  # `super().m(x)` reads `self`
                fn = model.functions.get(facts.scope_of(call.site))
                if fn is not None and fn.self_name:
                    reads.append((fn.self_name, call.site.order, call))
            elif call.func.kind == "attribute" and call.receiver and "." not in call.receiver \
                    and (self.flow_of(call.func.text).empty() or self._own_method(call)):
                # `self.generate(z)`: the method reads attributes of the object (`self.generator`)
                reads.append((call.receiver, call.site.order, call))
        for name, order, through in reads:
            if is_metadata(name):
                continue
            enclosing = [c for c in calls if c.site.order < order <= c.end_order]
            if any(not isinstance(c, Compare) and callee_of(facts, c) in STOP_CALLS for c in enclosing):
                continue
            element = _element_of(comprehensions, name, order) if comprehensions else None
            value = self.judge(element) if element is not None else self.flow_of(name)
            if through is not None and through.func.kind == "attribute":
                value = self._through_attributes(through, name)
            elif through is not None and not value.empty():
                value = self._through(through, order, value)
            if value.empty():
                continue
            indexed = [i for i, c in enumerate(enclosing) if not isinstance(c, Compare) and _is_index(facts, c)]
            outermost_index = indexed[0] if indexed else len(enclosing)
            for position in range(len(enclosing) - 1, -1, -1):
                call = enclosing[position]
                if position == outermost_index or position in indexed:
                    value.cuts.clear()  # an index or a sample: a choice, not a value
                elif position > outermost_index:
                    continue  # inside an index: no cut is a cut here
                elif isinstance(call, Compare):
                    value.cut_all(Cut(call.site, f"the comparison `{call.operator}`"))
                elif callee_of(facts, call) in STOP_GRADIENT_CALLS:
                    value.cut_all(Cut(call.site, describe(call), deliberate=True))
                elif cuts(facts, call) or (method_of(call) in PREDICT_METHODS and model.resolve(call) is None):
                    # `model.predict(x)`: Keras runs the model outside any tape and returns NumPy
                    value.cut_all(Cut(call.site, describe(call), zero=callee_of(facts, call) in ZERO_GRADIENT_OPS))
                else:
                    value = self._through(call, order, value)
                if value.empty():
                    break
            flow.merge(value)
        for origin in flow.live:
            flow.cuts.pop(origin, None)
        if flow.live and model.facts.sums:
            self._cut_terms(span, flow)
        return flow

    def _cut_terms(self, span: tuple[int, int], flow: Flow) -> None:
        """Note in `flow.partial` a term of a sum in `span` that a live origin reaches only through a
        cut, while another term reaches it live (`cls_loss + tf.constant(np.mean(reg.numpy()))`)."""
        for terms in self.model.sums_in(span):
            if len(terms) < 2 or terms in self._expanding:
                continue  # a sum whose other terms are constants spans no more than its first term
            if (terms[0][0], terms[-1][1]) in self.model.differences:
                continue  # `target - q`, `r + gamma * q_next - q`: a target cut from the model is what a target is
            self._expanding.add(terms)
            try:
                flows = [self.judge(term) for term in terms]
            finally:
                self._expanding.discard(terms)
            for origin in flow.live:
                if origin in flow.partial:
                    continue
                live = any(origin in f.live for f in flows)
                cut = next((f.cuts[origin] for f in flows if origin not in f.live and origin in f.cuts), None)
                if live and cut is not None and not cut.zero and not cut.deliberate \
                        and not cut.what.startswith("a Python `if`"):
                    flow.partial[origin] = cut
            for f in flows:
                for origin, cut in f.partial.items():
                    if origin in flow.live:
                        flow.partial.setdefault(origin, cut)

    def _own_method(self, call: Call) -> bool:
        """`self.binarized()` in a method's summary: a method of the object this one is called on
        (its reads of `self.kernel` are followed, not only the method's name)."""
        if not self.hides:
            return False  # the scope traced: `flow_of` already tells (an unknown name is empty)
        fn = self.model.resolve(call)
        return fn is not None and fn.bound and bool(fn.self_name)

    def _through_attributes(self, call: Call, receiver: str) -> Flow:
        """What `receiver.method(...)` returns through the attributes of `receiver` it reads: its
        summary's `self.<attribute>` origins, mapped to `receiver.<attribute>` here."""
        fn = self.model.resolve(call)
        if fn is None or not fn.bound or not fn.self_name:
            return Flow()
        summary = self.model.summary(fn)
        if summary is None:
            return Flow()
        returns = summary.returns
        prefix = fn.self_name + "."
        found = Flow()
        for origin in sorted(set(returns.live) | set(returns.cuts)):
            if not origin.startswith(prefix):
                continue
            value = self.flow_of(receiver + origin[len(fn.self_name):])
            if value.empty():
                continue
            if origin not in returns.live:
                cut = returns.cuts[origin]
                if fn.model is not self.model and not cut.file:
                    cut = replace(cut, file=fn.model.facts.path)
                value.cut_all(cut.through(fn.qualname, call.site, self.model.facts.path))
            found.merge(value)
        return found

    def _through(self, call: Call, order: int, value: Flow) -> Flow:
        model = self.model
        fn = model.resolve(call)
        if fn is None:
            cut = model.lambda_layer_cut(call) if call.func.kind in ("name", "attribute") else None
            if cut is not None and value.live:
                if order <= call.first_arg:  # the model's own variables: those of the layers before it are cut
                    for origin in value.live:
                        value.partial.setdefault(origin, cut)
                else:  # the input goes through every layer, the Lambda's too
                    value.cut_all(cut)
            return value
        param = model.parameter(call, fn, order)
        if param is None or param == "":
            return value  # a `*args` argument, or the function's own name: unknown, passed on
        summary = model.summary(fn)
        if summary is None:
            return value
        returns = summary.returns
        if param in returns.live:
            cut = returns.partial.get(param)
            if cut is not None:
                if fn.model is not model and not cut.file:
                    cut = replace(cut, file=fn.model.facts.path)
                cut = cut.through(fn.qualname, call.site, model.facts.path)
                for origin in value.live:
                    value.partial.setdefault(origin, cut)
            return value
        cut = returns.cuts.get(param)
        if cut is not None:
            if fn.model is not model and not cut.file:
                cut = replace(cut, file=fn.model.facts.path)
            value.cut_all(cut.through(fn.qualname, call.site, model.facts.path))
            return value
        return Flow()  # this argument does not reach the return value

    def _picked_by_if(self, assign, flow: Flow) -> None:
        """A value that does not depend on the origins, chosen by an `if` on one that does."""
        facts = self.model.facts
        for block_id in reversed(facts.chain(assign.site.block)):
            block = facts.blocks[block_id]
            if block_id in self.boundary:
                return
            if block.kind in ("if", "else") and block.test_span != (0, 0):
                for use in self.model.spans.uses_in(block.test_span):
                    if is_metadata(use.name):
                        continue
                    value = self.flow_of(use.name)
                    if value.live:
                        for origin in value.live:
                            flow.cuts[origin] = Cut(use.site, "a Python `if` on a tensor")
                        return


# Reading these of a variable computes nothing a tape could record (`trainer.b.numpy()` in a report).
VALUE_UNREAD = frozenset({"numpy", "shape", "dtype", "name", "assign", "assign_add", "assign_sub", "device"})


def _value_unread(name: str, attribute: str) -> bool:
    """`trainer.b.numpy`: a use of `.b` that takes a copy or metadata of it, never a differentiable read."""
    parts = name.split(".")
    return any(part == attribute and parts[i + 1: i + 2] and parts[i + 1] in VALUE_UNREAD
               for i, part in enumerate(parts[1:], start=1))


def _is_sequential(callee: str) -> bool:
    return keras_member(callee, "models") == "Sequential" or callee in (
        "keras.Sequential", "tensorflow.keras.Sequential", "tf_keras.Sequential")


def _iterated(comprehensions, order: int) -> bool:
    """The event is in the iterable of a comprehension's `for` that binds a name: the elements the
    comprehension makes carry it through that name, not directly."""
    return any(names and start < order <= end for c in comprehensions for names, (start, end) in c.fors)


def _element_of(comprehensions, name: str, order: int):
    """The iterable's order span when `name`, read at `order`, is bound by the `for` of the
    innermost comprehension around it (`v` in `[tf.Variable(v.numpy()) for v in variables]`)."""
    head = name.partition(".")[0]
    best = None
    for comprehension in comprehensions:
        start, end = comprehension.span
        if not start < order <= end or (best is not None and start < best[0]):
            continue
        for names, (iter_start, iter_end) in comprehension.fors:
            if head in names and not iter_start < order <= iter_end:
                best = (start, (iter_start, iter_end))
    return best[1] if best is not None else None


def _is_index(facts, call) -> bool:
    callee = callee_of(facts, call)
    return callee in INDEX_CALLS or callee.startswith("numpy.random.")


def model_of(facts: FileFacts) -> ProgramModel:
    """The model of `facts`, built once per file however many rules ask."""
    model = facts.model
    if model is None:
        model = facts.model = ProgramModel(facts)
    return model


# -- other files of the project ----------------------------------------------------------
LIBRARIES = frozenset({"tensorflow", "keras", "tf_keras", "numpy", "scipy", "sklearn", "torch", "jax", "pandas"})
MAX_MODULE_BYTES = 512 * 1024
MAX_MODULES = 64  # other files kept per process
SEARCH_LEVELS = 4  # folders above the importing file searched for an absolute import
_modules: dict[str, tuple[tuple[int, int], "ProgramModel | None"]] = {}
_depth = [0]  # summaries being computed in this process, across the models of several files


def module_file(importer: str, module: str, relative: bool) -> str | None:
    """The file that `import module` (or `from .module import`) in `importer` reads, if it is nearby.

    Relative imports are looked up from the importer's folder up; absolute ones from the
    importer's folder and the folders above it (a script beside its modules, a `src/` layout).
    Libraries are never read: only the project's own files inform the model."""
    if not module or module.split(".")[0] in LIBRARIES:
        return None
    folder = os.path.dirname(os.path.abspath(importer))
    parts = module.split(".")
    for _ in range(1 if relative else SEARCH_LEVELS):
        base = os.path.join(folder, *parts)
        for candidate in (base + ".py", os.path.join(base, "__init__.py")):
            if os.path.isfile(candidate) and os.path.abspath(candidate) != os.path.abspath(importer):
                return candidate
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    return None


def load_module(importer: str, module: str, relative: bool) -> "ProgramModel | None":
    """The model of a project file another file imports; None when it is not found or not readable."""
    path = module_file(importer, module, relative)
    if path is None:
        return None
    try:
        stat = os.stat(path)
    except OSError:
        return None
    stamp = (stat.st_mtime_ns, stat.st_size)
    cached = _modules.get(path)
    if cached is not None and cached[0] == stamp:
        return cached[1]
    other = None
    if stat.st_size <= MAX_MODULE_BYTES:
        _modules[path] = (stamp, None)  # while it loads: an import cycle sees nothing
        try:
            from tapecheck.lint.engine import _facts

            with open(path, "rb") as handle:
                facts = _facts(handle.read(), path)
            other = ProgramModel(facts)
        except Exception:  # noqa: BLE001 - a file that cannot be read or parsed informs nothing
            other = None
    if len(_modules) >= MAX_MODULES:
        _modules.pop(next(iter(_modules)))
    _modules[path] = (stamp, other)
    return other


def dependencies(path: str, source: bytes) -> list[str]:
    """The project files `source` imports (those the model may read), for cache keys."""
    found = []
    for match in _IMPORT.finditer(source):
        dots, module, names = match.group(1) or b"", match.group(2) or b"", match.group(3) or match.group(4) or b""
        relative = bool(dots)
        module_text = module.decode("utf-8", "replace").strip()
        candidates = [module_text] if module_text else []
        for name in re.split(rb"[,\s()]+", names):
            name = name.split(b" as ")[0].strip().decode("utf-8", "replace")
            if name and name.isidentifier():
                candidates.append(f"{module_text}.{name}" if module_text else name)
        for candidate in candidates:
            file = module_file(path, candidate, relative)
            if file is not None and file not in found:
                found.append(file)
    return found


_IMPORT = re.compile(rb"^[ \t]*(?:from[ \t]+(\.*)([\w.]*)[ \t]+import[ \t]+([^\n#;]+)|import[ \t]+([^\n#;]+))", re.M)

"""Call resolution: which function of the program a call runs (`helper(x)`, `self.method(x)`,
`obj.method(x)`, `model(x)` on an instance of a local Keras layer or model runs its `call`,
`super().method()`), which parameter an argument binds, who calls a function and with
what, and the call graph of the file.
"""

from __future__ import annotations

from tapecheck.lint.facts import Call, Site
from tapecheck.model.objects import Function, Instance, Klass


class Calls:
    """Which function a call runs, what its arguments bind, who calls whom."""

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
        if order <= call.first_arg:
            return fn.self_name if self._bound_by_call(call, fn) else ""
        for key, start, end in call.arg_spans:
            if start < order <= end:
                return self.parameter_of(call, fn, key)
        return None

    def parameter_of(self, call: Call, fn: Function, key: int | str) -> str | None:
        """The parameter of `fn` that receives the argument of `call` at `key` (a position or a
        keyword of `call.arg_spans`); None: unknown (`*args`, no such parameter). By key, not by an
        order in its span: an argument without events (`1.0`, `[]`) has an empty span, whose end is
        its neighbour's."""
        if key == -1:
            return None
        if isinstance(key, str):
            return key if key in fn.params else None
        positional = fn.params[1:] if self._bound_by_call(call, fn) else fn.params
        return positional[key] if key < len(positional) else None

    def _bound_by_call(self, call: Call, fn: Function) -> bool:
        """Whether the call hands `fn` its `self` (`x.method(...)`, `super().m(...)`, `Net(x)` runs
        `__init__(self, x)`): then the positions start at its second parameter."""
        return fn.bound and (
            call.func.kind in ("attribute", "super")
            or isinstance(self.binding(call.func.text, call.site), (Instance, Klass))
        )

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

    def static_callers(self, fn: Function) -> list:
        """The calls of this file that run the staticmethod `fn` through its class:
        `Owner.method(...)` (spelled with the class's name, here or in a method of the class);
        [] for anything else."""
        if fn.model is not self or fn.bound or fn.owner is None:
            return []
        spelled = f"{fn.owner.name}.{fn.name}"
        return [c for c in self.spans.calls if c.func.kind == "attribute" and c.func.text == spelled]

    def arguments_for(self, fn: Function, param: str) -> list | None:
        """(call, argument) for each call of this file that runs `fn` (a staticmethod called
        through its class, `Owner.method(x)`, too): the expression it passes as `param`. None when
        nothing here calls `fn`, or a call passes `param` in a way we cannot read (`*args`, left
        to its default)."""
        static = self.static_callers(fn)
        if any(call.spread for call in static):
            return None  # `Owner.method(*args)`: which parameter takes what is unknown
        calls = self.callers(fn) + static
        if not calls:
            return None
        found = []
        for call in calls:
            value = None
            for key, _, _ in call.arg_spans:
                if self.parameter_of(call, fn, key) == param:
                    value = call.passed(key)
                    break
            if value is None:
                return None
            found.append((call, value))
        return found

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

    def calls_in_scope(self, scope: int) -> list:
        """The calls written directly in one function (or class, or module) scope, in source order;
        indexed once per file."""
        index = self._calls_by_scope
        if index is None:
            index = self._calls_by_scope = {}
            for call in self.spans.calls:
                index.setdefault(self.facts.scope_of(call.site), []).append(call)
        return index.get(scope, [])

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

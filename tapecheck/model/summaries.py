"""Function summaries (Pysa's model), computed once per function from its body and the
summaries of the functions it calls: how the return value depends on each parameter (live,
cut with the op and line, or not at all), which optimizers, metrics and variables it creates
on every call, and which tapes handed to it it asks for gradients (and how often). Recursion
is bounded: a function met again while its own summary is being computed is unknown, and
unknown is silent.
"""

from __future__ import annotations

from dataclasses import replace

from tapecheck.lint.facts import GRADIENT_METHODS, Call
from tapecheck.model.flow import Tracer, _is_sequential
from tapecheck.model.keras import keras_member
from tapecheck.model.objects import Creation, Cut, Function, Summary
from tapecheck.model.ops import MAX_CALL_DEPTH
from tapecheck.model.queries import call_span, callee_of


_depth = [0]  # summaries being computed in this process, across the models of several files


class Summaries:
    """Per-function summaries, computed once each, across files."""

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
            summary.gradients.setdefault(call.receiver, ((fn.qualname, call.site.line, self.facts.path),))
            repeats = self._repeats(call)
            if repeats:
                summary.repeated.setdefault(call.receiver, repeats)
            return
        for param, path, _, repeated in self.handed_tapes(call, set(fn.params)):
            summary.gradients.setdefault(param, ((fn.qualname, call.site.line, self.facts.path), *path))
            repeats = repeated or self._repeats(call)
            if repeats:
                summary.repeated.setdefault(param, repeats)

    def _repeats(self, call: Call) -> tuple[str, int, str] | None:
        """("in a comprehension", 0, "") / ("in the loop at", its line, this file) when `call` may
        run more than once per call of its function (`Summary.repeated`); None otherwise (a loop it
        leaves right after, by `return`/`break`)."""
        facts = self.facts
        if self.repeats_in_comprehension(call.site):
            return ("in a comprehension", 0, "")
        loops = facts.loops_between(None, call.site)
        if not loops or facts.exits_after(call.site):
            return None
        return ("in the loop at", facts.blocks[loops[0]].line, facts.path)

    def handed_tapes(self, call: Call, names):
        """(name, path, file, repeated) for each of `names` that `call` hands, as a plain argument, to
        a function whose summary asks that parameter for gradients (`repeated`: Summary.repeated)."""
        if not names or not call.args and not call.keywords:
            return
        callee = None
        for key, _, _ in call.arg_spans:
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
            param = self.parameter_of(call, callee, key)
            path = inner.gradients.get(param) if param else None
            if path:
                repeated = inner.repeated.get(param)
                yield value.text, path, callee.model.facts.path if callee.model is not self else "", repeated

    def lambda_layer_cut(self, call: Call) -> Cut | None:
        """The cut in the function of a `keras.layers.Lambda` inside the `Sequential([...])` the called
        name holds (`keras.layers.Lambda(lambda t: tf.round(t))`), or None. Answered once per call
        (the flow tracer asks it of every call it passes a value through that runs no function here)."""
        key = ("lambda-layer cut of call", id(call))  # the facts, and with them the call, outlive the memo
        if key in self.memo:
            return self.memo[key]
        found = self.memo[key] = self._lambda_layer_cut(call)
        return found

    def _lambda_layer_cut(self, call: Call) -> Cut | None:
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

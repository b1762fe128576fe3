"""Differentiable flow: which origins (the sources of a tape, the parameters of a function) a
value depends on through ops with a gradient, and which only through a cut, with the cut's
site and the call path to it. `Tracer` walks one scope's assignments in order, through
helpers' summaries, `self.` attributes, Lambda layers and local `Layer.call`s.
"""

from __future__ import annotations

from dataclasses import replace

from tapecheck.lint.facts import Call, Compare
from tapecheck.model.keras import keras_member
from tapecheck.model.objects import Cut, Flow
from tapecheck.model.ops import (
    INDEX_CALLS, PREDICT_METHODS, STOP_CALLS, STOP_GRADIENT_CALLS, ZERO_GRADIENT_OPS, cuts, describe,
)
from tapecheck.model.queries import callee_of, is_metadata, method_of, prefixes


class Tracer:
    """Follows assignments in order, keeping the Flow of each name from the given origins.

    `origin_of(name)` gives the origins a name stands for when nothing assigned it
    here (a tape's sources, a function's parameters)."""

    def __init__(self, model, origin_of, boundary: tuple[int, ...] = (), hides: bool = False):
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
        # what each call is, asked once per judgement (every read below asks of the calls around it)
        callees = {id(c): callee_of(facts, c) for c in calls if not isinstance(c, Compare)} if reads else {}
        # Whether some read met a cut (or a step that decides one: a stop, an index) on its way. The
        # terms of a sum in `span` are judged on the same reads, each under the innermost of the same
        # calls: with no cut met here, none of them meets one, and `_cut_terms` finds nothing to note.
        # (One read differs: a comprehension's variable, which the whole reads as its iterable's
        # element and a term judged alone read as the name outside the comprehension. Skipping the
        # terms there drops what was a false alarm: TAP104's VALID example of a shadowing `x`.)
        met_cut = False
        for name, order, through in reads:
            if is_metadata(name):
                continue
            enclosing = [c for c in calls if c.site.order < order <= c.end_order]
            if any(callees.get(id(c)) in STOP_CALLS for c in enclosing):  # a Compare: None, in no set
                met_cut = True  # a term inside the stop call, judged without it, may meet a cut
                continue
            element = _element_of(comprehensions, name, order) if comprehensions else None
            value = self.judge(element) if element is not None else self.flow_of(name)
            if through is not None and through.func.kind == "attribute":
                value = self._through_attributes(through, name)
            elif through is not None and not value.empty():
                value = self._through(through, order, value)
            if value.cuts or value.partial:
                met_cut = True
            if value.empty():
                continue
            indexed = [i for i, c in enumerate(enclosing) if not isinstance(c, Compare) and _is_index_callee(callees[id(c)])]
            if indexed:
                met_cut = True  # the calls inside an index are passed over here, not in a term inside it
            outermost_index = indexed[0] if indexed else len(enclosing)
            for position in range(len(enclosing) - 1, -1, -1):
                call = enclosing[position]
                if position == outermost_index or position in indexed:
                    value.cuts.clear()  # an index or a sample: a choice, not a value
                elif position > outermost_index:
                    continue  # inside an index: no cut is a cut here
                elif isinstance(call, Compare):
                    met_cut = True
                    value.cut_all(Cut(call.site, f"the comparison `{call.operator}`"))
                elif callees[id(call)] in STOP_GRADIENT_CALLS:
                    met_cut = True
                    value.cut_all(Cut(call.site, describe(call), deliberate=True))
                elif cuts(facts, call) or (method_of(call) in PREDICT_METHODS and _keras_predict(model, call)):
                    # `model.predict(x)`: Keras runs the model outside any tape and returns NumPy
                    met_cut = True
                    value.cut_all(Cut(call.site, describe(call), zero=callees[id(call)] in ZERO_GRADIENT_OPS))
                else:
                    value = self._through(call, order, value)
                    if value.cuts or value.partial:
                        met_cut = True
                if value.empty():
                    break
            flow.merge(value)
        for origin in flow.live:
            flow.cuts.pop(origin, None)
        if flow.live and met_cut and model.facts.sums:
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


def _is_index_callee(callee: str) -> bool:
    return callee in INDEX_CALLS or callee.startswith("numpy.random.")


# keywords only Keras's `Model.predict` takes: a call passing one is Keras's own
PREDICT_KEYWORDS = frozenset({"verbose", "batch_size", "steps", "callbacks"})


def _keras_predict(model, call: Call) -> bool:
    """Whether `x.predict(...)` is known to be Keras's `Model.predict` (run outside the tape,
    NumPy out): the receiver is known to hold a Keras model, or the call passes a keyword only
    Keras's takes (`verbose=0`). A `predict` of a class of the user's own (a teacher, an agent)
    is not; where the model cannot tell, it is no cut."""
    if model.resolve(call) is not None:
        return False  # a function of this project
    if set(call.keywords) & PREDICT_KEYWORDS:
        return True
    return bool(call.receiver) and model.holds_a_model(call.receiver, call.site)

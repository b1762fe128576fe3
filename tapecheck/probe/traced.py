"""TAP501 at run time: a metric reset under a Python condition inside a traced step.

```python
@tf.function
def train_step(self, x, y):
    if self.new_epoch:            # a Python bool: read once, while tracing
        self.acc.reset_state()
```

Python runs a `tf.function`'s body only while tracing. A Python `if` on a plain
attribute (`self.new_epoch`, a module object's flag) is decided then, once: the
reset is baked into every call (the flag was True at the trace) or left out of
the graph (it was False). Attributes are not part of a `tf.function`'s signature:
changing one never retraces. Measured on TF 2.21: a step traced with
`self.new_epoch` True resets the accuracy at each of its 4 calls per epoch (epoch
results 0.5, 0.5625, 0.5625, the last batch's; run eagerly: 0.6094, 0.6719, 0.7188).

What the probe sees, all of it needed before it says anything:

1. while a `tf.function` traces (the metric hooks report each traced update or
   reset from the user's code, with the user's frame), the user function being
   traced holds, as a statement of its own body (no `return` above it), an
   `if <a.b>:` or `if not <a.b>:` whose body calls `<metric>.reset_state()`;
   `<a>` and the metric resolve in the traced frame (plain attributes, no property
   run), and `<a.b>` is a Python `bool` (a tensor or `tf.Variable` makes autograph
   write a `tf.cond`, decided at every call: left alone);
2. the trace agrees with the flag: the reset was traced when the condition was
   true at the end of the trace, and not traced when it was false (else the
   function changed the flag itself, or something else decided: left alone);
   every trace of that function saw the same value;
3. a later call of the same `tf.function` (eager Python, one dict lookup per call
   for functions without such a reset) finds the condition the other way and
   makes no new trace: this call ran the graph the flag no longer describes.

Under `fit` the same holds for a `train_step` override (Keras traces it in its own
`tf.function`; the hint then says to leave the reset to `fit` or a callback); with
`run_eagerly=True` nothing is traced and nothing is reported. Reported once per
reset line. Only weak references (the flag's holder, the
`tf.function`) and texts are kept.
"""

from __future__ import annotations

import ast
import linecache
import threading
import weakref

import tensorflow as tf
from tensorflow.python.eager.polymorphic_function import polymorphic_function

from tapecheck.probe import names
from tapecheck.probe.report import report_internal_error

CODE = "TAP501"
CAUSE = "condition-read-while-tracing"


class Watch:
    __slots__ = ("attr", "by_keras", "condition", "function", "holder", "line", "metric", "negated", "path",
                 "reported", "step", "value", "valid")

    def __init__(self, path, line, condition, holder, attr, negated, metric, step, value):
        self.path, self.line, self.condition = path, line, condition
        self.holder, self.attr, self.negated = holder, attr, negated
        self.metric, self.step, self.value = metric, step, value
        self.function = None
        self.by_keras = False  # traced by Keras's own `tf.function` (`fit`, `evaluate`), not the user's
        self.reported = False
        self.valid = True


class TracedConditionHooks:
    def __init__(self, collector, metrics):
        self.collector = collector
        self.metrics = metrics
        self.active = True
        self.local = threading.local()
        self.watches: dict[int, dict] = {}  # id(tf.function) -> {(path, line): Watch}
        self.functions: dict[int, weakref.ref] = {}

    def install(self, patcher):
        if patcher.wrap(polymorphic_function.Function, "__call__", self._wrap_call):
            self.metrics.trace_listeners.append(self._traced)

    def finish(self):
        self.active = False
        self.watches.clear()
        self.functions.clear()

    # -- the tf.function's calls ---------------------------------------------
    def _wrap_call(self, original):
        hooks = self

        def __call__(self, *args, **kwds):
            __tracebackhide__ = True  # pytest: the probe's frame is not the user's
            local = hooks.local
            if not hooks.active or getattr(local, "function", None) is not None or not tf.executing_eagerly():
                return original(self, *args, **kwds)
            watches = hooks.watches.get(id(self))
            if watches and hooks.functions[id(self)]() is not self:  # a dead function's id, reused
                del hooks.watches[id(self)]
                watches = None
            against = hooks._against(watches) if watches else ()
            count = self.experimental_get_tracing_count() if against else None
            local.function, local.trace = self, None  # a Trace is made only if this call traces a metric
            try:
                result = original(self, *args, **kwds)
            finally:
                trace, local.function, local.trace = local.trace, None, None
            try:
                if trace is not None:
                    hooks._trace_done(trace)
                if against and self.experimental_get_tracing_count() == count:
                    hooks._report(against)
            except Exception as exc:  # noqa: BLE001 - a probe bug must not stop training
                report_internal_error(exc)
            return result

        return __call__

    def _against(self, watches) -> list:
        """The watches whose condition now says the opposite of what the trace baked in."""
        found = []
        try:
            for watch in watches.values():
                if watch.valid and not watch.reported:
                    value = _read(watch.holder, watch.attr)
                    if isinstance(value, bool) and value != watch.value:
                        found.append(watch)
        except Exception as exc:  # noqa: BLE001 - a probe bug must not stop training
            report_internal_error(exc)
        return found

    # -- while tracing ---------------------------------------------------------
    def _traced(self, metric, kind, frame, site):
        traced = getattr(self.local, "function", None)
        if traced is None or site.path.startswith("<"):
            return
        function = _function_at(site.path, site.line)
        if function is None:
            return
        trace = self.local.trace
        if trace is None:
            trace = self.local.trace = Trace(traced)
        if kind == "reset":
            trace.reset_lines.add((site.path, site.line))
        key = (site.path, function.lineno)
        if key in trace.candidates:
            return
        found = []
        for gate, call, condition, prefix, attr, negated, receiver in _gated_resets(function):
            holder = names._resolves(prefix, frame)
            target = names._resolves(receiver, frame)
            if holder is None or not _is_metric(target):
                continue
            found.append((site.path, call.lineno, condition, weakref.ref(holder), attr, negated, receiver,
                          function.name))
        trace.candidates[key] = found

    def _trace_done(self, trace):
        """The trace returned: each gated reset's condition, as the trace decided it."""
        function = trace.function
        table = None
        for found in trace.candidates.values():
            for path, line, condition, holder, attr, negated, receiver, step in found:
                value = _read(holder, attr)
                if not isinstance(value, bool):
                    continue  # a tensor or a variable: autograph made a `tf.cond`
                traced = (path, line) in trace.reset_lines
                if traced != (value != negated):
                    continue  # the trace and the flag disagree: the function set it, or something else decided
                if table is None:
                    table = self.watches.setdefault(id(function), {})
                    self.functions[id(function)] = weakref.ref(function)
                known = table.get((path, line))
                if known is not None:
                    if known.value != value:
                        known.valid = False  # traced once each way: either graph may run
                    continue
                watch = table[(path, line)] = Watch(path, line, condition, holder, attr, negated, receiver, step, value)
                python = getattr(function, "python_function", None)
                watch.by_keras = str(getattr(python, "__module__", "") or "").split(".")[0] == "keras"

    # -- the finding ---------------------------------------------------------------
    def _report(self, against):
        from tapecheck.probe.sites import Site

        for watch in against:
            if watch.reported:
                continue
            watch.reported = True
            said = "true" if watch.value else "false"
            now = "false" if watch.value else "true"
            baked = watch.value != watch.negated  # the reset is in the graph
            what = (f"the traced function resets `{watch.metric}` at every call" if baked else
                    f"the traced function never resets `{watch.metric}`")
            flag = watch.condition.removeprefix("not ")
            where = (f"inside `{watch.step}`, which `fit` traces" if watch.by_keras else
                     f"inside the `tf.function` `{watch.step}`")
            hint = (f"Take the reset out of `{watch.step}`: reset `{watch.metric}` where Python runs at each epoch "
                    f"(`fit` resets the model's `metrics` itself at each epoch; else `{watch.metric}.reset_state()` "
                    "in a callback's `on_epoch_begin`)." if watch.by_keras else
                    f"Reset the metric outside the `tf.function`, where Python runs at every call: "
                    f"`if {watch.condition}: {watch.metric}.reset_state()` before calling `{watch.step}(...)` "
                    f"(or `{watch.metric}.reset_state()` at the start of each epoch).")
            self.collector.add(
                Site(watch.path, watch.line, 1), CODE, CAUSE,
                f"`{watch.metric}.reset_state()` is under `if {watch.condition}:` {where}: Python reads `{flag}` "
                f"only while tracing (it was {said} then), so {what}; it has just been called with `{flag}` {now}",
                hint,
                names=[watch.metric], subject=watch.metric,
            )


class Trace:
    __slots__ = ("candidates", "function", "reset_lines")

    def __init__(self, function):
        self.function = function
        self.reset_lines: set = set()
        self.candidates: dict[tuple, list] = {}


def _read(holder_ref, attr):
    holder = holder_ref()
    if holder is None:
        return None
    try:
        return vars(holder).get(attr)  # never runs a property
    except TypeError:
        return None


def _is_metric(obj) -> bool:
    import keras

    return isinstance(obj, keras.metrics.Metric)


_TREES: dict[str, object] = {}


def _function_at(path: str, line: int):
    """The innermost `def` of the user's file holding `line`."""
    tree = _TREES.get(path)
    if tree is None:
        try:
            tree = ast.parse("".join(linecache.getlines(path)))
        except (SyntaxError, ValueError):
            tree = False
        if len(_TREES) > 256:
            _TREES.clear()
        _TREES[path] = tree
    if not tree:
        return None
    best = None
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.lineno <= line <= (node.end_lineno or 0):
            if best is None or node.lineno >= best.lineno:
                best = node
    return best


def _dotted(node) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return f"{head}.{node.attr}" if head else None
    return None


def _gated_resets(function):
    """(if, reset call, condition text, holder text, attribute, negated, metric text) for each
    `if a.b:` / `if not a.b:` statement of `function`'s own body (no `return` above it) whose body
    calls `<metric>.reset_state()` as a statement; the function must not assign `a.b` itself."""
    assigned = set()
    for node in ast.walk(function):
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                text = _dotted(target)
                if text:
                    assigned.add(text)
    first_return = min((n.lineno for n in ast.walk(function) if isinstance(n, (ast.Return, ast.Raise))),
                       default=None)
    for statement in function.body:
        if first_return is not None and statement.lineno > first_return:
            break
        if not isinstance(statement, ast.If):
            continue
        test, negated = statement.test, False
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            test, negated = test.operand, True
        condition = _dotted(test)
        if not condition or "." not in condition or condition in assigned:
            continue
        prefix, attr = condition.rsplit(".", 1)
        for inner in statement.body:
            call = inner.value if isinstance(inner, ast.Expr) else None
            if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                    and call.func.attr == "reset_state" and not call.args and not call.keywords):
                receiver = _dotted(call.func.value)
                if receiver:
                    yield (statement, call, ("not " if negated else "") + condition, prefix, attr, negated,
                           receiver)

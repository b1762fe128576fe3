"""Hooks on Keras metrics: a `result()` that still carries the previous epoch.

An epoch boundary is an eager iteration over a `tf.data.Dataset` (eager loops
and `fit` call `DatasetV2.__iter__` once per epoch per dataset). A metric is
flagged when the user's code reads `result()` at the same line on both sides
of such a boundary, its variables changed in between and it was never reset
(`reset_state()`, which `fit` and `evaluate` call themselves). A loop with no
`tf.data` (NumPy batches sliced by hand) has its epochs read from the file: a
`result()` read in a loop after an inner loop that updates the metric (the
update's line, or the line of the call that led to it, in the same function)
is read once per outer iteration, an epoch. Metric
subclasses define their own `update_state`/`result`/`reset_state`, so every
subclass is wrapped, including those defined while the probe runs.
"""

from __future__ import annotations

import os
import threading
import weakref

import tensorflow as tf
from tensorflow.python.data.ops import dataset_ops

from tapecheck.probe import names, sites
from tapecheck.probe.lifetimes import Lifetimes
from tapecheck.probe.patching import subclasses
from tapecheck.probe.report import report_internal_error

_WRAPPED = ("update_state", "result", "reset_state")


UPDATE_STACKS = 2  # user stacks kept per reset, of the first updates: where the metric is updated


class MetricState:
    __slots__ = ("ever_updated", "fit_update", "generation", "graph_reset", "initial", "read", "reads",
                 "update_lines", "updates")

    def __init__(self):
        self.generation = 0
        self.updates = 0
        self.ever_updated = False  # updated at least once (also while tracing), whatever resets came after
        self.graph_reset = False  # a reset was traced into a graph: it runs unseen, epochs cannot be told apart
        self.reads: dict[tuple, tuple] = {}  # (path, line) -> (generation, epoch, snapshot)
        self.update_lines: list[tuple] = []  # the user (path, line)s of the first updates since the reset
        self.fit_update = None  # (site, name, generation, fit's reset rounds then): updated by the user's code in fit
        self.initial = None  # the variables' values before the first update (a user-defined reset_state only)
        self.read = False  # result() was called (also while tracing)


class MetricHooks:
    def __init__(self, collector):
        self.collector = collector
        self.states: dict[int, MetricState] = {}
        self.lifetimes = Lifetimes(self.states)
        self.epochs = 0
        self.local = threading.local()
        self.active = True
        self._patcher = None
        self.activity = 0  # updates and dataset iterations seen: tells one round of fit's resets from the next
        self.fit_rounds = 0  # rounds of resets made by Keras itself (`fit`'s `reset_metrics` at each epoch)
        self._round_at = -1
        self._round: set[int] = set()  # the metrics Keras reset in the current round
        self.reported: set = set()  # classes already reported for their reset method
        self.trace_listeners = []  # told (metric, "update" or "reset", user frame, site) of each traced user call

    def install(self, patcher):
        import keras

        self._patcher = patcher
        base = keras.metrics.Metric
        for cls in subclasses(base):
            self.wrap_class(cls)
        hooks = self
        own = base.__dict__.get("__init_subclass__")

        def __init_subclass__(cls, **kwargs):
            if own is not None:
                own.__func__(cls, **kwargs)
            else:
                super(base, cls).__init_subclass__(**kwargs)
            if hooks.active:
                hooks.wrap_class(cls)

        patcher.set(base, "__init_subclass__", classmethod(__init_subclass__))
        patcher.wrap(dataset_ops.DatasetV2, "__iter__", self._wrap_iter)

    def wrap_class(self, cls):
        self._patcher.wrap(cls, "update_state", self._wrap_update)
        self._patcher.wrap(cls, "result", self._wrap_result)
        self._patcher.wrap(cls, "reset_state", self._wrap_reset)

    def finish(self):
        self.active = False
        try:
            self._never_reset_by_fit()
        except Exception as exc:  # noqa: BLE001 - a probe bug must not hide the run's findings
            report_internal_error(exc)
        self.lifetimes.close()
        self.states.clear()

    # -- state -------------------------------------------------------------
    def state_of(self, metric) -> MetricState:
        """The probe's record of `metric` (made if new); other hooks keep it to read after the run."""
        return self._state(metric)

    def _state(self, metric) -> MetricState:
        self.lifetimes.sweep()
        state = self.states.get(id(metric))
        if state is None:
            state = MetricState()
            self.lifetimes.add(metric, state)
        return state

    def _outermost(self, name, metric) -> bool:
        """False inside a `super()` chain of the same method on the same metric (MeanMetricWrapper -> Mean);
        a metric updated inside another's `update_state` (a function given to `compile`) is outermost."""
        return id(metric) not in getattr(self.local, name, ())

    def _enter(self, name, metric):
        stack = getattr(self.local, name, None)
        if stack is None:
            stack = []
            setattr(self.local, name, stack)
        stack.append(id(metric))

    def _leave(self, name, metric):
        stack = getattr(self.local, name, None)
        if stack:
            stack.pop()

    # -- wrappers ----------------------------------------------------------
    def _wrap_iter(self, original):
        hooks = self

        def __iter__(self):
            __tracebackhide__ = True  # pytest: the probe's frame is not the user's
            if hooks.active and tf.executing_eagerly():
                hooks.epochs += 1
                hooks.activity += 1
            return original(self)

        return __iter__

    def _wrap_update(self, original):
        hooks = self

        def update_state(self, *args, **kwargs):
            __tracebackhide__ = True  # pytest: the probe's frame is not the user's
            if hooks.active and hooks._outermost("update", self):
                if hooks.trace_listeners and not tf.executing_eagerly():
                    hooks._traced(self, "update")
                state = hooks._state(self)
                state.updates += 1
                state.ever_updated = True
                hooks.activity += 1
                if len(state.update_lines) < UPDATE_STACKS:
                    state.update_lines.append(sites.user_lines())
                    try:
                        hooks._first_updates(self, state)
                    except Exception as exc:  # noqa: BLE001 - a probe bug must not stop training
                        report_internal_error(exc)
            hooks._enter("update", self)
            try:
                return original(self, *args, **kwargs)
            finally:
                hooks._leave("update", self)

        return update_state

    def _wrap_reset(self, original):
        hooks = self

        def reset_state(self, *args, **kwargs):
            __tracebackhide__ = True  # pytest: the probe's frame is not the user's
            outermost = hooks.active and hooks._outermost("reset", self)
            by_keras = False
            if outermost and hooks.trace_listeners and not tf.executing_eagerly():
                hooks._traced(self, "reset")
            if outermost:
                state = hooks._state(self)
                state.generation += 1
                state.updates = 0
                state.reads.clear()
                state.update_lines = []
                if not tf.executing_eagerly():
                    state.graph_reset = True
                by_keras = tf.executing_eagerly() and not sites.calls_from_user_code()
                if by_keras:
                    hooks._keras_reset_round(self)
            hooks._enter("reset", self)
            try:
                return original(self, *args, **kwargs)
            finally:
                hooks._leave("reset", self)
                if outermost and by_keras:
                    try:
                        hooks._after_keras_reset(self, state)
                    except Exception as exc:  # noqa: BLE001 - a probe bug must not stop training
                        report_internal_error(exc)

        return reset_state

    def _wrap_result(self, original):
        hooks = self

        def result(self, *args, **kwargs):
            __tracebackhide__ = True  # pytest: the probe's frame is not the user's
            if hooks.active:
                hooks._state(self).read = True
            watch = (hooks.active and hooks._outermost("result", self) and tf.executing_eagerly()
                     and sites.calls_from_user_code())
            hooks._enter("result", self)
            try:
                value = original(self, *args, **kwargs)
            finally:
                hooks._leave("result", self)
            if watch:
                try:
                    hooks._read(self)
                except Exception as exc:  # noqa: BLE001 - a probe bug must not stop training
                    report_internal_error(exc)
            return value

        return result

    def _traced(self, metric, kind):
        """A metric update or reset being traced (a `tf.function` or `fit` step): tell the listeners."""
        try:
            if not sites.calls_from_user_code(3):
                return
            frame, site = sites.user_frame(3)
            if site is None:
                return
            for listener in self.trace_listeners:
                listener(metric, kind, frame, site)
        except Exception as exc:  # noqa: BLE001 - a probe bug must not stop training
            report_internal_error(exc)

    # -- what fit resets, and what a reset leaves ----------------------------------------
    def _keras_reset_round(self, metric):
        """A new round of Keras's resets: something happened since the last one, or it resets a metric again."""
        if self._round_at != self.activity or id(metric) in self._round:
            self.fit_rounds += 1
            self._round_at = self.activity
            self._round = set()
        self._round.add(id(metric))

    def _first_updates(self, metric, state):
        """At one of the first updates after a reset: note a user `train_step`'s update under `fit`, and the
        starting values of a metric whose class defines its own `reset_state`."""
        if state.initial is None and _own_reset(type(metric)) is not None:
            state.initial = _values(metric)
        self._shim(metric)
        if state.fit_update is not None and state.fit_update[2] == state.generation:
            return
        frame, site = sites.user_frame(3)
        if site is None or not _under_fit():
            return
        name = names.from_frame(metric, frame, site.path, site.line, "update_state") if frame is not None else None
        state.fit_update = (site, name, state.generation, self.fit_rounds, weakref.ref(metric))

    def _shim(self, metric):
        """Keras 3's `compiled_metrics.update_state(y, y_pred)` shim gives a `Mean` (the loss tracker) `y_pred`."""
        import keras

        if not isinstance(metric, keras.metrics.Mean) or not _called_by("_compiled_metrics_update_state"):
            return
        _, site = sites.user_frame(3)
        if site is None:
            return
        name = getattr(metric, "name", "loss")
        self.collector.add(
            site, "TAP302", "compiled-metrics-shim",
            f"`compiled_metrics.update_state(y, y_pred)` is a deprecated Keras 3 shim: it updates every metric in "
            f"`self.metrics` with these arguments, and the `Mean` tracker `{name}` with `y_pred` alone, so the "
            f"`{name}` that `fit` reports is the mean prediction, not the {name}",
            "Update the trackers yourself: `self.compute_loss(x, y, y_pred)` for the loss, then "
            "`m.update_state(loss)` for the loss tracker and `m.update_state(y, y_pred)` for the other metrics.",
            names=[name], subject=name,
        )

    def _after_keras_reset(self, metric, state):
        """`fit` (or `evaluate`) just reset `metric`: a Keras 2 `reset_states` override never ran; a user
        `reset_state` that leaves some variable as it was is a partial reset."""
        cls = type(metric)
        override = _keras2_override(cls)
        if override is not None and cls not in self.reported:
            self.reported.add(cls)
            code = override.__code__
            self.collector.add(
                sites.Site(_abspath(code.co_filename), code.co_firstlineno, 1), "TAP302", "reset-states-override",
                f"`{cls.__name__}.reset_states()` overrides Keras 2's method, which Keras 3 never calls: `fit` "
                f"calls `reset_state()` (the base one, which sets every variable to 0), so this reset never runs",
                f"Rename it to `reset_state(self)` (singular).",
                names=[cls.__name__], subject=cls.__name__,
            )
            return
        own = _own_reset(cls)
        if own is None or state.initial is None or cls in self.reported:
            return
        now = _values(metric)
        if now is None or len(now) != len(state.initial):
            return
        kept = [v for v, a, b in zip(metric.variables, state.initial, now) if a != b]
        if not kept:
            return
        self.reported.add(cls)
        code = own.__code__
        kept_names = [getattr(v, "name", "?") for v in kept]
        self.collector.add(
            sites.Site(_abspath(code.co_filename), code.co_firstlineno, 1), "TAP301", "metric-partly-reset",
            f"`{cls.__name__}.reset_state()` does not reset {{names}}: `fit` resets the metric at each epoch "
            "through it, and the result still mixes in the earlier epochs",
            "Reset every variable in `reset_state` (`for v in self.variables: v.assign(tf.zeros_like(v))`, or "
            "each one to its starting value).",
            names=kept_names, subject=cls.__name__,
        )

    def _never_reset_by_fit(self):
        """Metrics the user's code updates inside `fit` and reads, which `fit`'s own resets at each epoch
        left out (a module-level metric, one missing from a `metrics` property override)."""
        for state in list(self.states.values()):
            update = state.fit_update
            if update is None or not state.read:
                continue
            site, name, generation, rounds, ref = update
            if generation != state.generation or self.fit_rounds <= rounds:
                continue  # reset since, or no later epoch of `fit` reset anything
            metric = ref()
            name = name or (names.user_name(metric) if metric is not None else "this metric")
            self.collector.add(
                site, "TAP301", "metric-not-reset-by-fit",
                f"metric `{name}` is updated here under `fit`, but `fit` never resets it (it resets the model's "
                f"`metrics` at each epoch, {self.fit_rounds - rounds} time(s) since, and this one is not among "
                "them): its result includes all earlier epochs",
                (f"Return `{name}` from the model's `metrics` property too (`fit` resets only what it returns)."
                 if name.startswith("self.") else
                 f"Make `{name}` an attribute of the model (Keras tracks it and `fit` resets it), or compute the "
                 "value without a metric object (a plain function given to `compile` is averaged by Keras)."),
                names=[name], subject=name,
            )

    def _read(self, metric):
        state = self._state(metric)
        if state.graph_reset:
            return  # its resets run in a traced function, unseen: a changed state may well be one epoch's
        frame, site = sites.user_frame()
        if site is None:
            return
        snapshot = _snapshot(metric)
        key = (site.path, site.line)
        previous = state.reads.get(key)
        state.reads[key] = (state.generation, self.epochs, snapshot, state.updates)
        if previous is None:
            return
        generation, epoch, old_snapshot, old_updates = previous
        if generation != state.generation or not old_updates or snapshot == old_snapshot:
            return
        if epoch < self.epochs or _read_after_inner_loop(site, state.update_lines):
            name = names.user_name(metric, frame, site, "result")
            self.collector.add(
                site, "TAP301", "metric-never-reset",
                f"metric `{name}` is read here once per epoch but never reset: "
                "this result still includes the earlier epochs",
                f"Call `{name}.reset_state()` at the start of each epoch.",
                names=[name], subject=name, stale_epochs=[self.epochs],
            )


def _read_after_inner_loop(site, update_lines) -> bool:
    """Whether the read at `site` is in a loop, after an inner loop of the same function that updates the metric."""
    for lines in update_lines:
        for path, line in lines:
            if path == site.path and _nested_below(path, site.line, line):
                return True
    return False


def _nested_below(path: str, read: int, update: int) -> bool:
    loops, functions = _spans(path)
    read_in = _innermost(functions, read)
    if read_in != _innermost(functions, update):
        return False
    outer = _innermost([s for s in loops if _inside(s, read_in)], read)
    inner = _innermost([s for s in loops if _inside(s, read_in)], update)
    if outer is None or inner is None or inner == outer:
        return False
    return outer[0] < inner[0] and inner[1] <= outer[1] and not inner[0] <= read <= inner[1]


def _inside(span, function) -> bool:
    return function is None or (function[0] <= span[0] and span[1] <= function[1])


def _innermost(spans, line):
    best = None
    for span in spans:
        if span[0] <= line <= span[1] and (best is None or span[0] >= best[0]):
            best = span
    return best


_SPANS: dict[str, tuple] = {}


def _spans(path: str) -> tuple:
    """(loops, functions) of a user file, as (first line, last line) pairs; parsed once per file."""
    known = _SPANS.get(path)
    if known is not None:
        return known
    import ast
    import linecache

    loops, functions = [], []
    try:
        tree = ast.parse("".join(linecache.getlines(path)))
        for node in ast.walk(tree):
            span = (node.lineno, node.end_lineno or node.lineno) if hasattr(node, "lineno") else None
            if isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
                loops.append(span)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                functions.append(span)
    except (SyntaxError, ValueError):
        pass
    if len(_SPANS) > 256:
        _SPANS.clear()
    _SPANS[path] = (loops, functions)
    return loops, functions


def _abspath(path: str) -> str:
    import os

    return path if path.startswith("<") else os.path.abspath(path)


def _own_reset(cls):
    """The user's own `reset_state` the metric runs (defined in a user file), or None."""
    for klass in cls.__mro__:
        if "reset_state" in klass.__dict__:
            function = getattr(klass.__dict__["reset_state"], "__wrapped__", klass.__dict__["reset_state"])
            code = getattr(function, "__code__", None)
            return function if code is not None and sites.is_user_file(code.co_filename) else None
    return None


def _keras2_override(cls):
    """A user `reset_states` defined below the `reset_state` the metric runs: Keras 3 never calls it."""
    for klass in cls.__mro__:
        if "reset_state" in klass.__dict__:
            function = getattr(klass.__dict__["reset_state"], "__wrapped__", klass.__dict__["reset_state"])
            code = getattr(function, "__code__", None)
            if code is not None and sites.is_user_file(code.co_filename):
                return None  # the user's own reset_state runs
            return None if klass.__module__.split(".")[0] not in ("keras", "tf_keras", "tensorflow") else _states(cls, klass)
    return None


def _states(cls, stop):
    for klass in cls.__mro__:
        if klass is stop:
            return None
        function = klass.__dict__.get("reset_states")
        code = getattr(function, "__code__", None)
        if code is not None and sites.is_user_file(code.co_filename):
            return function
    return None


def _called_by(function: str) -> bool:
    """Whether the update was called directly by Keras's function of this name (the probe's frames skipped)."""
    import sys

    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith(_PROBE_DIR):
        frame = frame.f_back
    return frame is not None and frame.f_code.co_name == function and "keras" in frame.f_code.co_filename


_PROBE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _under_fit() -> bool:
    """Whether Keras's `fit` (or `evaluate`) is on the stack."""
    import sys

    frame = sys._getframe(2)
    while frame is not None:
        code = frame.f_code
        if code.co_name in ("fit", "evaluate") and "keras" in code.co_filename and "trainer" in code.co_filename:
            return True
        frame = frame.f_back
    return False


def _values(metric):
    """The metric's variables' values as bytes (read outside any graph being traced), or None."""
    try:
        with tf.init_scope():
            return tuple(v.numpy().tobytes() for v in metric.variables)
    except Exception:  # noqa: BLE001 - unusual state: compare nothing, flag nothing
        return None


def _snapshot(metric):
    try:
        return tuple(v.numpy().tobytes() for v in metric.variables)
    except Exception:  # noqa: BLE001 - a metric with unusual state: compare nothing, flag nothing
        return None

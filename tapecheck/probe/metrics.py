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

import threading

import tensorflow as tf
from tensorflow.python.data.ops import dataset_ops

from tapecheck.probe import names, sites
from tapecheck.probe.lifetimes import Lifetimes
from tapecheck.probe.patching import subclasses
from tapecheck.probe.report import report_internal_error

_WRAPPED = ("update_state", "result", "reset_state")


UPDATE_STACKS = 2  # user stacks kept per reset, of the first updates: where the metric is updated


class MetricState:
    __slots__ = ("generation", "reads", "update_lines", "updates")

    def __init__(self):
        self.generation = 0
        self.updates = 0
        self.reads: dict[tuple, tuple] = {}  # (path, line) -> (generation, epoch, snapshot)
        self.update_lines: list[tuple] = []  # the user (path, line)s of the first updates since the reset


class MetricHooks:
    def __init__(self, collector):
        self.collector = collector
        self.states: dict[int, MetricState] = {}
        self.lifetimes = Lifetimes(self.states)
        self.epochs = 0
        self.local = threading.local()
        self.active = True
        self._patcher = None

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
        self.lifetimes.close()
        self.states.clear()

    # -- state -------------------------------------------------------------
    def _state(self, metric) -> MetricState:
        self.lifetimes.sweep()
        state = self.states.get(id(metric))
        if state is None:
            state = MetricState()
            self.lifetimes.add(metric, state)
        return state

    def _outermost(self, name) -> bool:
        """False inside a `super()` chain of the same method (MeanMetricWrapper -> Mean)."""
        depth = getattr(self.local, name, 0)
        return depth == 0

    def _enter(self, name):
        setattr(self.local, name, getattr(self.local, name, 0) + 1)

    def _leave(self, name):
        setattr(self.local, name, getattr(self.local, name, 0) - 1)

    # -- wrappers ----------------------------------------------------------
    def _wrap_iter(self, original):
        hooks = self

        def __iter__(self):
            if hooks.active and tf.executing_eagerly():
                hooks.epochs += 1
            return original(self)

        return __iter__

    def _wrap_update(self, original):
        hooks = self

        def update_state(self, *args, **kwargs):
            if hooks.active and hooks._outermost("update"):
                state = hooks._state(self)
                state.updates += 1
                if len(state.update_lines) < UPDATE_STACKS:
                    state.update_lines.append(sites.user_lines())
            hooks._enter("update")
            try:
                return original(self, *args, **kwargs)
            finally:
                hooks._leave("update")

        return update_state

    def _wrap_reset(self, original):
        hooks = self

        def reset_state(self, *args, **kwargs):
            if hooks.active and hooks._outermost("reset"):
                state = hooks._state(self)
                state.generation += 1
                state.updates = 0
                state.reads.clear()
                state.update_lines = []
            hooks._enter("reset")
            try:
                return original(self, *args, **kwargs)
            finally:
                hooks._leave("reset")

        return reset_state

    def _wrap_result(self, original):
        hooks = self

        def result(self, *args, **kwargs):
            watch = (hooks.active and hooks._outermost("result") and tf.executing_eagerly()
                     and sites.calls_from_user_code())
            hooks._enter("result")
            try:
                value = original(self, *args, **kwargs)
            finally:
                hooks._leave("result")
            if watch:
                try:
                    hooks._read(self)
                except Exception as exc:  # noqa: BLE001 - a probe bug must not stop training
                    report_internal_error(exc)
            return value

        return result

    def _read(self, metric):
        state = self._state(metric)
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


def _snapshot(metric):
    try:
        return tuple(v.numpy().tobytes() for v in metric.variables)
    except Exception:  # noqa: BLE001 - a metric with unusual state: compare nothing, flag nothing
        return None

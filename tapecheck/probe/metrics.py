"""Hooks on Keras metrics: a `result()` that still carries the previous epoch.

An epoch boundary is an eager iteration over a `tf.data.Dataset` (eager loops
and `fit` call `DatasetV2.__iter__` once per epoch per dataset). A metric is
flagged when the user's code reads `result()` at the same line on both sides
of such a boundary, its variables changed in between and it was never reset
(`reset_state()`, which `fit` and `evaluate` call themselves). Metric
subclasses define their own `update_state`/`result`/`reset_state`, so every
subclass is wrapped, including those defined while the probe runs.
"""

from __future__ import annotations

import threading

import tensorflow as tf
from tensorflow.python.data.ops import dataset_ops

from tapecheck.probe import sites
from tapecheck.probe.lifetimes import Lifetimes
from tapecheck.probe.patching import subclasses
from tapecheck.probe.report import report_internal_error

_WRAPPED = ("update_state", "result", "reset_state")


class MetricState:
    __slots__ = ("generation", "reads", "updates")

    def __init__(self):
        self.generation = 0
        self.updates = 0
        self.reads: dict[tuple, tuple] = {}  # (path, line) -> (generation, epoch, snapshot)


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
                hooks._state(self).updates += 1
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
        site = sites.user_site()
        if site is None:
            return
        snapshot = _snapshot(metric)
        key = (site.path, site.line)
        previous = state.reads.get(key)
        state.reads[key] = (state.generation, self.epochs, snapshot, state.updates)
        if previous is None:
            return
        generation, epoch, old_snapshot, old_updates = previous
        if generation == state.generation and epoch < self.epochs and old_updates and snapshot != old_snapshot:
            name = getattr(metric, "name", type(metric).__name__)
            self.collector.add(
                site, "TAP301", "metric-never-reset",
                f"metric `{name}` is read here once per epoch but never reset: "
                "this result still includes the earlier epochs",
                f"Call `{name}.reset_state()` at the start of each epoch.",
                names=[name], subject=name, stale_epochs=[self.epochs],
            )


def _snapshot(metric):
    try:
        return tuple(v.numpy().tobytes() for v in metric.variables)
    except Exception:  # noqa: BLE001 - a metric with unusual state: compare nothing, flag nothing
        return None

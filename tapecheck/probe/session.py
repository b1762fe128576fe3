"""`tapecheck.probe()`: install the hooks, collect findings, put everything back."""

from __future__ import annotations

import threading

from tapecheck.probe.report import Collector, render

_lock = threading.Lock()
_running = None  # the probe whose hooks are installed; only one at a time


class ProbeError(RuntimeError):
    """The probe cannot start (it is running already)."""


class Probe:
    """Watch TensorFlow training; `findings` says why gradients were None.

        with tapecheck.probe() as p:
            train()
        print(p.report())
    """

    def __init__(self):
        self.collector = Collector()
        self._patcher = None
        self._hooks = []
        self._notes = None  # loud.Notes, made at start
        self._tapes = None
        self._parent = None  # the running probe this one is nested in (it shares its hooks)
        self._learning_mark = 0  # nested: where the no-learning entries made while this one runs begin

    @property
    def findings(self):
        """What the probe saw, less what a `# tapecheck: ignore[...]`/`# noqa: ...` on the line hides."""
        from tapecheck.lint.suppressions import apply_suppressions
        from tapecheck.probe.notebook import relocate

        from tapecheck.rules import one_cause_one_finding

        return one_cause_one_finding(apply_suppressions(relocate(self.collector.findings())))

    @property
    def running(self) -> bool:
        return self._patcher is not None or self._parent is not None

    def start(self) -> Probe:
        global _running
        from tapecheck.probe.optimizer import OptimizerHooks, VariableCauses
        from tapecheck.probe.patching import Patcher
        from tapecheck.probe.tapes import TapeHooks

        with _lock:
            if self.running or _running is self:
                raise ProbeError("this tapecheck probe is already running")
            parent = _running
            if parent is None:
                _running = self
            else:
                # Nested (`with tapecheck.probe()` under `pytest --tapecheck` or `tapecheck probe`):
                # the running probe's hooks serve both; this one sees what happens while it runs.
                with parent.collector._lock:
                    parent.collector.children.append(self.collector)
                self._parent = parent
                self._notes, self._tapes = parent._notes, parent._tapes
                learning = _learning(parent)
                self._learning_mark = learning.mark() if learning is not None else 0
        if parent is not None:
            return self
        try:
            from tapecheck.probe.metrics import MetricHooks
            from tapecheck.probe.pairing import GradientOrigins
            from tapecheck.probe.shims import CompiledLossHooks
            from tapecheck.probe.steplogs import StepLogsHooks
            from tapecheck.probe.traced import TracedConditionHooks
            from tapecheck.probe.state import StateHooks, UpdateCount
            from tapecheck.probe.training import TrainingFlagHooks
            from tapecheck.probe.building import BuildHooks

            from tapecheck.probe.loud import Notes
            from tapecheck.probe.nolearning import NoLearning

            causes = VariableCauses()
            self._causes = causes
            self._origins = origins = GradientOrigins()  # which source each gradient was computed for
            updates = UpdateCount()  # optimizer updates: the steps the state hook counts between
            tapes = TapeHooks(self.collector, causes, origins)
            optimizers, state = OptimizerHooks(self.collector, causes, origins, updates), StateHooks(self.collector, updates)
            optimizers.learning = NoLearning(self.collector)  # read once, at teardown (`finish`)
            self._notes = notes = Notes()  # what hooks knew about an exception passing through them
            tapes.notes = optimizers.notes = state.notes = notes
            self._tapes = tapes
            metrics = MetricHooks(self.collector)
            shims = CompiledLossHooks(self.collector, metrics, tapes)
            steplogs = StepLogsHooks(self.collector, metrics, shims)
            steplogs.notes = notes
            self._hooks = [tapes, metrics, optimizers, state, TrainingFlagHooks(self.collector, tapes), shims,
                           TracedConditionHooks(self.collector, metrics), BuildHooks(self.collector, tapes),
                           steplogs]
            self._patcher = Patcher()
            for hooks in self._hooks:
                hooks.install(self._patcher)
            _hide_probe_frames(self._patcher)
        except BaseException:
            self._teardown()
            raise
        return self

    def stop(self) -> None:
        parent = self._parent
        if parent is not None:
            self._parent = None
            learning = _learning(parent)
            if learning is not None:  # zero gradients are judged when a probe stops: this one's, now
                learning.report_into(self.collector, getattr(self, "_learning_mark", 0))
            with parent.collector._lock:
                if self.collector in parent.collector.children:
                    parent.collector.children.remove(self.collector)
            return
        if self._patcher is not None:
            self._teardown()

    def _teardown(self):
        global _running
        try:
            if self._patcher is not None:
                self._patcher.restore()
        finally:
            for hooks in self._hooks:
                hooks.active = False
                finish = getattr(hooks, "finish", None)
                if finish is not None:
                    finish()
            self._hooks = []
            self._patcher = None
            if getattr(self, "_causes", None) is not None:
                self._causes.clear()
            if getattr(self, "_origins", None) is not None:
                self._origins.clear()
            with _lock:
                if _running is self:
                    _running = None

    def explain(self, exc: BaseException) -> int:
        """Add the finding that explains `exc`, the error ending the run; the exception itself is left alone.

        Called by `__exit__`, `tapecheck probe` and the pytest plugin before the
        probe stops. Returns the number of findings made or marked.
        """
        if not isinstance(exc, Exception) or self._notes is None:
            return 0
        from tapecheck.probe import loud
        from tapecheck.probe.report import report_internal_error

        try:
            return loud.explain(self.collector, self._notes, exc, self._tapes)
        except Exception as error:  # noqa: BLE001 - a probe bug must not hide the program's error
            report_internal_error(error)
            return 0

    def report(self, fmt: str = "text") -> str:
        from tapecheck.probe.report import current_task

        return render(self.findings, fmt, task=current_task())

    def __enter__(self) -> Probe:  # noqa: PYI034 - Probe is not meant to be subclassed
        return self.start()

    def __exit__(self, typ, value, traceback) -> bool:
        if value is not None and self.running:
            self.explain(value)
        self.stop()
        return False  # exceptions go on unchanged


def _learning(probe):
    """The running probe's no-learning check (nolearning.NoLearning), or None."""
    for hooks in probe._hooks:
        learning = getattr(hooks, "learning", None)
        if learning is not None:
            return learning
    return None


def _hide_probe_frames(patcher) -> None:
    """TensorFlow's filtered tracebacks and autograph's "in user code:" lists leave the probe's wrappers out.

    Without this, an error raised through a wrapped method (an optimizer's `apply`
    inside `tf.function`) would list a tapecheck frame in its message: the
    exception the program sees would not be the one it gets without the probe.
    """
    import os

    from tensorflow.python.util import traceback_utils

    here = os.path.dirname(os.path.abspath(__file__))
    excluded = getattr(traceback_utils, "_EXCLUDED_PATHS", None)
    if isinstance(excluded, tuple) and here not in excluded:
        patcher.set(traceback_utils, "_EXCLUDED_PATHS", (*excluded, here))


def probe() -> Probe:
    """A probe to use as a context manager: `with tapecheck.probe() as p: ...`."""
    return Probe()

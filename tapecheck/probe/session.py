"""`tapecheck.probe()`: install the hooks, collect findings, put everything back."""

from __future__ import annotations

import threading

from tapecheck.probe.report import Collector, render

_lock = threading.Lock()
_running = None  # the probe whose hooks are installed; only one at a time


class ProbeError(RuntimeError):
    """The probe cannot start (another probe is running)."""


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

    @property
    def findings(self):
        """What the probe saw, less what a `# tapecheck: ignore[...]`/`# noqa: ...` on the line hides."""
        from tapecheck.lint.suppressions import apply_suppressions

        return apply_suppressions(self.collector.findings())

    @property
    def running(self) -> bool:
        return self._patcher is not None

    def start(self) -> Probe:
        global _running
        from tapecheck.probe.optimizer import OptimizerHooks, VariableCauses
        from tapecheck.probe.patching import Patcher
        from tapecheck.probe.tapes import TapeHooks

        with _lock:
            if _running is not None:
                raise ProbeError("a tapecheck probe is already running; stop it before starting another")
            _running = self
        try:
            from tapecheck.probe.metrics import MetricHooks
            from tapecheck.probe.pairing import GradientOrigins
            from tapecheck.probe.state import StateHooks, UpdateCount
            from tapecheck.probe.training import TrainingFlagHooks

            causes = VariableCauses()
            self._causes = causes
            self._origins = origins = GradientOrigins()  # which source each gradient was computed for
            updates = UpdateCount()  # optimizer updates: the steps the state hook counts between
            tapes = TapeHooks(self.collector, causes, origins)
            self._hooks = [tapes, MetricHooks(self.collector),
                           OptimizerHooks(self.collector, causes, origins, updates),
                           StateHooks(self.collector, updates), TrainingFlagHooks(self.collector, tapes)]
            self._patcher = Patcher()
            for hooks in self._hooks:
                hooks.install(self._patcher)
        except BaseException:
            self._teardown()
            raise
        return self

    def stop(self) -> None:
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

    def report(self, fmt: str = "text") -> str:
        return render(self.findings, fmt)

    def __enter__(self) -> Probe:  # noqa: PYI034 - Probe is not meant to be subclassed
        return self.start()

    def __exit__(self, typ, value, traceback) -> bool:
        self.stop()
        return False  # exceptions go on unchanged


def probe() -> Probe:
    """A probe to use as a context manager: `with tapecheck.probe() as p: ...`."""
    return Probe()

"""TAP304 at run time: a step's returned logs replaced by trackers nothing updates.

Keras 3's `fit` (at each epoch's end) and `evaluate` (at its end) pass the last
step's returned dict to `Trainer._get_metrics_result_or_logs(logs)`: when its keys
are exactly the names of `model.metrics`, the metrics' results are logged instead.
A model that keeps no metric of its own has one, Keras's loss tracker `loss`, and a
hand-written `train_step` returning `{"loss": loss}` never updates it: `fit` logs
0.0 at every epoch (measured on TF 2.21 / Keras 3.15, `fixtures/probe/keras26/
bad_step_returns_loss.py`), and `EarlyStopping` or `ReduceLROnPlateau` read it.

The hook wraps `_get_metrics_result_or_logs` alone, which Keras calls once per epoch
of `fit` and once per `evaluate`: nothing is added to a step. A finding is made when
Keras replaced the step's dict, the metric whose result was logged for a key was
never updated by anything (not even while a step was traced: the metric hook's
record), its variables are all zero, and the value the step returned for that key
differs from the one logged (one host read of each, at most once per epoch, until
the step is reported). The step is the user's own `train_step` (`fit`) or
`test_step` (`evaluate`, also for `fit`'s validation); a step that called the
`compiled_loss` shim is TAP302's (shims.py), not reported here.

With `compile(metrics=[...])` such a step never updates the compiled metrics either, and
Keras raises `ValueError: Cannot get result() since the metric has not yet been built.`
at the first epoch's end, from this very call: the hook notes the never-updated,
unbuilt metrics (loud.Notes), reported at the step's `return` if that error ends the run.
"""

from __future__ import annotations

import ast
import inspect
import linecache
import os
import sys

import numpy as np

from tapecheck.probe import names, sites
from tapecheck.probe.report import report_internal_error

CODE = "TAP304"
_STEPS = {"fit": "train_step", "evaluate": "test_step"}


class StepLogsHooks:
    def __init__(self, collector, metrics, shims):
        self.collector = collector
        self.metrics = metrics  # MetricHooks: which metrics were ever updated
        self.shims = shims  # CompiledLossHooks: the models whose step called `compiled_loss`
        self.active = True
        self.notes = None  # loud.Notes: set by the session
        self.done: set = set()  # (class, step) already reported

    def install(self, patcher):
        try:
            from keras.src.trainers.trainer import Trainer
        except ImportError:  # another Keras
            return
        patcher.wrap(Trainer, "_get_metrics_result_or_logs", self._wrap)

    def finish(self):
        self.active = False
        self.done.clear()

    def _wrap(self, original):
        hooks = self

        def _get_metrics_result_or_logs(self, logs):
            __tracebackhide__ = True  # pytest: the probe's frame is not the user's
            try:
                logged = original(self, logs)
            except ValueError as exc:
                if hooks.active and hooks.notes is not None:
                    try:
                        hooks._unbuilt(self, logs, exc, sys._getframe(1).f_code.co_name)
                    except Exception as error:  # noqa: BLE001 - a probe bug must not change the program's error
                        report_internal_error(error)
                raise
            if hooks.active and logged is not logs and isinstance(logs, dict) and isinstance(logged, dict):
                try:
                    hooks._replaced(self, logs, logged, sys._getframe(1).f_code.co_name)
                except Exception as exc:  # noqa: BLE001 - a probe bug must not stop training
                    report_internal_error(exc)
            return logged

        return _get_metrics_result_or_logs

    def _replaced(self, model, logs, logged, caller):
        """Keras logged `model.metrics`' results instead of the step's `logs`: report the keys whose metric
        nothing ever updated while the step returned another value."""
        step, code = _user_step(model, caller)
        if code is None or (type(model), step) in self.done or self._called_shim(model):
            return
        producers = {}
        for metric in getattr(model, "metrics", None) or ():
            producers[getattr(metric, "name", None)] = metric  # a later metric of the same name wins, as in Keras
        stale = []
        for key in logs:
            metric = producers.get(key)
            state = self.metrics.states.get(id(metric)) if metric is not None else None
            if metric is None or (state is not None and state.ever_updated) or not _all_zero(metric):
                continue
            returned, shown = _number(logs[key]), _number(logged.get(key))
            if returned is None or shown is None or returned == shown:
                continue
            stale.append((key, metric, returned, shown))
        if not stale:
            return
        self.done.add((type(model), step))
        self._report(model, step, code, logs, stale, caller)

    def _unbuilt(self, model, logs, exc, caller):
        """Keras raised reading `model.metrics` at the epoch's end: a metric never updated (the ones given to
        `compile(metrics=...)`, which a step of the user's own never touches) was never built. Noted; reported
        if this error ends the run."""
        from tapecheck.probe import loud

        if "has not yet been built" not in str(exc):
            return
        step, code = _user_step(model, caller)
        if code is None:
            return
        unbuilt = []
        for metric in getattr(model, "metrics", None) or ():
            state = self.metrics.states.get(id(metric))
            if getattr(metric, "built", True) or (state is not None and state.ever_updated):
                continue
            unbuilt.append(metric)
        if not unbuilt:
            return
        path = os.path.abspath(code.co_filename)
        line, col, values = _returned_dict(path, code.co_firstlineno, set(logs) if isinstance(logs, dict) else set())
        model_name, _ = _model_name(model, caller)
        compiled = getattr(model, "_compile_metrics", None)
        what = " and ".join("the metrics given to `compile(metrics=...)`" if metric is compiled else
                            f"the metric `{names.keras_name(metric)}`" for metric in unbuilt)
        loss = values.get("loss", "...")
        said = "" if "loss" in values else " with the step's loss"
        self.notes.note(exc, loud.Explanation(
            site=sites.Site(path, line, col), code=CODE, cause="metrics-never-updated",
            message=(f"`{type(model).__name__}.{step}` never updates {what}: at the epoch's end Keras 3's `{caller}` "
                     f"reads the result of every metric in `{model_name}.metrics` (to log them in place of a returned "
                     "dict keyed by their names), and a metric never updated was never built, so it raises"
                     ).replace("{", "{{").replace("}", "}}"),
            hint=(f"Update the trackers in the step: `m.update_state({loss})`"
                  f"{said} for the `m` in `self.metrics` named "
                  "`\"loss\"`, then `return self.compute_metrics(x, y, y_pred, sample_weight=None)` with the step's "
                  "inputs, targets and predictions (it updates the metrics given to `compile` and returns every "
                  "metric's result); or leave `metrics=` out of `compile()`."),
            details={"model": model_name, "step": step},
        ))

    def _called_shim(self, model) -> bool:
        return any(ref() is model for ref in list(self.shims.models.values()))

    def _report(self, model, step, code, logs, stale, caller):
        path = os.path.abspath(code.co_filename)
        line, col, values = _returned_dict(path, code.co_firstlineno, set(logs))
        cls = type(model).__name__
        model_name, call_site = _model_name(model, caller)
        run = f"`{caller}`"
        if call_site is not None:
            at = f"line {call_site.line}" if call_site.path == path else call_site.short()
            text = linecache.getline(call_site.path, call_site.line)
            run = (f"`{caller}` (`{model_name}.{caller}(...)` at {at})" if f".{caller}(" in text else
                   f"`{caller}` (run by `{model_name}.fit(...)` at {at} on the validation data)"
                   if ".fit(" in text else run)
        loss_tracker = getattr(model, "_loss_tracker", None)
        keras_tracker = "Keras's loss tracker"
        alone = len(getattr(model, "metrics", ()) or ()) == 1 and stale[0][1] is loss_tracker
        said = "; ".join(
            f"{keras_tracker if metric is loss_tracker else 'the metric'} `{key}` is never updated (the step's last "
            f"batch returned {round(returned, 4)}, `{caller}` logs {round(shown, 4)})"
            for key, metric, returned, shown in stale)
        key = stale[0][0]
        where = (f'`history.history["{key}"]` is {round(stale[0][3], 4)} at every epoch' if step == "train_step" else
                 f"the `{key}` that `evaluate` returns (`val_{key}` at each epoch of `fit`) is {round(stale[0][3], 4)}")
        keys = ", ".join(f'"{k}": ...' for k, *_ in stale)
        message = (
            f"`{cls}.{step}` returns {{{keys}}}, but Keras 3's {run} logs the results of "
            f"`{model_name}.metrics` instead of a returned dict whose keys are their names"
            f"{', and this model keeps no metric of its own' if alone else ''}: {said}. So {where}, "
            "and the callbacks that watch it (`EarlyStopping`, `ReduceLROnPlateau`) read that")
        self.collector.add(
            sites.Site(path, line, col), CODE, "step-logs-replaced-by-trackers",
            message.replace("{", "{{").replace("}", "}}"),  # no `{names}` in it: the collector formats it
            _hint(stale, values), subject=f"{cls}.{step}", model=model_name, step=step,
            keys=[k for k, *_ in stale],
        )


def _model_name(model, caller) -> tuple:
    """(the user's name for `model`, the user's line that called `fit`/`evaluate`, None if none)."""
    frame, call_site = sites.user_frame(4)
    if call_site is None:
        return names.held_as(model) or names.keras_name(model), None
    return names.user_name(model, frame, call_site, caller), call_site


def _user_step(model, caller) -> tuple:
    """(the step `caller` runs, its code object when the user wrote it, else None)."""
    step = _STEPS.get(caller)
    if step is None:
        return None, None
    function = inspect.unwrap(getattr(type(model), step, None) or (lambda: None))
    code = getattr(function, "__code__", None)
    return step, code if code is not None and sites.is_user_file(code.co_filename) else None


def _hint(stale, values) -> str:
    trackers = [(key, "loss_tracker" if key == "loss" else f"{key}_tracker" if key.isidentifier() else "tracker")
                for key, *_ in stale]
    made = " and ".join(f'`self.{attribute} = keras.metrics.Mean(name="{key}")`' for key, attribute in trackers)
    listed = ", ".join(f"self.{attribute}" for _, attribute in trackers)
    updates = " and ".join(f"`self.{attribute}.update_state({values[key]})`" if key in values else
                           f"`self.{attribute}.update_state(...)` with the value the step returns as `\"{key}\"`"
                           for key, attribute in trackers)
    return (f"Keep a tracker: {made} in `__init__`, returned by a `metrics` property (`return [{listed}]`); "
            f"in the step, call {updates}, then `return {{m.name: m.result() for m in self.metrics}}`.")


def _number(value):
    """A scalar's value as a Python float (one host read), else None."""
    try:
        array = np.asarray(value)
        return float(array) if array.size == 1 and array.dtype.kind in "fiu" else None
    except Exception:  # noqa: BLE001 - an unusual log value: compare nothing
        return None


def _all_zero(metric) -> bool:
    try:
        return all(not v.numpy().any() for v in metric.variables)
    except Exception:  # noqa: BLE001 - unusual state: not certain, not reported
        return False


def _returned_dict(path: str, first_line: int, keys: set) -> tuple[int, int, dict]:
    """(the line and column of the step's `return {...}` with these keys, key -> the text of its value); the
    step's `def` line and no texts when no such return is found (its first line when the file cannot be read)."""
    try:
        tree = ast.parse("".join(linecache.getlines(path)))
    except (SyntaxError, ValueError):
        return first_line, 1, {}
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if min([node.lineno] + [d.lineno for d in node.decorator_list]) != first_line:
            continue
        found = []
        for inner in _own_nodes(node):
            if isinstance(inner, ast.Return) and isinstance(inner.value, ast.Dict):
                texts = {k.value: ast.unparse(v) for k, v in zip(inner.value.keys, inner.value.values)
                         if isinstance(k, ast.Constant) and isinstance(k.value, str)}
                if set(texts) == keys:
                    found.append((inner.lineno, inner.col_offset + 1, texts))
        return min(found, key=lambda f: f[0]) if found else (node.lineno, node.col_offset + 1, {})
    return first_line, 1, {}


def _own_nodes(function):
    """The nodes of `function`'s body, not those of a function or class defined inside it."""
    stack = list(function.body)
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            stack.extend(ast.iter_child_nodes(node))

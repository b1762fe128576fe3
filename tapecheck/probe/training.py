"""TAP403 at run time: Dropout/BatchNormalization in the wrong mode.

Each Dropout and BatchNormalization `call` (wrapped on every class that
defines one) reads Keras's call context: the model the user called
(`entry_layer`) and the `training` value that call resolved to.

- Trained without `training=True`: a user tape records and the user's call
  of the model left `training` unset (read from that `__call__` frame's
  keyword arguments: the call context only holds the last layer's value; an
  explicit `training=False`, a teacher model, is on purpose). The model's call
  line is remembered on that tape, and reported when the tape's gradient is
  asked for the model's variables.
- Validated with `training=True`: no tape records and the user's function
  calling the model is named like a validation step (the linter's rule), so
  Monte Carlo dropout on purpose elsewhere is left alone.

Reported at the user's line that called the model (through autograph's source
map inside `tf.function`), once per trace there.
"""

from __future__ import annotations

import functools
import threading
import weakref

from tapecheck.probe import names, sites
from tapecheck.probe.patching import subclasses
from tapecheck.probe.report import report_internal_error

LAYERS = ("Dropout", "BatchNormalization")


class TrainingFlagHooks:
    def __init__(self, collector, tape_hooks):
        self.collector = collector
        self.tapes = tape_hooks
        self.local = threading.local()
        self.active = True
        self.names: dict[tuple, str | None] = {}  # (path, line, id(model)) -> the user's name for it there

    def install(self, patcher):
        import keras

        for name in LAYERS:
            for cls in subclasses(getattr(keras.layers, name)):
                patcher.wrap(cls, "call", self._wrap_call)
        self.tapes.gradient_listeners.append(self._gradient_taken)

    def finish(self):
        self.active = False

    def _wrap_call(self, original):
        hooks = self

        def call(self, *args, **kwargs):
            __tracebackhide__ = True  # pytest: the probe's frame is not the user's
            if hooks.active and not getattr(hooks.local, "busy", False):
                hooks.local.busy = True
                try:
                    hooks._observe(self, kwargs.get("training"))
                except Exception as exc:  # noqa: BLE001 - a probe bug must not stop training
                    report_internal_error(exc)
                finally:
                    hooks.local.busy = False
            return original(self, *args, **kwargs)

        return call

    def _observe(self, layer, training):
        from keras.src.backend.common import global_state
        from tensorflow.python.eager import record

        context = global_state.get_global_attribute("current_call_ctx")  # new at each outermost call
        if context is not None:
            last = getattr(self.local, "context", None)
            if last is not None and last() is context:
                return  # one look per model call, not one per layer
            self.local.context = weakref.ref(context)
        if record.could_possibly_record():
            if training is True:
                return  # the user said training=True (or Keras passed it down): nothing to look up
            recording = self.tapes.recording_user_tapes()
            if recording:
                self._untrained(layer, recording)
        elif training is True:  # resolved by Keras from the user's call
            self._validated_in_training_mode(layer)

    def _untrained(self, layer, recording):
        import keras

        model, site, given, frame = sites.outermost_call_frame(keras.Layer, depth=4)
        if model is None or given.get("training") is not None or site is None:
            return
        note = (site, weakref.ref(model), type(layer).__name__,
                self._name(model, frame, site, fallback=False))
        for info in recording:
            if info.untrained_calls is None:
                info.untrained_calls = {}
            info.untrained_calls.setdefault(id(model), note)

    def _name(self, model, frame, site, fallback=True):
        """The model's name in the user's line (`self.encoder`), looked up once per line and model; with
        `fallback`, its holder's or Keras's name when the line has none (a garbage-collector walk: only
        when reporting, and once)."""
        key = (site.path, site.line, id(model))
        if key not in self.names:
            if len(self.names) > 1024:
                self.names.clear()
            try:
                self.names[key] = names.from_frame(model, frame, site.path, site.line)
            except Exception:  # noqa: BLE001 - names are a nicety
                self.names[key] = None
        name = self.names[key]
        if name is None and fallback:
            name = self.names[key] = names.user_name(model)
        return name

    def _gradient_taken(self, info, sources):
        calls, info.untrained_calls = info.untrained_calls, None
        if not calls:
            return
        from tensorflow.python.util import nest

        wanted = {id(s) for s in nest.flatten(sources)}
        for site, model_ref, layer_name, name in calls.values():
            model = model_ref()
            if model is None or not wanted & {id(v) for v in model.trainable_variables}:
                continue  # not the model being trained (a frozen teacher, a target network)
            name = name or self._name(model, None, site)
            self.collector.add(
                site, "TAP403", "training-flag-missing",
                f"`{name}` runs its {layer_name} layer in inference mode here while its variables are trained "
                "(called without `training=True`): dropout is off and batch-norm statistics never update",
                f"Call `{name}(..., training=True)` inside the tape.",
            )

    def _validated_in_training_mode(self, layer):
        import re

        import keras

        from tapecheck.rules.tap403_missing_training_flag import VALIDATION_STEP

        model, site, _, frame = sites.outermost_call_frame(keras.Layer, depth=4)
        function = _function_at(site)
        if site is None or not function or not re.fullmatch(VALIDATION_STEP, function):
            return
        name = self._name(model, frame, site)
        self.collector.add(
            site, "TAP403", "training-flag-in-validation",
            f"`{name}` runs its {type(layer).__name__} layer in training mode in `{function}`, with no tape "
            "recording: validation results become random and batch-norm statistics learn from validation data",
            f"Call `{name}(..., training=False)` when validating.",
        )


def _function_at(site) -> str:
    return _function_at_line(site.path, site.line) if site is not None else ""


@functools.lru_cache(maxsize=256)  # a validation step runs at every batch: parse its file once
def _function_at_line(path: str, line: int) -> str:
    """The name of the innermost function defined around `path:line`, from the file."""
    import ast
    import linecache

    if path.startswith("<"):
        return ""
    try:
        tree = ast.parse("".join(linecache.getlines(path)))
    except (SyntaxError, ValueError):
        return ""
    best = ""
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.lineno <= line <= (node.end_lineno or 0):
            best = node.name  # ast.walk goes outside in: the last match is the innermost
    return best

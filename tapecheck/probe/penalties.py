"""TAP105 at run time: a model's penalties left out of the loss.

A Keras 3 layer keeps its penalties apart from its output: a weight
regularizer is `variable.regularizer` (computed only when `layer.losses` is
read), an activity regularizer or an `add_loss(...)` in `call` goes through
`Layer.add_loss` during the forward pass. `fit` adds `model.losses` to the
loss; a custom step must do it itself.

Two hooks, both cheap: the `losses` property of `keras.Layer` (read while a
user tape records: that tape's loss may hold the penalties of the layer read,
and of every layer inside it) and `Layer.add_loss` (called while a user tape
records: that tape's model has a penalty of this kind). When the tape's
gradient is asked for variables that carry a regularizer, or of a layer that
added a loss, and the `losses` of no layer holding them was read while the
tape recorded, the step trains without them: reported at the `gradient` call
(inside `tf.function` once per trace, as Python runs only then).

Only weak references to layers are kept, on the tape's own record, which dies
with the tape. Nothing is computed: reading `losses` is the program's own
call, passed through unchanged.
"""

from __future__ import annotations

import weakref

from tensorflow.python.util import nest

from tapecheck.probe import diagnose
from tapecheck.probe.patching import subclasses
from tapecheck.probe.report import report_internal_error

CODE = "TAP105"
CAUSE = "regularization-losses-dropped"


class PenaltyHooks:
    def __init__(self, collector, tapes):
        self.collector = collector
        self.tapes = tapes

    def install(self, patcher):
        import keras

        for cls in subclasses(keras.Layer):
            prop = cls.__dict__.get("losses")
            if isinstance(prop, property) and prop.fget is not None:
                patcher.set(cls, "losses", property(self._wrap_losses(prop.fget), prop.fset, prop.fdel, prop.__doc__))
            if "add_loss" in cls.__dict__:
                patcher.wrap(cls, "add_loss", self._wrap_add_loss)
        self.tapes.target_listeners.append(self._gradient_taken)

    # -- hooks -------------------------------------------------------------
    def _recording(self):
        tapes = self.tapes
        if not tapes.active or tapes._busy():
            return ()
        return tapes.recording_user_tapes()

    def _note(self, field: str, layer) -> None:
        """Remember `layer` (weakly) in `field` of every tape recording now: its `.losses` was read
        (`losses_read`), or it called `add_loss` (`penalties`)."""
        try:
            for info in self._recording():
                seen = getattr(info, field)
                if seen is None:
                    seen = []
                    setattr(info, field, seen)
                if not any(ref() is layer for ref in seen):
                    seen.append(weakref.ref(layer))
        except Exception as exc:  # noqa: BLE001 - a probe bug must not stop training
            report_internal_error(exc)

    def _wrap_losses(self, fget):
        hooks = self

        def losses(self):
            __tracebackhide__ = True  # pytest: the probe's frame is not the user's
            hooks._note("losses_read", self)
            return fget(self)

        losses.__name__ = getattr(fget, "__name__", "losses")
        losses.__qualname__ = getattr(fget, "__qualname__", "losses")
        losses.__module__ = getattr(fget, "__module__", None)
        losses.__doc__ = getattr(fget, "__doc__", None)
        losses.__tapecheck_original__ = fget
        return losses

    def _wrap_add_loss(self, original):
        hooks = self

        def add_loss(self, *args, **kwargs):
            __tracebackhide__ = True  # pytest: the probe's frame is not the user's
            hooks._note("penalties", self)
            return original(self, *args, **kwargs)

        return add_loss

    # -- the check, after each user `gradient` call ------------------------
    def _gradient_taken(self, info, target, sources, site):
        flat = nest.flatten(sources)
        wanted = {id(s) for s in flat}
        regularized = [s for s in flat if diagnose.is_variable(s) and getattr(s, "regularizer", None) is not None]
        penalized = []
        for ref in info.penalties or ():
            layer = ref()
            if layer is not None and wanted & {id(w) for w in layer.trainable_weights}:
                penalized.append(layer)
        if not regularized and not penalized:
            return
        read = [layer for layer in (ref() for ref in info.losses_read or ()) if layer is not None]
        if read:
            covered_vars = {id(w) for layer in read for w in layer.trainable_weights}
            covered_layers = {id(sub) for layer in read for sub in layer._flatten_layers(include_self=True)}
            regularized = [v for v in regularized if id(v) not in covered_vars]
            penalized = [layer for layer in penalized if id(layer) not in covered_layers]
            if not regularized and not penalized:
                return
        self._report(info, site, regularized, penalized)

    def _report(self, info, site, regularized, penalized):
        target_text, _ = diagnose.call_texts(site)
        root = _root(site)
        model = f"`{root}`" if root else f"the model `{_keras_name(regularized, penalized)}`"
        losses = f"{root or 'model'}.losses"
        parts = []
        if regularized:
            kinds = sorted({_regularizer_name(v) for v in regularized})
            names = ", ".join(f"`{diagnose.describe(v)}`" for v in regularized[:4])
            if len(regularized) > 4:
                names += f" and {len(regularized) - 4} more"
            parts.append(f"a weight regularizer ({', '.join(kinds)}) on {names}")
        for layer in penalized[:3]:
            if getattr(layer, "activity_regularizer", None) is not None:
                parts.append(f"an activity regularizer on layer `{layer.name}`")
            else:
                parts.append(f"an `add_loss(...)` in `{type(layer).__name__}.call`")
        loss = f"`{target_text}`" if target_text else "the loss"
        if info.site is None:
            tape = "the tape"
        elif site is not None and info.site.path == site.path:
            tape = f"the tape made at line {info.site.line} (`with tf.GradientTape()`)"
        else:
            tape = f"the tape made at {info.site.short()}"
        name = target_text if target_text and target_text.isidentifier() else "loss"
        self.collector.add(
            site, CODE, CAUSE,
            f"{model} has regularization ({'; '.join(parts)}), but the loss {loss} differentiated here never adds "
            f"`{losses}`: no `.losses` was read while {tape} recorded, so this step trains without the "
            "penalties `fit` would add",
            f"Add the model's penalties to the loss inside the tape: `{name} = {name} + sum({losses})` "
            "(`tapecheck lint --fix --unsafe-fixes` writes it where the loss has one assignment in the tape).",
            names=[diagnose.describe(v) for v in regularized],
        )


def _regularizer_name(variable) -> str:
    regularizer = getattr(variable, "regularizer", None)
    return type(regularizer).__name__ if regularizer is not None else "?"


TRAINABLE = (".trainable_variables", ".trainable_weights", ".variables", ".weights")


def _root(site) -> str | None:
    """The model as the program names it: `self.model` in `tape.gradient(loss, self.model.trainable_variables)`."""
    text = diagnose.sources_text(site)
    for suffix in TRAINABLE:
        if text and text.endswith(suffix) and len(text) > len(suffix):
            root = text[: -len(suffix)]
            return root if all(part.isidentifier() for part in root.split(".")) else None
    return None


def _keras_name(regularized, penalized) -> str:
    """The model's Keras name, when the program's name for it is not in the `gradient` call."""
    if regularized:
        path = diagnose.describe(regularized[0])
        if "/" in path:
            return path.split("/")[0]
    if penalized:
        return penalized[0].name
    return "?"

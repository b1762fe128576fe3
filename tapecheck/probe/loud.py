"""Loud failures explained: the finding behind the exception that ends the run.

When the probed program raises, the probe (at `with tapecheck.probe()`'s exit,
`tapecheck probe`'s catch, the pytest plugin's) looks at the exception and its
chain (`__context__`/`__cause__`: TensorFlow re-raises errors from traced code
as new exceptions of the same type) before it goes on, unchanged:

- Hooks the exception passed through noted what they knew (`Notes.note`): a
  variable made on a later trace (TAP402), a NumPy gradient target (TAP104), a
  second call on a non-persistent tape (TAP201), `apply` with no gradients,
  gradients whose shapes are not their variables' (TAP401), an optimizer given
  variables it was not built for (TAP404). A note holds the exception's id,
  type and text (never the exception, which holds frames and tensors) and what
  to report; it counts only when that very exception reaches the boundary.
- Others are known by their text alone: Keras 3's removed APIs (TAP302), a
  `None` gradient used as a tensor (the last `None` the tape hook diagnosed).
  Their line is the innermost frame in user code, mapped back from autograph.

The finding carries `details["explains"]` (`ValueError: ...`); when the probe
had already made it (TAP201, TAP401 from pairing, the cause of a `None`
gradient), that finding is marked instead of a second one being made.
"""

from __future__ import annotations

import collections
import os
import re
import threading
from dataclasses import dataclass, field

from tapecheck.probe import sites

_MAX_CHAIN = 8


@dataclass
class Explanation:
    """What to report for one exception: new findings and/or records already made."""

    site: object = None  # sites.Site of the new finding; None: only `keys`
    code: str | None = None
    cause: str = ""
    message: str = ""
    hint: str = ""
    names: tuple = ()
    keys: tuple = ()  # Collector keys of findings already made that this exception confirms
    details: dict = field(default_factory=dict)


class Notes:
    """Exceptions seen passing through a hook, with what the hook knew."""

    def __init__(self):
        self._notes = collections.deque(maxlen=16)
        self._lock = threading.Lock()

    def note(self, exc: BaseException, explanation: Explanation) -> None:
        with self._lock:
            self._notes.append((id(exc), type(exc), _text(exc), explanation))

    def find(self, exc: BaseException):
        text = None
        with self._lock:
            notes = list(self._notes)
        for key, kind, noted_text, explanation in reversed(notes):
            if key == id(exc) and kind is type(exc):
                text = _text(exc) if text is None else text
                if text == noted_text:
                    return explanation
        return None

    def clear(self):
        with self._lock:
            self._notes.clear()


def _text(exc) -> str:
    try:
        return str(exc)
    except Exception:  # noqa: BLE001 - an exception whose __str__ fails: match by id and type only
        return ""


def chain(exc):
    """The exception, then its causes and contexts (the originals of re-raised traced errors)."""
    out, seen = [], set()
    todo = [exc]
    while todo and len(out) < _MAX_CHAIN:
        current = todo.pop(0)
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        out.append(current)
        todo.extend([current.__cause__, current.__context__])
    return out


def core_message(exc) -> str:
    """The exception's own text: autograph's "in user code:" frame list and TF's node prefix dropped."""
    meta = getattr(exc, "ag_error_metadata", None)
    text = getattr(meta, "cause_message", None) or _text(exc)
    text = re.sub(r"^\{\{function_node [^}]*\}\}\s*", "", text.strip())
    text = text.removeprefix(f"{type(exc).__name__}: ")  # autograph's cause_message names the type
    if text.startswith("in user code:"):
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        tail = [line for line in lines if re.match(r"^\w*(Error|Exception)\w*: ", line)]
        text = tail[-1].split(": ", 1)[1] if tail else lines[-1]
    first = text.splitlines()[0] if text else ""
    return first if len(first) <= 200 else first[:197] + "..."


def explains_text(exc) -> str:
    return f"{type(exc).__name__}: {core_message(exc)}"


def user_site_of(exc):
    """The innermost user frame where `exc` was raised (autograph's translated stack first)."""
    for current in chain(exc):
        meta = getattr(current, "ag_error_metadata", None)
        for frame in getattr(meta, "translated_stack", None) or ():
            filename = getattr(frame, "filename", "") or ""
            if sites.is_user_file(filename):
                return sites.Site(os.path.abspath(filename), frame.lineno, 1)
    for current in chain(exc):
        found = None
        tb = current.__traceback__
        while tb is not None:
            filename = tb.tb_frame.f_code.co_filename
            if sites.is_user_file(filename):
                found = sites.Site(os.path.abspath(filename) if not filename.startswith("<") else filename,
                                   tb.tb_lineno, 1)
            tb = tb.tb_next
        if found is not None:
            return found
    return None


def passes_through(exc, fragment: str) -> bool:
    """Whether a frame of `exc`'s chain is in a file whose path holds `fragment`."""
    for current in chain(exc):
        tb = current.__traceback__
        while tb is not None:
            if fragment in tb.tb_frame.f_code.co_filename.replace("\\", "/"):
                return True
            tb = tb.tb_next
    return False


# -- Keras 3 removed APIs (TAP302) ---------------------------------------------------
_TRAIN_WITH_TAPE = ("Take gradients with `tf.GradientTape` and apply them with "
                    "`optimizer.apply_gradients(zip(grads, variables))`.")
_REMOVED_ATTRIBUTES = {
    "reset_states": ("`Metric.reset_states()` was removed in Keras 3",
                     "Call `reset_state()` (singular)."),
    "get_gradients": ("`Optimizer.get_gradients()` was removed in Keras 3", _TRAIN_WITH_TAPE),
    "get_updates": ("`Optimizer.get_updates()` was removed in Keras 3", _TRAIN_WITH_TAPE),
    "set_learning_phase": ("`keras.backend.set_learning_phase()` was removed in Keras 3",
                           "Pass `training=True` (or False) to each model call instead."),
    "learning_phase": ("`keras.backend.learning_phase()` was removed in Keras 3",
                       "Pass `training=True` (or False) to each model call instead."),
    "lr": ("Keras 3 optimizers have no `lr` attribute (it was an alias of `learning_rate`)",
           "Read or assign `optimizer.learning_rate` (assigning `optimizer.lr` would set a new attribute "
           "and leave the rate unchanged)."),
    **{name: (f"`Model.{name}()` was removed in Keras 3", hint) for name, hint in (
        ("fit_generator", "Call `fit` (it takes generators and `tf.data` datasets)."),
        ("evaluate_generator", "Call `evaluate` (it takes generators and `tf.data` datasets)."),
        ("predict_generator", "Call `predict` (it takes generators and `tf.data` datasets)."),
        ("predict_classes", "Call `np.argmax(model.predict(x), axis=-1)`."),
        ("predict_proba", "Call `predict`."),
    )},
}
# The ValueErrors Keras 3 raises for a path only Keras 2 could save to or load from (measured on
# Keras 3.15), as the start of their text.
_REFUSED_PATHS = (
    "The filename must end in `.weights.h5`",
    "Invalid filepath extension for saving",
    "The `save_format` argument is deprecated in Keras 3",
    "When using `save_weights_only=True` in `ModelCheckpoint`",
    "The filepath provided must end in `.keras`",
    "File format not supported: filepath=",
)
_KERAS2_ARGUMENTS = {"lr": "learning_rate"}


def _from_keras(obj) -> bool:
    name = getattr(obj, "__name__", None) if type(obj).__name__ == "module" else type(obj).__module__
    return isinstance(name, str) and name.split(".")[0] in ("keras", "tensorflow", "tf_keras")


def removed_api(exc):
    """TAP302: an AttributeError, ValueError or ImportError Keras 3 raises for a Keras 2 API."""
    if isinstance(exc, AttributeError):
        name = getattr(exc, "name", None)
        if name not in _REMOVED_ATTRIBUTES or not _from_keras(getattr(exc, "obj", None)):
            return None
        what, hint = _REMOVED_ATTRIBUTES[name]
        return Explanation(code="TAP302", cause=f"removed-{name.replace('_', '-')}",
                           message=f"{what}: this call raises AttributeError", hint=hint)
    text = core_message(exc)
    if isinstance(exc, ValueError) and text.startswith("Argument(s) not recognized:"):
        old = [k for k in _KERAS2_ARGUMENTS if re.search(rf"'{k}'\s*:", text)]
        if not old or not passes_through(exc, "/keras/src/optimizers/"):
            return None
        renamed = ", ".join(f"`{k}=` is `{_KERAS2_ARGUMENTS[k]}=`" for k in old)
        return Explanation(code="TAP302", cause="removed-argument",
                           message=f"Keras 3 optimizers no longer take {', '.join(f'`{k}=`' for k in old)}: "
                                   "the constructor raises ValueError",
                           hint=f"Rename the argument: {renamed}.")
    if isinstance(exc, ValueError) and text.startswith(_REFUSED_PATHS) and passes_through(exc, "/keras/src/"):
        return Explanation(code="TAP302", cause="refused-path",
                           message="Keras 3 saves and loads only `.keras` models and `.weights.h5` weights "
                                   "(`.h5` too, for whole models): no TensorFlow checkpoints or SavedModel folders, "
                                   "so this raises ValueError",
                           hint="Name weight files `....weights.h5` and model files `....keras`; for a TensorFlow "
                                "checkpoint use `tf.train.Checkpoint(model=model)`, for a SavedModel `model.export(path)`.")
    if isinstance(exc, ImportError) and "keras.optimizers.legacy" in text and "not supported in Keras 3" in text:
        return Explanation(code="TAP302", cause="legacy-optimizer",
                           message="`tf.keras.optimizers.legacy` optimizers do not exist in Keras 3 "
                                   "(the module is a stub: a `hasattr` check passes, construction raises ImportError)",
                           hint="Use `tf.keras.optimizers.Adam(learning_rate=...)` (and its kin).")
    return None


_NONE_USED = (
    "None values not supported",
    "Attempt to convert a value (None)",
    "unsupported operand type(s)",
    "'NoneType' object",
)


def none_gradient_used(exc, tapes):
    """A `None` gradient used as a tensor (clipped, summed, divided): the cause of that `None`."""
    if not isinstance(exc, (ValueError, TypeError, AttributeError)):
        return None
    text = core_message(exc)
    if not any(fragment in text for fragment in _NONE_USED) or "None" not in text:
        return None
    last = getattr(tapes, "last_none", None) if tapes is not None else None
    if last is None:
        return None
    site, keys, names = last
    fallback = Explanation(
        site=site, code="TAP104", cause="gradient-none-used",
        message="the gradient of {names} is None here (the target does not reach it through any op the "
                "probe saw), and the program then uses it as a tensor",
        hint="Find why the source does not reach the loss, or skip `None` gradients before using them.",
        names=tuple(names),
    )
    return Explanation(keys=tuple(keys), details={"fallback": fallback})


def explain(collector, notes, exc, tapes=None) -> int:
    """Report what caused `exc` (once); the number of findings made or marked."""
    exceptions = chain(exc)
    for current in exceptions:
        explanation = notes.find(current) if notes is not None else None
        if explanation is not None:
            return _apply(collector, explanation, current, exc)
    for current in exceptions:
        explanation = removed_api(current)
        if explanation is not None:
            explanation.site = user_site_of(exc)
            return _apply(collector, explanation, current, exc)
    for current in exceptions:
        explanation = none_gradient_used(current, tapes)
        if explanation is not None:
            return _apply(collector, explanation, current, exc)
    return 0


def _apply(collector, explanation, current, outer) -> int:
    text = explains_text(current)
    details = dict(explanation.details)
    fallback = details.pop("fallback", None)
    done = sum(collector.mark(key, explains=text) for key in explanation.keys)
    if explanation.site is not None and explanation.code is not None:
        own = (explanation.site.path, explanation.site.line, explanation.code, explanation.cause)
        if not collector.mark(own, explains=text):  # a finding the hooks made already (TAP401 from pairing)
            collector.add(explanation.site, explanation.code, explanation.cause, explanation.message,
                          explanation.hint, names=explanation.names, explains=text, **details)
        done += 1
    if not done and fallback is not None and fallback.site is not None:
        return _apply(collector, fallback, current, outer)
    return done

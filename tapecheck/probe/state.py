"""TAP402 at run time: an optimizer, metric or variable made anew at every training step.

The constructors of the Keras optimizer and metric base classes and of
`tf.Variable` (its metaclass's `__call__`) note the user's line that made the
object, in eager code only (inside `tf.function` TensorFlow itself raises on a
variable made after the first call). Steps are seen two ways: optimizer
updates (`apply`, which a `tf.function` step runs only while tracing) and
eager batches drawn from a `tf.data` iterator. A line that makes the same kind
of object again after at most one batch and one or two updates (one step, or
a GAN step with two optimizers), and after at least one of either, is reported
once, with the number of objects it made. A metric made per epoch is not: its
epoch holds more batches or updates than that (an epoch of one or two steps
without `tf.data` looks like a step, and is reported).
"""

from __future__ import annotations

import sys
import threading
import weakref

import tensorflow as tf

from tapecheck.probe import sites
from tapecheck.probe.report import report_internal_error

MAX_UPDATES_BETWEEN = 2  # a GAN step updates two optimizers
MAX_BATCHES_BETWEEN = 1

WHY = {
    "optimizer": "a new optimizer each step forgets its moments and iteration count (Adam restarts, momentum never builds)",
    "metric": "a new metric each step only ever reports the last batch",
    "variable": "the variable is re-initialized each step",
}
WHERE_TO = {
    "optimizer": "Make the optimizer once, before the training loop, and pass it in.",
    "metric": "Make the metric once, before the loop; `reset_state()` it at each epoch.",
    "variable": "Make the variable once, outside the step (in `__init__` or `build`), and `assign` to it.",
}


class UpdateCount:
    """Optimizer updates so far, counted by the optimizer hook: one sign of a training step."""

    __slots__ = ("count",)

    def __init__(self):
        self.count = 0


class SiteRecord:
    __slots__ = ("last_batch", "last_update", "made", "reported")

    def __init__(self, update, batch):
        self.last_update = update
        self.last_batch = batch
        self.made = 1
        self.reported = False


class StateHooks:
    def __init__(self, collector, updates: UpdateCount):
        self.collector = collector
        self.updates = updates
        self.sites: dict[tuple, SiteRecord] = {}
        self.batches = 0  # eager batches from tf.data iterators: the other sign of a step
        self.lock = threading.Lock()
        self.active = True
        self.notes = None  # loud.Notes: a variable made on a later trace (TensorFlow raises)
        self.eager_optimizers: dict[int, tuple] = {}  # id -> (weak reference, the user's line that made it)

    def install(self, patcher):
        import keras
        from tensorflow.python.data.ops.iterator_ops import OwnedIterator
        from tensorflow.python.ops.variables import VariableMetaclass

        patcher.wrap(_root_init(keras.optimizers.Optimizer), "__init__", self._wrap_init("optimizer"))
        patcher.wrap(_root_init(keras.metrics.Metric), "__init__", self._wrap_init("metric"))
        patcher.wrap(VariableMetaclass, "__call__", self._wrap_variable_call)
        patcher.wrap(OwnedIterator, "__next__", self._wrap_next)

    def finish(self):
        self.active = False
        self.sites.clear()

    def _wrap_init(self, kind):
        hooks = self

        def make(original):
            def __init__(self, *args, **kwargs):
                __tracebackhide__ = True  # pytest: the probe's frame is not the user's
                original(self, *args, **kwargs)
                if hooks.active and tf.executing_eagerly():
                    try:
                        site = _constructor_site(self)
                        if kind == "optimizer":
                            hooks._note_optimizer(self, site)
                        hooks._made(kind, site)
                    except Exception as exc:  # noqa: BLE001 - a probe bug must not stop training
                        report_internal_error(exc)

            return __init__

        return make

    def _wrap_next(self, original):
        hooks = self

        def __next__(self):
            __tracebackhide__ = True  # pytest: the probe's frame is not the user's
            element = original(self)  # the end of an epoch raises StopIteration: not a batch
            if hooks.active:
                hooks.batches += 1  # eager only: a traced `next` runs this once, while tracing
            return element

        return __next__

    def _wrap_variable_call(self, original):
        hooks = self

        def __call__(cls, *args, **kwargs):
            __tracebackhide__ = True  # pytest: the probe's frame is not the user's
            try:
                variable = original(cls, *args, **kwargs)
            except ValueError as exc:
                if hooks.active and hooks.notes is not None:
                    hooks._traced_creation(exc)
                raise
            # `tf.Variable(...)` only: TensorFlow makes internal subclasses (_UnreadVariable) at each assign
            if cls is tf.Variable and hooks.active and tf.executing_eagerly() and sites.calls_from_user_code():
                try:
                    hooks._made("variable", sites.user_site())
                except Exception as exc:  # noqa: BLE001 - a probe bug must not stop training
                    report_internal_error(exc)
            return variable

        return __call__

    def _note_optimizer(self, optimizer, site):
        """An optimizer made in eager code: if a later trace builds it, it was handed to a traced step."""
        if site is None:
            return
        key = id(optimizer)
        try:
            ref = weakref.ref(optimizer, lambda _, key=key: self.eager_optimizers.pop(key, None))
        except TypeError:
            return
        self.eager_optimizers[key] = (ref, site)

    def _handed_optimizer(self, frame):
        """(the optimizer a traced step is building, the user's line that made it) when it was made in
        eager code, before the trace: handed to a `tf.function` already traced with another one."""
        while frame is not None:
            if "/keras/src/optimizers/" in frame.f_code.co_filename.replace("\\", "/"):
                optimizer = frame.f_locals.get("self")
                found = self.eager_optimizers.get(id(optimizer)) if optimizer is not None else None
                if found is not None and found[0]() is optimizer:
                    return optimizer, found[1]
            frame = frame.f_back
        return None

    def _traced_creation(self, exc):
        """`tf.function only supports singleton tf.Variables`: which object, made at which user line.
        (TensorFlow raises `Creating variables on a non-first call`, for a later trace when the first
        made no variables, after the trace, not from `tf.Variable(...)`: this hook never sees it.)"""
        from tapecheck.probe import loud

        try:
            if "only supports singleton tf.Variables" not in str(exc):
                return
            handed = self._handed_optimizer(sys._getframe(2))
            if handed is not None:
                optimizer, made = handed
                name = type(optimizer).__name__
                here = sites.user_site()
                at = f"line {made.line}" if here is not None and here.path == made.path else made.short()
                self.notes.note(exc, loud.Explanation(
                    site=here, code="TAP409", cause="optimizer-built-in-later-trace",
                    message=f"this `tf.function` was traced before with another optimizer; the `{name}` it is "
                            f"given now (made at {at}) makes its variables at its first update, in this "
                            "new trace, and TensorFlow allows variables only on a `tf.function`'s first trace, "
                            "so it raises ValueError",
                    hint="Make a new `tf.function` for each optimizer (define the step inside a function that "
                         f"returns it, and call that once per phase), or build the `{name}` before the step first "
                         "runs with it: `optimizer.build(model.trainable_variables)`.",
                ))
                return
            kind, where = _traced_kind(sys._getframe(2))
            self.notes.note(exc, loud.Explanation(
                site=sites.user_site(), code="TAP402", cause=f"{kind}-created-in-step",
                message=f"a new {kind} is made here at every call of {where}: {WHY[kind]}; "
                        "TensorFlow allows variables only on the first trace, so it raises ValueError",
                hint=WHERE_TO[kind] if "compile" not in where else
                f"{WHERE_TO[kind]} A loss given to `compile()` runs inside `fit`'s traced step: "
                "make its state outside the function.",
            ))
        except Exception as error:  # noqa: BLE001 - a probe bug must not change the program's error
            report_internal_error(error)

    def _made(self, kind, site):
        if site is None:
            return
        update, batch = self.updates.count, self.batches
        with self.lock:
            record = self.sites.get((site.path, site.line, kind))
            if record is None:
                self.sites[(site.path, site.line, kind)] = SiteRecord(update, batch)
                return
            updates, batches = update - record.last_update, batch - record.last_batch
            per_step = updates <= MAX_UPDATES_BETWEEN and batches <= MAX_BATCHES_BETWEEN and updates + batches >= 1
            record.last_update, record.last_batch = update, batch
            record.made += 1
            if not per_step:
                return
            count = 1 if record.reported else record.made  # the first report counts the earlier objects too
            record.reported = True
        self.collector.add(
            site, "TAP402", f"{kind}-created-in-step",
            f"a new {kind} is made here at every training step: {WHY[kind]}",
            WHERE_TO[kind], count=count,
        )


def _traced_kind(frame):
    """(kind, where) of a variable made in traced code, from the library frames above it."""
    kind, where = None, "this `tf.function`"
    while frame is not None:
        path = frame.f_code.co_filename.replace("\\", "/")
        if kind is None and sites.is_user_file(frame.f_code.co_filename):
            kind = "variable"
        elif kind is None and "/keras/src/optimizers/" in path:
            kind = "optimizer"
        elif kind is None and "/keras/src/metrics/" in path:
            kind = "metric"
        if path.endswith("trainers/compile_utils.py"):
            where = "the loss given to `compile()` (traced by `fit`)"
            break
        if path.endswith("backend/tensorflow/trainer.py"):
            where = "the step `fit` traces"
            break
        frame = frame.f_back
    return kind or "variable", where


def _root_init(cls):
    """The class at the top of `cls`'s hierarchy that defines `__init__` (every constructor ends there)."""
    return [klass for klass in cls.__mro__ if "__init__" in klass.__dict__ and klass is not object][-1]


def _constructor_site(obj):
    """The user's line that constructed `obj`: the first frame above its `__init__` chain.

    Subclass `__init__`s (a user's own metric) are part of the chain; an object
    made by Keras or TensorFlow themselves (compile, fit, deserialization) has
    no user frame there and gives None.
    """
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_name == "__init__" and frame.f_locals.get("self") is obj:
        frame = frame.f_back
    if frame is None or not sites.is_user_file(frame.f_code.co_filename):
        return None
    return sites.frame_site(frame)

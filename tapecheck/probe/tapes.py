"""Hooks on the real `tf.GradientTape` class.

`__init__` notes who made the tape (user code, or TensorFlow/Keras itself, whose
tapes are not reported) and where; `__enter__`/`__exit__` note the tensor-id
counter so a target made after the block can be told apart; `watch` keeps ids;
`gradient`/`jacobian`/`batch_jacobian` count calls, catch reuse before TF
raises, and diagnose None results. Everything is kept by id and forgotten
once the tape has died (see `lifetimes`): no tape or tensor is ever held.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading

from tensorflow.python.eager import backprop
from tensorflow.python.framework import ops
from tensorflow.python.ops.unconnected_gradients import UnconnectedGradients
from tensorflow.python.util import nest

from tapecheck.probe import derived, diagnose, firststep, loud, sites
from tapecheck.probe.lifetimes import Lifetimes
from tapecheck.probe.report import report_internal_error

GradientTape = backprop.GradientTape
_KERAS_TRAINER = os.path.join("keras", "src", "backend", "tensorflow", "trainer.py")

REUSE_HINT = "Make the tape with `persistent=True` (and `del tape` after the last call), or record a new tape."


class TapeInfo:
    __slots__ = (
        "cut_frames",
        "enter_uid",
        "exit_uid",
        "first_call",
        "fit",
        "grad_calls",
        "losses_read",
        "means",
        "ops",
        "penalties",
        "persistent",
        "ref",
        "site",
        "untrained_calls",
        "user",
        "watch_vars",
        "watch_sites",
        "watched_ids",
    )

    def __init__(self, site, persistent, watch_vars, user):
        self.ref = None  # weakref to the tape, from `Lifetimes.add`
        self.site = site
        self.persistent = persistent
        self.watch_vars = watch_vars
        self.user = user
        self.enter_uid = None
        self.exit_uid = None
        self.watched_ids: set[int] = set()
        self.watch_sites: dict[int, object] = {}  # tensor id -> the user's line of its `watch` (the first)
        self.grad_calls = 0
        self.first_call = None
        self.ops = None  # op records of one armed eager recording (see optrace)
        self.untrained_calls = None  # models run in inference mode while recording (see training)
        self.losses_read = None  # weakrefs to layers whose `losses` were read while recording (see penalties)
        self.penalties = None  # weakrefs to layers that called `add_loss` while recording (see penalties)
        self.means = None  # `Mean` ops of one armed eager recording in a replica (see replicas)
        self.cut_frames = None  # user frames of each cutting op of one armed eager recording (see firststep)
        self.fit = False  # the tape Keras's `fit` records its own `train_step` on


class TapeHooks:
    def __init__(self, collector, variable_causes, origins=None):
        self.collector = collector
        self.variable_causes = variable_causes  # shared with the optimizer hook
        self.origins = origins  # gradient -> its source, for the optimizer hook (TAP401)
        self.gradient_listeners = []  # told (info, sources) after each user `gradient` call
        self.target_listeners = []  # told (info, target, sources, site) after each user `gradient` call
        self.enter_listeners = []  # told (info) when a user tape's `with` block opens
        self.exit_listeners = []  # ... and when it closes
        self.extras = []  # hooks installed with these: TAP105 (penalties), TAP601 (replicas)
        self.infos: dict[int, TapeInfo] = {}
        self.lifetimes = Lifetimes(self.infos)
        self.local = threading.local()
        self.active = True
        self.tracer = firststep.FirstStepTrace()  # also watches the first recording of each tape line
        self.located: dict[tuple, tuple] = {}  # (gradient site, cause, sources) -> (op label, op site)
        self.notes = None  # loud.Notes: what an exception passing through `gradient` meant
        self.last_none = None  # (gradient site, finding keys, source names) of the last None gradient

    # -- state -------------------------------------------------------------
    def _stack(self) -> list:
        stack = getattr(self.local, "stack", None)
        if stack is None:
            stack = self.local.stack = []
        return stack

    def _busy(self) -> bool:
        return getattr(self.local, "busy", 0) > 0

    def _forget_dead(self):
        """Drop the tapes that died; report a persistent one that was asked only once."""
        for info in self.lifetimes.sweep():
            if info.user and info.persistent and info.grad_calls == 1:
                self._single_use(info)

    def _single_use(self, info):
        line = info.first_call.line if info.first_call else "?"
        self.collector.add(
            info.site, "TAP202", "persistent-single-use",
            f"persistent tape is asked for gradients only once (line {line}): "
            "it held every intermediate tensor for nothing",
            "Drop `persistent=True`, or `del tape` as soon as the last gradient is taken.",
        )

    def finish(self):
        """At the probe's end: report persistent tapes still alive, then let go of all."""
        import gc

        self.tracer.close()
        for extra in self.extras:
            finish = getattr(extra, "finish", None)
            if finish is not None:
                finish()
        derived.forget()
        gc.collect()  # tapes only held by reference cycles (jacobian's pfor makes some) are not alive
        self._forget_dead()
        self.active = False
        self.lifetimes.close()
        for info in list(self.infos.values()):
            if not (info.user and info.persistent and info.ref() is not None):
                continue
            if info.grad_calls == 1:
                self._single_use(info)
            else:
                self.collector.add(
                    info.site, "TAP202", "persistent-alive-at-exit",
                    "persistent tape is still alive when the run ends: "
                    "it keeps every recorded tensor alive until then",
                    "`del tape` after its last gradient call.",
                )
        self.infos.clear()

    def info_for(self, tape) -> TapeInfo | None:
        return self.infos.get(id(tape))

    def recording_user_tapes(self) -> list[TapeInfo]:
        """The user's tapes inside their `with` block on this thread, recording now."""
        found = []
        for ref in self._stack():
            tape = ref()
            info = self.infos.get(id(tape)) if tape is not None else None
            if info is not None and info.user and getattr(tape, "_recording", False):
                found.append(info)
        return found

    @staticmethod
    def _tell(listeners, info):
        for listener in listeners:
            try:
                listener(info)
            except Exception as exc:  # noqa: BLE001 - a probe bug must not stop training
                report_internal_error(exc)

    # -- wrappers ----------------------------------------------------------
    def install(self, patcher):
        patcher.wrap(GradientTape, "__init__", self._wrap_init)
        patcher.wrap(GradientTape, "__enter__", self._wrap_enter)
        patcher.wrap(GradientTape, "__exit__", self._wrap_exit)
        patcher.wrap(GradientTape, "watch", self._wrap_watch)
        patcher.wrap(GradientTape, "gradient", self._wrap_call("gradient"))
        patcher.wrap(GradientTape, "jacobian", self._wrap_call("jacobian"))
        patcher.wrap(GradientTape, "batch_jacobian", self._wrap_call("batch_jacobian"))
        from tapecheck.probe.penalties import PenaltyHooks
        from tapecheck.probe.replicas import ReplicaLossHooks

        self.extras = [PenaltyHooks(self.collector, self), ReplicaLossHooks(self.collector, self)]
        for extra in self.extras:
            extra.install(patcher)

    def _wrap_init(self, original):
        hooks = self

        def __init__(self, persistent=False, watch_accessed_variables=True, *args, **kwargs):
            __tracebackhide__ = True  # pytest: the probe's frame is not the user's
            original(self, persistent, watch_accessed_variables, *args, **kwargs)
            if not hooks.active:
                return
            hooks._forget_dead()  # before this tape takes the id of one that died
            user = not hooks._busy() and sites.calls_from_user_code()
            info = TapeInfo(sites.user_site() if user else None, bool(persistent),
                            bool(watch_accessed_variables), user)
            if not user:
                caller = sys._getframe(1).f_code
                info.fit = caller.co_name == "train_step" and caller.co_filename.endswith(_KERAS_TRAINER)
            info.ref = hooks.lifetimes.add(self, info)

        return __init__

    def _wrap_enter(self, original):
        hooks = self

        def __enter__(self):
            __tracebackhide__ = True  # pytest: the probe's frame is not the user's
            result = original(self)
            info = hooks.infos.get(id(self)) if hooks.active else None
            if info is not None:
                info.enter_uid = ops.uid()
                hooks._stack().append(info.ref)
                if info.user:
                    hooks.tracer.begin(info)
                    hooks._tell(hooks.enter_listeners, info)
            return result

        return __enter__

    def _wrap_exit(self, original):
        hooks = self

        def __exit__(self, typ, value, traceback):
            __tracebackhide__ = True  # pytest: the probe's frame is not the user's
            info = hooks.infos.get(id(self)) if hooks.active else None
            if info is not None:
                info.exit_uid = ops.uid()
                hooks.tracer.end(info)
                if info.user:
                    hooks._tell(hooks.exit_listeners, info)
                stack = hooks._stack()
                if info.ref in stack:
                    stack.remove(info.ref)
            return original(self, typ, value, traceback)

        return __exit__

    def _wrap_watch(self, original):
        hooks = self

        def watch(self, tensor):
            __tracebackhide__ = True  # pytest: the probe's frame is not the user's
            result = original(self, tensor)
            info = hooks.infos.get(id(self)) if hooks.active else None
            if info is not None and info.user:
                site = None
                for t in nest.flatten(tensor, expand_composites=True):
                    try:
                        tid = ops.tensor_id(t)  # the tensor-id counter: never reused
                    except (AttributeError, TypeError):
                        continue  # a variable: the tape lists those itself (watched_variables)
                    info.watched_ids.add(tid)
                    if tid not in info.watch_sites and len(info.watch_sites) < 64:
                        site = site or sites.user_site()
                        info.watch_sites[tid] = site
            return result

        return watch

    def _wrap_call(self, kind):
        hooks = self

        def make(original):
            def call(self, target, sources, *args, **kwargs):
                __tracebackhide__ = True  # pytest: the probe's frame is not the user's
                info = hooks.infos.get(id(self)) if hooks.active and not hooks._busy() else None
                if info is not None and info.fit and kind == "gradient":
                    result = original(self, target, sources, *args, **kwargs)
                    hooks._fit_gradient(target, sources, result)
                    return result
                if info is None or not info.user:
                    return original(self, target, sources, *args, **kwargs)
                site = sites.user_site()
                if self._tape is None and not self._persistent and info.grad_calls:
                    key = hooks._reused(info, site, kind)
                    try:
                        return original(self, target, sources, *args, **kwargs)  # raises, unchanged
                    except RuntimeError as exc:
                        hooks._note(exc, loud.Explanation(keys=(key,)))
                        raise
                info.grad_calls += 1
                if info.first_call is None:
                    info.first_call = site
                handle = self._tape  # kept only for this call, to ask what it recorded
                hooks.local.busy = getattr(hooks.local, "busy", 0) + 1
                try:
                    result = original(self, target, sources, *args, **kwargs)
                except AttributeError as exc:
                    hooks._failed(exc, info, site)
                    raise
                finally:
                    hooks.local.busy -= 1
                if kind == "gradient" and hooks.origins is not None:
                    try:
                        hooks.origins.remember(site, sources, result)
                    except Exception as exc:  # noqa: BLE001 - a probe bug must not stop training
                        report_internal_error(exc)
                for listener in hooks.gradient_listeners:
                    try:
                        listener(info, sources)
                    except Exception as exc:  # noqa: BLE001 - a probe bug must not stop training
                        report_internal_error(exc)
                if kind == "gradient" and hooks.target_listeners:
                    hooks.local.busy += 1
                    try:
                        for listener in hooks.target_listeners:
                            try:
                                listener(info, target, sources, site)
                            except Exception as exc:  # noqa: BLE001 - a probe bug must not stop training
                                report_internal_error(exc)
                    finally:
                        hooks.local.busy -= 1
                position = 1 if kind == "gradient" else 0  # where unconnected_gradients sits in *args
                unconnected = kwargs.get("unconnected_gradients", args[position] if len(args) > position else None)
                if unconnected in (None, UnconnectedGradients.NONE, "none") and handle is not None:
                    flat = nest.flatten(result)
                    if any(g is None for g in flat):
                        hooks.local.busy += 1
                        try:
                            hooks._diagnose(self, info, handle, target, sources, flat, site)
                        except Exception as exc:  # noqa: BLE001 - a probe bug must not stop training
                            report_internal_error(exc)
                        finally:
                            hooks.local.busy -= 1
                return result

            return call

        return make

    # -- reports -----------------------------------------------------------
    def _reused(self, info, site, kind):
        made = f"line {info.site.line}" if info.site else "an earlier line"
        first = info.first_call
        if first is None:
            first = "an earlier call"
        elif site is not None and first.path == site.path:
            first = f"line {first.line}"
        else:
            first = first.short()
        return self.collector.add(
            site, "TAP201", "tape-reused",
            f"non-persistent tape (made at {made}) already computed gradients at {first}: "
            f"this second `{kind}` call raises RuntimeError",
            REUSE_HINT, first_call=[first],
        )

    def _note(self, exc, explanation):
        if self.notes is not None:
            try:
                self.notes.note(exc, explanation)
            except Exception as error:  # noqa: BLE001 - a probe bug must not change the program's error
                report_internal_error(error)

    def _failed(self, exc, info, site):
        """`gradient` raised AttributeError: a NumPy target (`'numpy.float32' object has no attribute '_id'`)."""
        try:
            obj = getattr(exc, "obj", None)
            if getattr(exc, "name", None) != "_id" or type(obj).__module__ != "numpy":
                return
            target_text, _ = diagnose.call_texts(site)
            made = diagnose.assigned_at(site, target_text, info.site.line if info.site else None)
            name = f"`{target_text}`" if target_text else "the target"
            origin = f", made at line {made[0]} by `{made[1]}`" if made and made[1] else (
                f", made at line {made[0]}" if made else "")
            self._note(exc, loud.Explanation(
                site=site, code="TAP104", cause="numpy-target",
                message=f"the gradient target {name} is a NumPy `{type(obj).__name__}`, not a tensor{origin}: "
                        "it was computed outside TensorFlow (`.numpy()`, `np.` calls or `float()` on the way), "
                        "so the tape cannot differentiate it",
                hint="Keep the loss in TensorFlow ops (`tf.reduce_mean`, `tf.square`...): no `.numpy()` or NumPy.",
                details={"target_made_at": made[0]} if made else {},
            ))
        except Exception as error:  # noqa: BLE001 - a probe bug must not change the program's error
            report_internal_error(error)

    def _diagnose(self, tape, info, handle, target, sources, flat_grads, site):
        self.local.info = info  # per thread: replicas of a MirroredStrategy diagnose at once
        self.local.keys = keys = []
        try:
            self._diagnose_sources(tape, info, handle, target, sources, flat_grads, site)
        finally:
            self.local.info = None
            self.local.keys = None
        names = [n for _, n in self._none_names(sources, flat_grads, site)]
        self.last_none = (site, tuple(k for k in keys if k is not None), names)

    @staticmethod
    def _none_names(sources, flat_grads, site):
        flat_sources = nest.flatten(sources)
        _, texts = diagnose.call_texts(site)
        if texts is None or len(texts) != len(flat_sources):
            texts = [None] * len(flat_sources)
        return [(s, diagnose.describe(s, t)) for s, t, g in zip(flat_sources, texts, flat_grads) if g is None]

    def _diagnose_sources(self, tape, info, handle, target, sources, flat_grads, site):
        flat_sources = nest.flatten(sources)
        if len(flat_sources) != len(flat_grads):
            return
        targets = [t for t in nest.flatten(target) if t is not None]
        target_text, source_texts = diagnose.call_texts(site)
        if source_texts is not None and len(source_texts) != len(flat_sources):
            source_texts = None  # a nested structure: name by variable path instead
        names = {id(s): source_texts[i] for i, s in enumerate(flat_sources)} if source_texts else {}
        others = [ref() for ref in self._stack()]
        others = [t for t in others if t is not None and t is not tape]
        target_name = target_text or ", ".join(diagnose.describe(t) for t in targets) or "None"
        self.local.target = target_text
        none_sources = [s for s, g in zip(flat_sources, flat_grads) if g is None]
        target_recorded = bool(targets) and diagnose.recorded(tape, handle, targets, others)
        target_cause = None if target_recorded else diagnose.target_cause(info, targets, target_name)
        if target_cause is not None:
            # Integer, or made before/after the block: every gradient is None, whatever else holds.
            self._add(site, target_cause, none_sources, names)
        watched_handles = {id(v.handle) for v in tape.watched_variables()}
        cut = []
        for source in none_sources:
            cause = diagnose.source_cause(info, tape, handle, source, watched_handles, others, targets,
                                          names.get(id(source)))
            if cause.cause == "variable-not-read":
                cause = derived.cause_for(source, site) or cause  # read only in build/__init__: TAP106
            if cause.cause not in ("no-differentiable-path", "not-connected"):
                self._add(site, cause, [source], names)  # its own cause, even if the target is fixed
            elif target_cause is None and not target_recorded:
                cut.append(source)  # the source reached the tape; the target did not
            elif target_cause is None:
                self._add(site, cause, [source], names)
        if cut:
            self._add(site, diagnose.target_cut_off(info, targets, target_name, cut), cut, names)

    def _fit_gradient(self, target, sources, result):
        """Keras's `fit` tape: when every gradient is None, the cut in the loss or model it ran (TAP104)."""
        try:
            flat = nest.flatten(result)
            if not flat or any(g is not None for g in flat):
                return
            flat_sources = nest.flatten(sources)
            targets = [t for t in nest.flatten(target) if t is not None]
            if len(flat_sources) != len(flat) or not targets:
                return
            self.local.busy = getattr(self.local, "busy", 0) + 1
            try:
                site = sites.user_site()  # the user's `fit` line
                cause, extra = firststep.fit_cause(targets, flat_sources, site)
                if cause.at is not None:
                    extra["fit_call"] = site.short() if site else "?"
                self._report(site, cause, flat_sources, {}, extra)
            finally:
                self.local.busy -= 1
        except Exception as exc:  # noqa: BLE001 - a probe bug must not stop training
            report_internal_error(exc)

    def _report(self, site, cause, sources, given_names, extra):
        """Record a cause already placed (the `fit` tape's): at its op's line, else at `site`."""
        names = [diagnose.describe(s, given_names.get(id(s))) for s in sources]
        extra = dict(extra)
        if cause.op:
            extra["op"] = cause.op
        where = cause.at if cause.at is not None else site
        if cause.code is not None and where is not None:
            self.collector.add(where, cause.code, cause.cause, cause.text, cause.hint, names=names, **extra)
        for source in sources:
            if diagnose.is_variable(source):
                self.variable_causes.remember(source, (where, cause))

    def _eager_location(self, site, cause, names):
        """TAP104 in eager code: use the op found on an armed step, or arm the tape's line."""
        if cause.code != "TAP104" or cause.cause == "integer-target" or site is None:
            return cause
        key = (site.path, site.line, cause.cause, tuple(names))
        if cause.at is not None:
            if key not in self.located:
                self.located[key] = (cause.op, cause.at)
                # the earlier steps were recorded at the gradient call: they belong at the op's line
                self.collector.move(site, cause.at, cause.code, cause.cause, cause.text)
            return cause
        known = self.located.get(key)
        if known is not None:
            return dataclasses.replace(cause, op=known[0], at=known[1], certain=True)
        info = getattr(self.local, "info", None)
        if info is not None and info.site is not None:
            self.tracer.arm(info.site)
        return cause

    def _add(self, site, cause, sources, given_names):
        names = [diagnose.describe(s, given_names.get(id(s))) for s in sources]
        info = getattr(self.local, "info", None)
        known = site is not None and cause.at is None and \
            (site.path, site.line, cause.cause, tuple(names)) in self.located  # placed on an earlier step
        cause, placed = (cause, {}) if known else \
            firststep.placed(cause, site, info, getattr(self.local, "target", "") or "")
        cause = self._eager_location(site, cause, names)
        extra = {"op": cause.op} if cause.op else {}
        extra.update(placed)
        if cause.at is not None:  # the op that cut the path, in traced code: report at its line
            extra["gradient_call"] = site.short() if site else "?"
            site = cause.at
        elif cause.code == "TAP104" and cause.cause != "integer-target":
            info = getattr(self.local, "info", None)
            made = info.site if info is not None else None
            if made is not None and site is not None and made.path == site.path:
                extra["locate"] = (made.line, site.line)
                extra["drop_unlocated"] = not cause.certain
            elif not cause.certain:
                cause = diagnose.Cause(None, "not-connected", "", "")
        if cause.code is not None:
            key = self.collector.add(site, cause.code, cause.cause, cause.text, cause.hint, names=names, **extra)
            keys = getattr(self.local, "keys", None)
            if keys is not None:
                keys.append(key)
        for source in sources:
            if diagnose.is_variable(source):
                self.variable_causes.remember(source, (site, cause))

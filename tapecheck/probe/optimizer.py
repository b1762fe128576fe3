"""Hook on Keras optimizers: which variables `apply_gradients` skips, and why.

Keras 3 warns once ("Gradients do not exist for variables ...") and skips
them. When the probe diagnosed those None gradients at `tape.gradient`, the
skip is added to that finding (same code, same cause); otherwise the skipped
variables are reported at the user's line that led to the update.
"""

from __future__ import annotations

import threading
import weakref

from tapecheck.probe import diagnose, sites
from tapecheck.probe.patching import subclasses
from tapecheck.probe.report import report_internal_error


class VariableCauses:
    """Variable -> (site, cause) of its last None gradient, by weak reference only."""

    LIMIT = 10000

    def __init__(self):
        self._causes: dict[int, tuple] = {}
        self._lock = threading.Lock()

    def remember(self, variable, value):
        try:
            ref = weakref.ref(variable)
        except TypeError:
            return
        with self._lock:
            if len(self._causes) >= self.LIMIT:
                self._causes.clear()
            self._causes[id(variable)] = (ref, value)

    def lookup(self, variable):
        with self._lock:
            entry = self._causes.get(id(variable))
        if entry is None or entry[0]() is not variable:
            return None
        return entry[1]

    def clear(self):
        with self._lock:
            self._causes.clear()


class OptimizerHooks:
    def __init__(self, collector, variable_causes, origins=None, updates=None):
        self.collector = collector
        self.causes = variable_causes
        self.origins = origins  # filled by the tape hook: which source each gradient is for
        self.updates = updates  # counted here, read by the state hook (TAP402): the probe's steps
        self.local = threading.local()
        self.active = True

    def install(self, patcher):
        import keras

        base = keras.optimizers.Optimizer
        for cls in _with_subclasses(base):
            patcher.wrap(cls, "apply", self._wrap_apply)

    def _wrap_apply(self, original):
        hooks = self

        def apply(self, grads, trainable_variables=None, *args, **kwargs):
            if hooks.updates is not None and not getattr(hooks.local, "busy", False):
                hooks.updates.count += 1
            if hooks.active and not getattr(hooks.local, "busy", False) and isinstance(grads, (list, tuple)):
                variables = trainable_variables
                if variables is None:
                    variables = getattr(self, "_trainable_variables", None) or []
                if hooks.origins is not None and isinstance(variables, (list, tuple)):
                    try:
                        hooks._mismatched(grads, variables)
                    except Exception as exc:  # noqa: BLE001 - a probe bug must not stop training
                        report_internal_error(exc)
                if isinstance(variables, (list, tuple)) and len(variables) == len(grads):
                    skipped = [v for g, v in zip(grads, variables) if g is None]
                    if skipped:
                        try:
                            hooks._skipped(skipped, all(g is None for g in grads))
                        except Exception as exc:  # noqa: BLE001 - a probe bug must not stop training
                            report_internal_error(exc)
            hooks.local.busy = True
            try:
                return original(self, grads, trainable_variables, *args, **kwargs)
            finally:
                hooks.local.busy = False

        return apply

    def _mismatched(self, grads, variables):
        site = None
        for call, why, paired in self.origins.mismatches(grads, variables):
            site = site or sites.user_site()
            asked = ", ".join(call.names())
            given = ", ".join(call.name_of(v) for v in paired)
            self.collector.add(
                site, "TAP401", "grads-vars-mismatch",
                f"the gradients computed for `[{asked}]` ({_where(call.site, site)}) are applied to `[{given}]`, {why}: "
                "zip pairs them by position",
                "Apply the gradients to the list they were computed for.",
                gradient_call=[call.site.short() if call.site is not None else "?"],
            )

    def _skipped(self, variables, all_none):
        site = sites.user_site()
        where = site.short() if site else "?"
        unknown = []
        for variable in variables:
            known = self.causes.lookup(variable)
            if known is None:
                unknown.append(variable)
                continue
            cause_site, cause = known
            if cause.code is None:
                continue  # the target does not depend on it: Keras's skip is right
            # Same record as the gradient-time diagnosis: say the update skipped it.
            self.collector.add(cause_site, cause.code, cause.cause, cause.text, cause.hint, count=0,
                               skipped_by_apply_gradients=[diagnose.describe(variable)], applied_at=[where])
        if unknown:
            code = "TAP101" if all_none else "TAP102"
            what = "every gradient is None" if all_none else "Keras skips these variables"
            self.collector.add(
                site, code, "apply-gradients-none",
                "the optimizer got None gradients for {names}: " + what
                + " (the tape that computed them was not seen by the probe: made by Keras, or before the probe started)",
                "Check that the loss is computed inside the tape from these variables.",
                names=[diagnose.describe(v) for v in unknown],
            )


def _where(gradient_site, site) -> str:
    """The gradient call as `line N` when it is in the same file, else `path:N`."""
    if gradient_site is None:
        return "an earlier call"
    if site is not None and gradient_site.path == site.path:
        return f"line {gradient_site.line}"
    return gradient_site.short()


def _with_subclasses(cls):
    seen = subclasses(cls)
    # The base optimizer defines `apply`; Keras's own subclasses may override it.
    for klass in list(seen):
        for parent in klass.__mro__:
            if "apply" in parent.__dict__ and parent not in seen:
                seen.append(parent)
    return seen

"""Hook on Keras optimizers: which variables `apply_gradients` skips, and why.

Keras 3 warns once ("Gradients do not exist for variables ...") and skips
them. When the probe diagnosed those None gradients at `tape.gradient`, the
skip is added to that finding (same code, same cause); otherwise the skipped
variables are reported at the user's line that led to the update.
"""

from __future__ import annotations

import re
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
        self.notes = None  # loud.Notes: what an exception leaving `apply` meant
        self.built_by: dict[int, tuple] = {}  # id(optimizer) -> (weakref, site, variable names) of its first apply
        self.learning = None  # nolearning.NoLearning: zero gradients and variables that never move

    def finish(self):
        learning, self.learning = self.learning, None
        if learning is not None:
            learning.finish()

    def install(self, patcher):
        import keras

        base = keras.optimizers.Optimizer
        for cls in _with_subclasses(base):
            patcher.wrap(cls, "apply", self._wrap_apply)

    def _wrap_apply(self, original):
        hooks = self

        def apply(self, grads, trainable_variables=None, *args, **kwargs):
            __tracebackhide__ = True  # pytest: the probe's frame is not the user's
            if hooks.updates is not None and not getattr(hooks.local, "busy", False):
                hooks.updates.count += 1
            variables, touched = None, ()
            if hooks.active and not getattr(hooks.local, "busy", False) and isinstance(grads, (list, tuple)):
                variables = trainable_variables
                if variables is None:
                    variables = getattr(self, "_trainable_variables", None) or []
                if not getattr(self, "built", True):
                    hooks._first_build(self, variables)
                if hooks.origins is not None and isinstance(variables, (list, tuple)):
                    try:
                        hooks._mismatched(grads, variables)
                    except Exception as exc:  # noqa: BLE001 - a probe bug must not stop training
                        report_internal_error(exc)
                if isinstance(variables, (list, tuple)) and len(variables) == len(grads):
                    if hooks.learning is not None:
                        hooks.learning.seen(self, grads, variables)  # nothing to do on the usual step
                    skipped = [v for g, v in zip(grads, variables) if g is None]
                    if skipped:
                        try:
                            touched = hooks._skipped(skipped, all(g is None for g in grads))
                        except Exception as exc:  # noqa: BLE001 - a probe bug must not stop training
                            report_internal_error(exc)
            busy = getattr(hooks.local, "busy", False)
            hooks.local.busy = True
            try:
                return original(self, grads, trainable_variables, *args, **kwargs)
            except Exception as exc:
                if variables is not None and not busy:
                    hooks._failed(exc, self, grads, variables, touched)
                raise
            finally:
                hooks.local.busy = busy

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

    def _first_build(self, optimizer, variables):
        """The first `apply` builds the optimizer for these variables: remember where, for TAP404."""
        try:
            ref = weakref.ref(optimizer)
            if len(self.built_by) > 64:
                self.built_by = {k: v for k, v in self.built_by.items() if v[0]() is not None}
            names = [diagnose.describe(v) for v in variables[:4]] if isinstance(variables, (list, tuple)) else []
            self.built_by[id(optimizer)] = (ref, sites.user_site(), names, len(variables))
        except Exception as exc:  # noqa: BLE001 - a probe bug must not stop training
            report_internal_error(exc)

    def _failed(self, exc, optimizer, grads, variables, touched):
        """`apply` raised: note what it means (the finding is made if the error ends the run)."""
        if self.notes is None:
            return
        try:
            explanation = self._explanation(exc, optimizer, grads, variables, touched)
            if explanation is not None:
                self.notes.note(exc, explanation)
        except Exception as error:  # noqa: BLE001 - a probe bug must not change the program's error
            report_internal_error(error)

    def _explanation(self, exc, optimizer, grads, variables, touched):
        from tapecheck.probe import loud

        text = loud.core_message(exc)
        whole = str(exc)  # eager Keras prints the variable's value inside the message: it spans lines
        if "No gradients provided for any variable" in text:
            fallback = loud.Explanation(
                site=sites.user_site(), code="TAP104", cause="no-gradients",
                message="every gradient given to the optimizer is None: the loss does not reach {names} "
                        "through any differentiable op the probe saw",
                hint="Compute the loss inside the tape from the model's output, with TensorFlow ops only.",
                names=tuple(diagnose.describe(v) for v in variables),
            )
            return loud.Explanation(keys=tuple(touched), details={"fallback": fallback})
        if "Unknown variable" in whole and "originally built with" in whole:
            return self._shared(optimizer, whole)
        if "shape" in text.lower() and isinstance(grads, (list, tuple)) and isinstance(variables, (list, tuple)):
            return self._shapes(grads, variables)
        return None

    def _shared(self, optimizer, text):
        from tapecheck.probe import loud

        site = sites.user_site()
        unknown = re.search(r"path=([^,>\s]+)", text)
        unknown = unknown.group(1) if unknown else "a variable"
        kind = type(optimizer).__name__
        built = self.built_by.get(id(optimizer))
        if built is not None and built[0]() is optimizer:
            _, first_site, names, count = built
            shown = ", ".join(f"`{n}`" for n in names) + (f" and {count - len(names)} more" if count > len(names) else "")
            first = f"by its first `apply_gradients` ({_where(first_site, site)}, {shown})"
        else:
            first = "before this call (`fit` builds the model's optimizer for the variables it knows then)"
        return loud.Explanation(
            site=site, code="TAP404", cause="optimizer-shared",
            message=f"this `{kind}` optimizer was built for the variables given {first}; here it gets `{unknown}`, "
                    "which is not one of them: one optimizer is shared by two sets of variables (a GAN's two nets, "
                    "two models), and Keras 3 raises ValueError",
            hint="Make one optimizer per set of variables (e.g. `generator_optimizer` and `discriminator_optimizer`).",
            details={"optimizer": kind, "unknown_variable": unknown},
        )

    def _shapes(self, grads, variables):
        from tapecheck.probe import loud

        wrong = []
        for grad, variable in zip(grads, variables):
            g_shape, v_shape = getattr(grad, "shape", None), getattr(variable, "shape", None)
            if grad is None or g_shape is None or v_shape is None:
                continue
            if tuple(g_shape) != tuple(v_shape):
                wrong.append((tuple(g_shape), diagnose.describe(variable), tuple(v_shape)))
        if not wrong:
            return None
        pairs = "; ".join(f"a gradient of shape {g} is paired with `{name}` of shape {v}" for g, name, v in wrong[:3])
        more = f" and {len(wrong) - 3} more" if len(wrong) > 3 else ""
        return loud.Explanation(
            site=sites.user_site(), code="TAP401", cause="grads-vars-mismatch",
            message=f"the gradients are applied to other variables than they were computed for: {pairs}{more}; "
                    "the optimizer's update raises on the shapes",
            hint="Apply the gradients to the list they were computed for.",
            details={"mismatched_shapes": [f"{g} -> {name} {v}" for g, name, v in wrong]},
        )

    def _skipped(self, variables, all_none):
        """Report the variables `apply` skips; the keys of the findings made or extended."""
        site = sites.user_site()
        where = site.short() if site else "?"
        unknown, touched = [], []
        for variable in variables:
            known = self.causes.lookup(variable)
            if known is None:
                unknown.append(variable)
                continue
            cause_site, cause = known
            if cause.code is None:
                continue  # the target does not depend on it: Keras's skip is right
            # Same record as the gradient-time diagnosis: say the update skipped it.
            key = self.collector.add(cause_site, cause.code, cause.cause, cause.text, cause.hint, count=0,
                                     skipped_by_apply_gradients=[diagnose.describe(variable)], applied_at=[where])
            if key not in touched:
                touched.append(key)
        if unknown:
            code = "TAP101" if all_none else "TAP102"
            what = "every gradient is None" if all_none else "Keras skips these variables"
            touched.append(self.collector.add(
                site, code, "apply-gradients-none",
                "the optimizer got None gradients for {names}: " + what
                + " (the tape that computed them was not seen by the probe: made by Keras, or before the probe started)",
                "Check that the loss is computed inside the tape from these variables.",
                names=[diagnose.describe(v) for v in unknown],
            ))
        return touched


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

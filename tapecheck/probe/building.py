"""TAP109 and TAP303 at run time: Keras bookkeeping that a built (or never built) model misses.

TAP109 regularizer-set-after-build: Keras 3 hands a layer's `kernel_regularizer` /
`kernel_constraint` to `add_weight` when the layer builds, and reads the penalty from
the weight (`kernel.regularizer`) ever after. Setting the layer's attribute once it is
built changes nothing. Seen through `Operation._setattr_hook`, the per-attribute hook
Keras's own `Layer.__setattr__` already calls (replaced, not wrapped: no extra frame on
the attributes Keras sets each step, `_called` and `built`; two string compares each).
When a user line sets a `*_regularizer` / `*_constraint` (never `activity_regularizer`,
which Keras reads at every call) on a built layer whose weight of that name carries
another one, the weight is copied once. At the probe's end the finding is made only if
that weight was trained since (its value moved): a model rebuilt from its config after
the assignment (the fix) leaves the old weights untouched, so it stays silent.

TAP303 dunder-call-override: a `keras.Model` subclass of the program whose own
`__call__` (a plain function, not a decorated one) replaces Keras's. Seen when such a
model is constructed (`Model.__init__`, once per model); then, at each user
`gradient` call while such models wait (none wait in a program without them: one
truth test per step), a model whose variables are among the sources and that is still
not built (`model.built` is False) has been trained without Keras's `__call__` ever
running: reported at its `def __call__` line, once. A `__call__` that hands over to
`super().__call__` builds the model on its first call, and is never reported.

Nothing here changes a value: the hooks pass every attribute and argument through.
"""

from __future__ import annotations

import sys
import types
import weakref

from tapecheck.probe import sites
from tapecheck.probe.report import report_internal_error

REGULARIZER_CODE, REGULARIZER_CAUSE = "TAP109", "regularizer-set-after-build"
CALL_CODE, CALL_CAUSE = "TAP303", "dunder-call-override"


class BuildHooks:
    def __init__(self, collector, tapes):
        self.collector = collector
        self.tapes = tapes
        self.active = True
        self.late = {}  # (id(variable), attribute) -> [variable, copy, site, layer name, weight name, attribute, model]
        self.waiting = []  # [weakref to a model, its class's own __call__]
        self.kinds = {}  # class -> its own replacing __call__ (or None)

    def install(self, patcher):
        import keras
        from keras.src.ops.operation import Operation

        original = Operation.__dict__.get("_setattr_hook")
        if isinstance(original, types.FunctionType) and _passes_through(original):
            patcher.set(Operation, "_setattr_hook", self._make_setattr_hook(original))
        patcher.wrap(keras.Model, "__init__", self._wrap_model_init)
        self.tapes.target_listeners.append(self._gradient_taken)

    # -- TAP109 --------------------------------------------------------------
    def _make_setattr_hook(self, original):
        hooks = self

        def _setattr_hook(self, name, value):
            if (name[-12:] == "_regularizer" or name[-11:] == "_constraint") and hooks.active:
                hooks._attribute_set(self, name, value)
            return name, value

        _setattr_hook.__name__ = original.__name__
        _setattr_hook.__qualname__ = original.__qualname__
        _setattr_hook.__module__ = original.__module__
        _setattr_hook.__doc__ = original.__doc__
        _setattr_hook.__tapecheck_original__ = original
        return _setattr_hook

    def _attribute_set(self, layer, name, value):
        try:
            if value is None or name == "activity_regularizer" or getattr(layer, "built", False) is not True:
                return
            # _setattr_hook <- Layer.__setattr__ <- the line that set it (setattr() adds no frame)
            frame = sys._getframe(3)
            if not sites.is_user_file(frame.f_code.co_filename):
                return
            kind = "regularizer" if name.endswith("_regularizer") else "constraint"
            weight_name, variable = _weight_for(layer, name[: -len(kind) - 1])
            if variable is None or getattr(variable, kind, None) is value:
                return
            key = (id(variable), name)
            if key in self.late:
                return
            import numpy as np

            copy = np.array(variable.numpy(), copy=True)
            self.late[key] = [variable, copy, sites.frame_site(frame), layer.name, weight_name, name]
        except Exception as exc:  # noqa: BLE001 - a probe bug must not stop training
            report_internal_error(exc)

    def _report_late(self):
        import numpy as np

        for variable, copy, site, layer, weight, attribute in self.late.values():
            try:
                now = variable.numpy()
            except Exception:  # noqa: BLE001 - a variable gone with its device: nothing to compare
                continue
            if now.shape == copy.shape and np.array_equal(now, copy):
                continue  # never trained since: a model rebuilt from its config, or not trained at all
            kind = attribute.rsplit("_", 1)[1]
            what = "penalty" if kind == "regularizer" else "constraint"
            self.collector.add(
                site, REGULARIZER_CODE, REGULARIZER_CAUSE,
                f"`{attribute}` is set here on the already built layer(s) {{names}}: their `{weight}` was made "
                f"before, without it, and Keras 3 reads the {kind} from the weight (`{weight}.{kind}` is still "
                f"`None`), so training then moved these weights without the {what}"
                + (" (`model.losses` gets nothing from it)" if kind == "regularizer" else ""),
                f"Pass `{attribute}=` when the layer is made, or rebuild the model after setting the attributes: "
                "`weights = model.get_weights(); model = keras.Model.from_config(model.get_config()); "
                "model.set_weights(weights)` (then compile it again).",
                names=[layer],
            )
        self.late.clear()

    # -- TAP303 --------------------------------------------------------------
    def _wrap_model_init(self, original):
        hooks = self

        def __init__(self, *args, **kwargs):
            __tracebackhide__ = True  # pytest: the probe's frame is not the user's
            original(self, *args, **kwargs)
            if hooks.active:
                hooks._model_made(self)

        return __init__

    def _model_made(self, model):
        try:
            cls = type(model)
            if cls not in self.kinds:
                self.kinds[cls] = _own_call(cls)
            call = self.kinds[cls]
            if call is not None and not any(ref() is model for ref, _ in self.waiting):
                self.waiting.append((weakref.ref(model), call))
        except Exception as exc:  # noqa: BLE001 - a probe bug must not stop training
            report_internal_error(exc)

    def _gradient_taken(self, info, target, sources, site):
        if not self.waiting:
            return
        from tensorflow.python.util import nest

        wanted = {id(s) for s in nest.flatten(sources)}
        still = []
        for ref, call in self.waiting:
            model = ref()
            if model is None or getattr(model, "built", True) is not False:
                continue  # gone, or built (a `__call__` that hands over to Keras's)
            trained = [v for v in model.trainable_variables if id(v) in wanted]
            if not trained:
                still.append((ref, call))
                continue
            self._report_call(model, call, len(model.trainable_variables), site)
        self.waiting = still

    def _report_call(self, model, call, count, gradient_site):
        from tapecheck.probe import names
        from tapecheck.probe.penalties import _root

        code = call.__code__
        site = sites.Site(code.co_filename, code.co_firstlineno, 0)
        cls = call.__qualname__.rsplit(".", 1)[0]  # the class whose `def __call__` it is (a base of the model's)
        # the program's name: the root of the sources at the `gradient` call (`self.q_net.trainable_variables`)
        name = (_root(gradient_site) if gradient_site is not None else None) or names.user_name(model)
        where = (f"line {gradient_site.line}" if gradient_site is not None and gradient_site.path == site.path
                 else gradient_site.short() if gradient_site is not None else "a `gradient` call")
        self.collector.add(
            site, CALL_CODE, CALL_CAUSE,
            f"`{cls}.__call__` (line {site.line}) replaces Keras's `Model.__call__` and never hands over to it: "
            f"`{name}` is trained (its {count} variables are differentiated at {where}) but is still not "
            f"built (`{name}.built` is False), so `save_weights` refuses it, `fit`/`evaluate` would call it "
            "without `training=True`, and `call` raises `NotImplementedError`",
            f"Rename `{cls}.__call__` to `call` (calling `{name}(...)` still works, through Keras's `__call__`), "
            "or end it with `return super().__call__(...)` and put the forward pass in `call`.",
            subject=cls,
        )

    # -- teardown ------------------------------------------------------------
    def finish(self):
        try:
            self._report_late()
        except Exception as exc:  # noqa: BLE001 - a probe bug must not hide the program's findings
            report_internal_error(exc)
        finally:
            self.late.clear()
            self.waiting = []
            self.kinds.clear()


def _passes_through(function) -> bool:
    """Keras's own `_setattr_hook` is `return name, value`: replacing it by one that also looks is safe."""
    code = function.__code__
    return code.co_argcount == 3 and code.co_code == _identity_hook.__code__.co_code


def _identity_hook(self, name, value):
    """Can be overridden for per backend post build actions."""
    return name, value


def _weight_for(layer, prefix: str):
    """The weight `kernel_regularizer` is for: `layer.kernel` (or `layer.depthwise_kernel`), a Keras variable.

    Read from the layer's own `__dict__` (no property runs): `Dense` keeps its kernel as `_kernel`.
    """
    import keras

    own = vars(layer)
    for weight in (prefix, prefix + "_kernel"):
        for attribute in (weight, "_" + weight):
            value = own.get(attribute)
            if isinstance(value, keras.Variable):
                return weight, value
    return prefix, None


def _own_call(cls):
    """The program's own `__call__` that replaces `Model.__call__` for `cls`, or None."""
    for klass in cls.__mro__:
        module = getattr(klass, "__module__", "") or ""
        if module.split(".")[0] in ("keras", "tensorflow", "tf_keras"):
            return None  # Keras's own `__call__` comes first: the model is called through it
        call = klass.__dict__.get("__call__")
        if call is None:
            continue
        if not isinstance(call, types.FunctionType) or hasattr(call, "__wrapped__"):
            return None  # decorated (a tf.function for SavedModel signatures): left alone, as by the linter
        if not sites.is_user_file(call.__code__.co_filename):
            return None
        return call
    return None

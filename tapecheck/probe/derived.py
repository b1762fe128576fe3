"""TAP106 at run time: a layer's variables read only in `build()`/`__init__`.

A tensor computed from a layer's variables in `build()` or `__init__` (a
normalised kernel) is a constant made once, outside any tape; `call` reuses it,
the tape never reads the variables, and their gradients are None at every step.
The tape alone sees only "this variable was never read" (TAP102). When that is
the diagnosis, this module asks which layer holds the variable (a search of the
objects referring to it, once per variable, on this rare path only) and whether
the linter's TAP106 rule flags, in that layer's class, a derived tensor made
from that attribute: if so the finding is TAP106, at the line in
`build`/`__init__` that made it. Without the static finding it stays TAP102.
"""

from __future__ import annotations

import gc
import inspect
import os
import weakref

from tapecheck.probe import diagnose, locate, sites

CODE = "TAP106"
CAUSE = "variable-derived-outside-call"
HINT = "Compute it in `call` from the variables (a local name there), so the tape records it at every step."

_owners: dict[int, tuple] = {}  # id(variable) -> (weakref to variable, weakref to layer or None, attribute)


def owner_of(variable):
    """(layer, attribute) of the Keras layer holding `variable` as `self.<attribute>`, or (None, None)."""
    known = _owners.get(id(variable))
    if known is not None and known[0]() is variable:
        layer = known[1]() if known[1] is not None else None
        return layer, known[2]
    layer, attribute = _search(variable)
    try:
        _owners[id(variable)] = (weakref.ref(variable), weakref.ref(layer) if layer is not None else None, attribute)
    except TypeError:
        pass
    return layer, attribute


def _search(variable):
    import keras

    dicts = [r for r in gc.get_referrers(variable) if type(r) is dict]
    if not dicts:
        return None, None
    wanted = {id(d) for d in dicts}
    for obj in gc.get_referrers(*dicts):
        if isinstance(obj, keras.Layer) and id(getattr(obj, "__dict__", None)) in wanted:
            for name, value in vars(obj).items():
                if value is variable and not name.startswith("_"):
                    return obj, name
    return None, None


def forget() -> None:
    _owners.clear()


def cause_for(variable, gradient_site):
    """A TAP106 `diagnose.Cause` for a variable the tape never read, or None."""
    layer, attribute = owner_of(variable)
    if layer is None:
        return None
    for cls in type(layer).__mro__:
        found = _static_finding(cls, attribute)
        if found is not None:
            path, line, target, method, read = found
            return diagnose.Cause(
                CODE, CAUSE,
                f"`{target}` is computed here from {read} in `{cls.__name__}.{method}` (layer `{layer.name}`), once, "
                f"outside any tape, and `call` reuses that constant: {_where(gradient_site, path)} never reads "
                "{names}, so their gradients are None (`apply_gradients` skips them, or raises when no variable has one)",
                HINT, at=sites.Site(path, line, 1),
            )
    return None


def _where(gradient_site, path) -> str:
    if gradient_site is None:
        return "the tape"
    if gradient_site.path == path:
        return f"the tape differentiated at line {gradient_site.line} (`gradient`)"
    return f"the tape differentiated at {gradient_site.short()}"


def _static_finding(cls, attribute):
    """(path, line, `self.x`, method) of the TAP106 lint finding in `cls` about `self.<attribute>`."""
    try:
        path = inspect.getsourcefile(cls)
        lines, first = inspect.getsourcelines(cls)
    except (OSError, TypeError):
        return None
    if not path or not sites.is_user_file(os.path.abspath(path)):
        return None
    path = os.path.abspath(path)
    last = first + len(lines) - 1
    for line, code, message, _ in locate.findings(path):  # lint's findings, once per file and mtime
        if code == CODE and first <= line <= last and f"`self.{attribute}`" in message:
            # the rule's message: "`self.kernel` is computed from `self.g`, `self.v` in `build`, once, ..."
            target = message.split("`")[1] if message.count("`") >= 2 else "the tensor"
            read = message.partition(" is computed from ")[2].partition(" in `")[0] or f"`self.{attribute}`"
            method = message.partition(" in `")[2].partition("`")[0] or "build"
            return path, line, target, method, read
    return None



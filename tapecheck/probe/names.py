"""The name the user's code holds an object by (`acc`, `self.encoder`), for messages and pasteable hints.

Keras names objects itself (`mean`, `sequential`, `dense_1`); the user's code says
`acc`, `model`, `net`. Asked only when a finding is made (never on a clean step):

1. the text of the user's line: each dotted name on it (`self.val_acc`) that
   resolves, in that line's frame, to the very object (`is`), the one used with
   the method looked for (`acc.result(` for `result`) first;
2. else the attribute or module global holding it (found through the garbage
   collector's referrers, no frame read): `self.generator` gives `generator`;
3. else Keras's own name.

A frame's locals are read only to compare identities, at the time of the call
(the frame is not kept); nothing is stored but the name.
"""

from __future__ import annotations

import linecache
import re

_DOTTED = re.compile(r"(?<![\w.])([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)")


def from_frame(obj, frame, path: str, line: int, method: str | None = None) -> str | None:
    """The dotted name on `path:line` that means `obj` in `frame` (the frame running that line)."""
    if frame is None or path.startswith("<"):
        return None
    text = linecache.getline(path, line)
    if not text:
        return None
    candidates = []
    for match in _DOTTED.finditer(text):
        name = match.group(1)
        after = text[match.end():match.end() + len(method or "") + 2]
        if method is not None and name.endswith("." + method):
            name = name[: -len(method) - 1]  # `acc.result` -> `acc`
            after = "." + method + "("
        preferred = method is not None and after.startswith("." + method + "(")
        candidates.append((not preferred, name))
    for _, name in sorted(candidates, key=lambda c: c[0]):
        if _resolves(name, frame) is obj:
            return name
    return None


def _resolves(name: str, frame):
    head, *rest = name.split(".")
    try:
        f_locals = frame.f_locals
    except Exception:  # noqa: BLE001 - a frame whose locals cannot be read: no name from it
        return None
    marker = object()
    value = f_locals.get(head, marker)
    if value is marker:
        value = frame.f_globals.get(head, marker)
    if value is marker:
        return None
    for part in rest:
        try:
            value = vars(value).get(part, marker)  # never runs a property or __getattr__
        except TypeError:
            return None
        if value is marker:
            return None
    return value


def held_as(obj) -> str | None:
    """The attribute or user module global holding `obj` (an attribute first), or None."""
    import gc

    from tapecheck.probe import sites

    own = getattr(obj, "name", None)
    found = None
    for referrer in gc.get_referrers(obj):
        if not isinstance(referrer, dict):
            continue
        module = "__builtins__" in referrer
        if module and not sites.is_user_file(referrer.get("__file__") or "<run>"):
            continue
        for key, value in list(referrer.items()):
            if value is obj and isinstance(key, str) and key.isidentifier() and not key.startswith("_") and key != own:
                if not module:
                    return key
                found = found or key
    return found


def keras_name(obj) -> str:
    name = getattr(obj, "name", None)
    return name.removesuffix(":0") if isinstance(name, str) and name else type(obj).__name__


def user_name(obj, frame=None, site=None, method: str | None = None) -> str:
    """The user's name for `obj`: its text at `site` in `frame`, else its holder's, else Keras's."""
    try:
        if frame is not None and site is not None:
            name = from_frame(obj, frame, site.path, site.line, method)
            if name:
                return name
        return held_as(obj) or keras_name(obj)
    except Exception:  # noqa: BLE001 - names are a nicety: Keras's own will do
        return keras_name(obj)

"""Swap methods on real classes and put the identical objects back.

The probe wraps methods on TensorFlow's and Keras's own classes (never a
subclass or a module attribute), so tapes and metrics made through any import
path are seen. Each original is taken from `cls.__dict__` so restoring sets the
very same object back, or deletes the attribute where the class had none.
"""

from __future__ import annotations

import functools

_MISSING = object()


def subclasses(cls: type) -> list[type]:
    """`cls` and every subclass, in discovery order (the classes whose own methods get wrapped)."""
    seen, stack = [], [cls]
    while stack:
        current = stack.pop()
        if current in seen:
            continue
        seen.append(current)
        stack.extend(current.__subclasses__())
    return seen


class Patcher:
    def __init__(self):
        self._saved: list[tuple[type, str, object]] = []
        self._patched: set[tuple[int, str]] = set()

    def wrap(self, cls: type, name: str, make_wrapper) -> bool:
        """Replace `cls.name` (defined on `cls` itself) by `make_wrapper(original)`."""
        key = (id(cls), name)
        original = cls.__dict__.get(name, _MISSING)
        if key in self._patched or original is _MISSING:
            return False
        func = original
        if isinstance(original, (classmethod, staticmethod)):
            return False  # not needed by the probe; keep the patcher simple
        wrapper = make_wrapper(func)
        functools.update_wrapper(wrapper, func)  # keeps __module__: autograph leaves it alone
        wrapper.__tapecheck_original__ = func
        setattr(cls, name, wrapper)
        self._saved.append((cls, name, original))
        self._patched.add(key)
        return True

    def set(self, cls: type, name: str, value) -> None:
        """Set an attribute that may be inherited (restored by deleting it)."""
        self._saved.append((cls, name, cls.__dict__.get(name, _MISSING)))
        self._patched.add((id(cls), name))
        setattr(cls, name, value)

    def restore(self) -> None:
        # Reverse order, and never stop half way: every class gets its objects back.
        errors = []
        while self._saved:
            cls, name, original = self._saved.pop()
            try:
                if original is _MISSING:
                    delattr(cls, name)
                else:
                    setattr(cls, name, original)
            except Exception as exc:  # noqa: BLE001 - a class that refuses setattr; restore the rest first
                errors.append(exc)
        self._patched.clear()
        if errors:
            raise errors[0]

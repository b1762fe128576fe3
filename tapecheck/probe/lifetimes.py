"""Objects kept by id and forgotten when they die, with no Python code run at their death.

The garbage collector runs finalizers wherever it happens to run. A `weakref.finalize`
callback is Python code, so a KeyboardInterrupt can land inside it; Python then prints
"Exception ignored" and drops the interrupt: the user's Ctrl-C does nothing. Here the
weakref callback is `list.append`, a builtin that runs no bytecode and so cannot take
an interrupt, and the dead are collected by `drain()` on the probe's own paths.
"""

from __future__ import annotations

import weakref


class Lifetimes:
    def __init__(self):
        self._dead: list = []  # weakrefs whose object died, appended by the collector
        self._payloads: dict[int, tuple] = {}  # id(ref) -> (ref, payload); keeps each ref alive

    def track(self, obj, payload) -> weakref.ref:
        """A weakref to `obj`; `payload` comes out of `drain()` once `obj` has died."""
        ref = weakref.ref(obj, self._dead.append)
        self._payloads[id(ref)] = (ref, payload)
        return ref

    def drain(self) -> list:
        """The payloads of the objects that died since the last drain."""
        payloads = []
        while self._dead:
            try:
                ref = self._dead.pop()  # atomic: another thread may drain at the same time
            except IndexError:
                break
            entry = self._payloads.pop(id(ref), None)
            if entry is not None:
                payloads.append(entry[1])
        return payloads

    def close(self):
        """Stop tracking: the refs go, so their callbacks never fire again."""
        self._payloads.clear()
        self._dead.clear()

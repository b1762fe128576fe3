"""A table of objects by id whose entries go when the objects die, with no Python code run at their death.

The garbage collector runs finalizers wherever it happens to run. A `weakref.finalize`
callback is Python code, so a KeyboardInterrupt can land inside it; Python then prints
"Exception ignored" and drops the interrupt: the user's Ctrl-C does nothing. Here the
weakref callback is `list.append`, a builtin that runs no bytecode and so cannot take
an interrupt, and the dead are swept by `sweep()` on the probe's own paths.
"""

from __future__ import annotations

import weakref


class Lifetimes:
    def __init__(self, table: dict):
        self.table = table  # id(obj) -> entry, the owner's own dict
        self._dead: list = []  # weakrefs whose object died, appended by the collector
        self._tracked: dict[int, tuple] = {}  # id(ref) -> (ref, key, entry); keeps each ref alive

    def add(self, obj, entry) -> weakref.ref:
        """`table[id(obj)] = entry` until `obj` dies; returns a weakref to `obj`."""
        key = id(obj)
        ref = weakref.ref(obj, self._dead.append)
        self._tracked[id(ref)] = (ref, key, entry)
        self.table[key] = entry
        return ref

    def sweep(self) -> list:
        """Remove the entries of the objects that died since the last sweep; return them.
        Call it before adding: a new object may take the id of one that died."""
        gone = []
        while self._dead:
            try:
                ref = self._dead.pop()  # atomic: another thread may sweep at the same time
            except IndexError:
                break
            tracked = self._tracked.pop(id(ref), None)
            if tracked is None:
                continue
            _, key, entry = tracked
            if self.table.get(key) is entry:
                del self.table[key]
            gone.append(entry)
        return gone

    def close(self):
        """Stop tracking: the refs go, so their callbacks never fire again. The table stays."""
        self._tracked.clear()
        self._dead.clear()

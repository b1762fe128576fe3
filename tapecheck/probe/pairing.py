"""TAP401 at run time: gradients applied to variables they were not computed for.

`tape.gradient(target, sources)` returns one gradient per source, in order.
The tape hook remembers, for each gradient tensor, the call and the position
it came from (the tensor-id counter, never reused, and weak references to the
sources: no tensor is held). The optimizer hook then checks each pair that
`apply` receives: a gradient paired with another variable than its own source
is a mismatch. Gradients the probe did not see made (clipped, averaged, from
Keras's own tape) are not checked; a shorter variable list whose pairs are all
right (a slice on purpose, or zip stopping early) is left alone too.
"""

from __future__ import annotations

import collections
import threading
import weakref

from tensorflow.python.util import nest

from tapecheck.probe import diagnose


class GradientCall:
    __slots__ = ("grad_ids", "ids", "refs", "site")

    def __init__(self, site, sources, grad_ids):
        self.site = site
        self.ids = tuple(id(s) for s in sources)
        self.refs = tuple(_weak(s) for s in sources)
        self.grad_ids = grad_ids

    def names(self) -> list[str]:
        """The sources as written at the call (`[slope, intercept]`), else their variable paths."""
        _, texts = diagnose.call_texts(self.site)
        if texts is None or len(texts) != len(self.refs):
            texts = [None] * len(self.refs)
        alive = [ref() if ref is not None else None for ref in self.refs]
        return [diagnose.describe(obj, text) if obj is not None or text else "?" for obj, text in zip(alive, texts)]

    def name_of(self, variable) -> str:
        """A variable applied to: its name at this call when it is one of the sources."""
        if id(variable) in self.ids:
            return self.names()[self.ids.index(id(variable))]
        return diagnose.describe(variable)


def _weak(obj):
    try:
        return weakref.ref(obj)
    except TypeError:
        return None


def _tensor_id(tensor):
    return getattr(tensor, "_id", None)  # what ops.tensor_id reads; IndexedSlices have none


class GradientOrigins:
    # Gradient calls remembered: the update follows its gradients within a step
    # (a GAN makes two), so a few suffice, and memory stays flat over a long run.
    RECENT = 16

    def __init__(self):
        self._origin: dict[int, tuple[GradientCall, tuple[int, ...]]] = {}
        self._calls: collections.deque[GradientCall] = collections.deque()
        self._lock = threading.Lock()

    def remember(self, site, sources, result) -> None:
        flat_sources, flat_grads = nest.flatten(sources), nest.flatten(result)
        if len(flat_sources) != len(flat_grads):
            return
        grad_ids = [_tensor_id(grad) for grad in flat_grads]
        call = GradientCall(site, flat_sources, tuple(grad_ids))
        with self._lock:
            self._calls.append(call)
            if len(self._calls) > self.RECENT:
                self._forget(self._calls.popleft())
            for position, key in enumerate(grad_ids):
                if key is None:
                    continue
                known = self._origin.get(key)
                # one tensor can be the gradient of two sources (`a + b`): keep both positions
                positions = known[1] + (position,) if known is not None and known[0] is call else (position,)
                self._origin[key] = (call, positions)

    def _forget(self, call) -> None:
        for key in call.grad_ids:
            if key is not None and self._origin.get(key, (None,))[0] is call:
                del self._origin[key]

    def clear(self) -> None:
        with self._lock:
            self._origin.clear()
            self._calls.clear()

    def mismatches(self, grads, variables):
        """(gradient call, why, applied variables) for each call whose gradients are paired wrongly."""
        applied: dict[int, tuple[GradientCall, list]] = {}
        wrong: set[int] = set()
        with self._lock:
            for grad, variable in zip(grads, variables):
                entry = self._origin.get(_tensor_id(grad)) if grad is not None else None
                if entry is None:
                    continue
                call, positions = entry
                applied.setdefault(id(call), (call, []))[1].append(variable)
                if id(variable) not in {call.ids[p] for p in positions}:
                    wrong.add(id(call))
        for key in wrong:
            call, paired = applied[key]
            yield call, _why(call, paired), paired


def _why(call, paired) -> str:
    own = set(call.ids)
    if len(paired) != len(call.ids):
        return f"a list of {len(paired)} variables, not {len(call.ids)}"
    if all(id(v) in own for v in paired):
        return "the same variables in another order"
    return "other variables"

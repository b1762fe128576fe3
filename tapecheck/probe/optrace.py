"""Name the op that cut a gradient path in eager code, from the next step.

An eager tensor keeps no record of the op that made it, so the first time a
cut is diagnosed the probe cannot say which op it was. It then arms the tape's
creation line: the next time a tape is recorded there (training loops repeat
their step), an op callback notes, for that one recording, each op's type, its
input and output tensor ids and the user's line. The diagnosis walks those
back from the target. Only ids, strings and ints are kept, and only for one
armed recording at a time; nothing is watched otherwise.
"""

from __future__ import annotations

import os
import sys
import threading

from tensorflow.python.framework import op_callbacks, ops

from tapecheck.probe import sites

# Ops whose outputs are static facts about a tensor (a shape, a size): integer, but no cut.
SHAPE_OPS = frozenset({"Shape", "ShapeN", "Size", "Rank", "VariableShape", "TensorListLength", "TensorArraySizeV3"})

NO_GRADIENT = {
    "StopGradient", "PreventGradient", "Round", "Rint", "Floor", "Ceil", "Sign",
    "ArgMax", "ArgMin", "FloorDiv", "FloorMod", "Equal", "NotEqual", "Less",
    "LessEqual", "Greater", "GreaterEqual", "OneHot",
}


class EagerOpTrace:
    def __init__(self):
        self.armed: set[tuple] = set()  # (path, line) of tape creations to watch once
        self.local = threading.local()
        self._lock = threading.Lock()
        self._users = 0

    def arm(self, site) -> None:
        if site is not None:
            self.armed.add((site.path, site.line))

    def begin(self, info) -> None:
        """At the tape's `__enter__`: record this recording's ops if its line is armed."""
        key = (info.site.path, info.site.line) if info.site else None
        if key not in self.armed or getattr(self.local, "info", None) is not None:
            return
        self.armed.discard(key)
        info.ops = {}
        self.local.info = info
        with self._lock:
            if self._users == 0:
                op_callbacks.add_op_callback(self._callback)
            self._users += 1

    def end(self, info) -> None:
        """At the tape's `__exit__`."""
        if getattr(self.local, "info", None) is not info:
            return
        self.local.info = None
        with self._lock:
            self._users -= 1
            if self._users == 0:
                op_callbacks.remove_op_callback(self._callback)

    def close(self) -> None:
        with self._lock:
            if self._users:
                op_callbacks.remove_op_callback(self._callback)
            self._users = 0
        self.armed.clear()

    def _callback(self, op_type, inputs, attrs, outputs, op_name=None, graph=None):
        info = getattr(self.local, "info", None)
        if info is None or graph is not None or info.ops is None:
            return
        floating_in = any(t.dtype.is_floating for t in inputs)
        int_out = (bool(outputs) and op_type not in SHAPE_OPS
                   and all(t.dtype.is_integer or t.dtype.is_bool for t in outputs))
        cut = floating_in and (op_type in NO_GRADIENT or int_out)
        # For an op without a gradient only: every user frame that made it (the call path from the tape).
        frames = user_frames(sys._getframe(1)) if cut else None
        site = sites.Site(*frames[-1][:2], 1) if frames else sites.user_site()
        record = (op_type, tuple(ops.tensor_id(t) for t in inputs), floating_in, int_out, site)
        for t in outputs:
            info.ops[ops.tensor_id(t)] = record
        cut_frames = getattr(info, "cut_frames", None)
        if frames and cut_frames is not None and site not in cut_frames:
            cut_frames[site] = frames


def user_frames(frame) -> list[tuple]:
    """(path, line, function) of each user frame, outermost first."""
    found = []
    while frame is not None:
        filename = frame.f_code.co_filename
        if sites.is_user_file(filename):
            path = os.path.abspath(filename) if not filename.startswith("<") else filename
            found.append((path, frame.f_lineno, frame.f_code.co_name))
        frame = frame.f_back
    found.reverse()
    return found


def _cuts(record) -> bool:
    op_type, _, floating_in, int_out, _ = record
    return floating_in and (op_type in NO_GRADIENT or int_out)


def eager_cut(info, targets, source_id):
    """(label, site) of the op that cut the path to the target (from `source_id`, or from anything)."""
    recorded = getattr(info, "ops", None)
    if not recorded:
        return None, None
    queue = [ops.tensor_id(t) for t in targets]
    consumer: dict[int, int] = {}  # tensor id -> the id of an output of the op that consumed it
    seen = set()
    while queue:
        tid = queue.pop(0)
        if tid in seen:
            continue
        seen.add(tid)
        record = recorded.get(tid)
        if record is None:
            continue
        if source_id is None and _cuts(record):
            return _label(record)
        for input_id in record[1]:
            consumer.setdefault(input_id, tid)
            if source_id is not None and input_id == source_id:
                return _first_cut(tid, consumer, recorded)
            queue.append(input_id)
    return None, None


def made_outside_tensorflow(info, targets) -> bool:
    """On an armed recording: no op in the block produced the target (NumPy or Python made it)."""
    recorded = getattr(info, "ops", None)
    return bool(recorded) and all(ops.tensor_id(t) not in recorded for t in targets)


def _first_cut(tid, consumer, recorded):
    while tid is not None:
        record = recorded.get(tid)
        if record is not None and _cuts(record):
            return _label(record)
        tid = consumer.get(tid)
    return None, None


def _label(record):
    op_type, _, _, _, site = record
    where = f" at {site.short().rsplit('/', 1)[-1]}" if site else ""
    return f"`{op_type}` op{where}", site

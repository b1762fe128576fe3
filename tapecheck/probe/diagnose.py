"""Why is this gradient None? Answers built from what the tape recorded.

Asked only when a gradient came back None, so the normal step pays nothing.
Causes and the codes they are reported under (the linter's vocabulary):

  TAP101 target-after-block    the target was computed after the `with` block
  TAP101 target-before-block   ... or before it
  TAP104 target-cut-off        the target was computed in the block but cut off
                               by an op without gradient (argmax, int cast,
                               a numpy round-trip)
  TAP104 integer-target        the target has an integer dtype
  TAP104 no-differentiable-path  the source reaches the tape, but an op on the
                               way to the target has no gradient (round,
                               stop_gradient, argmax, int cast)
  TAP102 variable-not-read     the source variable was never read while the
                               tape recorded
  TAP103 tensor-not-watched    the source tensor was never `watch`ed
  TAP103 variable-not-watched  `watch_accessed_variables=False` and no `watch`
  TAP103 integer-source        the source has an integer dtype
  TAP103 non-trainable-source  the source is a non-trainable variable (BatchNorm
                               moving statistics in a cached `model.variables`)
  TAP103 watched-after-use     `tape.watch(x)` comes after the line that used `x`
  (none) not-connected         traced code, no path at all from the source to
                               the target: the target does not depend on it
                               (a bias under a derivative); not a mistake

In eager code tensors keep no producer, so a per-source cut cannot be told
from no dependence at all; it is reported only where the static pass finds
the TAP104 cut inside the tape's lines (see report.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from tensorflow.python.eager import record
from tensorflow.python.eager import tape as tape_lib
from tensorflow.python.framework import dtypes, ops

from tapecheck.probe import optrace, sites

# Ops whose registered gradient returns None (so `get_gradient_function` cannot tell).
_NO_GRADIENT_TYPES = optrace.NO_GRADIENT
_MAX_OPS = 20000  # a walk of the traced graph never runs away on huge models


@dataclass
class Cause:
    code: str
    cause: str
    text: str  # the message, with `{names}` for the sources
    hint: str
    op: str | None = None
    at: object = None  # the op's own user line (traced code), reported there
    certain: bool = True  # False: eager, the op is unknown; reported only if the static pass locates it
    frames: list | None = None  # (path, line, function) of the user frames that made the op, outermost first


def is_variable(obj) -> bool:
    return hasattr(obj, "handle") and hasattr(obj, "assign")


def is_integer(obj) -> bool:
    try:
        dtype = dtypes.as_dtype(obj.dtype)
    except (AttributeError, TypeError):
        return False
    return dtype.is_integer or dtype.is_bool


def describe(obj, given: str | None = None) -> str:
    """A short name: the text at the call site, the variable's path, or dtype and shape."""
    if given:
        return given
    if is_variable(obj):
        name = getattr(obj, "path", None) or getattr(obj, "name", "variable")
        return name.removesuffix(":0")
    dtype = getattr(getattr(obj, "dtype", None), "name", "")
    shape = getattr(obj, "shape", None)
    if shape is None:
        return type(obj).__name__
    return f"{dtype} tensor of shape {tuple(shape)}".strip()


_trees: dict[str, object] = {}


def call_texts(site) -> tuple[str | None, list[str] | None]:
    """The source text of the target and of each source at the `gradient` call.

    Read from the user's file (parsed once per file, only when a gradient was
    None), never from frame locals: reading `f_locals` would keep the user's
    tensors and tapes alive for as long as the frame runs.
    """
    if site is None or site.path.startswith("<"):
        return None, None
    known = _texts.get((site.path, site.line))
    if known is None:
        known = _texts[(site.path, site.line)] = _call_texts(site)
    return known


_texts: dict[tuple, tuple] = {}  # (path, line) -> the texts at that call: asked at every step with a None


def _call_texts(site):
    import ast
    import linecache

    tree = _trees.get(site.path)
    if tree is None:
        try:
            tree = ast.parse("".join(linecache.getlines(site.path)))
        except (SyntaxError, ValueError):
            tree = False
        _trees[site.path] = tree
    if not tree:
        return None, None
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and node.lineno <= site.line <= (node.end_lineno or node.lineno)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("gradient", "jacobian", "batch_jacobian") and len(node.args) >= 2):
            target = ast.unparse(node.args[0])
            sources = node.args[1]
            if isinstance(sources, (ast.List, ast.Tuple)):
                return target, [ast.unparse(e) for e in sources.elts]
            return target, None if not isinstance(sources, ast.Name) else [sources.id]
    return None, None


def sources_text(site) -> str | None:
    """The source text of the `sources` argument of the `gradient` call at `site` (`model.trainable_variables`)."""
    import ast

    if site is None or site.path.startswith("<"):
        return None
    call_texts(site)  # parses the file once
    tree = _trees.get(site.path)
    if not tree:
        return None
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and node.lineno <= site.line <= (node.end_lineno or node.lineno)
                and isinstance(node.func, ast.Attribute) and node.func.attr == "gradient"):
            sources = node.args[1] if len(node.args) >= 2 else next(
                (k.value for k in node.keywords if k.arg == "sources"), None)
            return ast.unparse(sources) if sources is not None else None
    return None


def assigned_at(site, name, first_line=None):
    """(line, callee) of the last assignment to `name` before the `gradient` call at `site`.

    Searched from `first_line` (the tape's `with` line) on; `callee` is the
    function the value came from (`mse_numpy` in `loss = mse_numpy(y, p)`), or None.
    """
    import ast

    if not name or not name.isidentifier() or site is None:
        return None
    call_texts(site)  # parses the file once
    tree = _trees.get(site.path)
    if not tree:
        return None
    low = first_line if first_line is not None and first_line <= site.line else 1
    best = None
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and low <= node.lineno < site.line:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                if best is None or node.lineno > best.lineno:
                    best = node
    if best is None:
        return None
    value = best.value
    callee = ast.unparse(value.func) if isinstance(value, ast.Call) else None
    return best.lineno, callee


def recorded(tape, handle, tensors, other_tapes) -> bool:
    """Whether `handle` (the tape's C++ tape, kept alive by the caller) recorded any of `tensors`.

    Other tapes active on this thread are set aside for the question, so an
    outer tape's record does not answer for this one.
    """
    removed = [t._tape for t in other_tapes if t is not tape and t._recording and t._tape is not None]
    own_pushed = not (tape._recording and tape._tape is handle)
    for other in removed:
        tape_lib.pop_tape(other)
    if own_pushed:
        tape_lib.push_tape(handle)
    try:
        return bool(record.should_record_backprop(tensors))
    finally:
        if own_pushed:
            tape_lib.pop_tape(handle)
        for other in reversed(removed):
            tape_lib.push_tape(other)


def block_text(info) -> str:
    if info.site is None:
        return "the tape's `with` block"
    return f"the `with` block of the tape made at line {info.site.line}"


def target_cause(info, targets, names) -> Cause | None:
    """Why the tape did not record the target, when the target alone explains it."""
    if targets and all(is_integer(t) for t in targets):
        return Cause("TAP104", "integer-target",
                     f"the gradient target `{names}` has an integer dtype: every gradient is None",
                     "Compute the loss in a float dtype; an int cast or argmax on the way has no gradient.")
    ids = [ops.tensor_id(t) for t in targets if _has_id(t)]
    where = block_text(info)
    if ids and info.exit_uid is not None and min(ids) > info.exit_uid:
        return Cause("TAP101", "target-after-block",
                     f"the gradient target `{names}` is computed after {where} closed: "
                     "the tape never recorded it, so every gradient is None",
                     "Compute the loss inside the `with tf.GradientTape()` block.")
    if ids and info.enter_uid is not None and max(ids) < info.enter_uid:
        return Cause("TAP101", "target-before-block",
                     f"the gradient target `{names}` is computed before {where} opened: "
                     "the tape never recorded it, so every gradient is None",
                     "Compute the loss inside the `with tf.GradientTape()` block.")
    return None


def target_cut_off(info, targets, names, sources=()) -> Cause:
    """The target did not reach the tape: the op that cut it, first on a path from one of `sources`."""
    op, at, frames = None, None, None
    for source in sources[:8]:  # a cut on the sources' path, not one on the labels' (`y_true > 0.5`)
        op, at, frames = graph_cut_frames(targets, source)
        if op is None and targets and _is_eager(targets[0]):
            op, at = optrace.eager_cut(info, targets, _source_id(source))
        if op is not None:
            break
    if op is None:
        op, at, frames = graph_cut_frames(targets, None)
    if op is None and targets and _is_eager(targets[0]):
        op, at = optrace.eager_cut(info, targets, None)
        if op is None and optrace.made_outside_tensorflow(info, targets):
            return Cause("TAP104", "target-cut-off",
                         f"the gradient target `{names}` was not made by any TensorFlow op in the block: "
                         "it comes from a NumPy or Python value (a `.numpy()` round trip), so every gradient is None",
                         "Keep the loss in TensorFlow ops: no `.numpy()`, `np.` calls or `float()` on the way.")
        if op is None and getattr(info, "ops", None):  # this recording was watched op by op: no cut among its ops
            return Cause("TAP104", "target-cut-off",
                         f"the gradient target `{names}` is made by TensorFlow ops in the block, but none of the ops "
                         "that lead to it reads the sources, and none of them lacks a gradient (the probe watched "
                         "every op of this recording): the model's output reaches it only through a value TensorFlow "
                         "did not make (a NumPy array, `.numpy()`, `float()`), so every gradient is None",
                         "Keep the loss in TensorFlow ops: no `.numpy()`, `np.` calls or `float()` on the way.")
    found = f" ({op})" if op else " (argmax, an int cast or a numpy round-trip)"
    return Cause("TAP104", "target-cut-off",
                 f"the gradient target `{names}` is cut off from the tape by a non-differentiable op{found}: "
                 "every gradient is None",
                 "Keep the loss differentiable: no argmax, int casts or `.numpy()` between the model and the loss.",
                 op, at, frames=frames)


def source_cause(info, tape, handle, source, watched_handles, other_tapes, targets, text=None) -> Cause:
    where = block_text(info)
    if is_integer(source):
        return Cause("TAP103", "integer-source",
                     "source {names} has an integer dtype: tapes watch only floating point tensors, so its gradient is None",
                     "Cast the source to a float dtype before watching it.")
    if is_variable(source):
        if id(source.handle) not in watched_handles and getattr(source, "trainable", True) is False and info.watch_vars:
            return Cause("TAP103", "non-trainable-source",
                         "source {names} is a non-trainable variable (a BatchNormalization moving statistic, a "
                         "`trainable=False` weight): the tape watches only trainable variables, so its gradient is "
                         "None and the optimizer skips it",
                         "Ask for `model.trainable_variables` (not `model.variables` or `model.weights`, nor a list "
                         "cached from them).")
        if id(source.handle) not in watched_handles:
            if not info.watch_vars:
                return Cause("TAP103", "variable-not-watched",
                             "source {names} is never watched: the tape was made with "
                             "watch_accessed_variables=False, so its gradient is None",
                             "Call `tape.watch(variable)` inside the `with` block.")
            return Cause("TAP102", "variable-not-read",
                         f"source {{names}} is never read while {where} recorded: "
                         "the tape never saw it, so its gradient is None",
                         "Use the variable (call the model or layer) inside the `with` block.")
    elif not ((_has_id(source) and ops.tensor_id(source) in info.watched_ids)
              or recorded(tape, handle, [source], other_tapes)):
        return Cause("TAP103", "tensor-not-watched",
                     f"source {{names}} is a tensor never watched by the tape made at line "
                     f"{info.site.line if info.site else '?'}: its gradient is None",
                     "Call `tape.watch(x)` inside the `with` block, before using it.")
    late = None if is_variable(source) else watched_after_use(info, source, text)
    if late is not None:
        watch_line, used = late
        return Cause("TAP103", "watched-after-use",
                     f"source {{names}} is watched at line {watch_line}, after line {used} already used it "
                     f"(`{_line_text(info.site.path, used)}`): the tape records only what follows the `watch`, so "
                     "its gradient is None",
                     f"Move `{_line_text(info.site.path, watch_line)}` up, first in the `with` block, before line "
                     f"{used} uses `{text}`.")
    op, at, frames = graph_cut_frames(targets, source)
    if op is None and targets and _is_eager(targets[0]):
        op, at = optrace.eager_cut(info, targets, ops.tensor_id(source.handle if is_variable(source) else source))
    elif op is None and targets:
        # Traced: the graph shows no cut, so the target simply does not depend on
        # the source (a bias under a derivative, an unused head). Not a mistake.
        return Cause(None, "not-connected", "", "")
    found = f" ({op})" if op else " (round, stop_gradient, argmax, an int cast or a numpy round-trip)"
    return Cause("TAP104", "no-differentiable-path",
                 f"the target does not depend on source {{names}} through differentiable ops{found}: its gradient is None",
                 "Remove the non-differentiable op between this source and the loss, or drop the source.",
                 op, at, certain=op is not None, frames=frames)


def watched_after_use(info, source, text):
    """(the `watch` line, the earlier block line that used the source's name), or None."""
    import linecache
    import re

    if not text or not text.isidentifier() or info.site is None or not _has_id(source):
        return None
    try:
        watch = info.watch_sites.get(ops.tensor_id(source))
    except (AttributeError, TypeError):
        return None
    if watch is None or watch.path != info.site.path or watch.line <= info.site.line:
        return None
    name = re.compile(rf"(?<![\w.]){re.escape(text)}\b(?!\s*=[^=])")
    for number in range(info.site.line + 1, watch.line):
        line = linecache.getline(watch.path, number).split("#", 1)[0]
        if name.search(line) and ".watch(" not in line:
            return watch.line, number
    return None


def _line_text(path, number) -> str:
    import linecache

    return linecache.getline(path, number).strip()


def _source_id(source):
    try:
        return ops.tensor_id(source.handle if is_variable(source) else source)
    except (AttributeError, TypeError):
        return None


def _is_eager(tensor) -> bool:
    try:
        tensor.op  # noqa: B018 - graph tensors have a producer op, eager tensors raise
    except AttributeError:
        return True
    return False


def _has_id(t) -> bool:
    return hasattr(t, "_id") or hasattr(t, "graph")


def _no_gradient(op) -> bool:
    if op.type in _NO_GRADIENT_TYPES:
        return True
    try:
        if ops.get_gradient_function(op) is None:
            return True
    except LookupError:
        return False
    return False


def _cuts(op) -> bool:
    """An op that drops a floating-point value's gradient (constants and int-only ops do not count)."""
    if op.type in optrace.SHAPE_OPS:
        return False
    floating_in = any(i.dtype.is_floating for i in op.inputs)
    return floating_in and (_no_gradient(op) or _float_in_int_out(op))


def _float_in_int_out(op) -> bool:
    outs = [o.dtype for o in op.outputs]
    ins = [i.dtype for i in op.inputs]
    return bool(outs) and all(d.is_integer or d.is_bool for d in outs) and any(d.is_floating for d in ins)


def _op_label(op):
    """`ArgMax` op `ArgMax` at train.py:12, and that user site (from the op's creation stack)."""
    label = f"`{op.type}` op `{op.name}`"
    try:
        frames = op.traceback
    except AttributeError:
        frames = None
    for frame in reversed(list(frames or [])):
        if sites.is_user_file(frame.filename):
            site = sites.Site(os.path.abspath(frame.filename), frame.lineno, 1)
            return f"{label} at {os.path.basename(frame.filename)}:{frame.lineno}", site
    return label, None


def graph_cut_frames(targets, source):
    """Inside a traced function: the op that cuts `source` (or anything) off the target.

    Walks the graph back from the target; returns (label, user site, user frames of the op's
    creation stack, outermost first) of the op closest to the target that has no gradient.
    Eager tensors keep no producer: (None, None, None)."""
    found = _graph_cut_op(targets, source)
    if found is None:
        return None, None, None

    label, site = _op_label(found)
    return label, site, sites.graph_frames(found) or None


def _graph_cut_op(targets, source):
    starts = []
    for t in targets:
        try:
            starts.append(t.op)
        except AttributeError:
            return None  # eager tensor
    wanted = None
    if source is not None:
        wanted = _graph_source(targets[0].graph if targets else None, source)
        if wanted is None:
            return None
    seen, queue, parent = set(), list(starts), {}
    while queue and len(seen) < _MAX_OPS:
        op = queue.pop(0)
        if id(op) in seen:
            continue
        seen.add(id(op))
        if wanted is None and _cuts(op):
            return op
        for inp in op.inputs:
            if wanted is not None and inp.name == wanted.name:
                return _first_cut_on_path(op, parent)
            producer = inp.op
            if id(producer) not in seen:
                parent.setdefault(id(producer), op)
                queue.append(producer)
    return None


def _first_cut_on_path(op, parent):
    """From the op that consumes the source up to the target: the first op without a gradient."""
    while op is not None:
        if _cuts(op):
            return op
        op = parent.get(id(op))
    return None


def _graph_source(graph, source):
    """The graph tensor standing for `source` (a captured variable's handle, or the tensor)."""
    if graph is None:
        return None
    if not is_variable(source):
        return source if getattr(source, "graph", None) is graph else None
    handle = source.handle
    if getattr(handle, "graph", None) is graph:
        return handle
    for external, internal in getattr(graph, "captures", ()):
        if external is handle:
            return internal
    return None

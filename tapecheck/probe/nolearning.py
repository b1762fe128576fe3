"""Silent no-learning: a trained variable whose gradient is zero and which never moves.

`tf.sign` (and any op whose gradient is zero rather than None) leaves the
weights behind it where they were: no None, no warning, a flat loss. The
optimizer hook calls `seen` at an `apply` with variables it has not met yet:

- eager: one read of `reduce_any(g != 0)` for the new variables (the only
  host sync, once per variable per run); a variable whose first gradient is
  all zero gets a copy of its value, and an op callback records the next
  step's forward ops, to name the op between it and the loss;
- traced (`tf.function`, `fit`): while tracing, the gradient's graph is read:
  a gradient built from zeros only (`zeros_like` of a `Sign`'s input through
  `MatMul`...) is zero at every step; the copy is taken under `init_scope`,
  and the forward graph names the op. Nothing is added to the traced graph.

At the end (`finish`) each copied variable is compared with its value: one
that moved (weight decay, a gradient zero on some steps only) is no finding.
One that did not, over at least two updates (one, when the zero is in the
traced graph itself), is reported as TAP104 `zero-gradient`, with its model's
name in the user's code. A variable whose gradient is not zero is never
reported, even when it does not move (a learning rate of 0, updates below
float precision): that is the optimizer's setting, not a cut gradient path.
"""

from __future__ import annotations

import sys
import threading
import weakref

from tapecheck.probe import sites
from tapecheck.probe.report import report_internal_error

ZERO_GRADIENT_OPS = {"Sign": "tf.sign"}  # a registered gradient of zeros: no None, nothing warns
NO_GRADIENT_OPS = {  # None gradients, zeros under `unconnected_gradients=ZERO`
    "Round": "tf.round", "Floor": "tf.floor", "Ceil": "tf.math.ceil", "Rint": "tf.math.rint",
    "StopGradient": "tf.stop_gradient", "ArgMax": "tf.argmax", "ArgMin": "tf.argmin",
}
SNAPSHOT_LIMIT = 256 * 2**20  # bytes of variable copies kept at most (only zero-gradient variables are copied)
MAX_GRAPH_OPS = 50000  # a graph walk never runs away on a huge model

HINT = (
    "Keep the path from the model to the loss in ops with a non-zero gradient: a smooth surrogate "
    "(`tf.tanh(x)` for `tf.sign(x)`) or a straight-through estimator (`x + tf.stop_gradient(tf.sign(x) - x)`)."
)


class Entry:
    """One variable whose first gradient was zero. It holds the TensorFlow variable under the
    Keras one (not the layer or the model), so a model that goes out of scope before the probe
    stops can still be compared: both copies count against `SNAPSHOT_LIMIT`."""

    __slots__ = (
        "apply_site",
        "cancelled",
        "handle_id",
        "iterations",
        "model",
        "name",
        "op",
        "op_site",
        "serial",
        "snapshot",
        "start",
        "traced",
        "variable",
    )

    def __init__(self, variable, snapshot, iterations, start, apply_site, traced):
        self.variable = variable
        self.snapshot = snapshot  # the variable's value before its first update (its own copy)
        self.iterations = iterations  # the optimizer's update counter (a variable), and its value then
        self.start = start
        self.apply_site = apply_site
        self.op, self.op_site = None, None  # the zero-gradient op and its user line, when found
        self.traced = traced
        self.handle_id = None
        self.cancelled = False  # its paths to the loss are linear: a zero gradient there is a cancellation
        self.model, self.name = None, None  # the model's name in the user's code, the variable's in the model
        self.serial = 0  # the order entries were made in: a nested probe reports the ones made while it ran


class NoLearning:
    def __init__(self, collector):
        self.collector = collector
        self.entries: dict[int, Entry] = {}  # id(variable) -> its copy: zero-gradient variables only
        self.known: dict[tuple, object] = {}  # (id(optimizer), id(first variable), id(last), count): nothing new
        self.met: dict[int, object] = {}  # id(variable) -> a weak reference: the variables looked at
        self.copied = 0
        self.serial = 0
        self.lock = threading.Lock()
        self.trace = None  # _EagerTrace while armed
        self.waiting: set[int] = set()  # optimizers whose next eager `apply` ends the armed recording

    # -- at `apply` -----------------------------------------------------------------------

    def seen(self, optimizer, grads, variables) -> None:
        """Before the optimizer's own `apply` (never inside it): look at variables met for the first time."""
        if self.waiting and id(optimizer) in self.waiting:
            self._stop_trace(optimizer)
        if not variables:
            return
        key = (id(optimizer), id(variables[0]), id(variables[-1]), len(variables))
        known = self.known.get(key)
        if known is not None and known() is optimizer:
            return  # the usual step: nothing new, nothing done
        try:
            self._first_sight(optimizer, grads, variables)
        except Exception as exc:  # noqa: BLE001 - a probe bug must not stop training
            report_internal_error(exc)
        finally:
            if len(self.known) > 4096:
                self.known.clear()
            self.known[key] = weakref.ref(optimizer)

    def _first_sight(self, optimizer, grads, variables):
        import tensorflow as tf

        new = []
        for grad, variable in zip(grads, variables):
            if grad is None or getattr(variable, "trainable", True) is False or not _floating_dtype(variable):
                continue
            if _decayed(optimizer, variable):
                continue  # the optimizer moves it on its own: zero gradients are not a finding there
            met = self.met.get(id(variable))
            if met is not None and met() is variable:
                continue
            if len(self.met) > 100000:  # models made again and again (k-fold): forget the dead ones
                self.met = {k: ref for k, ref in self.met.items() if ref() is not None}
            try:
                self.met[id(variable)] = weakref.ref(variable)
            except TypeError:
                continue
            new.append((grad, variable))
        if not new:
            return
        if tf.executing_eagerly():
            self._eager(optimizer, new)
        else:
            self._traced(optimizer, new)

    def _eager(self, optimizer, pairs):
        import tensorflow as tf

        flags = tf.stack([tf.reduce_any(tf.not_equal(_values(g), 0)) for g, _ in pairs]).numpy()  # one sync
        zero = [v for (_, v), nonzero in zip(pairs, flags) if not nonzero]
        if not zero:
            return
        site = sites.user_site(3) or _stack_site()
        start = int(optimizer.iterations.numpy())
        fresh = []  # (entry, variable)
        for variable in zero:
            entry = self._copy(variable, optimizer, start, site, traced=False)
            if entry is not None:
                entry.handle_id = _handle_id(variable)
                fresh.append((entry, variable))
        if fresh:
            _name(fresh, site)
            self._arm(optimizer, [entry for entry, _ in fresh])

    def _traced(self, optimizer, pairs):
        import tensorflow as tf

        graph = getattr(_values(pairs[0][0]), "graph", None)
        if graph is None:
            return
        memo: dict[str, bool] = {}
        budget = [MAX_GRAPH_OPS]
        zero = [v for g, v in pairs if _structurally_zero(_values(g), memo, budget)]
        if not zero:
            return
        site = sites.user_site(3) or _stack_site()
        fresh = []
        with tf.init_scope():
            start = int(optimizer.iterations.numpy())
            for variable in zero:
                entry = self._copy(variable, optimizer, start, site, traced=True)
                if entry is not None:
                    entry.op, entry.op_site = _graph_cut(graph, variable)
                    fresh.append((entry, variable))
        if fresh:
            _name(fresh, site)

    def _copy(self, variable, optimizer, start, site, traced):
        import tensorflow as tf

        try:
            size = int(variable.shape.num_elements()) * tf.as_dtype(variable.dtype).size  # Keras: dtype is a str
        except (AttributeError, TypeError, ValueError):
            return None
        held = _tf_variable(variable)
        iterations = _tf_variable(optimizer.iterations)
        if held is None or iterations is None:
            return None
        with self.lock:
            if self.copied + 2 * size > SNAPSHOT_LIMIT:
                return None
            self.copied += 2 * size
        snapshot = tf.identity(held)  # a new tensor: an update of the variable does not touch it
        entry = Entry(held, snapshot, iterations, start, site, traced)
        with self.lock:
            self.serial += 1
            entry.serial = self.serial
            self.entries[id(variable)] = entry
        return entry

    # -- the next eager step's ops --------------------------------------------------------

    def _arm(self, optimizer, entries):
        if self.trace is None:
            self.trace = _EagerTrace()
            self.trace.start()
        self.trace.entries.extend(entries)
        self.waiting.add(id(optimizer))

    def _stop_trace(self, optimizer):
        self.waiting.discard(id(optimizer))
        if self.waiting or self.trace is None:
            return
        trace, self.trace = self.trace, None
        trace.stop()
        try:
            for entry in trace.entries:
                entry.op, entry.op_site = trace.cut_from(entry.handle_id)
                entry.cancelled = entry.op is None and trace.cancels(entry.handle_id)
        except Exception as exc:  # noqa: BLE001 - a probe bug must not stop training
            report_internal_error(exc)

    # -- at the end -------------------------------------------------------------------------

    def finish(self) -> None:
        """Compare each copy with its variable, report the ones that never moved, drop everything."""
        if self.trace is not None:
            trace, self.trace = self.trace, None
            trace.stop()
            for entry in trace.entries:
                if entry.op is None:
                    entry.op, entry.op_site = trace.cut_from(entry.handle_id)
                    entry.cancelled = entry.op is None and trace.cancels(entry.handle_id)
        self.waiting.clear()
        entries, self.entries = list(self.entries.values()), {}
        self.known.clear()
        self.met.clear()
        self.copied = 0
        try:
            self._report(entries)
        except Exception as exc:  # noqa: BLE001 - a probe bug must not hide the run's findings
            report_internal_error(exc)

    def mark(self) -> int:
        """Where a nested probe starts: `report_into` reports the entries made after it."""
        return self.serial

    def report_into(self, collector, since: int) -> None:
        """A nested probe stops: report into its collector what it saw, keeping everything for this probe."""
        with self.lock:
            entries = [e for e in self.entries.values() if e.serial > since]
        try:
            self._report(entries, collector, keep=True)
        except Exception as exc:  # noqa: BLE001 - a probe bug must not stop training
            report_internal_error(exc)

    def _report(self, entries, collector=None, keep=False):
        import tensorflow as tf

        collector = collector or self.collector
        groups: dict[tuple, list] = {}
        for entry in entries:
            variable, snapshot, iterations = entry.variable, entry.snapshot, entry.iterations
            if variable is None or snapshot is None:
                continue
            if not keep:
                entry.variable = entry.snapshot = entry.iterations = None
            steps = int(iterations.numpy()) - entry.start
            if steps < (1 if entry.traced else 2) or entry.cancelled:
                continue
            if not bool(tf.reduce_all(tf.equal(snapshot, variable))):
                continue  # it moved: weight decay, or a gradient zero on some steps only
            site = entry.op_site or entry.apply_site
            groups.setdefault((site, entry.op, entry.model, entry.apply_site), []).append((entry.name, steps))
        for (site, op, model, apply_site), found in groups.items():
            names = [name for name, _ in found]
            steps = max(steps for _, steps in found)
            whose = f" of `{model}`" if model else ""
            updates = f"{steps} update{'' if steps == 1 else 's'}"
            where = _where(apply_site, site)
            if op is not None:
                api, op_type = op
                zero = op_type in ZERO_GRADIENT_OPS
                message = (
                    f"`{api}()` (the `{op_type}` op) {'has a zero gradient' if zero else 'has no gradient'}, and "
                    f"{{names}}{whose} reach the loss only through it: their gradients were zero and they never "
                    f"moved over {updates} by `apply_gradients` ({where}): the weights never move, and nothing warns"
                )
            else:
                message = (
                    f"the gradients of {{names}}{whose} were zero and they never moved over {updates} by "
                    f"`apply_gradients` ({where}): an op with a zero gradient (`tf.sign`) or units that are "
                    "never active lie between them and the loss; the weights never move, and nothing warns"
                )
            collector.add(
                site, "TAP104", "zero-gradient", message, HINT, names=names, subject=model or ",".join(names),
                steps=steps, model=model or "", op=(op[1] if op else ""),
                applied_at=[apply_site.short() if apply_site else "?"],
            )


def _where(apply_site, site) -> str:
    if apply_site is None:
        return "an earlier call"
    if site is not None and apply_site.path == site.path:
        return "here" if apply_site.line == site.line else f"line {apply_site.line}"
    return apply_site.short()


def _decayed(optimizer, variable) -> bool:
    """Whether the optimizer applies weight decay to this variable (Keras 3: `weight_decay` and its exclusions)."""
    decay = getattr(optimizer, "weight_decay", None)
    if not decay:
        return False
    use = getattr(optimizer, "_use_weight_decay", None)
    try:
        return bool(use(variable)) if use is not None else True
    except Exception:  # noqa: BLE001 - an optimizer of another kind: assume it decays
        return True


def _floating_dtype(variable) -> bool:
    import tensorflow as tf

    try:
        return tf.as_dtype(variable.dtype).is_floating
    except (AttributeError, TypeError, ValueError):
        return False


def _values(grad):
    """An `IndexedSlices` gradient (an embedding's) is zero when its values are."""
    return getattr(grad, "values", grad) if type(grad).__name__ == "IndexedSlices" else grad


def _handle_id(variable):
    from tensorflow.python.framework import ops

    handle = getattr(variable, "handle", None)
    return ops.tensor_id(handle) if handle is not None else None


def _path(variable) -> str:
    name = getattr(variable, "path", None) or getattr(variable, "name", "variable")
    return name.removesuffix(":0")


# -- traced graphs ----------------------------------------------------------------------------

# Zero when any floating input is zero (a product), when all are (a sum), or when input 0 is (linear in it).
_PRODUCT = {
    "Mul", "MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3", "Einsum", "MulNoNan", "SparseMatMul",
    "Conv2D", "Conv3D", "Conv2DBackpropFilter", "Conv2DBackpropInput", "Conv3DBackpropFilterV2",
    "Conv3DBackpropInputV2", "DepthwiseConv2dNative", "DepthwiseConv2dNativeBackpropFilter",
    "DepthwiseConv2dNativeBackpropInput", "Conv2DBackpropFilterV2", "Conv2DBackpropInputV2",
}
_SUM = {"Add", "AddV2", "AddN", "Sub", "ConcatV2", "Concat", "Pack", "Select", "SelectV2"}
_FIRST = {
    "Identity", "Snapshot", "EnsureShape", "Reshape", "Sum", "Mean", "Neg", "Transpose", "Tile",
    "Cast", "ExpandDims", "Squeeze", "BiasAddGrad", "Pad", "MirrorPad", "StridedSlice", "Slice",
    "UnsortedSegmentSum", "GatherV2", "BroadcastTo", "RealDiv", "Div", "DivNoNan", "ReluGrad", "Relu6Grad",
    "EluGrad", "SeluGrad", "LeakyReluGrad", "SoftplusGrad", "SoftsignGrad", "FusedBatchNormGrad",
    "FusedBatchNormGradV2", "FusedBatchNormGradV3", "Unpack",
    # a MultiWorker all-reduce sums the replicas' gradients, each made by this same graph
    "CollectiveReduceV2", "CollectiveReduceV3", "CollectiveReduce", "NcclAllReduce", "CollectiveGatherV2",
}
_AT = {"SigmoidGrad": 1, "TanhGrad": 1, "SqrtGrad": 1, "RsqrtGrad": 1, "ReciprocalGrad": 1,
       "StridedSliceGrad": 4, "MaxPoolGrad": 2, "MaxPoolGradV2": 2, "AvgPoolGrad": 1, "ScatterNd": 1,
       "Split": 1, "SplitV": 0}
_ZEROS = {"ZerosLike", "Zeros"}


def _structurally_zero(tensor, memo, budget) -> bool:
    """Whether a traced tensor is zero whatever the data: made from zeros through products and sums only."""
    stack = [tensor]
    while stack:
        t = stack[-1]
        if t.name in memo:
            stack.pop()
            continue
        budget[0] -= 1
        if budget[0] < 0:
            return False
        op = t.op
        deps = _zero_deps(op, t)
        if deps is None:  # a leaf: decided by itself
            memo[t.name] = _zero_leaf(op)
            stack.pop()
            continue
        kind, inputs = deps
        pending = [i for i in inputs if i.name not in memo]
        if pending:
            stack.extend(pending)
            continue
        values = [memo[i.name] for i in inputs]
        memo[t.name] = bool(values) and (any(values) if kind == "any" else all(values))
        stack.pop()
    return memo.get(tensor.name, False)


def _floating(tensors):
    return [t for t in tensors if t.dtype.is_floating]


def _zero_deps(op, tensor):
    """("any"|"all", inputs) whose zeros make `tensor` (an output of `op`) zero, or None for a leaf."""
    kind = op.type
    inputs = list(op.inputs)
    if kind == "IdentityN":  # output i is input i (tf.custom_gradient, tf.recompute_grad)
        index = tensor.value_index
        return "all", _floating(inputs[index:index + 1])
    if kind in _PRODUCT:
        return "any", _floating(inputs)
    if kind in ("Maximum", "Minimum", "ClipByValue") and inputs:
        return _clipped(kind, inputs)
    if kind in _SUM:
        values = _floating(inputs[1:]) if kind in ("Select", "SelectV2") else _floating(inputs)
        return "all", values
    if kind in _FIRST and inputs:
        return "all", _floating(inputs[:1])
    if kind in _AT and len(inputs) > _AT[kind]:
        return "all", _floating([inputs[_AT[kind]]])
    return None


def _clipped(kind, inputs):
    """`tf.clip_by_value(g, -c, c)` (Minimum then Maximum) keeps a zero: bounds on each side of 0."""
    def bound(t):
        value = _constant_value(t.op)
        return None if value is None or value.size != 1 else float(value.reshape(()))

    if kind == "ClipByValue" and len(inputs) == 3:
        low, high = bound(inputs[1]), bound(inputs[2])
        keeps = low is not None and high is not None and low <= 0 <= high
        return "all", _floating(inputs[:1]) if keeps else []
    if len(inputs) != 2:
        return "all", []
    for value, other in ((inputs[0], inputs[1]), (inputs[1], inputs[0])):
        limit = bound(other)
        if limit is not None and (limit <= 0 if kind == "Maximum" else limit >= 0):
            return "all", _floating([value])
    return "all", []


def _zero_leaf(op) -> bool:
    if op.type in _ZEROS:
        return True
    if op.type == "Fill" and len(op.inputs) == 2:
        return _constant_zero(op.inputs[1].op)
    if op.type == "Const":
        return _constant_zero(op)
    return False


def _constant_zero(op) -> bool:
    value = _constant_value(op)
    return value is not None and value.dtype.kind == "f" and not value.any()


def _constant_value(op):
    """A graph constant's value (NumPy), or None (not a constant, or a huge one)."""
    if op.type != "Const":
        return None
    try:
        from tensorflow.python.framework import tensor_util

        proto = op.get_attr("value")
        if proto.tensor_shape.dim and _elements(proto) > 1 << 20:
            return None
        return tensor_util.MakeNdarray(proto)
    except Exception:  # noqa: BLE001 - not a readable constant: not known to be zero
        return None


def _elements(proto) -> int:
    count = 1
    for dim in proto.tensor_shape.dim:
        count *= max(dim.size, 0)
    return count


def _graph_cut(graph, variable):
    """((api, op type), user site) of the first zero-gradient op on the forward paths from `variable`."""
    handle = getattr(variable, "handle", None)
    if handle is None:
        return None, None
    starts = [internal for external, internal in _captures(graph) if external is handle]
    if not starts:
        return None, None
    best, queue, seen, budget = None, [t.op for t in starts], set(), MAX_GRAPH_OPS
    while queue and budget > 0:
        op = queue.pop(0)
        if op.name in seen:
            continue
        seen.add(op.name)
        budget -= 1
        if op.name.startswith("gradient_tape/"):
            continue  # the backward pass (tf.abs's gradient has a Sign of its own)
        found = _label(op.type, any(t.dtype.is_floating for t in op.inputs))
        if found is not None:
            if found[1] in ZERO_GRADIENT_OPS:
                return found, _op_site(op)
            best = best or (found, _op_site(op))
        for output in op.outputs:
            queue.extend(output.consumers())
    return best if best is not None else (None, None)


def _captures(graph):
    try:
        return list(graph.captures)
    except Exception:  # noqa: BLE001 - an older or unusual graph: no captures to read
        return []


def _label(op_type, floating_in):
    if isinstance(op_type, bytes):
        op_type = op_type.decode()
    if not floating_in:
        return None
    if op_type in ZERO_GRADIENT_OPS:
        return ZERO_GRADIENT_OPS[op_type], op_type
    if op_type in NO_GRADIENT_OPS:
        return NO_GRADIENT_OPS[op_type], op_type
    return None


def _op_site(op):
    """The user's line that made a graph op (its traceback, mapped back from autograph)."""
    try:
        return _first_user((frame.filename, frame.lineno) for frame in reversed(list(op.traceback)))
    except Exception:  # noqa: BLE001 - no traceback kept for this op
        return None


def _stack_site(depth=2):
    """The user's line on this thread's stack; autograph files mapped even in a replica thread."""
    frame, found = sys._getframe(depth), []
    while frame is not None:
        found.append((frame.f_code.co_filename, frame.f_lineno))
        frame = frame.f_back
    return _first_user(found)


def _first_user(locations):
    """The first (path, line) that is the user's, or an autograph file's line that maps to one."""
    import os

    for filename, lineno in locations:
        if "__autograph_generated_file" in filename:
            mapped = _autograph_origin(filename, lineno)
            if mapped is not None and sites.is_user_file(mapped[0]):
                return sites.Site(os.path.abspath(mapped[0]), mapped[1], 1)
        elif sites.is_user_file(filename):
            return sites.Site(os.path.abspath(filename), lineno, 1)
    return None


def _autograph_origin(filename, lineno):
    """(path, line, col) of the user's source of a line of an autograph-generated file.

    tf_stack maps these only on the thread that called the `tf.function` (a
    MirroredStrategy replica runs on a thread of its own), so the converted
    functions' own source maps are read (TensorFlow's transpiler cache).
    """
    try:
        from tensorflow.python.autograph.impl import api

        for factories in list(api._TRANSPILER._cache._cache.values()):
            for factory in list(factories.values()):
                module = getattr(factory, "module", None)
                if module is None or getattr(module, "__file__", None) != filename:
                    continue
                for location, origin in (factory.source_map or {}).items():
                    if location.lineno == lineno:
                        return origin.loc.filename, origin.loc.lineno, origin.loc.col_offset + 1
    except Exception:  # noqa: BLE001 - a TensorFlow without these internals: no line
        return None
    return None


# -- eager: the next step's ops -----------------------------------------------------------------

class _EagerTrace:
    """An op callback over one eager step: (type, inputs, outputs) by tensor id, while a tape records."""

    MAX_OPS = 200000

    def __init__(self):
        self.entries: list[Entry] = []
        self.consumers: dict[int, list[int]] = {}  # tensor id -> indexes of the ops that read it
        self.ops: list[tuple] = []  # (label or None, output ids, site or None)
        self.thread = threading.get_ident()
        self.on = False

    def start(self):
        from tensorflow.python.framework import op_callbacks

        op_callbacks.add_op_callback(self._callback)
        self.on = True

    def stop(self):
        if not self.on:
            return
        self.on = False
        from tensorflow.python.framework import op_callbacks

        try:
            op_callbacks.remove_op_callback(self._callback)
        except Exception:  # noqa: BLE001, S110 - registered on another thread: it stays there, switched off
            pass

    def _callback(self, op_type, inputs, attrs, outputs, op_name=None, graph=None):
        if graph is not None or not self.on or len(self.ops) >= self.MAX_OPS:
            return
        from tensorflow.python.eager import record
        from tensorflow.python.framework import ops

        if not record.could_possibly_record():
            return  # no tape recording: the backward pass, metrics, the optimizer
        try:
            label = _label(op_type, any(t.dtype.is_floating for t in inputs))
            index = len(self.ops)
            self.ops.append((label, tuple(ops.tensor_id(t) for t in outputs),
                             sites.user_site(3) if label is not None else None, _op_type(op_type)))
            for t in inputs:
                self.consumers.setdefault(ops.tensor_id(t), []).append(index)
        except Exception as exc:  # noqa: BLE001 - a probe bug must not stop training
            report_internal_error(exc)
        return

    def cut_from(self, handle_id):
        """((api, op type), site) of the first zero-gradient op reached from the variable's handle."""
        if handle_id is None:
            return None, None
        best, queue, seen = None, list(self.consumers.get(handle_id, ())), set()
        while queue:
            index = queue.pop(0)
            if index in seen:
                continue
            seen.add(index)
            label, outputs, site, _ = self.ops[index]
            if label is not None:
                if label[1] in ZERO_GRADIENT_OPS:
                    return label, site
                best = best or (label, site)
            for tid in outputs:
                queue.extend(self.consumers.get(tid, ()))
        return best if best is not None else (None, None)

    def cancels(self, handle_id) -> bool:
        """Whether the variable reaches everything recorded after it only through linear ops with a
        non-zero derivative (`BiasAdd`, `Sub`, `Mean`...): then no single path can carry a zero, and
        a zero gradient is its contributions cancelling (a WGAN critic's output bias in
        `mean(critic(fake)) - mean(critic(real))`), not a cut. Any other op on the way (`Relu`, a
        `MatMul` by data, `tf.sign`) and the answer is no: a real cut stays reported."""
        if handle_id is None:
            return False
        queue, seen, passed = list(self.consumers.get(handle_id, ())), set(), False
        while queue:
            index = queue.pop(0)
            if index in seen:
                continue
            seen.add(index)
            label, outputs, _, op_type = self.ops[index]
            if op_type in _NO_PATH:
                continue  # carries no gradient on (a shape, `ones_like` of a traced target)
            if label is not None or op_type not in _LINEAR:
                return False
            passed = passed or op_type != "ReadVariableOp"
            for tid in outputs:
                queue.extend(self.consumers.get(tid, ()))
        return passed


# Linear in their floating inputs with a derivative that is never zero: a path through these alone
# carries a non-zero gradient (a product of +-1 and 1/n), so a zero can only come from paths cancelling.
_LINEAR = {
    "ReadVariableOp", "Identity", "Snapshot", "BiasAdd", "Add", "AddV2", "AddN", "Sub", "Neg", "Mean", "Sum",
    "Reshape", "Squeeze", "ExpandDims", "Transpose", "BroadcastTo", "Tile", "ConcatV2", "Pack", "EnsureShape",
}
# Ops whose outputs carry no gradient back to their inputs (integers, shapes, fresh constants).
_NO_PATH = {"Shape", "ShapeN", "Size", "Rank", "OnesLike", "ZerosLike", "Equal", "NotEqual", "Greater",
            "GreaterEqual", "Less", "LessEqual", "IsFinite", "IsNan", "VarIsInitializedOp"}


def _op_type(op_type) -> str:
    return op_type.decode() if isinstance(op_type, bytes) else str(op_type)


# -- user names -----------------------------------------------------------------------------------

def _tf_variable(variable):
    """The `tf.Variable` itself (a Keras 3 variable wraps one), or None."""
    import tensorflow as tf

    inner = getattr(variable, "_value", None)
    if isinstance(inner, tf.Variable):
        return inner
    return variable if isinstance(variable, tf.Variable) else None


def _name(pairs, site) -> None:
    """Each entry's model as the user's code names it, and the variable's name in that model.

    Done once, when a variable's first gradient is zero (never on a clean run): the
    smallest Keras model holding the variable, named by the attribute or global that
    holds it (`self.generator` gives `generator`), else by the receiver of
    `.trainable_variables` on the `apply_gradients` line, else by Keras's name.
    """
    try:
        owners = _owners([variable for _, variable in pairs], site)
    except Exception as exc:  # noqa: BLE001 - names are a nicety: Keras's own will do
        report_internal_error(exc)
        owners = {}
    for entry, variable in pairs:
        entry.model, entry.name = owners.get(id(variable), (None, _path(variable)))


def _owners(variables, site) -> dict[int, tuple]:
    import gc

    import keras

    wanted = {id(v): v for v in variables}
    holders: dict[int, list] = {}  # id(variable) -> [(is a Model, its variable count, the layer)]
    for obj in gc.get_objects():
        if not isinstance(obj, keras.layers.Layer):
            continue
        try:
            ids = {id(v) for v in obj.trainable_variables}
        except Exception:  # noqa: BLE001, S112 - a layer that cannot list its variables now
            continue
        for vid in ids & wanted.keys():
            holders.setdefault(vid, []).append((isinstance(obj, keras.Model), len(ids), obj))
    out, labels = {}, {}
    for vid, variable in wanted.items():
        found = holders.get(vid)
        if not found:
            out[vid] = (None, _user_name(variable, None) or _path(variable))
            continue
        parts = _path(variable).split("/")
        models = [h for h in found if h[0]]
        # the smallest model (a GAN's generator, not the GAN), else the outermost layer; a model named
        # in the variable's path first (a Sequential's inner Functional holds the same variables)
        if models:
            owner = min(models, key=lambda h: (h[1], getattr(h[2], "name", None) not in parts))[2]
        else:
            owner = max(found, key=lambda h: h[1])[2]
        if id(owner) not in labels:
            labels[id(owner)] = _user_name(owner, site)
        name = getattr(owner, "name", None)
        inner = "/".join(parts[len(parts) - parts[::-1].index(name):]) if name in parts[:-1] else "/".join(parts)
        out[vid] = (labels[id(owner)], inner)
    return out


def _user_name(obj, site) -> str | None:
    """The attribute or global name the user's code holds `obj` by (no frame's locals are read)."""
    import linecache
    import re

    from tapecheck.probe.names import held_as

    own = getattr(obj, "name", None)
    found = held_as(obj)  # an attribute (`self.generator`) first: the name the code uses for it
    if found is not None:
        return found
    if site is not None:
        line = linecache.getline(site.path, site.line)
        receiver = re.search(r"([A-Za-z_][\w.]*)\.(?:trainable_variables|trainable_weights|fit)\b", line)
        if receiver:
            name = receiver.group(1).rsplit(".", 1)[-1]
            return type(obj).__name__ if name == "self" else name
    return own.removesuffix(":0") if isinstance(own, str) else None

"""TAP302 at run time: Keras 3's `compiled_loss(...)` shim in a user `train_step`.

Keras 3 keeps `model.compiled_loss(y, y_pred, sample_weight, regularization_losses)`
for Keras 2 code (a UserWarning from Keras's own file, once), and it does two things
Keras 2's did not (measured on TF 2.21 / Keras 3.15):

- it returns `compute_loss(...)`, which adds `model.losses` itself, whatever
  `regularization_losses` says (`[]` or nothing included): a Keras 2 step that adds
  `tf.add_n(self.losses)` to the shim's value counts every penalty twice;
- it never updates the loss tracker (`model.metrics[0]`, `loss`), which Keras 2's did:
  a step that returns the metrics' results (`{m.name: m.result() for m in
  self.metrics}`, `self.compute_metrics(...)`) without updating it itself makes
  `fit` report a loss of 0.0 at every epoch.

Two checks, both certain:

- the tracker: at the probe's end, the loss tracker of a model whose step called the
  shim was read (its `result()`, by the step or by Keras) and never updated, by
  anything, in any epoch (also while tracing). The `compiled_metrics.update_state`
  shim updates it (with `y_pred`: metrics.py reports that one).
- the penalties: at the user's `gradient` call in a traced step (`fit`, a
  `tf.function`), the graph of the target holds the shim's value and, outside it, a
  second reading of the regularizer of a variable the shim's value already holds
  the penalty of (ops made by `keras/src/regularizers`, on the same variable handle).
  Eager code keeps no graph: not checked there.

Only the user's line, the texts of the call and op names (strings) are kept; the
loss tracker's record is the metric hook's own.
"""

from __future__ import annotations

import ast
import linecache
import os
import weakref

import tensorflow as tf
from tensorflow.python.util import nest

from tapecheck.probe import sites
from tapecheck.probe.report import report_internal_error

CODE = "TAP302"
_REGULARIZERS = os.path.join("keras", "src", "regularizers", "")
_MAX_OPS = 50_000  # a graph walk stops here: a graph this large is left unchecked


class CompiledLossHooks:
    def __init__(self, collector, metrics, tapes):
        self.collector = collector
        self.metrics = metrics  # MetricHooks: the loss tracker's record
        self.tapes = tapes
        self.active = True
        self.calls: dict[tuple, tuple] = {}  # (path, line) -> (site, texts, the loss tracker's state)
        self.outputs: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # graph -> [(op name, site, texts)]
        self.models: dict[tuple, weakref.ref] = {}  # (path, line) -> the model whose step called the shim there
        self.reported: set = set()

    def install(self, patcher):
        try:
            from keras.src.backend.tensorflow.trainer import TensorFlowTrainer
        except ImportError:  # another Keras backend, or a Keras without the shim
            return
        if patcher.wrap(TensorFlowTrainer, "compiled_loss", self._wrap):
            self.tapes.target_listeners.append(self._gradient_taken)

    def finish(self):
        self.active = False
        try:
            self._tracker_left_empty()
        except Exception as exc:  # noqa: BLE001 - a probe bug must not hide the run's findings
            report_internal_error(exc)
        self.calls.clear()
        self.models.clear()
        self.outputs = weakref.WeakKeyDictionary()

    # -- the hook ----------------------------------------------------------
    def _wrap(self, original):
        hooks = self

        def compiled_loss(self, *args, **kwargs):
            __tracebackhide__ = True  # pytest: the probe's frame is not the user's
            noted = None
            if hooks.active:
                try:
                    noted = hooks._called(self)
                except Exception as exc:  # noqa: BLE001 - a probe bug must not stop training
                    report_internal_error(exc)
            value = original(self, *args, **kwargs)
            if noted is not None:
                try:
                    hooks._returned(value, noted)
                except Exception as exc:  # noqa: BLE001 - a probe bug must not stop training
                    report_internal_error(exc)
            return value

        return compiled_loss

    def _called(self, model):
        """A user step calls the shim: note where, the texts of the call and the loss tracker's record."""
        if not sites.calls_from_user_code(3):
            return None
        _, site = sites.user_frame(3)
        if site is None:
            return None
        known = self.calls.get((site.path, site.line))
        if known is None:
            tracker = getattr(model, "_loss_tracker", None)
            state = self.metrics.state_of(tracker) if tracker is not None else None
            known = self.calls[(site.path, site.line)] = (site, _call_texts(site), state)
        self.models[(site.path, site.line)] = weakref.ref(model)
        return known

    def _returned(self, value, noted):
        if tf.executing_eagerly() or not isinstance(value, tf.Tensor):
            return
        graph = getattr(value, "graph", None)
        if graph is None:
            return
        site, texts, _ = noted
        self.outputs.setdefault(graph, []).append((value.op.name, site, texts))

    # -- the loss tracker, at the end --------------------------------------
    def _tracker_left_empty(self):
        for site, texts, state in self.calls.values():
            if state is None or not state.read or state.ever_updated:
                continue  # not reported, or updated (the compiled_metrics shim has its own finding)
            receiver, y, y_pred, weight, loss = texts
            weights = f", sample_weight={weight}" if weight else ""
            self.collector.add(
                site, CODE, "compiled-loss-shim",
                f"`{receiver}.compiled_loss(...)` is a deprecated Keras 3 shim: it returns "
                f"`{receiver}.compute_loss(...)` (which adds `{receiver}.losses` itself, whatever "
                "`regularization_losses` says) but, unlike Keras 2's, never updates the loss tracker `loss`; "
                "this step never updates it either, so the `loss` that `fit` reports "
                "(`history.history[\"loss\"]`) is 0.0 at every epoch",
                f"Use `{loss} = {receiver}.compute_loss(y={y}, y_pred={y_pred}{weights})` (it adds "
                f"`{receiver}.losses` itself), then, after the tape, update the loss tracker yourself: "
                f"`m.update_state({loss})` for the `m` in `{receiver}.metrics` named `\"loss\"`.",
                names=["loss"], subject="loss",
            )

    # -- the penalties, at the user's `gradient` call ------------------------
    def _gradient_taken(self, info, target, sources, site):
        if not self.outputs or tf.executing_eagerly():
            return
        targets = [t for t in nest.flatten(target) if isinstance(t, tf.Tensor)]
        graph = getattr(targets[0], "graph", None) if targets else None
        noted = self.outputs.get(graph) if graph is not None else None
        if not noted:
            return
        for op_name, call_site, texts in noted:
            key = (call_site.path, call_site.line, site.path if site else None, site.line if site else None)
            if key in self.reported:
                continue
            found = _penalty_twice(graph, targets, op_name)
            if found is None:
                continue
            self.reported.add(key)
            self._report_twice(call_site, texts, site, found, graph, sources)

    def _report_twice(self, call_site, texts, site, found, graph, sources):
        handles, extra_op = found
        receiver, y, y_pred, weight, loss = texts
        model = self.models.get((call_site.path, call_site.line))
        names = _variable_names(graph, handles, sources, model() if model is not None else None, receiver)
        frames = sites.graph_frames(extra_op)
        extra_line = frames[-1][1] if frames and frames[-1][0] == call_site.path else None
        where = ("this line adds" if extra_line == call_site.line else
                 f"line {extra_line} adds" if extra_line else "the loss adds")
        gradient = f" at line {site.line}" if site is not None and site.path == call_site.path else ""
        weights = f", sample_weight={weight}" if weight else ""
        self.collector.add(
            call_site, CODE, "compiled-loss-penalties-twice",
            f"`{receiver}.compiled_loss(...)` is a deprecated Keras 3 shim that returns `{receiver}.compute_loss(...)`, "
            f"which already adds `{receiver}.losses`; {where} the penalties again, so the loss differentiated"
            f"{gradient} counts the regularization of {{names}} twice",
            f"Use `{loss} = {receiver}.compute_loss(y={y}, y_pred={y_pred}{weights})` and do not add "
            f"`{receiver}.losses` to it again{f' (line {extra_line})' if extra_line else ''}: it holds them already.",
            names=names,
        )


def _ancestors(tensors, stop=frozenset()):
    """Op name -> op of everything `tensors` are computed from (not below the ops named in `stop`); None when
    the graph is too large to walk."""
    seen, stack = {}, [t.op for t in tensors]
    while stack:
        op = stack.pop()
        if op.name in seen:
            continue
        seen[op.name] = op
        if len(seen) > _MAX_OPS:
            return None
        if op.name in stop:
            continue
        stack.extend(t.op for t in op.inputs)
        stack.extend(op.control_inputs)
    return seen


def _penalty_reads(ops) -> dict:
    """Variable handle name -> a `ReadVariableOp` made by a Keras regularizer, among `ops`."""
    found = {}
    for op in ops:
        if op.type != "ReadVariableOp" or not op.inputs:
            continue
        try:
            frames = op.traceback or ()
        except AttributeError:
            continue
        if any(_REGULARIZERS in frame.filename for frame in frames):
            found.setdefault(op.inputs[0].name, op)
    return found


def _penalty_twice(graph, targets, op_name):
    """(the variable handles penalized twice, a regularizer op of the second copy) when the target holds the
    shim's value and, outside it, the penalty of a variable the shim's value already holds; else None."""
    try:
        shim_op = graph.get_operation_by_name(op_name)
    except (KeyError, ValueError):
        return None
    outside = _ancestors(targets, stop=frozenset({op_name}))
    if outside is None or op_name not in outside:
        return None  # the shim's value is not in this target
    inside = _ancestors(shim_op.outputs)
    if inside is None:
        return None
    in_shim = _penalty_reads(inside.values())
    extra = _penalty_reads(op for name, op in outside.items() if name not in inside)
    twice = sorted(set(in_shim) & set(extra))
    if not twice:
        return None
    return twice, _first_regularizer_op(extra[twice[0]])


def _first_regularizer_op(read_op):
    """The op the regularizer computes from `read_op` (its traceback names the user's line that read `.losses`)."""
    consumers = read_op.outputs[0].consumers() if read_op.outputs else []
    return consumers[0] if consumers else read_op


def _variable_names(graph, handles, sources, model=None, receiver="self") -> list[str]:
    """The names of the source variables whose captured handles are `handles`: `self.encoder.kernel` where
    an attribute of the model holds its layer, else its path (`autoencoder/dense/kernel`)."""
    wanted = set(handles)
    by_handle = {}
    try:
        for external, internal in graph.captures:
            if internal.name in wanted:
                by_handle[id(external)] = internal.name
    except (AttributeError, TypeError, ValueError):
        return ["the model's weights"]
    names = []
    for variable in nest.flatten(sources):
        handle = getattr(getattr(variable, "_value", variable), "handle", None)  # Keras 3 wraps a tf.Variable
        if handle is not None and id(handle) in by_handle:
            names.append(_user_name(variable, model, receiver))
    return names or ["the model's weights"]


def _user_name(variable, model, receiver) -> str:
    path = (getattr(variable, "path", None) or getattr(variable, "name", "?")).removesuffix(":0")
    if model is None or not receiver.isidentifier():
        return path
    try:
        for key, layer in vars(model).items():
            own = getattr(layer, "_trainable_variables", None)
            if key.startswith("_") or not isinstance(own, list) or not any(v is variable for v in own):
                continue
            short = getattr(variable, "name", "")
            held = vars(layer)  # never runs a property: `kernel` may compute (LoRA)
            if isinstance(short, str) and short.isidentifier() and (
                    held.get(short) is variable or held.get("_" + short) is variable):
                return f"{receiver}.{key}.{short}"
    except Exception:  # noqa: BLE001 - names are a nicety: the path will do
        pass
    return path


def _call_texts(site) -> tuple:
    """(receiver, y, y_pred, sample_weight or None, the name assigned) of the `compiled_loss` call at `site`,
    from the user's file; the usual names where the file cannot be read."""
    found = ("self", "y", "y_pred", None, "loss")
    if site.path.startswith("<"):
        return found
    try:
        tree = ast.parse("".join(linecache.getlines(site.path)))
    except (SyntaxError, ValueError):
        return found
    assigned = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            for inner in ast.walk(node.value):
                assigned.setdefault(id(inner), node.targets[0].id)
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "compiled_loss"
                and node.lineno <= site.line <= (node.end_lineno or node.lineno)):
            given = dict(zip(("y", "y_pred", "sample_weight"), node.args))
            given.update({k.arg: k.value for k in node.keywords if k.arg})
            text = {k: ast.unparse(v) for k, v in given.items()}
            return (ast.unparse(node.func.value), text.get("y", "y"), text.get("y_pred", "y_pred"),
                    text.get("sample_weight"), assigned.get(id(node), "loss"))
    return found

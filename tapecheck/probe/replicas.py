"""TAP601 at run time: a replica's loss averaged over its own batch.

Under a `MirroredStrategy` (any strategy with more than one replica in sync)
the optimizer sums the replicas' gradients, so each replica's loss must be its
share of the global mean. Measured on TensorFlow 2.21 with two logical CPUs,
inside `strategy.run` of a `tf.function` step, the op that made the target:

  tf.reduce_mean(per_example), keras.ops.mean(...)  `Mean` over the batch axis
                                                    of a rank >= 1 input
  tf.nn.compute_average_loss(...)                   `DivNoNan` of a `Sum`
  a Keras loss object, default reduction            `Mul` (by 1/replicas) of a `DivNoNan`
  tf.reduce_mean(loss_object(y, p))                 `Mean` of a scalar (rank 0)
  tf.reduce_mean(...) / num_replicas_in_sync        `RealDiv`

With the first, one SGD step moves a weight 0.6 where the others move it 0.3.

Checked after each user `gradient` call made in a replica context with more
than one replica: the target's producer (through `Identity`) is a `Mean` whose
reduction takes in axis 0 of a rank >= 1 input. Reported at the line of the
op, once per trace.

Eager `strategy.run` (no `tf.function`; each replica runs in its own thread)
gives eager tensors, which keep no producer. The first eager `gradient` in a
replica arms the tape's line; the next recording there, in a replica, runs
with an op callback on that thread noting only the `Mean` ops (input rank,
axes, the user's line), and its `gradient` call is judged on them. The line is
armed once: later steps cost nothing. A step that runs only once is not
checked.
"""

from __future__ import annotations

import threading

from tensorflow.python.framework import op_callbacks, ops

from tapecheck.probe import diagnose, sites
from tapecheck.probe.report import report_internal_error

CODE = "TAP601"
CAUSE = "loss-not-scaled-for-replicas"
HINT = ("Sum over the global batch instead: `tf.nn.compute_average_loss(per_example_loss, "
        "global_batch_size=GLOBAL_BATCH_SIZE)`, or a Keras loss object with its default reduction.")
NOT_A_BATCH_MEAN = object()


def _replicas() -> int:
    from tensorflow.python.distribute import distribute_lib

    context = distribute_lib.get_replica_context()
    replicas = getattr(context, "num_replicas_in_sync", 1) if context is not None else 1
    return replicas if isinstance(replicas, int) else 1


class ReplicaLossHooks:
    def __init__(self, collector, tapes):
        self.collector = collector
        self.tapes = tapes
        self.armed: set[tuple] = set()  # tape lines whose next eager recording in a replica notes its means
        self.done: set[tuple] = set()  # tape lines already looked at that way: never armed again
        self.local = threading.local()

    def install(self, patcher):
        self.tapes.target_listeners.append(self._gradient_taken)
        self.tapes.enter_listeners.append(self._entered)
        self.tapes.exit_listeners.append(self._exited)

    def finish(self):
        if getattr(self.local, "info", None) is not None:
            self._exited(self.local.info)
        self.armed.clear()

    # -- eager: note the `Mean` ops of one armed recording ------------------
    def _entered(self, info):
        key = (info.site.path, info.site.line) if info.site else None
        if key is None or key not in self.armed or getattr(self.local, "info", None) is not None:
            return
        if _replicas() < 2:
            return
        self.armed.discard(key)
        self.done.add(key)
        info.means = {}
        self.local.info = info
        op_callbacks.add_op_callback(self._callback)  # this thread only (op callbacks are per thread)

    def _exited(self, info):
        if getattr(self.local, "info", None) is not info:
            return
        self.local.info = None
        op_callbacks.remove_op_callback(self._callback)

    def _callback(self, op_type, inputs, attrs, outputs, op_name=None, graph=None):
        if op_type != "Mean" or graph is not None:
            return
        info = getattr(self.local, "info", None)
        if info is None or info.means is None:
            return
        try:
            keep_dims = dict(zip(attrs[::2], attrs[1::2])).get("keep_dims", False) if attrs else False
            data, axes = inputs
            value = axes.numpy()  # a few ints, already computed: no op is made
            record = _mean_record(data.shape, value, bool(keep_dims), sites.user_site())
            for output in outputs:
                info.means[ops.tensor_id(output)] = record
        except Exception as exc:  # noqa: BLE001 - a probe bug must not stop training
            report_internal_error(exc)

    # -- after each user `gradient` call --------------------------------------
    def _gradient_taken(self, info, target, sources, site):
        replicas = _replicas()
        if replicas < 2 or target is None or isinstance(target, (list, tuple, dict)):
            return
        try:
            op = _through_identity(target).op
        except AttributeError:
            op = None
        if op is not None:
            if op.type != "Mean" or len(op.inputs) != 2:
                return
            from tensorflow.python.framework import tensor_util

            data, axes = op.inputs
            try:
                keep_dims = bool(op.get_attr("keep_dims"))
            except ValueError:
                keep_dims = False
            _, at = diagnose._op_label(op)
            record = _mean_record(data.shape, tensor_util.constant_value(axes), keep_dims, at)
        else:
            record = self._eager_record(info, target)
        if record is None or record[0] is NOT_A_BATCH_MEAN:
            return
        examples, at = record
        self._report(site, at, examples, replicas)

    def _eager_record(self, info, target):
        means, info.means = info.means, None
        if means is None:
            key = (info.site.path, info.site.line) if info.site else None
            if key is not None and key not in self.done:
                self.armed.add(key)  # the next step's recording on this line notes its means
            return None
        try:
            return means.get(ops.tensor_id(target))
        except (AttributeError, TypeError):
            return None

    def _report(self, site, at, examples, replicas):
        target_text, _ = diagnose.call_texts(site)
        loss = f"`{target_text}`" if target_text else "the loss"
        batch = f"this replica's batch of {examples}" if examples else "this replica's batch"
        if at is not None and site is not None and at.path == site.path:
            call = f"the `gradient` call at line {site.line}"
        else:
            call = f"the `gradient` call at {site.short()}" if site is not None else "the `gradient` call"
        self.collector.add(
            at or site, CODE, CAUSE,
            f"the `Mean` op made {'here' if at is not None else 'for this target'} (`tf.reduce_mean`, "
            f"`keras.ops.mean`) averages {loss} over {batch} inside `strategy.run` on {replicas} replicas, and "
            f"{call} differentiates it: `apply_gradients` sums the replicas' gradients, so each update is "
            f"{replicas} times too large",
            HINT, replicas=replicas, gradient_call=site.short() if site is not None else "?",
        )


def _through_identity(tensor):
    """The graph tensor behind `Identity`/`IdentityN` ops (output i of `IdentityN` is its input i)."""
    for _ in range(8):
        op = tensor.op
        if op.type not in ("Identity", "IdentityN") or not op.inputs:
            break
        tensor = op.inputs[tensor.value_index if op.type == "IdentityN" else 0]
    return tensor


def _mean_record(shape, axes, keep_dims, at):
    """(batch size or None, the op's user site) for a mean over axis 0 of a rank >= 1 input,
    else (NOT_A_BATCH_MEAN, None): a scalar's mean (a Keras loss object's result), another axis,
    `keepdims=True`, axes not known while tracing."""
    rank = shape.rank
    if not rank or keep_dims or axes is None:
        return NOT_A_BATCH_MEAN, None
    try:
        reduced = {int(a) % rank for a in axes.reshape(-1)}
    except (AttributeError, TypeError, ValueError):
        return NOT_A_BATCH_MEAN, None
    if 0 not in reduced:
        return NOT_A_BATCH_MEAN, None
    return shape[0], at

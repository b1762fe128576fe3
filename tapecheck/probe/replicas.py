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
op (its creation stack), once per trace. Eager `strategy.run` (no `tf.function`)
gives eager tensors, which keep no producer: not checked.
"""

from __future__ import annotations

from tapecheck.probe import diagnose

CODE = "TAP601"
CAUSE = "loss-not-scaled-for-replicas"
HINT = ("Sum over the global batch instead: `tf.nn.compute_average_loss(per_example_loss, "
        "global_batch_size=GLOBAL_BATCH_SIZE)`, or a Keras loss object with its default reduction.")


class ReplicaLossHooks:
    def __init__(self, collector, tapes):
        self.collector = collector
        self.tapes = tapes

    def install(self, patcher):
        self.tapes.target_listeners.append(self._gradient_taken)

    def _gradient_taken(self, info, target, sources, site):
        from tensorflow.python.distribute import distribute_lib

        context = distribute_lib.get_replica_context()
        replicas = getattr(context, "num_replicas_in_sync", 1) if context is not None else 1
        if not isinstance(replicas, int) or replicas < 2:
            return
        op = _producer(target)
        if op is None:
            return
        examples = _batch_mean(op)
        if examples is False:
            return
        _, at = diagnose._op_label(op)
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


def _producer(target):
    """The op that made a graph-tensor target, through `Identity`; None for eager tensors or structures."""
    if isinstance(target, (list, tuple, dict)):
        return None
    try:
        op = target.op
    except AttributeError:
        return None
    for _ in range(8):
        if op.type not in ("Identity", "IdentityN") or not op.inputs:
            break
        op = op.inputs[0].op
    return op


def _batch_mean(op):
    """For a `Mean` over axis 0 of a rank >= 1 input: the batch size (None when unknown); else False."""
    from tensorflow.python.framework import tensor_util

    if op.type != "Mean" or len(op.inputs) != 2:
        return False
    data, axes = op.inputs
    rank = data.shape.rank
    if not rank:
        return False  # a scalar (a Keras loss object's result): nothing per example left to average
    try:
        if op.get_attr("keep_dims"):
            return False
    except ValueError:
        pass
    value = tensor_util.constant_value(axes)
    if value is None:
        return False
    reduced = {int(a) % rank for a in value.reshape(-1)}
    if 0 not in reduced:
        return False
    return data.shape[0]

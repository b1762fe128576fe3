"""What the probe may patch, as the exact objects found now: for its restore promises.

Every attribute of every class the probe wraps methods on (and their subclasses), so a
patch added to the probe later is covered without editing this list: a wrapper left
behind, an attribute added or one deleted all show up as a difference.
"""

from __future__ import annotations

import keras
import tensorflow as tf
from tensorflow.python.data.ops import dataset_ops
from tensorflow.python.data.ops.iterator_ops import OwnedIterator
from tensorflow.python.eager.polymorphic_function.polymorphic_function import Function
from tensorflow.python.ops.variables import VariableMetaclass


def _with_subclasses_and_bases(cls) -> set[type]:
    out, stack = set(), [cls]
    while stack:
        current = stack.pop()
        if current not in out:
            out.add(current)
            stack.extend(current.__subclasses__())
    return out | {base for klass in out for base in klass.__mro__ if base is not object}


def probed_classes() -> set[type]:
    roots = (
        tf.GradientTape, keras.metrics.Metric, keras.optimizers.Optimizer,
        keras.layers.Dropout, keras.layers.BatchNormalization, keras.Model,  # its trainer: `compiled_loss`
    )
    classes = set().union(*(_with_subclasses_and_bases(root) for root in roots))
    return classes | {VariableMetaclass, OwnedIterator, dataset_ops.DatasetV2, Function}


# Python itself adds these to a class on first access; they are not the probe's doing.
LAZY_ATTRIBUTES = frozenset({"__annotations__", "__abstractmethods__"})


def patched_objects(classes=None) -> dict:
    classes = probed_classes() if classes is None else classes
    return {
        (cls, name): value
        for cls in classes
        for name, value in list(vars(cls).items())
        if name not in LAZY_ATTRIBUTES
    }


def assert_restored(before: dict) -> None:
    # classes defined since (user metrics made during the test) are not part of the promise
    after = patched_objects({cls for cls, _ in before})
    changed = [key for key in before.keys() | after.keys() if before.get(key, "absent") is not after.get(key, "absent")]
    assert not changed, f"not restored: {sorted(f'{cls.__name__}.{name}' for cls, name in changed)[:10]}"

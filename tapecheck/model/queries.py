"""Span queries over the facts: what an assignment's value or a call reads (used by the model and the rules).

Every event the extractor records carries an `order`; a call's arguments and an
assignment's value occupy an order span. Looking events up by span (bisection
over sorted orders) gives "the names this value reads" without a second walk.
"""

from __future__ import annotations

import functools
import re
from bisect import bisect_right

# Attributes that hold a model's variables: `model.trainable_variables` -> `model`.
# Two spellings of one list of variables.
SAME_LIST = {"trainable_weights": "trainable_variables", "weights": "variables"}
VARIABLE_ATTRIBUTES = frozenset(
    {"trainable_variables", "trainable_weights", "variables", "weights", "trainable_params"}
)
# Parts of a dotted name that are static metadata, never a tensor on a gradient path.
METADATA_ATTRIBUTES = frozenset({"shape", "ndim", "dtype", "name", "device", "rank"})
# The Keras model classes, in every flavour's spelling (`keras.Model`, `tf.keras.models.Sequential`...).
MODEL_CLASSES = frozenset(
    f"{root}{name}"
    for root in ("keras.", "tensorflow.keras.", "tf_keras.", "keras.models.", "tensorflow.keras.models.")
    for name in ("Model", "Sequential")
)
# Calls whose result is static metadata (an integer, a shape): no gradient to cut.
METADATA_CALLS = frozenset(
    {
        "len", "tensorflow.shape", "tensorflow.size", "tensorflow.rank", "tensorflow.shape_n",
        "keras.ops.shape", "keras.ops.size", "tensorflow.keras.backend.shape", "keras.backend.shape",
    }
)


class Spans:
    """Uses and calls of one file, sorted by order, looked up by order span. Built with the file's
    model (`ProgramModel.spans`, `spans_of`)."""

    def __init__(self, facts):
        self.uses, self._use_orders = _by_order(facts.uses)
        self.calls, self._call_orders = _by_order(facts.calls)

    def uses_in(self, span: tuple[int, int]):
        start, end = span
        return self.uses[bisect_right(self._use_orders, start): bisect_right(self._use_orders, end)]

    def calls_in(self, span: tuple[int, int]):
        start, end = span
        return self.calls[bisect_right(self._call_orders, start): bisect_right(self._call_orders, end)]


def _by_order(events) -> tuple[list, list[int]]:
    """The events sorted by order (stable), and their orders. The walk records most in order
    already: then the list is copied, not sorted."""
    orders = [event.site.order for event in events]
    if all(a <= b for a, b in zip(orders, orders[1:])):
        return list(events), orders
    ordered = sorted(events, key=lambda event: event.site.order)
    return ordered, [event.site.order for event in ordered]


def call_span(call) -> tuple[int, int]:
    return (call.site.order, call.end_order)


def within(order: int, span: tuple[int, int]) -> bool:
    return span[0] < order <= span[1]


def method_of(call) -> str:
    """`numpy` for `x.numpy()` and for `model(x).numpy()`."""
    return call.method or call.func.method


def callee_of(facts, call) -> str:
    text = call.func.text
    return facts.resolved_name(text) if text else ""


@functools.lru_cache(maxsize=8192)  # asked of the same names for every value the flow tracer judges
def is_metadata(name: str) -> bool:
    """`x.shape`, `x.shape[0]`, `images.dtype`: static facts about a tensor."""
    return any(part in METADATA_ATTRIBUTES for part in name.split(".")[1:])


@functools.lru_cache(maxsize=8192)  # asked of the same names for every value the flow tracer judges
def prefixes(name: str) -> tuple[str, ...]:
    """`a.b.c`, `a.b`, `a`: a dotted name and the objects it is read through."""
    if "." not in name:
        return (name,)
    parts = name.split(".")
    return tuple(".".join(parts[:end]) for end in range(len(parts), 0, -1))


def variable_owner(text: str) -> str:
    """`model` for `model.trainable_variables`, "" for anything else."""
    owner, _, attribute = text.rpartition(".")
    return owner if owner and attribute in VARIABLE_ATTRIBUTES else ""


# A method (or attribute) of an object that hands back some of its variables, named so:
# `policy.critic_trainable_variables(key)`, `agent.get_trainable_variables()`, `net.actor_params`.
VARIABLES_NAMED = re.compile(r"^(?:get_)?(?:[a-z0-9]+_)*(?:trainable_)?(?:variables|weights|params|parameters)$")
NOT_VARIABLES = frozenset({"get_weights", "set_weights", "count_params", "get_params", "set_params"})


def variables_owner(text: str) -> str:
    """`policy` for `policy.critic_trainable_variables` (a method or an attribute whose name says it
    holds variables) as well as for `policy.trainable_variables`; "" otherwise. Not the NumPy
    copies (`get_weights`) nor the non-trainable ones."""
    owner = variable_owner(text)
    if owner:
        return owner
    owner, _, attribute = text.rpartition(".")
    if (not owner or attribute in NOT_VARIABLES or "non_trainable" in attribute
            or VARIABLES_NAMED.match(attribute) is None):
        return ""
    return owner

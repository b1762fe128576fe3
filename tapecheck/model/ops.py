"""What an op does to a gradient: which calls cut the path from their inputs (`.numpy()`,
NumPy, `float()`, argmax, rounding, integer casts), which give a zero gradient (`tf.sign`),
which stop it on purpose, and which take indices. Plain data and two small questions
(`cuts`, `describe`); the flow tracer (`flow.py`) asks them at every call it meets.
"""

from __future__ import annotations

import re

from tapecheck.lint.facts import Call, FileFacts
from tapecheck.model.queries import METADATA_CALLS, callee_of, method_of


# -- what cuts a gradient path --------------------------------------------------------
NO_GRADIENT_OPS = frozenset(
    {
        "tensorflow.argmax", "tensorflow.argmin", "tensorflow.math.argmax", "tensorflow.math.argmin",
        "tensorflow.round", "tensorflow.math.round",
        "keras.ops.argmax", "keras.ops.argmin", "keras.ops.round",
        "tensorflow.floor", "tensorflow.math.floor", "tensorflow.math.ceil", "keras.ops.floor", "keras.ops.ceil",
    }
)


# Ops whose gradient is zero everywhere (not None): the weights behind them never move, silently.
ZERO_GRADIENT_OPS = frozenset({"tensorflow.sign", "tensorflow.math.sign", "keras.ops.sign"})


CASTS = frozenset({"tensorflow.cast", "tensorflow.dtypes.cast", "keras.ops.cast"})


PYTHON_CASTS = frozenset({"float", "int", "round"})


INTEGER_DTYPE = re.compile(r"(u?int(8|16|32|64)|bool)")


# Calls through which nothing flows, by design or because the result is metadata.
STOP_GRADIENT_CALLS = frozenset({"tensorflow.stop_gradient", "keras.ops.stop_gradient"})


# Methods of a Keras model that run it in their own loop and return NumPy arrays.
PREDICT_METHODS = frozenset({"predict", "predict_on_batch"})


# Reads inside these make no value the loss depends on: printing, shapes. A `stop_gradient` does
# make one, cut on purpose (a `deliberate` Cut): fine beside a live path, not as the only one.
STOP_CALLS = frozenset({"print", "tensorflow.print"}) | METADATA_CALLS


# Calls that take indices or draw samples: a cut value used there is a choice, not a value.
INDEX_CALLS = frozenset(
    {
        "tensorflow.gather", "tensorflow.gather_nd", "tensorflow.one_hot", "tensorflow.boolean_mask",
        "tensorflow.nn.embedding_lookup", "tensorflow.random.categorical", "tensorflow.range",
        "keras.ops.take", "keras.ops.take_along_axis", "keras.ops.one_hot",
    }
)


CONDITIONAL_BLOCKS = frozenset({"if", "else", "except", "match", "for", "while", "try", "finally"})


GUARD_BLOCKS = frozenset({"if", "else", "except", "match"})


MAX_ALIAS_DEPTH = 8


MAX_CALL_DEPTH = 40  # summaries computed inside one another; deeper calls are unknown


def describe(call: Call) -> str:
    if method_of(call) == "numpy" and not call.args:
        return "`.numpy()`"
    return f"`{call.func.text}()`" if call.func.text else f"`.{method_of(call)}()`"


def cuts(facts: FileFacts, call: Call) -> bool:
    """Whether this call returns a value with no gradient back to its inputs."""
    callee = callee_of(facts, call)
    if method_of(call) == "numpy" and not call.args and not callee.startswith(("numpy", "tensorflow")):
        return True
    if callee.startswith("numpy.") and not callee.startswith("numpy.random."):
        return True
    if call.func.kind == "name" and call.func.text in PYTHON_CASTS and call.func.text not in facts.imports:
        return True
    if callee in NO_GRADIENT_OPS or callee in ZERO_GRADIENT_OPS:
        return True
    if callee in CASTS:
        dtype = call.arg(1, "dtype")
        if dtype is not None:
            text = dtype.text.rsplit(".", 1)[-1] if dtype.text else str(dtype.value or "")
            return bool(INTEGER_DTYPE.fullmatch(text))
    return False

'''# TAP501 python-side-effect-in-function

## What it does
Inside a function compiled with `@tf.function` (or wrapped by
`tf.function(f)`), flags Python code that only runs while the function is
traced: `.numpy()`, `float()`/`int()`/`bool()` of a tensor, `print` of a tensor,
draws from Python's `random` or `np.random`, and a tensor appended to a list made
outside the function (`self.history.append(loss)`: one symbolic tensor, once).
The same holds in a function mapped over a `tf.data` dataset (`Dataset.map`
traces it), an object's `__call__`
given to `map` (`ds.map(Augmenter(0.1))`) included, and in the functions and
methods these call. A dataset is followed from its `tf.data` call through rebinding
(`ds = ds.shuffle(1024)`), chained dataset methods, functions that return it and
the parameters its callers fill with it; a `.map` of anything else (a pandas
column) is left alone. Static shapes (`x.shape[0]`) and the bodies of
`tf.py_function`/`tf.numpy_function` are left alone.

## Why is this bad?
`tf.function` runs the Python body once (per input signature) to build a graph,
then runs the graph. While tracing, tensors are symbolic: `.numpy()` raises
`AttributeError: 'SymbolicTensor' object has no attribute 'numpy'` and
`float(loss)` raises `TypeError`. A `print` shows `Tensor("add:0", ...)` once and
never again. A random number drawn with `np.random` (a mixup weight, a dropout
mask, an augmentation choice) is drawn once and frozen into the graph as a
constant: every step uses the same value, silently.

## Example
```python
import numpy as np
import tensorflow as tf

@tf.function
def train_step(model, optimizer, x, y):
    lam = np.random.beta(0.2, 0.2)
    mixed_x = lam * x + (1.0 - lam) * tf.reverse(x, axis=[0])
    mixed_y = lam * y + (1.0 - lam) * tf.reverse(y, axis=[0])
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(mixed_x, training=True) - mixed_y))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    print("loss", loss)
    return loss
```

## Use instead
```python
import tensorflow as tf

@tf.function
def train_step(model, optimizer, x, y):
    gamma_a = tf.random.gamma([], 0.2)
    lam = gamma_a / (gamma_a + tf.random.gamma([], 0.2))
    mixed_x = lam * x + (1.0 - lam) * tf.reverse(x, axis=[0])
    mixed_y = lam * y + (1.0 - lam) * tf.reverse(y, axis=[0])
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(mixed_x, training=True) - mixed_y))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    tf.print("loss", loss)
    return loss
```
'''

from __future__ import annotations

from tapecheck.rules._common import calls_map_method, names_tf_function, report
from tapecheck.model import (
    METADATA_CALLS,
    TF_FUNCTIONS,
    call_span,
    callee_of,
    dataset_map,
    is_metadata,
    mapped_function,
    method_of,
    model_of,
    spans_of,
    within,
)

CODE = "TAP501"
NAME = "python-side-effect-in-function"
SUMMARY = "inside `@tf.function`: `.numpy()`, `float(t)`, `print(t)` or Python randomness run only at trace time"
PROBE = False  # no runtime twin in tapecheck.probe yet


def screen(source: bytes) -> bool:
    """`tf.function` through any spelling the facts resolve (`names_tf_function`: `tf.function`,
    `tensorflow.compat.v2.function`, an alias `import tensorflow as tf2`, `from tensorflow import
    compat` then `compat.v2.function`, `from tensorflow import function`, a `tf` of a star import);
    or a `.map(` of a `tf.data` dataset."""
    if calls_map_method(source):
        return True  # a function mapped over a tf.data dataset (made here or by another module) is traced
    return names_tf_function(source)


# Their function arguments run eagerly, on real values: anything goes there.
EAGER_ISLANDS = frozenset(
    {"tensorflow.py_function", "tensorflow.numpy_function", "tensorflow.compat.v1.py_func"}
)
PYTHON_CONVERSIONS = frozenset({"float", "int", "bool", "complex"})
NOT_TENSORS = frozenset({"self", "cls"})
# Parameters annotated as Python values: tf.function retraces for each value, they are not tensors.
PYTHON_ANNOTATIONS = frozenset({"int", "float", "bool", "str"})

VALID = [
    # a list built inside the function and stacked, a list handed in, a trace counter
    """
import tensorflow as tf
traces = []
@tf.function
def unrolled(model, x, extra):
    outputs = []
    for i in range(3):
        outputs.append(model(x[i]))
    extra.append(x)
    traces.append(1)
    return tf.stack(outputs)
""",
    # the same object drawing with tf.random: a new draw for every element
    """
import tensorflow as tf
class Augmenter:
    def __init__(self, strength):
        self.strength = strength
    def __call__(self, image, label):
        return image + tf.random.normal((28, 28, 1), stddev=self.strength), label
def make_dataset(images, labels):
    return tf.data.Dataset.from_tensor_slices((images, labels)).map(Augmenter(0.1)).batch(32)
""",
    # pandas' Series.map runs the function eagerly, for each value
    """
import numpy as np
import pandas as pd
def noisy(value):
    return value * np.random.uniform(0.9, 1.1)
frame = pd.read_csv("data.csv")
frame["x"] = frame["x"].map(noisy)
""",
    # `.map` of a parameter the callers fill with a pandas column: it runs `noisy` per value
    """
import numpy as np
import pandas as pd
import tensorflow as tf
def noisy(value):
    return value * np.random.uniform(0.9, 1.1)
def jitter_column(column):
    column = column.map(noisy)
    return column
frame = pd.read_csv("data.csv")
frame["x"] = jitter_column(frame["x"])
dataset = tf.data.Dataset.from_tensor_slices(frame.values)
""",
    # a helper given only Python values prints them: once per trace, as meant
    """
import tensorflow as tf
def announce(name, step):
    print("tracing", name, "at", step)
@tf.function
def train_step(model, x, step: int):
    announce("train_step", step)
    return tf.reduce_mean(model(x))
""",
    # Python values and a trace marker: printed once on purpose, or never tensors
    """
import tensorflow as tf
@tf.function
def step(model, opt, x, n_steps: int):
    print("Tracing with", x)
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(model(x))
    grads = tape.gradient(loss, model.trainable_variables)
    print("missing gradient:", grads[0] is None, n_steps)
    opt.apply_gradients(zip(grads, model.trainable_variables))
""",
    # tf.print, tf.random, static shapes, and .numpy() outside the function
    """
import tensorflow as tf
@tf.function
def train_step(model, opt, x, y):
    batch = int(x.shape[0])
    noise = tf.random.normal(tf.shape(x), stddev=0.1)
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x + noise, training=True) - y)) / batch
    opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    tf.print("loss", loss)
    print("tracing train_step")
    return loss
def fit(model, opt, ds):
    for x, y in ds:
        print(float(train_step(model, opt, x, y)), train_step(model, opt, x, y).numpy())
""",
    # numpy code inside tf.numpy_function runs eagerly at every step
    """
import numpy as np
import tensorflow as tf
@tf.function
def augment(image):
    def jitter(img):
        return (img + np.random.normal(0.0, 0.1, img.shape)).astype(np.float32)
    out = tf.numpy_function(lambda img: img.numpy() if hasattr(img, "numpy") else img, [image], tf.float32)
    return tf.numpy_function(jitter, [out], tf.float32)
""",
    # debugging with every tf.function run eagerly
    """
import tensorflow as tf
tf.config.run_functions_eagerly(True)
@tf.function
def train_step(model, x):
    y = model(x)
    print("output", y.numpy())
    return y
""",
    # the same code without tf.function runs eagerly: fine
    """
import numpy as np
import tensorflow as tf
def eager_step(model, opt, x, y):
    lam = np.random.beta(0.2, 0.2)
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(lam * x, training=True) - y))
    opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    print("loss", float(loss), loss.numpy())
""",
]

INVALID = [
    # the trainer's history list gets one symbolic tensor, at trace time
    """
import tensorflow as tf
class Trainer:
    def __init__(self):
        self.history = []
    @tf.function
    def train_step(self, x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(self.model(x, training=True) - y))
        self.opt.apply_gradients(zip(tape.gradient(loss, self.model.trainable_variables), self.model.trainable_variables))
        self.history.append(loss)  # expect: TAP501
        return loss
""",
    # an augmentation object mapped over a dataset: its __call__ is traced once
    """
import numpy as np
import tensorflow as tf
class Augmenter:
    def __init__(self, strength):
        self.strength = strength
    def __call__(self, image, label):
        noise = np.random.normal(0, self.strength, size=(28, 28, 1)).astype("float32")  # expect: TAP501
        return image + noise, label
def make_dataset(images, labels):
    augment = Augmenter(0.1)
    return tf.data.Dataset.from_tensor_slices((images, labels)).map(augment).batch(32)
""",
    # Dataset.map traces its function: the NumPy draw happens once
    """
import numpy as np
import tensorflow as tf
def augment(image, label):
    return image * np.random.uniform(0.8, 1.2), label  # expect: TAP501
train = tf.data.Dataset.from_tensor_slices((images, labels)).map(augment).batch(32)
""",
    # a loader method maps another method over a dataset it built in steps, and a helper maps
    # over the dataset its caller passes: both functions are traced once
    """
import random
import numpy as np
import tensorflow as tf
def random_flip(image):
    if random.random() < 0.5:  # expect: TAP501
        image = tf.image.flip_left_right(image)
    return image
def prepare(dataset, batch_size):
    dataset = dataset.map(random_flip)
    return dataset.batch(batch_size)
class Loader:
    def __init__(self, images):
        self.images = images
    def _augment(self, image):
        return image + np.random.normal(0.0, 0.1)  # expect: TAP501
    def build(self):
        ds = tf.data.Dataset.from_tensor_slices(self.images)
        ds = ds.shuffle(1024).repeat()
        ds = ds.map(self._augment, num_parallel_calls=tf.data.AUTOTUNE)
        return prepare(ds, 32)
""",
    # a helper the traced step calls runs while tracing too
    """
import numpy as np
import tensorflow as tf
def log_step(tag, loss):
    print(tag, loss)  # expect: TAP501
    return loss
def augment(images):
    return images * np.random.uniform(0.8, 1.2)  # expect: TAP501
@tf.function
def train_step(model, opt, images, labels):
    images = augment(images)
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(images, training=True) - labels))
    opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    return log_step("train", loss)
""",
    """
import random
import tensorflow as tf
class Trainer:
    @tf.function(reduce_retracing=True)
    def train_step(self, x, y):
        if random.random() < 0.5:  # expect: TAP501
            x = tf.image.flip_left_right(x)
        with tf.GradientTape() as tape:
            loss = self.loss_fn(y, self.model(x, training=True))
        grads = tape.gradient(loss, self.model.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
        self.history.append(loss.numpy())  # expect: TAP501
        return float(loss)  # expect: TAP501
""",
    """
import tensorflow as tf
def val_step(model, x, y):
    pred = model(x, training=False)
    accuracy = tf.reduce_mean(tf.cast(tf.argmax(pred, -1) == y, tf.float32))
    print("val accuracy", accuracy)  # expect: TAP501
    return accuracy
val_step = tf.function(val_step)
""",
]


# What traces a function, and what then reuses each value frozen into its graph.
FUNCTION = ("tf.function", "step")
MAP = ("`Dataset.map`", "element")


def _graph_functions(facts) -> dict[int, tuple[str, str, tuple[str, str]]]:
    """Function blocks that run traced: decorated with tf.function, wrapped by it, or mapped
    over a `tf.data` dataset (Dataset.map traces its function, and an object's `__call__`):
    block id -> (how the message says it runs traced, the function's name, FUNCTION or MAP)."""
    model = model_of(facts)
    wrapped = set()
    mapped: dict[int, tuple[str, str, tuple[str, str]]] = {}
    for call in facts.calls:
        if not call.args:
            continue
        is_map = dataset_map(model, call)
        if not (is_map or callee_of(facts, call) in TF_FUNCTIONS):
            continue
        arg = call.args[0]
        if is_map:
            method = mapped_function(model, arg, call.site)
            if method is not None:
                mapped.setdefault(method.block.id, (  # the first `map` of it names it
                    f"in `{method.qualname}`, which `Dataset.map` (line {call.site.line}) traces",
                    method.qualname, MAP,
                ))
                continue
        if arg.text:
            wrapped.add(arg.text.rsplit(".", 1)[-1])
    found = {
        block.id: (f"in `@tf.function` `{block.name}`", block.name, FUNCTION)
        for block in facts.blocks
        if block.kind == "function" and (set(block.decorators) & TF_FUNCTIONS or block.name in wrapped)
    }
    return {**mapped, **found}


def _tensor_names(facts, spans, function_id, params=None) -> set[str]:
    """Parameters of the function (those in `params`, when given) and the names computed from them
    or from TensorFlow calls."""
    names = {
        a.target for a in facts.assigns_in_scope(function_id)
        if a.kind == "param" and a.target not in NOT_TENSORS
        and a.annotation not in PYTHON_ANNOTATIONS and (params is None or a.target in params)
    }
    local = sorted(
        (a for a in facts.assigns_in_scope(function_id) if a.kind in ("assign", "augassign")),
        key=lambda a: a.site.order,
    )
    for assign in local:
        calls = spans.calls_in(assign.span)
        if calls and callee_of(facts, calls[0]) in METADATA_CALLS | PYTHON_CONVERSIONS:
            continue
        if _reads_tensor(facts, spans, assign.span, names) or any(
            callee_of(facts, c).startswith(("tensorflow.", "keras.")) for c in calls
        ):
            names.add(assign.target)
    return names


def _reads_tensor(facts, spans, span, names) -> bool:
    static = [call_span(c) for c in spans.calls_in(span) if callee_of(facts, c) in METADATA_CALLS]
    # `g is None`, `x is not y`: a Python bool about the object, never a tensor
    static += [(c.site.order, c.end_order) for c in model_of(facts).compares_in(span) if c.operator in ("is", "is not")]
    for use in spans.uses_in(span):
        if is_metadata(use.name) or any(within(use.site.order, s) for s in static):
            continue
        if use.name in names or use.name.split(".", 1)[0] in names:
            return True
    return False


def _finding(facts, spans, call, names, tracer=FUNCTION) -> tuple[str, str] | None:
    """(what happens, what to do) for a trace-time-only call, else None. `tracer`: FUNCTION or MAP."""
    callee = callee_of(facts, call)
    by, each = tracer
    if method_of(call) == "numpy" and not call.args and not callee.startswith(("numpy", "tensorflow")):
        return (
            f"`.numpy()` raises AttributeError here: tensors are symbolic while {by} traces",
            "Keep it a tensor inside the function; call .numpy() on the returned value.",
        )
    if callee.startswith("numpy.random.") or (callee.startswith("random.") and facts.imports.get("random") == "random"):
        return (
            f"`{call.func.text}()` runs once, while {by} traces: its value is frozen into the graph "
            f"and every {each} reuses it",
            "Draw it with tf.random (or a tf.random.Generator) inside the function.",
        )
    appended = call.args[0] if len(call.args) == 1 else None
    converted = appended is not None and appended.kind == "call" and (
        appended.method == "numpy" or appended.func_text in PYTHON_CONVERSIONS)  # reported as itself
    if (method_of(call) == "append" and appended is not None and not converted and not call.keywords
            and _outer_list(facts, call) and _reads_tensor(facts, spans, call_span(call), names)):
        # a list made outside the function (`self.history`, a global): appended to once, while tracing
        return (
            f"`{call.receiver}.append()` runs once, while {by} traces: the list keeps a symbolic tensor "
            "(using it later raises TypeError: out of scope) and later calls append nothing",
            "Return the value and append it outside the function, or keep it in a tf.Variable, a "
            "tf.TensorArray or a Keras metric.",
        )
    if call.func.kind != "name" or call.func.text in facts.imports:
        return None
    if call.func.text in PYTHON_CONVERSIONS and _reads_tensor(facts, spans, call_span(call), names):
        return (
            f"`{call.func.text}()` of a tensor raises TypeError here: the tensor is symbolic while {by} traces",
            "Keep it a tensor (tf.cast) inside the function; convert the returned value outside.",
        )
    if call.func.text == "print" and _reads_tensor(facts, spans, call_span(call), names) and not _trace_marker(call):
        return (
            f"`print` of a tensor runs only while {by} traces: it shows a symbolic tensor once, "
            "then never again",
            "Use tf.print to print at every step.",
        )
    return None


def _outer_list(facts, call) -> bool:
    """`self.history.append(...)` in a method, `losses.append(...)` of a module-level or enclosing
    list: the list outlives the trace. A list bound in the function itself (a parameter, a local
    built up and stacked) is left alone."""
    receiver = call.receiver
    if not receiver or facts.reaching_assigns(receiver, call.site):
        return False
    head, dot, _ = receiver.partition(".")
    if not dot:
        return True
    fn = model_of(facts).functions.get(facts.scope_of(call.site))
    return (fn is not None and fn.bound and head == fn.self_name) or not facts.reaching_assigns(head, call.site)


def _trace_marker(call) -> bool:
    """`print("Tracing with", x)`: a print that says it is about tracing is meant to run once."""
    first = call.args[0] if call.args else None
    return first is not None and isinstance(first.value, str) and "trac" in first.value.lower()


def _runs_eagerly(facts) -> bool:
    """`tf.config.run_functions_eagerly(True)` in the file: its functions run as plain Python."""
    return any(
        callee_of(facts, call) == "tensorflow.config.run_functions_eagerly"
        and call.arg(0, "run_eagerly") is not None
        and call.arg(0, "run_eagerly").value is True
        for call in facts.calls
    )


def check(facts):
    functions = _graph_functions(facts)
    if not functions or _runs_eagerly(facts):
        return
    spans = spans_of(facts)
    islands = [call_span(c) for c in facts.calls if callee_of(facts, c) in EAGER_ISLANDS]
    traced = {function_id: (where, None, name, tracer) for function_id, (where, name, tracer) in functions.items()}
    pending = list(traced)
    model = model_of(facts)
    while pending:  # the functions a traced function calls are traced too, while it traces
        function_id = pending.pop(0)
        params = traced[function_id][1]
        names = _tensor_names(facts, spans, function_id, params)
        for call in facts.calls_in_scope(function_id):
            if any(within(call.site.order, s) for s in islands):
                continue
            found = _finding(facts, spans, call, names, traced[function_id][3])
            if found is not None:
                yield report(facts, call.site, CODE, f"{traced[function_id][0]}: {found[0]}", found[1])
            callee = model.resolve(call)
            if callee is None or callee.block.id in traced or callee.model is not model:
                continue
            root, tracer = traced[function_id][2], traced[function_id][3]
            traced[callee.block.id] = (
                f"in `{callee.qualname}`, which `{root}` calls at line {call.site.line} while {tracer[0]} traces it",
                _tensor_params(model, call, callee, names),
                root, tracer,
            )
            pending.append(callee.block.id)


def _tensor_params(model, call, callee, names) -> set[str]:
    """The parameters of `callee` this call gives a tensor: a tensor name of the caller, or a
    TensorFlow call. Python values (a string, a step count) stay Python values."""
    params = set()
    for key, start, end in call.arg_spans:
        uses = model.spans.uses_in((start, end))
        calls = model.spans.calls_in((start, end))
        tensor = any(u.name.split(".", 1)[0] in names for u in uses) or any(
            callee_of(model.facts, c).startswith(("tensorflow.", "keras.")) for c in calls
        )
        order = uses[0].site.order if uses else (calls[0].site.order if calls else None)
        param = model.parameter(call, callee, order) if order is not None else None
        if tensor and param:
            params.add(param)
    return params

'''# TAP103 unwatched-tensor

## What it does
Flags `tape.gradient(target, x)` where `x` is a plain tensor (made by
`tf.constant`, `tf.convert_to_tensor`, another TensorFlow op, a NumPy call, or
a tensor slice such as `inputs[:, 0]`) that the tape never `watch`ed, or a name
bound to arithmetic that never yields a variable (`scaled = images / 255.0`,
`-x`, `a @ b`: a tensor or a NumPy array). It also flags variables asked from a
tape made with `watch_accessed_variables=False` that never watches them,
variables made with `trainable=False` (followed through aliases and `self.`
attributes), a layer's `non_trainable_variables` (its BatchNormalization
statistics: `[None, None]` in TF 2.21) with no `watch`, and a variable that the
training loop rebinds to a tensor with a manual update (`w = w - lr * g`): from
the second pass on it is a plain tensor. And a Keras model or layer given itself
as the sources (`tape.gradient(loss, self.model)`), instead of its
`trainable_variables`, and a layer's symbolic `.output` given as a source
(`model.get_layer("conv").output`, `model.layers[-3].output`: the Grad-CAM
mistake), which no call of the model computed.

## Why is this bad?
A tape follows `tf.Variable`s it sees used, and nothing else unless told to:
every other tensor is a constant to it. The gradient with respect to an
unwatched tensor is `None`, silently, even when the target clearly depends on
it. Input gradients (saliency maps, adversarial examples, physics-informed
losses, gradient penalties) all need `tape.watch`. A model is not a structure of
tensors: given as the sources, `gradient` fails with an AttributeError about `_id`
that names neither the model nor the fix.

## Example
```python
import tensorflow as tf

x = tf.constant([1.0, 2.0, 3.0])
with tf.GradientTape(persistent=True) as tape:
    y = tf.reduce_sum(x ** 2)
dy_dx = tape.gradient(y, x)  # None
del tape
```

## Use instead
```python
import tensorflow as tf

x = tf.constant([1.0, 2.0, 3.0])
with tf.GradientTape() as tape:
    tape.watch(x)
    y = tf.reduce_sum(x ** 2)
dy_dx = tape.gradient(y, x)  # [2.0, 4.0, 6.0]
```
'''

from tapecheck.model import (
    MODEL_CLASSES,
    VARIABLE_CLASSES,
    Expr,
    Function,
    Klass,
    callee_of,
    is_keras_class,
    is_metadata,
    method_of,
    model_of,
)
from tapecheck.rules._common import flatten, report

CODE = "TAP103"
NAME = "unwatched-tensor"
SUMMARY = "a gradient is asked for a tensor the tape never watched"
PROBE = True
TRIGGERS = (b"GradientTape",)

# Modules whose lower-case functions return plain tensors (never variables).
TENSOR_MODULES = frozenset(
    {"tensorflow", "tensorflow.math", "tensorflow.random", "tensorflow.linalg", "tensorflow.image", "tensorflow.signal"}
)

VALID = [
    # Grad-CAM done right: a model that returns the layer's output, called inside the tape
    """
import tensorflow as tf
def gradcam(model, images, layer_name):
    grad_model = tf.keras.Model(model.inputs, [model.get_layer(layer_name).output, model.output])
    with tf.GradientTape() as tape:
        activations, preds = grad_model(images)
        score = preds[:, 0]
    return tape.gradient(score, activations)
""",
    # an activation this call computed, kept on self: the tape recorded it
    """
import tensorflow as tf
class Probe:
    def run(self, x):
        with tf.GradientTape() as tape:
            self.features = self.encoder(x)
            score = tf.reduce_sum(self.head(self.features))
        return tape.gradient(score, self.features)
""",
    # the normalised input watched; and two models' variable lists joined with `+`
    """
import tensorflow as tf
def input_saliency(model, images):
    scaled = images / 255.0
    with tf.GradientTape() as tape:
        tape.watch(scaled)
        top = tf.reduce_max(model(scaled), axis=-1)
    return tape.gradient(top, scaled)
def joint_step(encoder, head, x, y, opt):
    variables = encoder.trainable_variables + head.trainable_variables
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(head(encoder(x)) - y))
    grads = tape.gradient(loss, variables)
    opt.apply_gradients(zip(grads, variables))
""",
    # the statistics watched first: their gradients exist
    """
import tensorflow as tf
def sensitivity(bn, x):
    with tf.GradientTape() as tape:
        tape.watch([v.value for v in bn.non_trainable_variables])  # Keras 3 variables: watch their values
        loss = tf.reduce_sum(bn(x, training=False))
    return tape.gradient(loss, bn.non_trainable_variables)
""",
    # the trainer is also made with something we cannot name: the source may be anything
    """
import tensorflow as tf
def build_model():
    return tf.keras.Sequential([tf.keras.layers.Dense(1)])
class Probe:
    def __init__(self, target):
        self.target = target
    def step(self, x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(x * 2.0)
        return tape.gradient(loss, self.target)
a = Probe(build_model())
b = Probe(tf.constant(1.0))
""",
    # the model's variables, and a model passed in (we cannot tell what it is)
    """
import tensorflow as tf
model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
def step(net, x):
    with tf.GradientTape(persistent=True) as tape:
        loss = tf.reduce_mean(net(x)) + tf.reduce_mean(model(x))
    grads = tape.gradient(loss, model.trainable_variables), tape.gradient(loss, net)
    del tape
    return grads
""",
    """
import tensorflow as tf
def saliency(model, images):
    images = tf.convert_to_tensor(images)
    with tf.GradientTape() as tape:
        tape.watch(images)
        score = tf.reduce_max(model(images), axis=1)
    return tape.gradient(score, images)
""",
    # a variable is watched automatically
    """
import tensorflow as tf
w = tf.Variable(3.0)
with tf.GradientTape() as tape:
    y = w * w
g = tape.gradient(y, w)
""",
    # updated in place, and a counter rebound outside the gradient's sources
    """
import tensorflow as tf
w = tf.Variable(0.0)
step = tf.Variable(0, trainable=False)
for _ in range(3):
    with tf.GradientTape() as tape:
        loss = (3.0 * w - 1.0) ** 2
    w.assign_sub(0.1 * tape.gradient(loss, w))
    step = step + 1
""",
    # watched through a list
    """
import tensorflow as tf
x = tf.constant(1.0)
t = tf.constant(0.5)
with tf.GradientTape() as tape:
    tape.watch([x, t])
    u = x * t
grads = tape.gradient(u, [x, t])
""",
    # the tape goes to a helper, which may watch
    """
import tensorflow as tf
def f(helper):
    x = tf.constant(1.0)
    with tf.GradientTape() as tape:
        helper(tape, x)
        y = x * 2.0
    return tape.gradient(y, x)
""",
]

INVALID = [
    # a layer's symbolic output as the source, inline and through a name
    """
import tensorflow as tf
def gradcam(model, images, layer_name):
    with tf.GradientTape() as tape:
        score = model(images)[:, 0]
    return tape.gradient(score, model.get_layer(layer_name).output)  # expect: TAP103
def layer_saliency(model, x):
    features = model.layers[-3].output
    with tf.GradientTape() as tape:
        score = model(x)[:, 0]
    return tape.gradient(score, features)  # expect: TAP103
class GradCAM:
    def __init__(self, model, layer_name):
        self.model = model
        self.activations = model.get_layer(layer_name).output
    def heatmap(self, images):
        with tf.GradientTape() as tape:
            score = self.model(images)[:, 0]
        return tape.gradient(score, self.activations)  # expect: TAP103
""",
    # a saliency helper differentiating by the normalised input it made itself
    """
import tensorflow as tf
def input_saliency(model, images):
    scaled = images / 255.0
    with tf.GradientTape() as tape:
        top = tf.reduce_max(model(scaled), axis=-1)
    return tape.gradient(top, scaled)  # expect: TAP103
""",
    # a trainer asking for the BatchNormalization statistics (not watched: [None, None])
    """
import tensorflow as tf
class StatsProbe:
    def __init__(self, bn):
        self.bn = bn
    def sensitivity(self, x):
        stats = self.bn.non_trainable_variables
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(self.bn(x, training=False))
        return tape.gradient(loss, stats)  # expect: TAP103
def frozen_grads(model, x):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model(x))
    return tape.gradient(loss, model.non_trainable_weights)  # expect: TAP103
""",
    # the model built by a function and handed to the trainer that passes it as the sources
    """
import tensorflow as tf
def build_model():
    return tf.keras.Sequential([tf.keras.layers.Dense(1)])
class Trainer:
    def __init__(self, model):
        self.model = model
        self.opt = tf.keras.optimizers.Adam()
    def step(self, x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(self.model(x, training=True) - y))
        grads = tape.gradient(loss, self.model)  # expect: TAP103
        self.opt.apply_gradients(zip(grads, self.model.trainable_variables))
trainer = Trainer(build_model())
""",
    # the model itself given as the sources
    """
import tensorflow as tf
class Trainer:
    def __init__(self):
        self.model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
        self.opt = tf.keras.optimizers.Adam()
    def step(self, x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(self.model(x, training=True) - y))
        grads = tape.gradient(loss, self.model)  # expect: TAP103
        self.opt.apply_gradients(zip(grads, self.model.trainable_variables))
""",
    # a tensor made by arithmetic on a constant is still a plain tensor
    """
import tensorflow as tf
base = tf.constant([1.0, 2.0])
scaled = base * 2.0 + 1.0
with tf.GradientTape() as tape:
    out = tf.reduce_sum(scaled ** 2)
g = tape.gradient(out, scaled)  # expect: TAP103
""",
    # a manual update rebinds the variable to a tensor: None from the second pass on
    """
import tensorflow as tf
w = tf.Variable(0.0)
for _ in range(3):
    with tf.GradientTape() as tape:
        loss = (3.0 * w - 1.0) ** 2
    g = tape.gradient(loss, w)  # expect: TAP103
    w = w - 0.1 * g
""",
    # a non-trainable variable, asked for through an attribute alias
    """
import tensorflow as tf
class Scaler:
    def __init__(self):
        self.scale = tf.Variable(1.0, trainable=False)
    def grad(self, x):
        scale = self.scale
        with tf.GradientTape() as tape:
            y = scale * x
        return tape.gradient(y, scale)  # expect: TAP103
""",
    """
import tensorflow as tf
def input_gradient(model, batch):
    x = batch[:, 0]
    with tf.GradientTape() as tape:
        y = model(x)
    return tape.gradient(y, x)  # expect: TAP103
""",
    """
import numpy as np
import tensorflow as tf
x = np.linspace(0.0, 1.0, 8)
with tf.GradientTape() as tape:
    y = tf.sin(x)
g = tape.gradient(y, x)  # expect: TAP103
""",
    """
import tensorflow as tf
w = tf.Variable(2.0)
with tf.GradientTape(watch_accessed_variables=False) as tape:
    y = w * w
g = tape.gradient(y, [w])  # expect: TAP103
""",
]


def _kind_of(value) -> str:
    """'tensor', 'variable' or '' (unknown) for the value a name was bound to."""
    if value is None:
        return ""
    if value.kind == "subscript" and value.tensor_slice:
        return "tensor"
    if value.kind != "call":
        return ""
    callee = value.callee
    if callee in VARIABLE_CLASSES:
        return "variable"
    if callee.startswith("numpy."):
        return "tensor"
    module, _, function = callee.rpartition(".")
    if module in TENSOR_MODULES and function[:1].islower():
        return "tensor"
    return ""



# Operators whose result is a new tensor (or NumPy array) whatever the operands: never a variable,
# and never a list (`+` and `*` also join and repeat lists of variables).
ARITHMETIC = frozenset({"Subtract", "Divide", "FloorDivide", "Power", "MatrixMultiply", "Minus"})


def _arithmetic(assign) -> bool:
    value = assign.value
    return assign.kind == "assign" and value is not None and value.kind == "binop" and value.method in ARITHMETIC


def _kind_of_binding(model, assign, depth: int = 0) -> str:
    """`_kind_of` its value; for arithmetic (`scaled = base * 2.0 + 1.0`), a tensor when every name it
    reads is one (and no variable), followed a few bindings back. '' when unknown."""
    kind = _kind_of(assign.value)
    if not kind and _model_output(model, assign):
        return "tensor"  # what a Keras model returns: its output tensor, never one of its variables
    if kind or assign.value is None or assign.value.kind != "binop" or depth > 3:
        return kind
    uses = [u for u in model.spans.uses_in(assign.span) if not is_metadata(u.name)]
    if not uses or model.spans.calls_in(assign.span):
        return ""
    for use in uses:
        bindings = model.value_assigns(use.name, assign.site)
        if not bindings or {_kind_of_binding(model, b, depth + 1) for b in bindings} != {"tensor"}:
            return ""
    return "tensor"


def _model_output(model, assign) -> bool:
    """`features = self.encoder(images)` outside any tape: the value is the output of a call of a name
    known to hold a Keras model (built here, returned by a builder, handed to the class's
    constructor). Made on a tape, it is recorded there (the model reads its variables) and is a
    valid source of that tape's gradient."""
    value = assign.value
    if assign.kind != "assign" or value is None or value.kind != "call" or not value.func_text:
        return False
    if any(model.facts.records(tape, assign.site) for tape in model.facts.tapes):
        return False  # run on a tape, the model reads its variables: the tape records its output
    call = model.value_call(assign)
    return call is not None and call.func.kind in ("name", "attribute") and model.holds_a_model(call.func.text, call.site)


MAX_DEPTH = 4  # bindings, returns and callers followed


SYMBOLIC = frozenset({"output", "outputs", "input", "inputs"})  # a Keras layer's or model's graph tensors
MAX_SYMBOLIC_STEPS = 4  # names bound to names followed back to the `.output`


def _symbolic(model, expr, span, site, depth: int = 0) -> str:
    """How `expr` (spanning `span`) is a layer's or a model's symbolic tensor, "" when it is not
    known to be one: `model.get_layer("conv").output`, `model.layers[-3].output`, `layer.output`
    for a name that holds a Keras layer or model, or a name or `self.` attribute bound once to
    one of those."""
    if expr.kind == "attribute":
        owner, _, attribute = expr.text.rpartition(".")
        if attribute in SYMBOLIC and owner and _kinds_held(model, owner, site, 0) in ({"model"}, {"layer"}):
            return f"`{expr.text}`"
    if expr.kind == "other" and expr.method in SYMBOLIC and span is not None:
        # `.get_layer(...)` and `.layers` belong to Keras models (a `tf.Module` has neither)
        for inner in model.spans.calls_in(span):
            if method_of(inner) == "get_layer":
                return f"the `.{expr.method}` of `{inner.func.text or 'get_layer'}(...)`"
        for use in model.spans.uses_in(span):
            if use.name.endswith(".layers"):
                return f"the `.{expr.method}` of a layer of `{use.name}`"
    if expr.kind in ("name", "attribute") and depth < MAX_SYMBOLIC_STEPS:
        # bound once to one of those: a name, or `self.x` set in any method (`__init__` of an explainer)
        bindings = model.assigns_of(expr.text, site)
        if len(bindings) == 1 and bindings[0].kind == "assign" and bindings[0].value is not None:
            assign = bindings[0]
            found = _symbolic(model, assign.value, assign.span, assign.site, depth + 1)
            if found:
                return f"`{expr.text}` ({found}, line {assign.site.line})"
    return ""


def _keras_object(model, source, site) -> str:
    """"model" or "layer" when every value `source` may hold is one Keras object of that kind, else ""."""
    if source.kind not in ("name", "attribute") or not source.text:
        return ""
    kinds = _kinds_held(model, source.text, site, 0)
    return kinds.pop() if kinds and len(kinds) == 1 and "" not in kinds else ""


def _kinds_held(model, name, site, depth) -> set[str] | None:
    """The kinds ("model", "layer", "" for anything else) of the values `name` may hold at `site`:
    through aliases and `self.` attributes, a builder function's returns, and the arguments the
    calls of this file pass for a parameter (a trainer made with `Trainer(build_model())`)."""
    facts = model.facts
    assigns = model.value_assigns(name, site)
    if not assigns or depth > MAX_DEPTH:
        return None
    kinds: set[str] = set()
    for assign in assigns:
        if assign.kind == "param":
            fn = model.functions.get(facts.scope_of(assign.site))
            arguments = model.arguments_for(fn, assign.target) if fn is not None else None
            if not arguments:
                return None
            for call, value in arguments:
                inner = _kind_of_value(model, value, call.site, depth + 1)
                if inner is None:
                    return None
                kinds |= inner
            continue
        if assign.kind != "assign" or assign.value is None:
            return None
        inner = _kind_of_value(model, assign.value, assign.site, depth + 1)
        if inner is None:
            return None
        kinds |= inner
    return kinds


def _kind_of_value(model, value, site, depth) -> set[str] | None:
    if value.kind in ("name", "attribute") and value.text:
        return _kinds_held(model, value.text, site, depth)
    if value.kind != "call":
        return {""}
    callee = value.callee
    if callee in MODEL_CLASSES or is_keras_class(callee, "models"):
        return {"model"}
    if is_keras_class(callee, "layers"):
        return {"layer"}
    made = model.binding(value.func_text, site) if value.func_text else None
    if isinstance(made, Klass):
        if not made.model.is_keras(made.block):
            return {""}
        models = any(is_keras_class(b, "models") or b.rsplit(".", 1)[-1] in ("Model", "Sequential")
                     for cls in made.model.bases(made.block) for b in cls.bases)
        return {"model" if models else "layer"}
    if isinstance(made, Function) and made.model is model and depth <= MAX_DEPTH:
        returned = model.returned_calls(made)
        if not returned:
            return None
        kinds: set[str] = set()
        for call in returned:
            inner = _kind_of_value(model, _as_value(model.facts, call), call.site, depth + 1)
            if inner is None:
                return None
            kinds |= inner
        return kinds
    return None


def _as_value(facts, call):
    """A call fact as the value of an assignment (what `_kind_of_value` reads)."""
    named = call.func.kind in ("name", "attribute")
    return Expr("call", "", callee=callee_of(facts, call) if named else "", func_text=call.func.text if named else "")


NON_TRAINABLE_LISTS = ("non_trainable_variables", "non_trainable_weights")


def _non_trainable_list(model, source, site) -> str:
    """`bn.non_trainable_variables` when the source is that list (or a name bound only to it)."""
    if source.kind == "attribute" and source.text.rpartition(".")[2] in NON_TRAINABLE_LISTS:
        return source.text
    if source.kind == "name":
        reaching = model.assigns_reaching(source.text, site)
        texts = {a.value.text for a in reaching if a.value is not None and a.value.kind == "attribute"}
        if reaching and len(texts) == 1 and len(reaching) == sum(1 for a in reaching if a.kind == "assign"):
            text = texts.pop()
            if text.rpartition(".")[2] in NON_TRAINABLE_LISTS:
                return text
    return ""


def _not_trainable(value) -> bool:
    flag = value.keywords.get("trainable") if value is not None else None
    return flag is not None and flag.value is False and flag.kind in ("constant", "name")


def _computes_tensor(value) -> bool:
    """`w - lr * g`, `tf.subtract(w, ...)`: a new tensor, not the variable (`w.assign_sub` is a call too,
    but returns the variable only in eager code: not counted)."""
    if value is None:
        return False
    if value.kind == "binop":
        return True
    return value.kind == "call" and value.callee.startswith("tensorflow.") and value.callee not in VARIABLE_CLASSES


def check(facts):
    model = model_of(facts)
    for call, tape in model.gradient_calls():
        if not tape.name or facts.tape_escapes(tape):
            continue
        watches = facts.tape_calls(tape, {"watch"})
        watched: set[str] = set()
        for watch in watches:
            for arg in flatten(watch.arg(0, "tensor")):
                if arg.kind != "name":
                    watched.add("*")  # watches something we cannot name: assume it covers
                watched.add(arg.text)
        if "*" in watched:
            continue
        span = call.arg_span(1, "sources")
        for source in flatten(call.arg(1, "sources")):
            symbolic = _symbolic(model, source, span, call.site)
            if symbolic:
                yield report(
                    facts, call.site, CODE,
                    f"{symbolic} is a Keras symbolic tensor (the layer's output in the model's definition), "
                    f"not a tensor `{tape.name}` recorded: `gradient` cannot differentiate by it "
                    "(Keras 3 raises AttributeError \"'KerasTensor' object has no attribute '_id'\"; Keras 2 returns None)",
                    "Build a model that returns that output (`keras.Model(model.inputs, [layer.output, model.output])`), "
                    "call it inside the tape, and ask for the gradient with respect to the tensor it returns.",
                )
                continue
            made = _keras_object(model, source, call.site)
            if made:
                yield report(
                    facts, call.site, CODE,
                    f"`{source.text}` is a Keras {made}, not its variables: `{tape.name}.gradient` cannot take "
                    "it as a source and raises AttributeError (\"object has no attribute '_id'\")",
                    f"Ask for `{source.text}.trainable_variables`.",
                )
                continue
            if source.kind == "attribute" and tape.watch_accessed_variables is False and not watches:
                yield report(
                    facts, call.site, CODE,
                    f"`{tape.name}` was made with watch_accessed_variables=False and watches nothing: "
                    f"every gradient for `{source.text}` is None",
                    f"Call `{tape.name}.watch(...)` on the variables inside the `with` block.",
                )
                continue
            held = _non_trainable_list(model, source, call.site) if not watches else ""
            if held:
                yield report(
                    facts, call.site, CODE,
                    f"`{source.text}` {'holds' if held == source.text else f'is `{held}`, which holds'} variables "
                    f"that are not trainable (BatchNormalization statistics, frozen weights): `{tape.name}` does not "
                    "watch them, so every gradient for them is None",
                    "Ask for the `trainable_variables`; to differentiate by these, watch their values inside the "
                    f"`with` block: `{tape.name}.watch([v.value for v in {source.text}])` (Keras 3 variables).",
                )
                continue
            if source.kind != "name" or source.text in watched:
                continue
            reaching = model.value_assigns(source.text, call.site)
            kinds = {_kind_of_binding(model, a) for a in reaching}
            rebound = model.loop_rebinding(source.text, call.site) if kinds == {"variable"} else None
            if reaching and all(_arithmetic(a) for a in reaching) and not watches:
                line = reaching[-1].site.line
                yield report(
                    facts, call.site, CODE,
                    f"`{source.text}` is computed by arithmetic (line {line}): a new tensor (or NumPy array), never "
                    f"a variable, and `{tape.name}` never watches it: its gradient is None (a NumPy array makes "
                    "`gradient` raise AttributeError '_id')",
                    f"Call `{tape.name}.watch({source.text})` inside the `with` block, before using it "
                    f"(`tf.convert_to_tensor` it first if it may be a NumPy array).",
                )
                continue
            if kinds == {"tensor"}:
                what = "a plain tensor"
            elif kinds == {"variable"} and tape.watch_accessed_variables is False:
                what = "a variable, and the tape was made with watch_accessed_variables=False"
            elif kinds == {"variable"} and all(_not_trainable(a.value) for a in reaching):
                line = reaching[-1].site.line
                yield report(
                    facts, call.site, CODE,
                    f"`{source.text}` is a variable made with trainable=False (line {line}): "
                    f"`{tape.name}` does not watch it, so its gradient is None",
                    f"Make it trainable, or call `{tape.name}.watch({source.text})` inside the `with` block.",
                )
                continue
            elif rebound is not None and _computes_tensor(rebound.value) and not watches:
                yield report(
                    facts, call.site, CODE,
                    f"`{source.text}` is rebound to a tensor at line {rebound.site.line} (a manual update), "
                    f"so from the second pass on it is a plain tensor `{tape.name}` never watches: its gradient is None",
                    f"Update the variable in place: `{source.text}.assign_sub(...)`, or use an optimizer.",
                )
                continue
            else:
                continue
            yield report(
                facts, call.site, CODE,
                f"`{source.text}` is {what}, never watched by `{tape.name}`: its gradient is None",
                f"Call `{tape.name}.watch({source.text})` inside the `with` block, before using it.",
            )

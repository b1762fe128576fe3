'''# TAP406 train-step-trains-another-model

## What it does
Flags a `train_step` (or `test_step`) override of a Keras `Model` subclass that runs
its forward pass through, takes gradients of, or applies gradients to a module-level
(or enclosing function's) model instead of `self`: `generator(x)`,
`generator.trainable_variables`, where `generator` is a Keras model made elsewhere
in the file (`generator = build_generator()`), not the model `fit` is running.

## Why is this bad?
`fit` calls `train_step` on the model it was called on. A step that trains a global
model trains *that* object: its weights move and the loss the step reports falls,
so the training log looks right, while the fitted model's own weights never change.
Everything read from the fitted model afterwards (`evaluate`, `predict`,
`save`/`save_weights`, a checkpoint callback) is the untrained network. Measured on
TF 2.21 / Keras 3.15 (fixture `generator_trainer_global`, 6 epochs): the reported
training loss falls from 0.51 to 0.12, the validation loss (`test_step` uses `self`)
stays between 0.68 and 0.70, and the fitted model's weights move by 0.0; with `self`
in the step the validation loss falls from 0.41 to 0.09. A step that runs the global
model forward but asks for the gradients of `self.trainable_variables` gets no
gradient at all: `ValueError: No gradients provided for any variable` (fixture
`classifier_step_global_model`).

## Example
```python
import tensorflow as tf
from tensorflow import keras

def build_generator():
    return keras.Sequential([keras.Input((8,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(8)])

generator = build_generator()

class GeneratorTrainer(keras.Model):
    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(generator(x, training=True) - y))
        grads = tape.gradient(loss, generator.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, generator.trainable_variables))
        return {"loss": loss}

inputs = keras.Input((8,))
trainer = GeneratorTrainer(inputs, keras.layers.Dense(8)(inputs))
```

## Use instead
```python
import tensorflow as tf
from tensorflow import keras

def build_generator():
    return keras.Sequential([keras.Input((8,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(8)])

generator = build_generator()

class GeneratorTrainer(keras.Model):
    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(self(x, training=True) - y))
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        return {"loss": loss}

inputs = keras.Input((8,))
trainer = GeneratorTrainer(inputs, keras.layers.Dense(8)(inputs))
```

Use `self(x)`, `self.trainable_variables` and `self.optimizer` in the step. A wrapper
that trains a sub-model holds it (`self.generator = generator` in `__init__`) and
uses `self.generator` in the step.

## Where it stays silent
When the global may be the fitted model itself: it is made by this class or one
related to it (`model = MyModel(); model.fit(...)`), by a builder whose returns are
not all known to be other models, or by `clone_model`; when it is handed to the
class where it is made (`GAN(generator=generator)`, `MyModel(model.inputs,
model.outputs)`, also through names: the fitted model then holds it or shares its
layers), read in another method of the class (`__init__` keeping it on `self`, a
`call` running it), or set as an attribute anywhere; when the step only runs the
global forward (never its variables) beside a forward pass of its own (`self(x)`, a
`self.<sub-model>(x)`: a frozen teacher in distillation); when the name is a parameter
or a local of the step, or `self.<attribute>`; when the class is not a Keras model,
or the file never makes an instance of it (what `self` is is not known). A global
optimizer applying `self.trainable_variables` is not reported alone (the fitted
model does train); it is named when the step trains a global model with it.
'''

from __future__ import annotations

from tapecheck.model import model_of
from tapecheck.rules._common import report

CODE = "TAP406"
NAME = "train-step-trains-another-model"
SUMMARY = ("a Keras model's `train_step`/`test_step` runs or trains a module-level model instead of `self`: "
           "the fitted model's weights never move")

TRIGGERS = (b"train_step", b"test_step")
STEPS = ("train_step", "test_step")
VARIABLES = ("trainable_variables", "trainable_weights")

HINT = ("Use `self(x)`, `self.trainable_variables` and `self.optimizer` in the step; to train a sub-model, "
        "hand it to the model (`self.generator = generator` in `__init__`) and use `self.generator`.")


VALID = [
    # the step uses self; the module-level name IS the fitted model
    """
import tensorflow as tf
import keras
class Regressor(keras.Model):
    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
        grads = tape.gradient(loss, model.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return {"loss": loss}
model = Regressor()
model.compile(optimizer="adam")
""",
    # a wrapper trains the sub-model it holds; the global is the same object, handed to it
    """
import tensorflow as tf
import keras
def build_generator():
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(4)])
generator = build_generator()
class GAN(keras.Model):
    def __init__(self, generator):
        super().__init__()
        self.generator = generator
    def train_step(self, data):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(generator(data))
        grads = tape.gradient(loss, generator.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, generator.trainable_variables))
        return {"loss": loss}
gan = GAN(generator)
""",
    # a functional subclass made over the global model's own tensors: it shares its layers
    """
import tensorflow as tf
import keras
base = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
class Custom(keras.Model):
    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(base(x) - y))
        grads = tape.gradient(loss, base.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, base.trainable_variables))
        return {"loss": loss}
inputs, outputs = base.inputs, base.outputs
custom = Custom(inputs, outputs)
""",
    # a parameter or a local of the step, a global optimizer on self's variables, and a class no one makes
    """
import tensorflow as tf
import keras
net = keras.Sequential([keras.layers.Dense(1)])
opt = keras.optimizers.Adam()
class Trainer(keras.Model):
    def train_step(self, data):
        with tf.GradientTape() as tape:
            net = self.net
            loss = tf.reduce_mean(net(data))
        grads = tape.gradient(loss, self.trainable_variables)
        opt.apply_gradients(zip(grads, self.trainable_variables))
        return {"loss": loss}
trainer = Trainer()
class Later(keras.Model):
    def train_step(self, data):
        return {"loss": tf.reduce_mean(net(data))}
""",
    # a frozen teacher run beside the model's own forward pass (distillation)
    """
import tensorflow as tf
import keras
teacher = keras.applications.MobileNetV2(weights=None)
class Distiller(keras.Model):
    def train_step(self, data):
        x, y = data
        soft = teacher(x, training=False)
        with tf.GradientTape() as tape:
            pred = self(x, training=True)
            loss = tf.reduce_mean(tf.square(pred - soft))
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        return {"loss": loss}
inputs = keras.Input((224, 224, 3))
student = Distiller(inputs, keras.layers.Dense(1000)(keras.layers.GlobalAveragePooling2D()(inputs)))
""",
    # not a Keras model
    """
import tensorflow as tf
import keras
model = keras.Sequential([keras.layers.Dense(1)])
class Loop:
    def train_step(self, x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(model(x))
        return tape.gradient(loss, model.trainable_variables)
loop = Loop()
""",
]

INVALID = [
    # the forward pass and the gradients of a module-level model built by a builder
    """
import tensorflow as tf
import keras
def build_net():
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
net = build_net()
class Trainer(keras.Model):
    def __init__(self):
        super().__init__()
        self.body = build_net()
    def call(self, x):
        return self.body(x)
    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            pred = net(x, training=True)  # expect: TAP406
            loss = tf.reduce_mean(tf.square(pred - y))
        grads = tape.gradient(loss, net.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, net.trainable_variables))
        return {"loss": loss}
trainer = Trainer()
""",
    # a closure: the class and the model made in one function; a global optimizer with it
    """
import tensorflow as tf
import keras
def experiment(x, y):
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    optimizer = keras.optimizers.SGD(0.1)
    class Fitter(keras.Model):
        def train_step(self, data):
            x, y = data
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(self(x) - y))
            grads = tape.gradient(loss, model.trainable_weights)  # expect: TAP406
            optimizer.apply_gradients(zip(grads, model.trainable_weights))
            return {"loss": loss}  # expect: TAP304 (and no tracker: fit logs 0.0)
    inputs = keras.Input((4,))
    fitter = Fitter(inputs, keras.layers.Dense(1)(inputs))
    fitter.compile(optimizer="sgd")
    return fitter.fit(x, y)
""",
    # only the validation step scores the global model
    """
import tensorflow as tf
import keras
net = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
class Scored(keras.Model):
    def test_step(self, data):
        x, y = data
        return {"loss": tf.reduce_mean(tf.square(net(x) - y))}  # expect: TAP406
inputs = keras.Input((4,))
scored = Scored(inputs, keras.layers.Dense(1)(inputs))
""",
]


def _module_name(model, head, fn, site) -> str:
    """Where `head`, read in the step `fn`, is bound: "module-level", "enclosing function's", or "" when
    it is the step's own (a parameter, a local, `self`) or not known."""
    if head == fn.self_name or head in fn.params:
        return ""
    assigns = model.assigns_reaching(head, site)
    scopes = {model.facts.scope_of(a.site) for a in assigns}
    if not assigns or fn.block.id in scopes or len(scopes) != 1:
        return ""
    return "module-level" if model.facts.blocks[scopes.pop()].kind == "module" else "enclosing function's"


def _another_model(model, head, site, klass) -> bool:
    """Every binding of `head` makes a Keras model that is not an instance of `klass` (nor related)."""
    assigns = model.assigns_reaching(head, site)
    calls = [model.value_call(a) for a in assigns]
    return bool(calls) and all(c is not None and model.makes_another_model(c, klass) for c in calls)


def _an_optimizer(model, head, site) -> bool:
    calls = model.value_calls(head, site)
    return bool(calls) and all(model.state_kind(c) == "optimizer" for c in calls)


def _held_by_the_model(model, head, klass, made) -> bool:
    """Whether the object `head` names may be (part of) the fitted model: handed to the class where it is
    made, read in a method of the class other than its steps, or set as an attribute anywhere."""
    if any(model.span_reads((call.site.order, call.end_order), head) for call in made):
        return True
    facts = model.facts
    for use in model.spans.uses:
        if use.name.partition(".")[0] != head:
            continue
        fn = model.functions.get(facts.scope_of(use.site))
        while fn is not None and fn.owner is None and fn.block.parent is not None:  # a lambda or helper inside a method
            fn = model.functions.get(facts.blocks[fn.block.parent].scope)
        if fn is not None and fn.owner is not None and fn.name not in STEPS \
                and any(cls is fn.owner for cls in model.bases(klass)):
            return True
    return any(a.kind == "assign" and "." in a.target and a.value is not None and a.value.text == head
               for a in facts.assigns)


# `self.<attribute>(...)` calls in a step that are never a forward pass of a model
NOT_A_FORWARD_PASS = frozenset({"compiled_loss", "compute_loss", "compiled_metrics", "compute_metrics"})


def _runs_its_own_model(model, fn) -> bool:
    """Whether the step may run a forward pass of the fitted model: `self(...)`, `self.call(...)`, or a
    `self.<attribute>(...)` call (a sub-model it holds) other than the compiled loss and metrics."""
    me = fn.self_name
    for call in model.calls_in_scope(fn.block.id):
        text = call.func.text
        if text == me or (text.startswith(me + ".") and text.count(".") == 1
                          and text.partition(".")[2] not in NOT_A_FORWARD_PASS):
            return True
    return False


def _sites(model, fn):
    """(head, site, what) for each use in the step of a plain name as a model or an optimizer."""
    facts = model.facts
    for call in model.calls_in_scope(fn.block.id):
        if call.func.kind == "name":
            yield call.func.text, call.site, f"`{call.func.text}(...)`", "model"
        elif call.method == "apply_gradients" and call.receiver and "." not in call.receiver:
            yield call.receiver, call.site, f"`{call.receiver}.apply_gradients(...)`", "optimizer"
    for use in model.spans.uses:
        head, _, attribute = use.name.partition(".")
        if attribute in VARIABLES and facts.scope_of(use.site) == fn.block.id:
            yield head, use.site, f"`{use.name}`", "model"


def check(facts):
    model = model_of(facts)
    for fn in list(model.functions.values()):
        klass = fn.owner
        if fn.name not in STEPS or klass is None or not fn.bound or not model.is_model_class(klass):
            continue
        made = model.instances_made(klass)
        if not made:
            continue  # what `self` is, is not known here
        found, optimizers, judged = [], [], {}
        for head, site, what, kind in sorted(_sites(model, fn), key=lambda s: s[1].order):
            key = (head, kind)
            if key not in judged:
                where = _module_name(model, head, fn, site)
                ok = bool(where) and (_another_model(model, head, site, klass) if kind == "model"
                                      else _an_optimizer(model, head, site))
                judged[key] = where if ok and not _held_by_the_model(model, head, klass, made) else ""
            if judged[key]:
                (found if kind == "model" else optimizers).append((head, site, what, judged[key]))
        if not found:
            continue
        trained = any(what.startswith(f"`{head}.") for head, _, what, _ in found)
        if not trained and _runs_its_own_model(model, fn):
            continue  # a teacher or a frozen critic run beside the model's own forward pass
        head, site, what, where = found[0]
        others = sorted({f"{w} (line {s.line})" for h, s, w, _ in found[1:] + optimizers if (s.line, w) != (site.line, what)})
        also = f"; also {', '.join(others)}" if others else ""
        if fn.name == "train_step" and not trained:
            effect = ("the loss does not depend on the fitted model's own weights, so their gradients are None "
                      "(`fit` raises `ValueError: No gradients provided for any variable`)")
        elif fn.name == "test_step" and not trained:
            effect = (f"`evaluate` and `fit`'s validation score `{head}`, not the fitted model")
        else:
            effect = (f"the step trains or scores `{head}` while the fitted model's own weights never move (its "
                      "`evaluate`, `predict` and saved weights stay untrained)")
        yield report(
            facts, site, CODE,
            f"`{klass.name}.{fn.name}` uses the {where} model `{head}` ({what}) instead of `self`{also}: "
            f"`fit` runs this step for a `{klass.name}` instance, a different object: {effect}",
            HINT,
        )

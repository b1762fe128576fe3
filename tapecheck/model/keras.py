"""Keras kinds: what a class or a value of the program is in Keras's terms.

- `keras_member` / `is_keras_class`: a dotted name as a member of one Keras package
  (`keras.metrics.Mean`, `tf.keras.layers.Dense`, any Keras flavour).
- `KerasKinds` (part of `ProgramModel`): the program's own classes and their bases
  (`local_class`, `bases`, `methods`), whether a class is a Keras layer or model,
  whether a name holds a Keras model at a site (built here, returned by a builder of
  another module, handed to a trainer), what state a constructor call makes
  (optimizer, metric, variable), and the losses handed to `compile()`; which calls make an
  instance of a model class (`instances_made`) and which are known to make another model
  (`makes_another_model`), for what a `train_step` may be running on.
"""

from __future__ import annotations

import functools

from tapecheck.lint.facts import Block, Call, Site
from tapecheck.model.objects import Function, Instance, Klass
from tapecheck.model.ops import MAX_ALIAS_DEPTH
from tapecheck.model.queries import MODEL_CLASSES, callee_of, method_of


# -- what makes state --------------------------------------------------------------------
VARIABLE_CLASSES = frozenset({
    "tensorflow.Variable", "keras.Variable", "tensorflow.keras.Variable",
    # the Keras backend's constructor (`K.variable`): a tf.Variable too
    "tensorflow.keras.backend.variable", "keras.backend.variable", "tf_keras.backend.variable",
})


KERAS_ROOTS = ("keras.", "tensorflow.keras.", "tf_keras.", "tensorflow.python.keras.")


WEIGHT_METHODS = frozenset({"add_weight", "add_variable"})  # `self.add_weight(...)`: a layer's weight


# Keras layers that hold state once made (measured on Keras 3.15, TF 2.21: variables after
# construction and after one call). Weights, made at the first call (`build`): made again at every
# forward pass, they start fresh each time, the model does not track them, no optimizer trains them.
WEIGHT_LAYERS = frozenset({
    "Dense", "EinsumDense", "Embedding", "BatchNormalization", "LayerNormalization", "GroupNormalization",
    "Conv1D", "Conv2D", "Conv3D", "Convolution1D", "Convolution2D", "Convolution3D",
    "Conv1DTranspose", "Conv2DTranspose", "Conv3DTranspose", "Convolution2DTranspose", "Convolution3DTranspose",
    "DepthwiseConv1D", "DepthwiseConv2D", "SeparableConv1D", "SeparableConv2D",
    "SeparableConvolution1D", "SeparableConvolution2D", "ConvLSTM1D", "ConvLSTM2D", "ConvLSTM3D",
    "LSTM", "GRU", "SimpleRNN", "LSTMCell", "GRUCell", "SimpleRNNCell", "Bidirectional",
    "MultiHeadAttention", "GroupQueryAttention", "PReLU",
})
# A `SeedGenerator` variable made in `__init__` (Dropout and the random augmentation layers): made
# inside a traced function (`fit`, `tf.function`, `Dataset.map`) it raises ValueError.
SEEDED_LAYERS = frozenset({
    "Dropout", "SpatialDropout1D", "SpatialDropout2D", "SpatialDropout3D", "GaussianDropout", "GaussianNoise",
    "AlphaDropout", "RandAugment", "AugMix", "MixUp", "CutMix",
})
# Flatten, Reshape, Activation, ReLU, Softmax, Concatenate, Add, Permute, Lambda, pooling, Rescaling,
# CenterCrop, Resizing, `Normalization(mean=, variance=)` hold none: made per call they cost nothing.


# `tf.function` under every name the rules resolve: a function decorated or wrapped by one is traced.
TF_FUNCTIONS = frozenset({"tensorflow.function", "tensorflow.compat.v2.function", "tensorflow.compat.v1.function"})


# `keras.models` functions that return a model (besides the classes `Model` and `Sequential`).
MODEL_FACTORIES = frozenset({"Model", "Sequential", "load_model", "clone_model", "model_from_json"})


# What makes a `Sequential` built when made: its first layer is an input (`keras.Input((4,))`), or is
# told its input's shape (measured on Keras 3.15: `model.built` is True right after the call).
INPUT_CLASSES = frozenset(f"{root}{name}" for root in ("keras.", "tensorflow.keras.", "tf_keras.")
                          for name in ("Input", "InputLayer", "layers.Input", "layers.InputLayer"))
INPUT_KEYWORDS = frozenset({"input_shape", "input_dim", "batch_input_shape", "batch_shape"})


# `tf.optimizers`, `tf.metrics`, `tf.losses`: TensorFlow's aliases of the Keras packages.
TF_SHORT_PACKAGES = frozenset({"optimizers", "metrics", "losses"})


@functools.lru_cache(maxsize=8192)  # asked of the same few hundred names for every call of a file
def keras_member(dotted: str, package: str) -> str:
    """`Mean` for `keras.metrics.Mean` (any Keras flavour) when in `package`, else "". TensorFlow's
    short names are the Keras classes themselves (`tf.optimizers.Adam is keras.optimizers.Adam`,
    also `tf.metrics`, `tf.losses`: measured on TF 2.21)."""
    if "keras" not in dotted:
        if package in TF_SHORT_PACKAGES:
            for prefix in (f"tensorflow.{package}.", f"tensorflow.compat.v2.{package}."):
                if dotted.startswith(prefix):
                    return dotted[len(prefix):].rsplit(".", 1)[-1]
        return ""
    for root in KERAS_ROOTS:
        for middle in (f"{package}.", f"src.{package}.", f"api.{package}."):
            prefix = root + middle
            if dotted.startswith(prefix):
                return dotted[len(prefix):].rsplit(".", 1)[-1]
    return ""


def is_keras_class(dotted: str, package: str) -> bool:
    member = keras_member(dotted, package)
    return bool(member) and member[0].isupper()


class KerasKinds:
    """Which classes and values of the file are Keras layers, models, metrics, optimizers."""

    # -- classes --------------------------------------------------------------------------
    def local_class(self, dotted: str) -> Block | None:
        """The class of this file a base or constructor name (`Net`, resolved) refers to."""
        index = self.memo.get("module classes by name")
        if index is None:  # indexed once per file (each question scanned every class)
            index = self.memo["module classes by name"] = {}
            for b in self.classes.values():
                if self.facts.blocks[b.parent].kind == "module":
                    index[b.name] = b  # the last one of a name, as before
        return index.get(dotted)

    def bases(self, klass: Block, depth: int = 0):
        """`klass` and its local base classes (of its own file), nearest first."""
        owner = self.owner_of(klass)
        if owner is not self:
            yield from owner.bases(klass, depth) if owner is not None else (klass,)
            return
        yield klass
        if depth > MAX_ALIAS_DEPTH:
            return
        for base in klass.bases:
            local = self.local_class(base)
            if local is not None and local is not klass:
                yield from self.bases(local, depth + 1)

    def method(self, klass: "Klass", name: str) -> Function | None:
        """The method `name` of a class, found in it or its local bases."""
        return klass.model.method_of_block(klass.block, name)

    def methods(self, klass: Block) -> list[Function]:
        """The functions defined in the body of `klass` (not its bases'), in source order."""
        owner = self.owner_of(klass)
        if owner is not self:
            return owner.methods(klass) if owner is not None else []
        if self._methods is None:
            self._methods = {}
            for fn in self.functions.values():
                if fn.owner is not None:
                    self._methods.setdefault(fn.owner.id, []).append(fn)
        return self._methods.get(klass.id, [])

    def method_of_block(self, klass: Block, name: str) -> Function | None:
        """The method `name` of the class `klass` (of any file), found in it or its local bases."""
        owner = self.owner_of(klass)
        if owner is not self:
            return owner.method_of_block(klass, name) if owner is not None else None
        key = ("method of block", id(klass), name)  # the block held in the value: its id stays its own
        known = self.memo.get(key)
        if known is not None:
            return known[1]
        found = None
        for cls in self.bases(klass):
            found = next((fn for fn in self.methods(cls) if fn.name == name), None)
            if found is not None:
                break
        self.memo[key] = (klass, found)
        return found

    def base_names(self, klass: Block) -> tuple[str, ...]:
        """The bases of `klass` as written and, for a base bound by assignment at module level
        (`Wrapper = keras.layers.Wrapper` after `keras = tf.keras`), what it names."""
        owner = self.owner_of(klass)
        if owner is not self:
            return owner.base_names(klass) if owner is not None else tuple(klass.bases)
        key = ("base names", klass.id)
        found = self.memo.get(key)
        if found is None:
            names = list(klass.bases)
            aliases = self._alias_heads()
            made = self._definitions().get((klass.name, klass.line))
            for base in klass.bases:
                if made is not None and base.partition(".")[0] in aliases:
                    named = self.alias_of(base, made.site)
                    if named.partition(".")[0] in aliases and named != base:
                        named = self.alias_of(named, made.site)
                    if named != base:
                        names.append(named)
            found = self.memo[key] = tuple(names)
        return found

    def _definitions(self) -> dict:
        """The first `def`/`class` binding of each (name, line), indexed once per file (each class
        scanned every binding of the file for its own)."""
        found = self.memo.get("definitions by name and line")
        if found is None:
            found = self.memo["definitions by name and line"] = {}
            for a in self.facts.assigns:
                if a.kind == "def":
                    found.setdefault((a.target, a.site.line), a)
        return found

    def is_keras(self, klass: Block | Klass, package: str = "layers") -> bool:
        """A subclass of a Keras Layer or Model (package "layers"), Loss ("losses"), Metric ("metrics")."""
        if isinstance(klass, Klass):
            return klass.model.is_keras(klass.block, package)
        for cls in self.bases(klass):
            for base in self.base_names(cls):
                if package == "layers" and (is_keras_class(base, "layers") or is_keras_class(base, "models")
                                            or base in ("keras.Model", "tensorflow.keras.Model", "keras.Layer",
                                                        "tensorflow.Module", "tensorflow.keras.Sequential")):
                    return True
                if package != "layers" and is_keras_class(base, package):
                    return True
        return False

    def is_model_class(self, klass: Block | Klass) -> bool:
        """A subclass of a Keras `Model` (or `Sequential`), through the local classes it derives from."""
        if isinstance(klass, Klass):
            return klass.model.is_model_class(klass.block)
        return any(base in MODEL_CLASSES or is_keras_class(base, "models")
                   for cls in self.bases(klass) for base in cls.bases)

    def makes_a_model(self, call: Call, depth: int = 0, *, built: bool = False) -> bool:
        """Whether `call` returns a Keras model: a model class (`keras.Sequential`, `keras.Model(inputs,
        outputs)`, a subclass of one in a linted file), `keras.models.load_model`, an application
        (`keras.applications.ResNet50`), or a function of a linted file each of whose returns is one.
        With `built`, only a model that is built when made (`built_when_made`): a functional model, a
        `Sequential` that starts with its input, a loaded model, an application."""
        if depth > MAX_ALIAS_DEPTH or not call.func.text:
            return False
        callee = self.resolved(call.func.text, call.site)
        if is_keras_class(callee, "applications"):
            return True
        if callee in MODEL_CLASSES or keras_member(callee, "models") in MODEL_FACTORIES:
            return not built or self.built_when_made(call, callee)
        made = self.binding(call.func.text, call.site)
        if isinstance(made, Klass):
            return not built and self.is_model_class(made)
        if isinstance(made, Function) and not made.bound and made.model is not None:
            other = made.model
            returned = other.returned_calls(made)
            if returned:
                return all(other.makes_a_model(inner, depth + 1, built=built) for inner in returned)
            names = other.returned_names(made)  # `model = keras.Model(inputs, outputs); return model`
            return bool(names) and all(other.holds_a_model(name, site, depth + 1, built=built) for name, site in names)
        return False

    def instances_made(self, klass: Block) -> list[Call]:
        """The calls of this file that make an instance of `klass` or of a class of this file deriving
        from it (`Trainer(...)`, `GAN(generator=g)`), in source order. Empty for a class of
        another file (no class of this file derives from it: `bases` are local)."""
        if self.owner_of(klass) is not self:
            return []
        key = ("instances made", klass.id)
        found = self.memo.get(key)
        if found is None:
            found = self.memo[key] = [
                call for call in self.spans.calls
                if call.func.kind == "name" and self._derives_from(self.binding(call.func.text, call.site), klass)
            ]
        return list(found)

    def _derives_from(self, made, klass: Block) -> bool:
        return isinstance(made, Klass) and made.model is self and any(cls is klass for cls in self.bases(made.block))

    def makes_another_model(self, call: Call, klass: Block, depth: int = 0) -> bool:
        """Whether `call` makes a Keras model known not to be an instance of `klass` (nor of a class
        deriving from it or one it derives from): a Keras model class or factory, an application, a
        model class of this file unrelated to `klass`, or a function of this file each of whose returns
        is such a call. False when unknown (then the model may be the very instance a method of
        `klass` runs on)."""
        if depth > MAX_ALIAS_DEPTH or not call.func.text:
            return False
        callee = self.resolved(call.func.text, call.site)
        if is_keras_class(callee, "applications") or callee in MODEL_CLASSES \
                or keras_member(callee, "models") in MODEL_FACTORIES:
            return keras_member(callee, "models") != "clone_model" and not self._derives_from(
                self.binding(call.func.text, call.site), klass)
        made = self.binding(call.func.text, call.site)
        if isinstance(made, Klass):
            related = self._derives_from(made, klass) or any(cls is made.block for cls in self.bases(klass))
            return made.model is self and not related and self.is_model_class(made)
        if isinstance(made, Function) and not made.bound and made.model is self:
            returned = self.returned_calls(made)
            return bool(returned) and all(self.makes_another_model(inner, klass, depth + 1) for inner in returned)
        return False

    def span_reads(self, span: tuple[int, int], name: str, depth: int = 0) -> bool:
        """Whether the events in an order span (a call's arguments) read `name` (`name`, `name.x`),
        also through the names read there, one binding deep each (`inputs = model.input`)."""
        if depth > MAX_ALIAS_DEPTH:
            return False
        for use in self.spans.uses_in(span):
            head = use.name.partition(".")[0]
            if head == name:
                return True
            for assign in self.assigns_reaching(head, use.site):
                if assign.kind == "assign" and assign.span != (0, 0) and self.span_reads(assign.span, name, depth + 1):
                    return True
        return False

    def built_when_made(self, call: Call, callee: str) -> bool:
        """Whether a call of a Keras model class or factory (`callee`, resolved) gives a built model
        (measured on Keras 3.15: `model.built` right after it): `Model(inputs, outputs)`, a
        `Sequential([...])` whose first layer is `keras.Input(...)`/`InputLayer` or is given
        `input_shape=`/`input_dim=`/`batch_input_shape=`, `load_model(...)`. Not a subclass (built at
        its first call), not `Sequential()` filled by `add`, not `clone_model` (as built as its argument)."""
        member = keras_member(callee, "models") or callee.rpartition(".")[2]
        if member == "load_model":
            return True
        if member == "Model":
            return call.arg(0, "inputs") is not None and call.arg(1, "outputs") is not None
        if member != "Sequential":
            return False
        layers = call.arg(0, "layers")
        if layers is None or layers.kind != "list" or not layers.elements:
            return False
        first = layers.elements[0]
        if first.kind != "call":
            return False
        if any(keyword in first.keywords for keyword in INPUT_KEYWORDS):
            return True
        made = self.resolved(first.func_text, call.site) if first.func_text else first.callee
        return made in INPUT_CLASSES or keras_member(made, "layers") in ("Input", "InputLayer")

    def returned_names(self, fn: Function) -> list | None:
        """(name, site) for each `return` of `fn` that gives a plain name, or None when some `return`
        gives anything else (or there is none)."""
        facts = self.facts
        found = []
        for exit_ in facts.exits:
            if exit_.kind != "return" or facts.scope_of(exit_.site) != fn.block.id:
                continue
            uses = self.spans.uses_in(exit_.span) if exit_.span != (0, 0) else []
            if len(uses) != 1 or "." in uses[0].name or self.spans.calls_in(exit_.span):
                return None
            found.append((uses[0].name, uses[0].site))
        return found or None

    def holds_a_model(self, name: str, site: Site, depth: int = 0, *, built: bool = False) -> bool:
        """Whether `name` is a Keras model at `site`: each binding of it (for `self.x`, every
        `self.x = ...` of the class) is a call that makes one (`makes_a_model`) or a name that holds
        one; a parameter, when every call of its function here passes one (`Trainer(build_model())`);
        `trainer.model` when `trainer` is an instance whose class sets `self.model` so; `self` in a method of a Keras Model subclass; `self.model` in a Keras callback (Keras sets
        it). False when unknown. With `built`, a model already built when it was made (`makes_a_model`);
        `self` in a model's method is not known to be."""
        if depth > MAX_ALIAS_DEPTH or not name:
            return False
        # Each (name, place) is worked out once per file: callers of callers fan out, and a cut-off
        # answer (False while it is worked out: a cycle; False past the depth) errs towards silence.
        key = ("holds a model", name, site.order, built)
        known = self.memo.get(key)
        if known is None:
            self.memo[key] = False
            known = self.memo[key] = self._holds_a_model(name, site, depth, built)
        return known

    def _holds_a_model(self, name: str, site: Site, depth: int, built: bool = False) -> bool:
        klass = self.self_class(name, site)
        if klass is not None:
            return not built and self.is_model_class(klass)
        head, _, attribute = name.partition(".")
        if attribute == "model":
            klass = self.self_class(head, site)
            if klass is not None and any(is_keras_class(base, "callbacks")
                                         for cls in self.bases(klass) for base in cls.bases):
                return True
        if attribute and "." not in attribute and self.self_class(head, site) is None:
            owner = self.binding(head, site)  # `trainer.model` for `trainer = Trainer(build())`
            if isinstance(owner, Instance):
                other = owner.klass.model
                assigns = [assign for assign, _ in other.attribute_assigns(owner.klass.block, attribute)]
                return bool(assigns) and all(other._binds_a_model(assign, depth, built) for assign in assigns)
        assigns = self.assigns_of(name, site)
        return bool(assigns) and all(self._binds_a_model(assign, depth, built) for assign in assigns)

    def _binds_a_model(self, assign, depth: int, built: bool = False) -> bool:
        value = assign.value
        if assign.kind == "param":
            fn = self.functions.get(self.facts.scope_of(assign.site))
            passed = self.arguments_for(fn, assign.target) if fn is not None else None
            return bool(passed) and all(self._is_a_model(call, argument, depth + 1, built) for call, argument in passed)
        if assign.kind != "assign" or value is None:
            return False
        if value.kind == "call":
            made = self.value_call(assign)
            return made is not None and self.makes_a_model(made, depth + 1, built=built)
        return value.kind in ("name", "attribute") and self.holds_a_model(value.text, assign.site, depth + 1, built=built)

    def _is_a_model(self, call: Call, argument, depth: int, built: bool = False) -> bool:
        """Whether `argument`, passed by `call`, is a Keras model (`built`: one built when made)."""
        if argument.kind == "call":
            span = call.span_of(argument)
            made = self.call_at(span, argument) if span is not None else None
            return made is not None and self.makes_a_model(made, depth, built=built)
        return argument.kind in ("name", "attribute") and self.holds_a_model(argument.text, call.site, depth, built=built)

    # -- bindings ---------------------------------------------------------------------------
    def _definition(self, assign, scope: int):
        block = self._defs.get((assign.target, assign.site.line, scope))
        if block is None:
            return None
        if block.id in self.classes:
            return Klass(block, self)
        return self.functions.get(block.id)

    def _value_of(self, assign, depth: int):
        """What one binding binds: a Function, a class Block, an Instance, or None."""
        facts = self.facts
        if assign.kind == "def":
            return self._definition(assign, facts.scope_of(assign.site))
        value = assign.value
        if assign.kind != "assign" or value is None:
            return None
        if value.kind == "lambda":
            fn = self.lambda_at(value.value, facts.scope_of(assign.site))
            if fn is not None and not fn.label:
                fn.label = assign.target
            return fn
        if value.kind in ("name", "attribute") and value.text:
            return self.binding(value.text, assign.site, depth + 1)
        if value.kind == "call" and value.func_text:
            made = self.binding(value.func_text, assign.site, depth + 1)
            if isinstance(made, Klass):
                return Instance(made)
        return None

    def state_kind(self, call: Call) -> str:
        """optimizer, metric, variable or layer (a Keras layer or model that holds state:
        `layer_state`) when the call makes one, else ""."""
        callee = callee_of(self.facts, call)
        if callee in VARIABLE_CLASSES:
            return "variable"
        if is_keras_class(callee, "optimizers") and ".schedules." not in callee:
            return "optimizer"
        if is_keras_class(callee, "metrics"):
            return "metric"
        if call.func.kind == "name":
            made = self.binding(call.func.text, call.site)
            if isinstance(made, Klass) and self.is_keras(made, "metrics"):
                return "metric"
        if call.func.text and self.layer_state(call) and call.site.order not in self._inside_layers():
            return "layer"
        return ""

    def _inside_layers(self) -> set[int]:
        """The orders of the calls made in the arguments of a Keras layer or model constructor
        (`Sequential([Dense(4)])`, `Bidirectional(LSTM(8))`): the outer one is the state made."""
        found = self.memo.get("inside layers")
        if found is None:
            found = self.memo["inside layers"] = set()
            for call in self.spans.calls:
                if call.args or call.keywords:
                    callee = callee_of(self.facts, call)
                    if keras_member(callee, "layers") or keras_member(callee, "models") or callee in MODEL_CLASSES:
                        found.update(inner.site.order for inner in self.spans.calls_in((call.first_arg, call.end_order)))
        return found

    def layer_state(self, call: Call, depth: int = 0) -> str:
        """What state the Keras layer or model `call` constructs holds: "weights" (`Dense`,
        `BatchNormalization`, ... built at the first call), "seed" (the `SeedGenerator` variable of
        `Dropout` and the `Random*` augmentation layers), or "" (a stateless layer: `Flatten`,
        `Activation`, `Rescaling`; not a layer; not known). A `Sequential([...])` holds what its
        listed layers hold; a layer or model class of the project holds what its `__init__` and
        `build` make (`add_weight`, a `tf.Variable`, a stateful layer)."""
        if depth > MAX_ALIAS_DEPTH or not call.func.text:
            return ""
        callee = callee_of(self.facts, call)
        member = keras_member(callee, "layers")
        if member:
            if member in WEIGHT_LAYERS:
                return "weights"
            return "seed" if member in SEEDED_LAYERS or member.startswith("Random") else ""
        if callee in MODEL_CLASSES and callee.endswith("Sequential") or keras_member(callee, "models") == "Sequential":
            span = call.arg_span(0, "layers")
            found = {self.layer_state(inner, depth + 1) for inner in self.spans.calls_in(span)} if span else set()
            return "weights" if "weights" in found else "seed" if "seed" in found else ""
        made = self.binding(call.func.text, call.site)
        if isinstance(made, Klass) and self.is_keras(made, "layers"):
            return made.model.class_state(made.block, depth + 1)
        return ""

    def class_state(self, klass: Block, depth: int = 0) -> str:
        """What state an instance of the Keras layer or model class `klass` of this file holds once
        made and called: what its `__init__` and `build` (of it or its local bases) make."""
        owner = self.owner_of(klass)
        if owner is not self:
            return owner.class_state(klass, depth) if owner is not None else ""
        key = ("class state", klass.id)
        known = self.memo.get(key)
        if known is None:
            self.memo[key] = ""  # while it is worked out: a class that makes itself
            found = set()
            if depth <= MAX_ALIAS_DEPTH:
                for name in ("__init__", "build"):
                    fn = self.method_of_block(klass, name)
                    for inner in self.calls_in_scope(fn.block.id) if fn is not None else ():
                        if method_of(inner) in WEIGHT_METHODS or callee_of(self.facts, inner) in VARIABLE_CLASSES:
                            found.add("weights")
                        elif inner.func.text:
                            found.add(self.layer_state(inner, depth + 1))
            known = self.memo[key] = "weights" if "weights" in found else "seed" if "seed" in found else ""
        return known

    def builds_lazily(self, klass: Block, depth: int = 0) -> bool:
        """Whether a new instance of the Keras layer or model class `klass` of this file lacks weights
        it will make at its first call: its `__init__` (or a local base's) makes a layer that builds
        at its first call (`Dense`, a `Sequential` not opened with `keras.Input`, a class of the
        project that builds lazily) or the class has a `build` making weights; and `__init__` never
        calls the model or a layer of it, nor `build` (`self(x)`, `self.net(x)`, `self.build(...)`,
        `super().build(...)`, `self.setup()`: it may be built there). False when unknown. Measured
        on Keras 3.15: such a model's `trainable_variables` is `[]` until its first call, and only
        what `keras.Input` built is there."""
        owner = self.owner_of(klass)
        if owner is not self:
            return owner.builds_lazily(klass, depth) if owner is not None else False
        key = ("builds lazily", klass.id)
        known = self.memo.get(key)
        if known is None:
            self.memo[key] = False  # while it is worked out: a class that makes itself
            known = self.memo[key] = depth <= MAX_ALIAS_DEPTH and self._builds_lazily(klass, depth)
        return known

    def _builds_lazily(self, klass: Block, depth: int) -> bool:
        if not self.is_keras(klass, "layers"):
            return False
        if any(self.method_of_block(klass, name) for name in ("trainable_variables", "trainable_weights")):
            return False  # the class says itself what its variables are
        init = self.method_of_block(klass, "__init__")
        lazy = False
        for call in self.calls_in_scope(init.block.id) if init is not None else ():
            text = call.func.text
            if method_of(call) == "build" or text == init.self_name or text.startswith(f"{init.self_name}."):
                return False  # built here, or a method of its own that may build it
            if call.site.order in self._inside_layers() or not text:
                continue
            lazy = lazy or self._lazy_layer(call, depth)
        build = self.method_of_block(klass, "build")
        if build is not None:
            lazy = lazy or any(method_of(call) in WEIGHT_METHODS or self.layer_state(call) == "weights"
                               for call in self.calls_in_scope(build.block.id))
        return lazy

    def _lazy_layer(self, call: Call, depth: int) -> bool:
        """`call` makes a layer or model whose weights wait for its first call."""
        callee = callee_of(self.facts, call)
        member = keras_member(callee, "layers")
        if member:
            return member in WEIGHT_LAYERS
        if callee in MODEL_CLASSES and callee.endswith("Sequential") or keras_member(callee, "models") == "Sequential":
            span = call.arg_span(0, "layers")
            inner = self.spans.calls_in(span) if span else []
            if not inner or keras_member(callee_of(self.facts, inner[0]), "layers") in ("Input", "InputLayer") \
                    or callee_of(self.facts, inner[0]) in ("keras.Input", "tensorflow.keras.Input"):
                return False
            return self.layer_state(call, depth + 1) == "weights"
        made = self.binding(call.func.text, call.site)
        if isinstance(made, Klass):
            return made.model.builds_lazily(made.block, depth + 1)
        return False

    def loss_constructions(self, name: str, site: Site) -> list | None:
        """For a name that holds a Keras loss object (`loss_fn = keras.losses.BinaryCrossentropy()`,
        `self.loss_fn` set in `__init__`): (its `keras.losses` class, the constructor call's summary)
        for each binding it may hold at `site` (`value_assigns`). None when there is none, or one
        binding is not the construction of a `keras.losses` class."""
        leaves = self._assigned_leaves
        if leaves is None:
            leaves = self._assigned_leaves = frozenset(
                a.target.rpartition(".")[2] for a in self.facts.assigns if a.kind == "assign")
        if name.rpartition(".")[2] not in leaves:
            return None  # no plain assignment binds the name (nor `self.<it>`): every binding found would be of another kind
        assigns = self.value_assigns(name, site)
        if not assigns:
            return None
        found = []
        for assign in assigns:
            value = assign.value
            if assign.kind != "assign" or value is None or value.kind != "call" or not value.func_text:
                return None
            member = keras_member(self.resolved(value.func_text, assign.site), "losses")
            if not member:
                return None
            found.append((member, value))
        return found

    # -- what Keras runs for you ---------------------------------------------------------
    def compiled_losses(self):
        """(compile call, the function Keras calls as a loss, its `y_pred` parameter) for each loss given
        to `compile`; found once per file (TAP104 and TAP402 ask)."""
        found = self.memo.get("compiled losses")
        if found is None:
            found = self.memo["compiled losses"] = list(self._compiled_losses())
        return iter(found)

    def _compiled_losses(self):
        for call in self.spans.calls:
            if (call.method or call.func.method) != "compile":  # method_of(call), inline: asked of every call
                continue
            loss = call.arg(1, "loss")
            if loss is None:
                continue
            items = list(loss.elements) if loss.kind in ("list", "tuple") else [loss]
            for item in items:
                fn = None
                if item.kind in ("name", "attribute") and item.text:
                    target = self.binding(item.text, call.site)
                    if isinstance(target, Function):
                        fn = target
                    elif isinstance(target, Instance):
                        fn = self.method(target.klass, "call") or self.method(target.klass, "__call__")
                elif item.kind == "lambda":
                    fn = self.lambda_at(item.value, self.facts.scope_of(call.site))
                elif item.kind == "call" and item.func_text:
                    made = self.binding(item.func_text, call.site)
                    if isinstance(made, Klass):
                        fn = self.method(made, "call") or self.method(made, "__call__")
                if fn is None:
                    continue
                positional = fn.params[1:] if fn.bound else fn.params
                if len(positional) >= 2:
                    yield call, fn, positional[1]

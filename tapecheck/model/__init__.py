"""The program model: what one file's functions, classes, names and tapes are, asked once, shared
by every rule. The middle room: it reads the facts (`tapecheck.lint.facts`, one walk of each
file) and answers the rules' questions; rules import only this package (its public face,
below), `tapecheck.findings` and `tapecheck.rules._common`. Nothing here imports libcst or
TensorFlow.

Its modules, each answering one kind of question:

- `program`: `ProgramModel`, one per file (`model_of(facts)`), assembled from the parts below;
  `load_module` builds the model of a project file another one imports.
- `bindings`: what a name or a `self.` attribute refers to at a site (scopes, reaching
  definitions, aliases, imports resolved).
- `calls`: which function a call runs, what its arguments bind, who calls whom.
- `keras`: Keras kinds: layers, models, metrics, optimizers, variables; what holds a model.
- `flow`: the differentiable-flow tracer, and `ops` the ops that cut a gradient path.
- `summaries`: per-function summaries (Pysa's model), across files.
- `tapes`: what a tape records and who asks it for gradients.
- `distribute`: strategies and the steps they run.
- `datasets`: `tf.data` datasets, and the functions their `map` traces.
- `queries`: span questions over the facts (what a call or a value reads).
- `project`: which file an import reads, and a file's project dependencies.
- `objects`: the plain data the answers are made of.
"""

from __future__ import annotations

from tapecheck.lint.facts import GRADIENT_METHODS, Expr
from tapecheck.model.distribute import (
    STRATEGIES, all_calls, builds_variables, distributes, makes_keras_model, makes_strategy, strategy_steps,
)
from tapecheck.model.datasets import dataset_map, mapped_function, mapped_functions
from tapecheck.model.flow import Tracer
from tapecheck.model.keras import (
    KERAS_ROOTS, TF_FUNCTIONS, VARIABLE_CLASSES, WEIGHT_METHODS, is_keras_class, keras_member,
)
from tapecheck.model.objects import Function, Instance, Klass, line_at
from tapecheck.model.program import ProgramModel, load_module, model_of, spans_of
from tapecheck.model.project import LIBRARIES, dependencies
from tapecheck.model.queries import (
    METADATA_CALLS, MODEL_CLASSES, SAME_LIST, call_span, callee_of, is_metadata, method_of, prefixes, variable_owner,
    within,
)

__all__ = [
    "GRADIENT_METHODS", "KERAS_ROOTS", "LIBRARIES", "METADATA_CALLS", "MODEL_CLASSES", "SAME_LIST", "STRATEGIES",
    "TF_FUNCTIONS", "VARIABLE_CLASSES", "WEIGHT_METHODS", "Expr", "Function", "Instance", "Klass", "ProgramModel",
    "Tracer", "all_calls", "builds_variables", "call_span", "callee_of", "dataset_map", "dependencies", "distributes",
    "is_keras_class", "is_metadata", "keras_member", "line_at", "load_module", "makes_keras_model", "makes_strategy",
    "mapped_function", "mapped_functions", "method_of", "model_of", "prefixes", "spans_of", "strategy_steps", "variable_owner", "within",
]

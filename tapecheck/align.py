"""`tapecheck align`: prove that a custom training loop does what `model.fit` does, step for step.

Both loops start from the same weights (copied from one model into the other, random
seed state included, so Dropout draws the same masks), see the same batches in the same
order, and use optimizers built by the same function. After every step the loss of each
is compared (for `fit`, the loss of that batch, not the running mean it prints), and the
weights after every step (or every N). A correct loop matches `fit` to float32 rounding;
the verdict is either "aligned" or the first step where the loops part, naming the
quantity (the loss, a variable, an epoch metric) and by how much.

The protocol, a Python file (or the same callables passed to `align()`):

    build_model()        -> a keras.Model; called twice, once for fit and once for your loop
    make_optimizer()     -> a keras optimizer; called once for fit, once for your loop
    loss_fn              -> the loss you mean; fit is compiled with it
    data()               -> (x, y) arrays (batched here, never shuffled) or a tf.data.Dataset
                            of (x, y) batches in a fixed order
    and one of
    train_step(model, optimizer, x, y) -> the batch loss       (align runs the loop), or
    train(model, optimizer, dataset, epochs)                   (your loop, a generator):
        yield the loss after every step, and at the end of each epoch optionally a dict of
        the metrics your loop reports for it, e.g. {"loss": train_loss.result()}
    optional: metrics() -> keras metrics fit is compiled with (compared with your epoch
    dicts by name), EPOCHS, BATCH_SIZE.
"""

from __future__ import annotations

import importlib.util
import inspect
import math
import sys
import types
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import numpy as np

DEFAULT_RTOL = 1e-5
TINY = 1e-12  # keeps relative differences finite when both values are zero


class AlignError(Exception):
    """The loop could not be aligned at all (bad file, broken protocol, a crash); one line."""


@dataclass(frozen=True)
class Divergence:
    """Where the two loops first part."""

    step: int  # 1-based global step; for an epoch metric, the epoch's last step
    epoch: int  # 1-based
    kind: str  # "loss", "variable", "epoch metric" or "steps"
    name: str  # variable path or metric name ("loss" for the per-step loss)
    fit_value: float
    your_value: float
    abs_diff: float
    rel_diff: float  # abs_diff relative to the largest magnitude in fit's value
    detail: str = ""
    element: tuple[int, ...] = ()  # for a variable: the entry that differs most (shown)

    def describe(self) -> str:
        where = f"step {self.step} (epoch {self.epoch})"
        if self.kind == "steps":
            return f"{where}: {self.detail}"
        element = f"[{', '.join(map(str, self.element))}]" if self.element else ""
        what = {
            "loss": "the loss",
            "variable": f"variable {self.name}{element}",
            "epoch metric": f"the reported epoch metric {self.name!r}",
        }[self.kind]
        text = (
            f"{where}: {what} differs: fit {self.fit_value:.8g}, yours {self.your_value:.8g} "
            f"(difference {self.abs_diff:.3g}, relative {self.rel_diff:.3g})"
        )
        return text + (f"; {self.detail}" if self.detail else "")


@dataclass
class AlignResult:
    fit_losses: list[float]
    your_losses: list[float]
    steps_per_epoch: int
    rtol: float
    weights_every: int
    max_loss_rel_diff: float
    max_weight_rel_diff: float
    epoch_metrics: list[dict[str, tuple[float, float]]] = field(default_factory=list)  # per epoch: name -> (fit, yours)
    divergence: Divergence | None = None
    uncompared: list[str] = field(default_factory=list)  # epoch metrics only one side reports
    # the quantity that diverged, over the run, for the plot: (x label, xs, fit's values, yours);
    # None when it is the loss (the loss curves are drawn anyway)
    diverged_series: tuple[str, list[int], list[float], list[float]] | None = None

    @property
    def aligned(self) -> bool:
        return self.divergence is None

    def summary(self) -> str:
        steps = len(self.fit_losses)
        lines = []
        if self.aligned:
            lines.append(f"aligned: {steps} steps, every loss and weight within relative {self.rtol:g} of fit")
        else:
            lines.append(f"diverged at {self.divergence.describe()}")
        lines.append(
            f"largest relative difference: loss {self.max_loss_rel_diff:.3g}, weights {self.max_weight_rel_diff:.3g} "
            f"(weights compared every {self.weights_every} step{'s' if self.weights_every != 1 else ''})"
        )
        if self.epoch_metrics:
            names = sorted({name for epoch in self.epoch_metrics for name in epoch})
            lines.append(f"epoch metrics compared: {', '.join(names)} over {len(self.epoch_metrics)} epochs")
        if self.uncompared:
            lines.append(f"not compared (reported by one side only): {', '.join(sorted(self.uncompared))}")
        return "\n".join(lines)


@dataclass
class LoopSpec:
    """What `align` needs from the user, whether from a file or passed directly."""

    build_model: Callable[[], Any]
    make_optimizer: Callable[[], Any]
    loss_fn: Callable
    data: Callable[[], Any]
    train: Callable[..., Iterator]
    metrics: Callable[[], list] | None = None
    epochs: int = 2
    batch_size: int = 32


def loop_from_step(train_step: Callable) -> Callable[..., Iterator]:
    """Turn `train_step(model, optimizer, x, y) -> loss` into the generator protocol."""

    def train(model, optimizer, dataset, epochs):
        for _ in range(epochs):
            for x, y in dataset:
                yield train_step(model, optimizer, x, y)

    return train


REQUIRED = ("build_model", "make_optimizer", "loss_fn", "data")


_BLOCKS = ("body", "orelse", "handlers", "finalbody", "cases")
_DYNAMIC_CALLS = {"globals", "vars", "setattr", "exec", "eval", "__import__"}


def _top_level_names(tree) -> tuple[set[str], bool]:
    """The names a module binds at its top level (in `if`/`try`/`with`/loop blocks too, not in
    functions or classes), and whether it may bind others in ways the source does not show
    (`from x import *`, a module `__getattr__`, `globals()`/`setattr`/`exec` at the top level)."""
    import ast

    names: set[str] = set()
    dynamic = False

    def targets(node):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, (ast.Tuple, ast.List)):
            for element in node.elts:
                targets(element)
        elif isinstance(node, ast.Starred):
            targets(node.value)

    def statements(body):
        nonlocal dynamic
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
                dynamic = dynamic or node.name == "__getattr__"
                continue
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    targets(target)
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and getattr(node, "value", None) is not None:
                targets(node.target)
            elif isinstance(node, (ast.For, ast.AsyncFor)):
                targets(node.target)
            elif isinstance(node, (ast.With, ast.AsyncWith)):
                for item in node.items:
                    if item.optional_vars is not None:
                        targets(item.optional_vars)
            elif isinstance(node, ast.Import):
                names.update(alias.asname or alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                if any(alias.name == "*" for alias in node.names):
                    dynamic = True
                names.update(alias.asname or alias.name for alias in node.names if alias.name != "*")
            for child in ast.walk(node):  # top-level code only: function bodies were skipped above
                if isinstance(child, ast.NamedExpr):
                    targets(child.target)
                elif isinstance(child, ast.Call) and isinstance(child.func, ast.Name) and child.func.id in _DYNAMIC_CALLS:
                    dynamic = True
                elif isinstance(child, ast.ExceptHandler) and child.name:
                    names.add(child.name)
            for block in _BLOCKS:
                inner = getattr(node, block, None)
                if isinstance(inner, list):
                    statements([n for n in inner if isinstance(n, ast.stmt)])
                    for item in inner:  # except handlers and match cases hold statements themselves
                        if not isinstance(item, ast.stmt) and isinstance(getattr(item, "body", None), list):
                            statements(item.body)

    statements(tree.body)
    return names, dynamic


def check_protocol_source(path: str) -> None:
    """Read the file's source (with `ast`, importing and running nothing) and raise AlignError
    when it cannot follow the protocol: a syntax error, or a required name it never defines.
    Names bound in ways the source does not show are left to the import to find."""
    import ast
    import warnings

    try:
        source = Path(path).read_bytes()
    except OSError as exc:
        raise AlignError(f"{path}: error: cannot read: {exc.strerror or exc}") from None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(source, filename=str(path))
    except SyntaxError as exc:
        raise AlignError(f"{path}: error: syntax error at line {exc.lineno}: {exc.msg} (nothing was run)") from None
    except (ValueError, RecursionError, MemoryError) as exc:
        raise AlignError(f"{path}: error: cannot parse it: {type(exc).__name__}: {exc}") from None
    names, dynamic = _top_level_names(tree)
    if dynamic:
        return
    missing = [name for name in REQUIRED if name not in names]
    if "train" not in names and "train_step" not in names:
        missing.append("train or train_step")
    if missing:
        raise AlignError(
            f"{path}: error: missing {', '.join(missing)} (the align protocol needs build_model, "
            "make_optimizer, loss_fn, data, and train or train_step; see `tapecheck align --help`; "
            "read from the source, nothing was run)"
        )


def load_loop(path: str) -> LoopSpec:
    """Check the file's source follows the protocol, then import it and check again (a name
    may be made at import time). Raises AlignError."""
    file = Path(path)
    if not file.is_file():
        raise AlignError(f"{path}: error: no such file")
    check_protocol_source(path)
    # The file may import its neighbours, as it would when run as a script.
    sys.path.insert(0, str(file.resolve().parent))
    try:
        spec = importlib.util.spec_from_file_location(f"tapecheck_align_{file.stem}", file)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except Exception as exc:  # any failure in user code becomes one line naming the file
        raise AlignError(f"{path}: error: importing it raised {one_line(exc)}") from None
    finally:
        sys.path.pop(0)
    missing = [name for name in REQUIRED if not hasattr(module, name)]
    if not hasattr(module, "train") and not hasattr(module, "train_step"):
        missing.append("train or train_step")
    if missing:
        raise AlignError(
            f"{path}: error: missing {', '.join(missing)} (the align protocol needs build_model, "
            "make_optimizer, loss_fn, data, and train or train_step; see `tapecheck align --help`)"
        )
    train = module.train if hasattr(module, "train") else loop_from_step(module.train_step)
    return LoopSpec(
        build_model=module.build_model,
        make_optimizer=module.make_optimizer,
        loss_fn=module.loss_fn,
        data=module.data,
        train=train,
        metrics=getattr(module, "metrics", None),
        epochs=int(getattr(module, "EPOCHS", 2)),
        batch_size=int(getattr(module, "BATCH_SIZE", 32)),
    )


def one_line(exc: BaseException) -> str:
    """`Type: message` on one line; TF's "in user code:" tracebacks keep their last line."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    text = lines[-1] if lines[0] == "in user code:" else lines[0]
    text = text if text.startswith(type(exc).__name__) else f"{type(exc).__name__}: {text}"
    return text if len(text) <= 300 else text[:297] + "..."


def relative_difference(fit_value, your_value) -> tuple[float, float]:
    """(max absolute difference, that relative to the largest magnitude of fit's value)."""
    fit_value = np.asarray(fit_value, dtype=np.float64)
    your_value = np.asarray(your_value, dtype=np.float64)
    abs_diff = float(np.max(np.abs(fit_value - your_value))) if fit_value.size else 0.0
    if math.isnan(abs_diff):
        return math.inf, math.inf
    scale = float(np.max(np.abs(fit_value))) if fit_value.size else 0.0
    return abs_diff, abs_diff / max(scale, TINY)


def _as_dataset(data, batch_size: int):
    import tensorflow as tf

    if isinstance(data, tf.data.Dataset):
        # fit and your loop each iterate it once per epoch: a reshuffling dataset would
        # give them different batches, and every step would "diverge" for that reason alone.
        first, again = (next(iter(data)) for _ in range(2))
        if not all(np.array_equal(a, b) for a, b in zip(tf.nest.flatten(first), tf.nest.flatten(again))):
            raise AlignError("data() returned a dataset whose order changes between iterations (shuffled?); align needs a fixed order")
        return data
    if not (isinstance(data, (tuple, list)) and len(data) == 2):
        raise AlignError("data() must return (x, y) arrays or a tf.data.Dataset of (x, y) batches")

    def as_array(values):
        values = np.asarray(values)
        # fit and the loop both see float32, as the model computes; float64 input would be cast
        # in different places by the two.
        return values.astype(np.float32) if np.issubdtype(values.dtype, np.floating) else values

    x, y = (as_array(part) for part in data)
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(batch_size)


def _copy_state(source_model, target_model) -> None:
    """Copy every variable, including Dropout's seed state, so both draw the same masks."""
    source, target = source_model.variables, target_model.variables
    shapes = [tuple(v.shape) for v in source], [tuple(v.shape) for v in target]
    if shapes[0] != shapes[1]:
        raise AlignError("build_model() returned two models with different variables; it must build the same architecture each call")
    for source_variable, target_variable in zip(source, target):
        target_variable.assign(source_variable)


def _snapshot(model):
    return [variable.numpy().copy() for variable in model.weights]


def _fit_recorder(model):
    """Run fit with a callback that records each batch's own loss and the weights after it."""
    import keras
    import tensorflow as tf

    # The yardstick is Keras's own train step. A model class that overrides it would have
    # fit run that override, and a loop would be compared with itself.
    if type(model).train_step is not keras.Model.train_step:
        model.train_step = types.MethodType(keras.Model.train_step, model)

    batch_loss = tf.Variable(0.0, dtype=tf.float32, trainable=False)
    compute_loss = model.compute_loss
    takes_training = "training" in inspect.signature(compute_loss).parameters

    # fit's logs carry the running mean of the loss; the batch's own loss is the value
    # `compute_loss` returns inside the train step, so keep it in a variable.
    def compute_loss_and_keep_it(x=None, y=None, y_pred=None, sample_weight=None, training=True):
        extra = {"training": training} if takes_training else {}
        loss = compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, **extra)
        batch_loss.assign(tf.cast(loss, tf.float32))
        return loss

    model.compute_loss = compute_loss_and_keep_it

    class Recorder(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.losses, self.weights, self.epoch_logs, self.steps_per_epoch = [], [], [], []
            self._steps = 0

        def on_epoch_begin(self, epoch, logs=None):
            self._steps = 0

        def on_train_batch_end(self, batch, logs=None):
            self._steps += 1
            self.losses.append(float(batch_loss.numpy()))
            self.weights.append(_snapshot(model))

        def on_epoch_end(self, epoch, logs=None):
            self.steps_per_epoch.append(self._steps)
            self.epoch_logs.append({name: float(value) for name, value in (logs or {}).items()})

    return Recorder()


def _run_your_loop(spec: LoopSpec, model, optimizer, dataset, epochs):
    """Drive the user's generator; record each yielded loss, the weights, the epoch dicts."""
    losses, weights, epoch_reports = [], [], []
    try:
        for item in spec.train(model, optimizer, dataset, epochs):
            if isinstance(item, Mapping):
                epoch_reports.append({name: float(np.asarray(value)) for name, value in item.items()})
                continue
            if isinstance(item, (tuple, list)):  # (loss, ...) from a step that returns more
                item = item[0]
            losses.append(float(np.asarray(item)))
            weights.append(_snapshot(model))
    except AlignError:
        raise
    except Exception as exc:
        raise AlignError(f"your loop raised at step {len(losses) + 1}: {one_line(exc)}") from None
    return losses, weights, epoch_reports


def align(
    build_model=None,
    make_optimizer=None,
    loss_fn=None,
    data=None,
    train=None,
    train_step=None,
    *,
    spec: LoopSpec | None = None,
    metrics=None,
    epochs: int | None = None,
    batch_size: int | None = None,
    rtol: float = DEFAULT_RTOL,
    weights_every: int = 1,
    seed: int = 0,
    deterministic: bool = True,
) -> AlignResult:
    """Run `fit` and your loop from identical state and compare them step by step.

    Pass the protocol's callables, or `spec=load_loop(path)`. `deterministic` turns on
    TensorFlow op determinism for the process (needed on GPUs; harmless on CPUs).
    Raises AlignError when either loop cannot run.
    """
    import keras
    import tensorflow as tf

    if spec is None:
        if train is None and train_step is None:
            raise AlignError("give train (a generator) or train_step")
        spec = LoopSpec(build_model, make_optimizer, loss_fn, data, train or loop_from_step(train_step), metrics)
    epochs = epochs or spec.epochs
    batch_size = batch_size or spec.batch_size
    if weights_every < 1:
        raise AlignError("weights_every must be at least 1")

    # TensorFlow's public API can turn op determinism on but not ask or turn it off; the
    # module behind it can, and lets align leave the process as it found it.
    from tensorflow.python.framework import config as tf_config

    keras.utils.set_random_seed(seed)
    determinism_was_on = tf_config.is_op_determinism_enabled()
    if deterministic:
        tf.config.experimental.enable_op_determinism()
    try:
        return _align(spec, epochs, batch_size, rtol, weights_every)
    finally:
        if not determinism_was_on:
            tf_config.disable_op_determinism()


def _align(spec: LoopSpec, epochs: int, batch_size: int, rtol: float, weights_every: int) -> AlignResult:
    try:
        dataset = _as_dataset(spec.data(), batch_size)
        first_x, _ = next(iter(dataset))
        fit_model, your_model = spec.build_model(), spec.build_model()
        for model in (fit_model, your_model):
            if not model.built:
                model(first_x)  # inference call: creates the variables, draws no random numbers
        _copy_state(fit_model, your_model)
        recorder = _fit_recorder(fit_model)
        fit_model.compile(
            optimizer=spec.make_optimizer(),
            loss=spec.loss_fn,
            metrics=spec.metrics() if spec.metrics else None,
            jit_compile=False,  # your tf.function runs without XLA unless you ask; so does fit here
        )
        your_optimizer = spec.make_optimizer()
    except AlignError:
        raise
    except Exception as exc:
        raise AlignError(f"setting up raised {one_line(exc)}") from None
    # Your loop first: if it is broken, say so before spending the time fit takes.
    your_losses, your_weights, your_reports = _run_your_loop(spec, your_model, your_optimizer, dataset, epochs)
    try:
        fit_model.fit(dataset, epochs=epochs, shuffle=False, verbose=0, callbacks=[recorder])
    except Exception as exc:
        raise AlignError(f"model.fit raised {one_line(exc)}") from None
    # Named as in fit's model: the first one built, so its paths carry no `_1` suffixes.
    names = [variable.path for variable in fit_model.weights]
    return compare(recorder, your_losses, your_weights, your_reports, names, rtol, weights_every)


def compare(recorder, your_losses, your_weights, your_reports, names, rtol, weights_every) -> AlignResult:
    """The verdict: walk the steps in order; the first quantity beyond `rtol` is the divergence.

    Within a step the loss comes first (it is computed before the update), then the
    weights after the update, then, at an epoch's last step, the metrics reported for it.
    """
    epoch_of_step = [epoch for epoch, count in enumerate(recorder.steps_per_epoch, start=1) for _ in range(count)]
    epoch_end_steps = {step: epoch for epoch, step in enumerate(_cumulative(recorder.steps_per_epoch), start=1)}
    fit_steps, your_steps = len(recorder.losses), len(your_losses)
    last_epoch = len(recorder.steps_per_epoch)
    divergences: list[Divergence] = []
    max_loss = max_weight = 0.0
    epoch_metrics: list[dict[str, tuple[float, float]]] = []
    uncompared: set[str] = set()

    for step in range(1, min(fit_steps, your_steps) + 1):
        epoch = epoch_of_step[step - 1]
        fit_loss, your_loss = recorder.losses[step - 1], your_losses[step - 1]
        abs_diff, rel = relative_difference(fit_loss, your_loss)
        max_loss = max(max_loss, rel)
        if rel > rtol:
            divergences.append(Divergence(step, epoch, "loss", "loss", fit_loss, your_loss, abs_diff, rel))

        if step % weights_every == 0 or step == fit_steps:
            per_variable = [
                (name, fit_w, your_w, *relative_difference(fit_w, your_w))
                for name, fit_w, your_w in zip(names, recorder.weights[step - 1], your_weights[step - 1])
            ]
            max_weight = max([max_weight] + [rel for *_, rel in per_variable])
            diverged = [entry for entry in per_variable if entry[4] > rtol]
            if diverged:
                name, fit_w, your_w, abs_diff, rel = max(diverged, key=lambda entry: entry[4])
                worst = np.unravel_index(np.abs(fit_w.astype(np.float64) - your_w).argmax(), fit_w.shape)
                detail = f"{len(diverged) - 1} other variable(s) too" if len(diverged) > 1 else "no other variable"
                if weights_every > 1:
                    detail = f"weights compared every {weights_every} steps; {detail}"
                divergences.append(
                    Divergence(
                        step, epoch, "variable", name, float(fit_w[worst]), float(your_w[worst]), abs_diff, rel, detail,
                        element=tuple(int(i) for i in worst),
                    )
                )

        if step in epoch_end_steps and epoch - 1 < len(your_reports):
            fit_logs, yours = recorder.epoch_logs[epoch - 1], your_reports[epoch - 1]
            uncompared.update(set(fit_logs) ^ set(yours))
            compared = {name: (fit_logs[name], yours[name]) for name in sorted(set(fit_logs) & set(yours))}
            for name, (fit_value, your_value) in compared.items():
                abs_diff, rel = relative_difference(fit_value, your_value)
                if rel > rtol:
                    divergences.append(Divergence(step, epoch, "epoch metric", name, fit_value, your_value, abs_diff, rel))
            if compared:
                epoch_metrics.append(compared)

    if fit_steps != your_steps:
        step = min(fit_steps, your_steps) + 1
        epoch = epoch_of_step[step - 1] if step <= fit_steps else last_epoch
        detail = f"fit ran {fit_steps} steps, your loop yielded {your_steps} losses"
        divergences.append(Divergence(step, epoch, "steps", "steps", fit_steps, your_steps, abs(fit_steps - your_steps), math.inf, detail))

    first = divergences[0] if divergences else None
    series = None
    if first is not None and first.kind == "variable" and first.name in names:
        index = names.index(first.name)
        xs = [step for step in range(1, min(fit_steps, your_steps) + 1)
              if (step % weights_every == 0 or step == fit_steps)]
        series = ("step", xs, [float(recorder.weights[x - 1][index][first.element]) for x in xs],
                  [float(your_weights[x - 1][index][first.element]) for x in xs])
    elif first is not None and first.kind == "epoch metric":
        xs = [n for n, epoch in enumerate(epoch_metrics, start=1) if first.name in epoch]
        series = ("epoch", xs, [float(epoch_metrics[n - 1][first.name][0]) for n in xs],
                  [float(epoch_metrics[n - 1][first.name][1]) for n in xs])
    return AlignResult(
        diverged_series=series,
        fit_losses=recorder.losses,
        your_losses=your_losses,
        steps_per_epoch=recorder.steps_per_epoch[0] if recorder.steps_per_epoch else 0,
        rtol=rtol,
        weights_every=weights_every,
        max_loss_rel_diff=max_loss,
        max_weight_rel_diff=max_weight,
        epoch_metrics=epoch_metrics,
        divergence=divergences[0] if divergences else None,
        uncompared=sorted(uncompared),
    )


def _cumulative(counts):
    total = 0
    for count in counts:
        total += count
        yield total


def plot(result: AlignResult, path: str) -> None:
    """The quantity that diverged first (the loss when it did, or when the loops aligned; else
    the variable's entry or the epoch metric), both loops' values and their relative difference,
    captioned with what it is, into an image file."""
    figure = plot_figure(result)
    try:
        figure.savefig(path)
    except (OSError, ValueError) as exc:
        raise AlignError(f"{path}: error: cannot write the plot: {exc}") from None


def plot_figure(result: AlignResult):
    """The matplotlib Figure `plot` writes."""
    # matplotlib is optional (the `plot` extra); Figure + Agg canvas leave pyplot's global state alone.
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ModuleNotFoundError:
        raise AlignError("--plot needs matplotlib: pip install 'tapecheck[plot]'") from None
    count = min(len(result.fit_losses), len(result.your_losses))
    steps = np.arange(1, count + 1)
    fit_losses = np.asarray(result.fit_losses[:count])
    your_losses = np.asarray(result.your_losses[:count])
    divergence = result.divergence
    series = result.diverged_series
    figure = Figure(figsize=(8, 6), layout="constrained")
    FigureCanvasAgg(figure)
    curves, differences = figure.subplots(2, 1, sharex=series is None)
    verdict = "aligned" if result.aligned else f"diverged at step {divergence.step}"
    figure.suptitle(f"tapecheck align: {verdict}")
    if series is None:  # aligned, or the loss (or the number of steps) diverged: the loss curves
        fit_x, fit_y = np.arange(1, len(result.fit_losses) + 1), result.fit_losses
        your_x, your_y = np.arange(1, len(result.your_losses) + 1), result.your_losses
        xs, fit_values, your_values, x_label = steps, fit_losses, your_losses, "step"
        quantity = "batch loss"
        caption = "the loss diverged first" if divergence is not None else "every loss and weight within tolerance"
        if divergence is not None and divergence.kind == "steps":
            caption = divergence.detail
    else:  # a weight or an epoch metric diverged first: draw that one, as compared
        x_label, xs, fit_values, your_values = series
        fit_x = your_x = xs = np.asarray(xs)
        fit_y, your_y = fit_values, your_values
        fit_values, your_values = np.asarray(fit_values), np.asarray(your_values)
        if divergence.kind == "variable":
            element = f"[{', '.join(map(str, divergence.element))}]" if divergence.element else ""
            quantity = f"{divergence.name}{element}"
            caption = f"variable {quantity} diverged first (its entry that differs most), after each compared step"
        else:
            quantity = divergence.name
            caption = f"the epoch metric {divergence.name!r} diverged first, as each loop reported it"
    curves.plot(fit_x, fit_y, label="fit", linewidth=2, marker="." if series is not None else None)
    curves.plot(your_x, your_y, label="your loop", linestyle="--", marker="." if series is not None else None)
    curves.set_ylabel(quantity)
    curves.set_title(caption, fontsize="medium")
    curves.legend()
    relative = np.abs(fit_values - your_values) / np.maximum(np.abs(fit_values), TINY)
    # A log scale cannot show 0; exact agreement sits on the floor, far below the tolerance.
    floor = 1e-12
    differences.semilogy(xs, np.maximum(relative, floor), marker=".", label=f"|fit - yours| / |fit| (0 drawn at {floor:g})")
    differences.axhline(result.rtol, color="red", linestyle=":", label=f"tolerance {result.rtol:g}")
    if divergence is not None:
        at = divergence.step if series is None or x_label == "step" else divergence.epoch
        for axes in (curves, differences):
            axes.axvline(at, color="gray", linestyle="--", linewidth=1)
    differences.set_xlabel(x_label)
    differences.set_ylabel(f"relative difference of {quantity}")
    differences.legend()
    return figure


@click.command()
@click.argument("loop_file", type=click.Path(dir_okay=False))
@click.option("--epochs", type=click.IntRange(min=1), default=None, help="Epochs to run (default: EPOCHS in the file, else 2).")
@click.option("--batch-size", type=click.IntRange(min=1), default=None, help="Batch size when data() returns arrays (default: BATCH_SIZE, else 32).")
@click.option("--rtol", type=click.FloatRange(min=0), default=DEFAULT_RTOL, show_default=True, help="Relative tolerance for losses, weights and epoch metrics.")
@click.option("--every", "weights_every", type=click.IntRange(min=1), default=1, show_default=True, help="Compare the weights every N steps.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), default=None, help="Draw the quantity that diverged first (the loss curves when none did or the loss did), both loops and their difference, captioned, into this image (needs matplotlib).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for everything random outside the copied initial state.")
@click.option("--verbose", "-v", is_flag=True, help="Show TensorFlow's start-up log lines (hidden by default).")
def cli(loop_file, epochs, batch_size, rtol, weights_every, plot_path, seed, verbose):
    """Prove that the custom loop in LOOP_FILE does what model.fit does, step for step.

    \b
    LOOP_FILE defines:
      build_model()      a keras.Model (called twice: fit's and yours)
      make_optimizer()   a keras optimizer (called twice)
      loss_fn            the loss you mean; fit is compiled with it
      data()             (x, y) arrays, or a tf.data.Dataset of (x, y) batches
      train_step(model, optimizer, x, y) -> the batch loss, or
      train(model, optimizer, dataset, epochs): a generator yielding the loss
                         after each step and, optionally, a dict of the metrics
                         reported at each epoch's end
      optional: metrics() (keras metrics for fit), EPOCHS, BATCH_SIZE

    Exit status: 0 aligned, 1 diverged, 2 the loops could not be run.
    """
    try:
        # Check what the plot needs before the minutes of training, not after.
        if plot_path and not Path(plot_path).resolve().parent.is_dir():
            raise AlignError(f"{plot_path}: error: cannot write the plot: no such directory")
        if plot_path and importlib.util.find_spec("matplotlib") is None:
            raise AlignError(f"{plot_path}: error: --plot needs matplotlib: pip install 'tapecheck[plot]'")
        if Path(loop_file).is_file():
            check_protocol_source(loop_file)  # before TensorFlow's import: a broken file fails in a moment
        from tapecheck._quiet import import_tensorflow

        import_tensorflow(verbose)  # the user's file imports it next: its start-up lines held back
        spec = load_loop(loop_file)
        result = align(spec=spec, epochs=epochs, batch_size=batch_size, rtol=rtol, weights_every=weights_every, seed=seed)
        if plot_path:
            plot(result, plot_path)
    except AlignError as exc:
        message = str(exc)  # messages about a named file carry its name already
        click.echo(message if ": error: " in message else f"{loop_file}: error: {message}", err=True)
        sys.exit(2)
    click.echo(f"{loop_file}: {result.summary()}")
    if plot_path:
        click.echo(f"plot written to {plot_path}")
    sys.exit(0 if result.aligned else 1)


if __name__ == "__main__":
    cli()

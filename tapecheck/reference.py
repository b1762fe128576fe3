"""The reference custom training loop: what a careful engineer writes in place of `model.fit`.

Read it as the model of a correct tf.GradientTape loop. Every choice that `fit` makes for
you is made here explicitly, and `tapecheck align` proves the train step matches `fit`
to float32 rounding (tests/test_align.py):

- one `@tf.function` train step: forward pass with `training=True` inside the tape, the
  loss (plus the model's own penalties) inside the tape, one `tape.gradient`, one
  `apply_gradients`;
- a read-only validation step (`training=False`, no tape, no update);
- Keras metric objects updated per batch and reset at every epoch boundary;
- `tf.train.Checkpoint` + `CheckpointManager` saving model, optimizer, epoch counter and
  Dropout's random state, so a rerun on the same directory resumes where it stopped and
  ends with the weights an uninterrupted run would have;
- a progress bar in a terminal, one plain line per epoch when piped;
- the final metrics returned as data (`RunResult`).

Run it: `tapecheck reference --epochs 5 --checkpoint-dir ckpt` (or `python -m
tapecheck.reference ...`, e.g. under `tapecheck probe -m`).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass, field
from typing import TextIO

import click
import numpy as np

from tapecheck._quiet import import_tensorflow

import_tensorflow()  # TensorFlow's start-up lines held back; `-v` shows them
import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

DATA_CHOICES = ("auto", "california", "diabetes")


class ReferenceLoopError(Exception):
    """A problem with the input (data, checkpoint directory): one line for the user."""


# --- data -----------------------------------------------------------------------------


@dataclass
class RegressionData:
    name: str
    note: str  # where the data came from, said to the user
    x_train: np.ndarray
    y_train: np.ndarray
    x_val: np.ndarray
    y_val: np.ndarray

    @property
    def n_features(self) -> int:
        return self.x_train.shape[1]


def _california_from_cache():
    """California housing if scikit-learn already has it on disk, else None. Never downloads."""
    from sklearn.datasets import fetch_california_housing

    try:
        return fetch_california_housing(return_X_y=True, download_if_missing=False)
    except OSError:  # scikit-learn says "Data not found and `download_if_missing` is False"
        return None


def load_data(name: str = "auto", validation_fraction: float = 0.2, seed: int = 0) -> RegressionData:
    """Features and target standardized with the training split's statistics only."""
    from sklearn.datasets import get_data_home, load_diabetes

    if name not in DATA_CHOICES:
        raise ReferenceLoopError(f"unknown data set {name!r}; choose one of {', '.join(DATA_CHOICES)}")
    arrays = _california_from_cache() if name in ("auto", "california") else None
    if arrays is not None:
        label, note = "california", "California housing (8 features), from the local scikit-learn cache"
    elif name == "california":
        raise ReferenceLoopError(
            f"California housing is not in the local scikit-learn cache ({get_data_home()}) and tapecheck "
            "never downloads; fetch it once with sklearn.datasets.fetch_california_housing(), or use --data diabetes"
        )
    else:
        arrays = load_diabetes(return_X_y=True)
        label = "diabetes"
        note = "scikit-learn's bundled diabetes set (10 features)"
        if name == "auto":
            note += "; California housing is not in the local scikit-learn cache, and nothing is downloaded"
    x, y = arrays
    order = np.random.default_rng(seed).permutation(len(x))
    n_val = max(1, int(len(x) * validation_fraction))
    val, train = order[:n_val], order[n_val:]
    x_mean, x_std = x[train].mean(0), x[train].std(0) + 1e-12
    y_mean, y_std = y[train].mean(), y[train].std() + 1e-12

    def standardize(rows):
        features = ((x[rows] - x_mean) / x_std).astype(np.float32)
        target = ((y[rows] - y_mean) / y_std).astype(np.float32)[:, None]
        return features, target

    return RegressionData(label, note, *standardize(train), *standardize(val))


def epoch_batches(x: np.ndarray, y: np.ndarray, batch_size: int, seed: int, epoch: int) -> tf.data.Dataset:
    """The training batches of one epoch, shuffled by (seed, epoch) alone.

    Deriving the order from the epoch number, rather than from a shuffle buffer's hidden
    state, is what lets a resumed run see exactly the batches an uninterrupted one would.
    """
    order = np.random.default_rng([seed, epoch]).permutation(len(x))
    return tf.data.Dataset.from_tensor_slices((x[order], y[order])).batch(batch_size)


# --- model --------------------------------------------------------------------------


def build_model(n_features: int, hidden_units: int = 64, dropout: float = 0.1) -> keras.Model:
    return keras.Sequential(
        [
            keras.Input((n_features,)),
            keras.layers.Dense(hidden_units, activation="relu"),
            keras.layers.Dropout(dropout),
            keras.layers.Dense(hidden_units, activation="relu"),
            keras.layers.Dense(1),
        ],
        name="reference_regressor",
    )


def make_optimizer(learning_rate: float = 1e-3) -> keras.optimizers.Optimizer:
    return keras.optimizers.Adam(learning_rate=learning_rate)


def make_loss() -> keras.losses.Loss:
    # The default reduction averages over the batch, as fit does.
    return keras.losses.MeanSquaredError()


def random_state(model: keras.Model) -> list:
    """The model's random seed variables (Dropout's), which tf.train.Checkpoint skips.

    Keras 3 keeps them out of `model.weights`, and a checkpoint of the model saves only
    weights; without them a resumed run would draw different dropout masks.
    """
    weights = {id(weight) for weight in model.weights}
    return [variable for variable in model.variables if id(variable) not in weights]


# --- the loop -----------------------------------------------------------------------


class Trainer:
    """The train and validation steps, and the metrics they update."""

    def __init__(self, model: keras.Model, optimizer: keras.optimizers.Optimizer, loss_fn: keras.losses.Loss):
        self.model = model
        self.optimizer = optimizer
        self.loss_fn = loss_fn
        self.train_metrics = [keras.metrics.Mean(name="loss"), keras.metrics.MeanAbsoluteError(name="mae")]
        self.val_metrics = [keras.metrics.Mean(name="val_loss"), keras.metrics.MeanAbsoluteError(name="val_mae")]
        # tf.function turns each step into a graph; the Python inside runs only while
        # tracing, so the steps keep no Python-side state. reduce_retracing: the short last
        # batch reuses the full batches' graph (with an unknown batch size) after one retrace.
        self.train_step = tf.function(self._train_step, reduce_retracing=True)
        self.val_step = tf.function(self._val_step, reduce_retracing=True)

    def _train_step(self, x, y):
        with tf.GradientTape() as tape:
            predictions = self.model(x, training=True)  # training=True: Dropout drops
            loss = self.loss_fn(y, predictions)
            if self.model.losses:  # weight penalties, if any layer has them: fit adds them too
                loss += tf.add_n(self.model.losses)
        gradients = tape.gradient(loss, self.model.trainable_variables)
        self.optimizer.apply_gradients(zip(gradients, self.model.trainable_variables))
        mean_loss, mae = self.train_metrics
        # Weighted by batch size, as fit does, so a short last batch counts for what it holds.
        mean_loss.update_state(loss, sample_weight=tf.shape(x)[0])
        mae.update_state(y, predictions)
        return loss

    def _val_step(self, x, y):
        predictions = self.model(x, training=False)
        mean_loss, mae = self.val_metrics
        mean_loss.update_state(self.loss_fn(y, predictions), sample_weight=tf.shape(x)[0])
        mae.update_state(y, predictions)

    def reset_metrics(self) -> None:
        for metric in self.train_metrics + self.val_metrics:
            metric.reset_state()

    def results(self) -> dict[str, float]:
        return {metric.name: float(metric.result()) for metric in self.train_metrics + self.val_metrics}


class Progress:
    """A progress bar on a terminal; one plain line per epoch otherwise (logs, pipes, CI).

    `Progress(None)` says nothing: what `train()` does unless given a stream.
    """

    WIDTH = 30

    def __init__(self, stream: TextIO | None):
        self.stream = stream
        self.is_terminal = stream is not None and stream.isatty()

    def epoch_started(self, epoch: int, epochs: int, steps: int) -> None:
        self.epoch, self.epochs, self.steps, self.done = epoch, epochs, steps, 0

    def step_done(self) -> None:
        self.done += 1
        if self.is_terminal:
            filled = self.WIDTH * self.done // max(self.steps, 1)
            bar = "#" * filled + "." * (self.WIDTH - filled)
            self._write(f"\repoch {self.epoch}/{self.epochs} [{bar}] {self.done}/{self.steps}")

    def epoch_finished(self, results: dict[str, float]) -> None:
        figures = "  ".join(f"{name} {value:.4f}" for name, value in results.items())
        prefix = "\r\033[K" if self.is_terminal else ""  # clear the bar, keep the summary
        self._write(f"{prefix}epoch {self.epoch}/{self.epochs}  {figures}\n")

    def message(self, text: str) -> None:
        self._write(text + "\n")

    def _write(self, text: str) -> None:
        if self.stream is not None:
            self.stream.write(text)
            self.stream.flush()  # a pipe shows each epoch as it ends, not at exit


@dataclass
class RunResult:
    metrics: dict[str, float]  # the last epoch's (after a resume with nothing left: validation only)
    history: list[dict[str, float]] = field(default_factory=list)  # one entry per epoch run now
    epochs_completed: int = 0  # in total, counting epochs run before a resume
    resumed_from_epoch: int = 0  # 0: a fresh start
    data: str = ""
    checkpoint: str | None = None  # the latest checkpoint written or restored

    def to_dict(self) -> dict:
        return asdict(self)


def train(
    epochs: int = 10,
    batch_size: int = 64,
    learning_rate: float = 1e-3,
    data: str | RegressionData = "auto",
    checkpoint_dir: str | None = None,
    max_to_keep: int = 3,
    checkpoint_every: int = 1,
    seed: int = 0,
    progress: Progress | None = None,
) -> RunResult:
    """Train the reference regressor; resume from `checkpoint_dir` if it holds a checkpoint."""
    progress = progress if progress is not None else Progress(None)
    keras.utils.set_random_seed(seed)  # initial weights and Dropout's seed
    dataset = data if isinstance(data, RegressionData) else load_data(data, seed=seed)
    progress.message(f"data: {dataset.note}; {len(dataset.x_train)} training, {len(dataset.x_val)} validation rows")

    model = build_model(dataset.n_features)
    optimizer = make_optimizer(learning_rate)
    trainer = Trainer(model, optimizer, make_loss())
    epochs_done = tf.Variable(0, dtype=tf.int64, trainable=False)  # saved: where a resume starts
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, epochs_done=epochs_done, random_state=random_state(model))
    manager = None
    if checkpoint_dir is not None:
        manager = _checkpoint_manager(checkpoint, checkpoint_dir, max_to_keep)
        if manager.latest_checkpoint:
            _restore(checkpoint, manager.latest_checkpoint, model, optimizer)
    resumed_from = int(epochs_done.numpy())
    if resumed_from:
        progress.message(f"resuming from {manager.latest_checkpoint}: {resumed_from} epochs done")

    validation = tf.data.Dataset.from_tensor_slices((dataset.x_val, dataset.y_val)).batch(batch_size)
    steps = -(-len(dataset.x_train) // batch_size)
    history: list[dict[str, float]] = []
    for epoch in range(resumed_from, epochs):
        trainer.reset_metrics()  # every epoch reports its own batches only
        progress.epoch_started(epoch + 1, epochs, steps)
        for x, y in epoch_batches(dataset.x_train, dataset.y_train, batch_size, seed, epoch):
            trainer.train_step(x, y)
            progress.step_done()
        for x, y in validation:
            trainer.val_step(x, y)
        results = trainer.results()
        history.append(results)
        progress.epoch_finished(results)
        epochs_done.assign(epoch + 1)
        if manager is not None and ((epoch + 1) % checkpoint_every == 0 or epoch + 1 == epochs):
            manager.save(checkpoint_number=epoch + 1)

    if history:
        final = history[-1]
    else:  # the checkpoint already holds every epoch asked for: report validation only
        trainer.reset_metrics()
        for x, y in validation:
            trainer.val_step(x, y)
        final = {name: value for name, value in trainer.results().items() if name.startswith("val_")}
        progress.message(f"already trained for {resumed_from} epochs; nothing to do")
    return RunResult(
        metrics=final,
        history=history,
        epochs_completed=max(resumed_from, epochs),
        resumed_from_epoch=resumed_from,
        data=dataset.name,
        checkpoint=manager.latest_checkpoint if manager is not None else None,
    )


def _checkpoint_manager(checkpoint, directory: str, max_to_keep: int) -> tf.train.CheckpointManager:
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise ReferenceLoopError(f"{directory}: not a directory")
    try:
        os.makedirs(directory, exist_ok=True)
        return tf.train.CheckpointManager(checkpoint, directory, max_to_keep=max_to_keep)
    except (OSError, tf.errors.OpError) as exc:
        raise ReferenceLoopError(f"{directory}: cannot use as checkpoint directory: {exc}") from None


def _restore(checkpoint, path: str, model, optimizer) -> None:
    # Keras 3 creates the optimizer's slots on its first update; they must exist before a
    # restore, or the saved moments would be silently dropped.
    optimizer.build(model.trainable_variables)
    try:
        checkpoint.restore(path).assert_existing_objects_matched()
    except (AssertionError, ValueError, tf.errors.OpError) as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ReferenceLoopError(f"{path}: cannot resume from this checkpoint (another model or a damaged file?): {first_line}") from None


# --- command line -------------------------------------------------------------------


@click.command()
@click.option("--epochs", type=click.IntRange(min=1), default=10, show_default=True, help="Total epochs, counting those already in the checkpoint.")
@click.option("--batch-size", type=click.IntRange(min=1), default=64, show_default=True)
@click.option("--learning-rate", type=click.FloatRange(min=0, min_open=True), default=1e-3, show_default=True)
@click.option("--data", type=click.Choice(DATA_CHOICES), default="auto", show_default=True,
              help="auto: California housing if in the local scikit-learn cache, else the bundled diabetes set.")
@click.option("--checkpoint-dir", type=click.Path(file_okay=False), default=None, help="Save every epoch here; rerun with the same directory to resume.")
@click.option("--max-to-keep", type=click.IntRange(min=1), default=3, show_default=True, help="Checkpoints kept.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON (final metrics, history) at the end.")
@click.option("--verbose", "-v", is_flag=True, help="Show TensorFlow's start-up log lines (hidden by default).")
def cli(epochs, batch_size, learning_rate, data, checkpoint_dir, max_to_keep, seed, as_json, verbose):
    """Train the reference custom loop (a small regressor) and print its metrics per epoch."""
    if verbose:
        from tapecheck._quiet import show_held

        show_held()
    try:
        result = train(
            epochs=epochs,
            batch_size=batch_size,
            learning_rate=learning_rate,
            data=data,
            checkpoint_dir=checkpoint_dir,
            max_to_keep=max_to_keep,
            seed=seed,
            progress=Progress(sys.stderr if as_json else sys.stdout),
        )
    except ReferenceLoopError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        where = f"; rerun with --checkpoint-dir {checkpoint_dir} to resume from the last epoch saved" if checkpoint_dir else ""
        click.echo(f"\ninterrupted{where}", err=True)
        sys.exit(130)
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2))
    else:
        figures = "  ".join(f"{name} {value:.4f}" for name, value in result.metrics.items())
        click.echo(f"final ({result.epochs_completed} epochs): {figures}")


if __name__ == "__main__":
    cli()

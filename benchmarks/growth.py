"""Does tapecheck's lint grow linearly with one file's size? Prints figures.

    python benchmarks/growth.py                        # N = 200, 400, 800, 1600, both shapes
    python benchmarks/growth.py --sizes 200 400 --shape steps
    python benchmarks/growth.py --write DIR            # only write the generated files (for
                                                       # benchmarks/findings_identical.py DIR)

Two shapes of generated training file, as issue 25 describes them:

- `steps`: N small step functions at module level, each with its own
  `with tf.GradientTape() as tape:`, sharing one global model, loss and optimizer
  (every fourth one computes its loss after the tape: a TAP101 finding per four);
- `trainer`: one trainer class of N such methods on `self.model` / `self.optimizer`.

Each file is linted in this process (`lint_source`, every rule, the file's own screen), and
the CPU time (`time.process_time`) of the lint is reported per N, best of `--repeat`; beside it
libcst's `parse_module` of the same file. The growth exponent between the two largest sizes is
log(t2/t1)/log(n2/n1): 1.0 is linear, 2.0 quadratic. The ratio lint/parse is given for the
largest file. Numbers are from one run: compare ratios, not seconds.
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import sys
import textwrap
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

HEADER = textwrap.dedent(
    """\
    import tensorflow as tf
    from tensorflow import keras

    model = keras.Sequential([keras.layers.Dense(32, activation="relu"), keras.layers.Dropout(0.1), keras.layers.Dense(1)])
    optimizer = keras.optimizers.Adam(1e-3)
    loss_fn = keras.losses.MeanSquaredError()
    train_loss = keras.metrics.Mean(name="train_loss")

    """
)

STEP = textwrap.dedent(
    """\
    @tf.function
    def train_step_{n}(x, y):
        with tf.GradientTape() as tape:
            prediction = model(x, training=True)
            loss = loss_fn(y, prediction) * {scale}
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        train_loss.update_state(loss)
        return loss


    """
)

LATE_STEP = textwrap.dedent(
    """\
    def late_step_{n}(x, y):
        with tf.GradientTape() as tape:
            prediction = model(x, training=True)
        loss = loss_fn(y, prediction)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss


    """
)

CLASS_HEADER = textwrap.dedent(
    """\
    class Trainer:
        def __init__(self):
            self.model = keras.Sequential([keras.layers.Dense(32), keras.layers.Dropout(0.1), keras.layers.Dense(1)])
            self.optimizer = keras.optimizers.Adam(1e-3)
            self.loss_fn = keras.losses.MeanSquaredError()

    """
)

METHOD = textwrap.dedent(
    """\
        @tf.function
        def train_step_{n}(self, x, y):
            with tf.GradientTape() as tape:
                prediction = self.model(x, training=True)
                loss = self.loss_fn(y, prediction) * {scale}
            grads = tape.gradient(loss, self.model.trainable_variables)
            self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
            return loss

    """
)

LATE_METHOD = textwrap.dedent(
    """\
        def late_step_{n}(self, x, y):
            with tf.GradientTape() as tape:
                prediction = self.model(x, training=True)
            loss = self.loss_fn(y, prediction)
            return tape.gradient(loss, self.model.trainable_variables)

    """
)

FOOTER = textwrap.dedent(
    """\
    def main(dataset, epochs=2):
        for epoch in range(epochs):
            for x, y in dataset:
                train_step_0(x, y)
            print(epoch, float(train_loss.result()))
            train_loss.reset_state()
    """
)


def generate(shape: str, n: int) -> str:
    parts = [HEADER]
    if shape == "steps":
        for i in range(n):
            parts.append((LATE_STEP if i % 4 == 3 else STEP).format(n=i, scale=1 + i % 7))
        parts.append(FOOTER)
    else:
        parts.append(CLASS_HEADER)
        for i in range(n):
            parts.append((LATE_METHOD if i % 4 == 3 else METHOD).format(n=i, scale=1 + i % 7))
    return "".join(parts)


def cpu(function, repeat: int) -> tuple[float, object]:
    best, result = math.inf, None
    for _ in range(repeat):
        gc.collect()
        start = time.process_time()
        result = function()
        best = min(best, time.process_time() - start)
    return best, result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[200, 400, 800, 1600])
    parser.add_argument("--shape", choices=("steps", "trainer", "both"), default="both")
    parser.add_argument("--repeat", type=int, default=1, help="best of this many lints per size")
    parser.add_argument("--write", metavar="DIR", help="write the generated files into DIR and stop")
    args = parser.parse_args(argv)
    shapes = ("steps", "trainer") if args.shape == "both" else (args.shape,)

    if args.write:
        os.makedirs(args.write, exist_ok=True)
        for shape in shapes:
            for n in args.sizes:
                with open(os.path.join(args.write, f"{shape}_{n}.py"), "w", encoding="utf-8") as out:
                    out.write(generate(shape, n))
        return 0

    import libcst

    from tapecheck.lint.engine import lint_source

    lint_source(generate("steps", 4).encode(), "warm.py")  # imports, first-use caches
    for shape in shapes:
        rows = []
        for n in args.sizes:
            source = generate(shape, n).encode()
            seconds, findings = cpu(lambda: lint_source(source, f"{shape}_{n}.py"), args.repeat)
            rows.append((n, len(source), source.count(b"\n"), seconds, len(findings)))
            print(f"{shape:8s} N={n:5d}  {len(source) / 1024:7.0f} KB {rows[-1][2]:6d} lines  "
                  f"lint CPU {seconds:7.2f} s  findings {len(findings)}", flush=True)
        if len(rows) >= 2:
            (n1, *_, t1, _), (n2, *_, t2, _) = rows[-2], rows[-1]
            exponent = math.log(t2 / t1) / math.log(n2 / n1) if t1 > 0 and t2 > 0 else float("nan")
            print(f"{shape:8s} growth exponent N={n1}->{n2}: {exponent:.2f}")
        source = generate(shape, args.sizes[-1])
        parse, _ = cpu(lambda: libcst.parse_module(source), args.repeat)
        print(f"{shape:8s} libcst parse_module of N={args.sizes[-1]}: {parse:.2f} s CPU; "
              f"lint / parse {rows[-1][3] / parse:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

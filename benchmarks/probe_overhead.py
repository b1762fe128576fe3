"""What the runtime probe costs per training step.

Times a small Keras model's step, eager and `@tf.function`, with and without
the probe, in interleaved blocks (off, on, on, off, ...) so drift in machine
load falls on both sides; reports the median per-step time and the ratio. A
third line times an eager step whose gradients include a None (the probe then
diagnoses every step): the price of a finding, not of watching. The last two
time a step whose loss goes through `tf.sign` (every gradient zero: the
no-learning check copies the variables, traces one eager step's ops and names
the model, once per probe, i.e. once per block here), eager and traced.

    python benchmarks/probe_overhead.py [--rounds 12] [--steps 40]
    python benchmarks/probe_overhead.py --nolearning-ab   # the probe with and without the no-learning check
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np
import tensorflow as tf

import tapecheck


def build(spare: bool, sign: bool = False):
    keras = tf.keras
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"),
                              keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1)])
    optimizer = keras.optimizers.SGD(0.01)
    metric = keras.metrics.Mean()
    extra = [tf.Variable(0.0, name="spare")] if spare else []
    x = tf.constant(np.random.default_rng(0).normal(size=(32, 16)).astype("float32"))
    y = tf.constant(np.random.default_rng(1).normal(size=(32, 1)).astype("float32"))

    def step():
        with tf.GradientTape() as tape:
            prediction = model(x, training=True)
            loss = tf.reduce_mean(tf.square(y - (tf.sign(prediction) if sign else prediction)))
        variables = model.trainable_variables + extra
        grads = tape.gradient(loss, variables)
        optimizer.apply_gradients(zip(grads, variables))
        metric.update_state(loss)
        return loss

    return step


def time_block(step, steps: int) -> float:
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - start) / steps


def measure(step, rounds: int, steps: int) -> tuple[float, float]:
    for _ in range(3):
        step()  # warm up (and trace, for tf.function) before timing anything
    off, on = [], []
    for r in range(rounds):
        order = ("off", "on") if r % 2 == 0 else ("on", "off")
        for mode in order:
            if mode == "on":
                with tapecheck.probe():
                    on.append(time_block(step, steps))
            else:
                off.append(time_block(step, steps))
    return statistics.median(off), statistics.median(on)


def measure_nolearning(step, rounds: int, steps: int) -> tuple[float, float, float]:
    """Median per-step time: no probe, the probe without the no-learning check, the probe with it."""
    from tapecheck.probe import nolearning

    seen = nolearning.NoLearning.seen
    for _ in range(3):
        step()
    times = {"off": [], "without": [], "with": []}
    modes = ["off", "without", "with"]
    try:
        for r in range(rounds):
            for mode in modes[r % 3:] + modes[:r % 3]:  # rotated: drift falls on all three
                if mode == "off":
                    times[mode].append(time_block(step, steps))
                    continue
                nolearning.NoLearning.seen = seen if mode == "with" else (lambda *args: None)
                with tapecheck.probe():
                    times[mode].append(time_block(step, steps))
    finally:
        nolearning.NoLearning.seen = seen
    return tuple(statistics.median(times[m]) for m in modes)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--only", nargs="*", default=None, help="run the cases whose name holds one of these words")
    parser.add_argument("--nolearning-ab", action="store_true",
                        help="time the probe with and without the no-learning check (clean steps)")
    args = parser.parse_args()
    if args.nolearning_ab:
        print(f"{'case':<20}{'off (ms)':>10}{'without (ms)':>14}{'with (ms)':>11}{'with/without':>14}{'with/off':>10}")
        for name, step in [("eager step", build(spare=False)), ("tf.function step", tf.function(build(spare=False)))]:
            off, without, with_check = measure_nolearning(step, args.rounds, args.steps)
            print(f"{name:<20}{off * 1e3:>10.3f}{without * 1e3:>14.3f}{with_check * 1e3:>11.3f}"
                  f"{with_check / without:>14.3f}{with_check / off:>10.3f}")
        return
    import warnings

    warnings.simplefilter("ignore")  # Keras warns once about the None gradient of the third case
    cases = [
        ("eager step", build(spare=False)),
        ("tf.function step", tf.function(build(spare=False))),
        ("eager step, one None gradient", build(spare=True)),
        ("eager step, tf.sign (zero grads)", build(spare=False, sign=True)),
        ("tf.function step, tf.sign", tf.function(build(spare=False, sign=True))),
    ]
    print(f"tapecheck probe overhead: median of {args.rounds} interleaved blocks of {args.steps} steps "
          f"(TensorFlow {tf.__version__}, {os.cpu_count()} CPUs)")
    print(f"{'case':<34}{'off (ms)':>10}{'on (ms)':>10}{'ratio':>8}")
    for name, step in cases:
        if args.only and not any(word in name for word in args.only):
            continue
        off, on = measure(step, args.rounds, args.steps)
        print(f"{name:<34}{off * 1e3:>10.3f}{on * 1e3:>10.3f}{on / off:>8.3f}")


if __name__ == "__main__":
    main()

"""What the probe's TAP304 check (step logs replaced by trackers) costs: per epoch, nothing per step.

The check wraps Keras's `Trainer._get_metrics_result_or_logs`, which `fit` calls once
per epoch (and `evaluate` once) and never inside a step. This times that call as
`fit` makes it, under a probe with the check and under one without, in interleaved
blocks: for a model whose `train_step` updates its tracker (the check's full path
on a clean model) and for one returning `{"loss": loss}` (reported at the first
call, then skipped).

    python benchmarks/step_logs_overhead.py [--rounds 6] [--calls 2000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras
import tensorflow as tf

import tapecheck
from tapecheck.probe.steplogs import StepLogsHooks


class Regressor(keras.Model):
    def __init__(self, tracked):
        super().__init__()
        self.tracked = tracked
        self.dense = keras.layers.Dense(1)
        if tracked:
            self.loss_tracker = keras.metrics.Mean(name="loss")

    def call(self, x):
        return self.dense(x)

    @property
    def metrics(self):
        return [self.loss_tracker] if self.tracked else super().metrics

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(self(x, training=True) - y))
        self.optimizer.apply_gradients(zip(tape.gradient(loss, self.trainable_variables), self.trainable_variables))
        if self.tracked:
            self.loss_tracker.update_state(loss)
        return {"loss": loss}


def fit(model, logs, calls):  # named as Keras's caller, so the check takes its path for `fit`
    method = type(model)._get_metrics_result_or_logs
    start = time.perf_counter()
    for _ in range(calls):
        method(model, logs)
    return (time.perf_counter() - start) / calls * 1e6


def block(with_check: bool, calls: int) -> dict:
    install = StepLogsHooks.install
    if not with_check:
        StepLogsHooks.install = lambda self, patcher: None
    try:
        with tapecheck.probe():
            times = {}
            for tracked in (True, False):
                model = Regressor(tracked)
                model.compile(optimizer="adam")
                x = tf.random.normal((32, 4))
                model.fit(x, tf.reduce_sum(x, axis=1, keepdims=True), epochs=1, batch_size=16, verbose=0)
                times["tracker updated" if tracked else "reported"] = fit(model, {"loss": tf.constant(0.5)}, calls)
    finally:
        StepLogsHooks.install = install
    return times


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    blocks = {False: [], True: []}
    for _ in range(args.rounds):
        for with_check in (False, True):
            blocks[with_check].append(block(with_check, args.calls))
    for case in blocks[True][0]:
        off = statistics.median(b[case] for b in blocks[False])
        on = statistics.median(b[case] for b in blocks[True])
        print(f"{case:16s} end-of-epoch call {off:7.1f} us without the check, {on:7.1f} us with it ({on - off:+.1f} us)")


if __name__ == "__main__":
    main()

"""Long run with the probe on: memory growth over 20,000 tiny eager training steps.

    python benchmarks/probe_memory.py                    # 20,000 steps, probe on
    python benchmarks/probe_memory.py --steps 5000 --baseline   # also the same run without the probe
    python benchmarks/probe_memory.py --zero-gradient    # the loss through tf.sign: every gradient zero

Each step is a real eager training step of a small Keras model with an extra variable the
loss never reads, so every step takes the probe's slow path (a None gradient diagnosed and
folded into one finding), and a metric updated and read. Measured after a warm-up:
- the C heap in use (glibc `mallinfo2().uordblks`: TensorFlow's and Python's allocations),
- the Python memory allocated by the probe's own modules (tracemalloc, filtered to
  tapecheck/probe; tracing starts after the warm-up and slows the run),
- live GradientTape objects and EagerTensors (gc), and the probe's tape table.
Exits 1 if the probe's own memory grows by more than --limit bytes or tapes are kept alive.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import importlib
import os
import sys
import time
import tracemalloc

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


def heap_in_use() -> int | None:
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = _Mallinfo2
    except (OSError, AttributeError):
        return None
    info = libc.mallinfo2()
    return info.uordblks + info.hblkhd


def live(cls_name: str) -> int:
    return sum(1 for obj in gc.get_objects() if type(obj).__name__ == cls_name)


def run(steps: int, warmup: int, with_probe: bool, trace: bool, zero: bool = False) -> dict:
    import keras
    import tensorflow as tf

    import tapecheck

    probe_dir = os.path.dirname(os.path.abspath(importlib.import_module("tapecheck.probe").__file__))
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8), keras.layers.Dense(1)])
    spare = tf.Variable(0.0)
    opt = keras.optimizers.SGD(0.01)
    metric = keras.metrics.Mean()
    x, y = tf.ones((8, 4)), tf.ones((8, 1))

    def step():
        with tf.GradientTape() as tape:
            prediction = model(x)
            loss = tf.reduce_mean(tf.square((tf.sign(prediction) if zero else prediction) - y))
        variables = model.trainable_variables + [spare]
        grads = tape.gradient(loss, variables)  # `spare`: None every step
        opt.apply_gradients(zip(grads, variables))
        metric.update_state(loss)
        float(metric.result())

    def probe_bytes() -> int:
        snapshot = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(True, probe_dir + os.sep + "*")])
        return sum(stat.size for stat in snapshot.statistics("filename"))

    def measure() -> dict:
        gc.collect()
        return {"heap": heap_in_use(), "probe": probe_bytes() if trace else 0,
                "tapes": live("GradientTape"), "tensors": live("EagerTensor")}

    probe = tapecheck.probe() if with_probe else None
    if probe is not None:
        probe.start()
    checkpoints = []  # (step, measurement)
    try:
        for _ in range(warmup):
            step()
        if trace:
            tracemalloc.start()  # what the probe allocates from here on is traced
        for _ in range(warmup):
            step()  # the traced allocations reach their steady state (caches, folded findings)
        checkpoints.append((2 * warmup, measure()))
        began = time.perf_counter()
        for index in range(2 * warmup, steps):
            step()
            if index % 1000 == 0:
                metric.reset_state()
            if (index + 1) % 5000 == 0 or index + 1 == steps:
                checkpoints.append((index + 1, measure()))
        elapsed = time.perf_counter() - began
        table = len(probe._hooks[0].infos) if probe is not None else 0
    finally:
        if trace:
            tracemalloc.stop()
        if probe is not None:
            probe.stop()
    findings = [(f.code, f.count) for f in probe.findings] if probe is not None else []
    return {"checkpoints": checkpoints, "elapsed": elapsed, "measured": steps - 2 * warmup,
            "table": table, "findings": findings}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--warmup", type=int, default=500)
    parser.add_argument("--baseline", action="store_true", help="also run without the probe")
    parser.add_argument("--no-tracemalloc", action="store_true", help="skip the Python-side measurement (faster)")
    parser.add_argument("--zero-gradient", action="store_true",
                        help="the loss through tf.sign: every gradient zero, the no-learning check's copies kept")
    parser.add_argument("--limit", type=int, default=64 * 1024, help="allowed growth of the probe's own memory (bytes)")
    args = parser.parse_args(argv)
    trace = not args.no_tracemalloc
    runs = [("probe on", True)] + ([("probe off", False)] if args.baseline else [])
    status = 0
    for name, with_probe in runs:
        result = run(args.steps, args.warmup, with_probe, trace and with_probe, args.zero_gradient)
        (first_step, start), (last_step, end) = result["checkpoints"][0], result["checkpoints"][-1]
        print(f"{name}: {args.steps} steps, measured from step {first_step} to {last_step}, "
              f"{result['elapsed'] / result['measured'] * 1e3:.2f} ms/step"
              f"{' under tracemalloc' if trace and with_probe else ''}")
        for at, point in result["checkpoints"]:
            heap = "n/a" if point["heap"] is None else f"{(point['heap'] - start['heap']) / 2**20:+.2f} MiB"
            own = f", probe's own Python memory {point['probe'] - start['probe']:+d} B" if trace and with_probe else ""
            print(f"  step {at:6d}: C heap {heap}{own}, live tapes {point['tapes']}, EagerTensors {point['tensors']}")
        print(f"  probe tape table at the end: {result['table']}")
        if with_probe:
            print(f"  findings: {result['findings']}")
            if trace and end["probe"] - start["probe"] > args.limit:
                status = 1
            if end["tapes"] > start["tapes"] + 1 or result["table"] > 1:
                status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())

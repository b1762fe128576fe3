"""The probe's promises: it changes nothing, keeps nothing, and leaves no trace.

In-process checks share one TensorFlow import. Two promises need a fresh
process (op determinism and logical CPU devices are process-wide settings):
those run one small script each, in a subprocess.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import textwrap
import tracemalloc
import weakref

import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from tensorflow.python.eager import context

import tapecheck
from tapecheck.probe import ProbeError
from probe_objects import assert_restored, patched_objects


def small_step(w, b):
    with tf.GradientTape() as tape:
        loss = w * w
    return tape.gradient(loss, [w, b])


def cut_step(w):
    with tf.GradientTape() as tape:
        y = tf.cast(tf.argmax([w, 2 * w]), tf.float32)
    return tape.gradient(y, w)


class Boom(Exception):
    pass


def test_restores_the_identical_objects_on_exit_error_and_keyboard_interrupt():
    before = patched_objects()
    w, b = tf.Variable(1.0), tf.Variable(2.0)
    with tapecheck.probe():
        assert tf.GradientTape.__dict__["gradient"] is not before[(tf.GradientTape, "gradient")]
        assert "__init_subclass__" in keras.metrics.Metric.__dict__
        small_step(w, b)
    assert_restored(before)
    assert "__init_subclass__" not in keras.metrics.Metric.__dict__

    for error in (Boom("user code failed"), KeyboardInterrupt()):
        with pytest.raises(type(error)) as caught, tapecheck.probe():
            small_step(w, b)
            for _ in range(2):  # the second recording of a cut path is watched by an op callback
                cut_step(w)
            raise error
        assert caught.value is error  # the same object, not wrapped or replaced
        assert_restored(before)
        assert context.context().op_callbacks == []


def test_exceptions_from_tensorflow_and_user_code_pass_unchanged():
    w = tf.Variable(1.0)
    with pytest.raises(tf.errors.InvalidArgumentError) as plain, tf.GradientTape():
        tf.reshape(w, (2, 2))
    with tapecheck.probe(), pytest.raises(tf.errors.InvalidArgumentError) as probed, tf.GradientTape():
        tf.reshape(w, (2, 2))
    assert type(probed.value) is type(plain.value) and probed.value.message == plain.value.message

    def loss_fn():
        raise Boom("in the loss")

    error_seen = None
    with tapecheck.probe():
        try:
            with tf.GradientTape() as tape:
                loss_fn()
        except Boom as exc:
            error_seen = exc
    assert str(error_seen) == "in the loss" and error_seen.__traceback__ is not None
    del tape


def test_two_probes_in_a_row_and_a_nested_one():
    w, b = tf.Variable(1.0), tf.Variable(2.0)
    for _ in range(2):
        with tapecheck.probe() as p:
            small_step(w, b)
            inner = tapecheck.probe().start()  # nests: the running probe's hooks serve both
            small_step(w, b)
            inner.stop()
            small_step(w, b)  # the running probe is unaffected by the nested one
            with pytest.raises(ProbeError):
                p.start()  # but the running probe itself cannot start again
        assert [(f.code, f.count) for f in p.findings] == [("TAP102", 3)]
        assert [(f.code, f.count) for f in inner.findings] == [("TAP102", 1)]


def test_keeps_no_tape_or_tensor_alive():
    w, b = tf.Variable(1.0), tf.Variable(2.0)
    x = tf.constant(3.0)
    with tapecheck.probe() as p:
        with tf.GradientTape() as tape:
            y = w * x
        z = y + b
        tape.gradient(z, [w, b])  # diagnosed: the slow path that looks at everything
        refs = [weakref.ref(tape), weakref.ref(y), weakref.ref(z)]
        del tape, y, z
        gc.collect()
        assert [r() for r in refs] == [None, None, None]
        tape_hooks = p._hooks[0]
        tape_hooks._forget_dead()  # done at the next tape, without Python code run by the collector
        assert tape_hooks.infos == {}
    assert p.findings  # what is kept is plain data
    assert all(isinstance(v, (str, int, list)) for f in p.findings for v in f.details.values())


def test_memory_stays_flat_over_a_long_run():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8), keras.layers.Dense(1)])
    spare = tf.Variable(0.0)
    opt = keras.optimizers.SGD(0.01)
    metric = keras.metrics.Mean()
    x, y = tf.ones((8, 4)), tf.ones((8, 1))
    probe_dir = os.path.dirname(tapecheck.probe.__file__)

    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x) - y))
        variables = model.trainable_variables + [spare]
        grads = tape.gradient(loss, variables)  # `spare` is None every step: the diagnosis runs each time
        opt.apply_gradients(zip(grads, variables))
        metric.update_state(loss)
        float(metric.result())

    def probe_bytes():
        gc.collect()
        snapshot = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(True, probe_dir + "/*")])
        return sum(stat.size for stat in snapshot.statistics("filename"))

    with tapecheck.probe() as p:
        for _ in range(10):
            step()
        tracemalloc.start()
        try:
            for _ in range(20):
                step()
            start = probe_bytes()
            for _ in range(100):
                step()
            end = probe_bytes()
        finally:
            tracemalloc.stop()
        live_tapes = len(p._hooks[0].infos)
    assert end - start < 16_384, (start, end)
    assert live_tapes <= 1
    [finding] = p.findings
    assert finding.count == 130


def run_script(tmp_path, source: str, timeout=240) -> dict:
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(source))
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=timeout, check=False,
                          env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


DETERMINISM = """
    import numpy as np
    import keras

    tf.config.experimental.enable_op_determinism()
    x = np.random.default_rng(0).normal(size=(64, 6)).astype("float32")
    y = (x.sum(axis=1, keepdims=True) > 0).astype("float32")

    def make():
        keras.utils.set_random_seed(7)
        model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(16, activation="relu"),
                                  keras.layers.Dropout(0.3), keras.layers.Dense(1)])
        return model, keras.optimizers.Adam(0.01)

    def custom(traced):
        model, opt = make()
        loss_fn = keras.losses.BinaryCrossentropy(from_logits=True)
        metric = keras.metrics.Mean()
        def step(xb, yb):
            with tf.GradientTape() as tape:
                loss = loss_fn(yb, model(xb, training=True))
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))
            metric.update_state(loss)
        if traced:
            step = tf.function(step)
        data = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(64, seed=1).batch(16)
        for _ in range(3):
            metric.reset_state()
            for xb, yb in data:
                step(xb, yb)
            float(metric.result())
        return model.get_weights()

    def fit():
        model, opt = make()
        model.compile(optimizer=opt, loss=keras.losses.BinaryCrossentropy(from_logits=True), metrics=["accuracy"])
        model.fit(x, y, batch_size=16, epochs=3, shuffle=True, verbose=0)
        return model.get_weights()

    out = {}
    for name, run in (("eager", lambda: custom(False)), ("tf.function", lambda: custom(True)), ("fit", fit)):
        plain = run()
        with tapecheck.probe() as p:
            probed = run()
        out[name] = {
            "identical": all(a.tobytes() == b.tobytes() for a, b in zip(plain, probed)),
            "findings": len(p.findings),
        }
    results["determinism"] = out
    print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def process_wide(tmp_path_factory):
    """One fresh process for both settings that are process-wide: logical devices, then op determinism."""
    source = textwrap.dedent(MIRRORED) + textwrap.dedent(DETERMINISM)
    return run_script(tmp_path_factory.mktemp("process_wide"), source)


def test_training_is_bit_identical_with_and_without_the_probe(process_wide):
    expected = {name: {"identical": True, "findings": 0} for name in ("eager", "tf.function", "fit")}
    assert process_wide["determinism"] == expected


MIRRORED = """
    import json
    import tensorflow as tf
    import tapecheck

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope():
        w = tf.Variable(1.0, name="w")
        unused = tf.Variable(1.0, name="unused")

    def replica_step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(w * x)
        return tape.gradient(loss, [w, unused])  # MARK:replica

    data = strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensor_slices(tf.ones((8, 1))).batch(4))
    with tapecheck.probe() as p:
        for batch in data:
            strategy.run(replica_step, args=(batch,))  # eager: one thread per replica
        traced = tf.function(lambda b: strategy.run(replica_step, args=(b,)))
        for batch in data:
            traced(batch)
    results = {"mirrored": {
        "replicas": strategy.num_replicas_in_sync,
        "findings": [[f.code, f.line, f.details["cause"], f.details["sources"], f.count] for f in p.findings],
    }}
"""


def test_mirrored_strategy_over_two_cpu_devices(process_wide):
    result = process_wide["mirrored"]
    mark = next(n for n, text in enumerate(textwrap.dedent(MIRRORED).splitlines(), 1) if "MARK:replica" in text)
    assert result["replicas"] == 2
    [[code, line, cause, sources, count]] = result["findings"]
    assert (code, line, cause, sources) == ("TAP102", mark, "variable-not-read", ["unused"])
    assert count >= 2 * 2  # two eager steps on two replicas, plus the traces


def test_a_failing_diagnosis_never_stops_training(monkeypatch, capsys):
    from tapecheck.probe import diagnose

    def broken(site):
        raise LookupError("probe bug")

    monkeypatch.setattr(diagnose, "call_texts", broken)
    w, b = tf.Variable(1.0), tf.Variable(2.0)
    with tapecheck.probe() as p:
        grads = small_step(w, b)
        grads = small_step(w, b)
    assert grads[1] is None and p.findings == []
    assert capsys.readouterr().err.count("tapecheck probe: internal error") == 1

"""The probe never breaks training: errors, exits, interrupts, nesting, threads, stale probes.

All in this process (one TensorFlow import for the module), except MultiWorkerMirroredStrategy,
which needs two worker processes by nature (marked slow; see the test).
The promises already covered by tests/test_probe_promises.py (identical objects restored on
a raised KeyboardInterrupt, one probe at a time, memory over 130 steps, MirroredStrategy over
two logical CPUs) are not repeated; these add the cases that test does not reach.
"""

from __future__ import annotations

import _thread
import contextlib
import gc
import json
import operator
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
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
    return tape.gradient(loss, [w, b])  # b is never read: TAP102

HERE = os.path.abspath(__file__)
PROBE_DIR = os.path.dirname(os.path.abspath(tapecheck.probe.__file__)) + os.sep


class Boom(Exception):
    pass


def probe_is_off():
    from tapecheck.probe import session

    return session._running is None and context.context().op_callbacks == []


# -- exceptions pass through unchanged -----------------------------------------------------------

def reshape_loss(w):
    return tf.reshape(w, (2, 2))  # InvalidArgumentError raised by TensorFlow, from this line


def tf_error_in_tape(w):
    with tf.GradientTape() as tape:
        loss = reshape_loss(w)
    return tape.gradient(loss, w)


@tf.custom_gradient
def fragile(x):
    def grad(dy):
        raise Boom("in the backward pass")  # user code run by TensorFlow inside tape.gradient

    return x * 1.0, grad


def user_error_in_gradient(w):
    with tf.GradientTape() as tape:
        loss = fragile(w)
    return tape.gradient(loss, w)


def tape_reused(w):
    with tf.GradientTape() as tape:
        loss = w * w
    tape.gradient(loss, w)
    return tape.gradient(loss, w)  # RuntimeError from TensorFlow


def caught(fn, *args):
    try:
        fn(*args)
    except Exception as exc:  # noqa: BLE001
        return exc
    raise AssertionError(f"{fn.__name__} did not raise")


def user_frames(exc):
    return [(f.filename, f.lineno, f.name) for f in traceback.extract_tb(exc.__traceback__) if f.filename == HERE]


@pytest.mark.parametrize("fn", [tf_error_in_tape, user_error_in_gradient, tape_reused], ids=lambda f: f.__name__)
def test_errors_keep_type_message_and_the_user_frames_of_their_traceback(fn):
    w = tf.Variable([1.0, 2.0, 3.0])
    plain = caught(fn, w)
    with tapecheck.probe():
        probed = caught(fn, w)
    assert type(probed) is type(plain)
    assert str(probed) == str(plain)
    assert user_frames(probed) == user_frames(plain)  # every line of the user's code, in order
    innermost = [f for f in traceback.extract_tb(probed.__traceback__) if not f.filename.startswith(PROBE_DIR)][-1]
    innermost_plain = traceback.extract_tb(plain.__traceback__)[-1]
    assert (innermost.filename, innermost.lineno) == (innermost_plain.filename, innermost_plain.lineno)
    assert probe_is_off()


def test_a_user_error_inside_the_with_block_is_the_same_object(tmp_path):
    w = tf.Variable(1.0)
    error = Boom("mine")
    with pytest.raises(Boom) as seen, tapecheck.probe(), tf.GradientTape():
        _ = w * 2.0
        raise error
    assert seen.value is error and seen.value.__cause__ is None and seen.value.__context__ is None
    assert probe_is_off()


# -- `tapecheck probe script.py`: exit statuses, interrupts, tracebacks -------------------------------

SCRIPT = """\
import sys
import tensorflow as tf

w, b = tf.Variable(1.0), tf.Variable(2.0)
for _ in range(2):
    with tf.GradientTape() as tape:
        loss = w * w
    grads = tape.gradient(loss, [w, b])
{ending}
"""


def probe_cli(tmp_path, monkeypatch, ending: str):
    from click.testing import CliRunner

    from tapecheck.cli import main

    (tmp_path / "train.py").write_text(SCRIPT.format(ending=ending))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = patched_objects()
    result = CliRunner().invoke(main, ["probe", "train.py"], catch_exceptions=False)
    assert_restored(before)
    assert probe_is_off()
    assert "train.py:8:" in result.stderr and "TAP102" in result.stderr, result.stderr  # the report is printed
    return result


@pytest.mark.parametrize("ending,status", [
    ("", 0), ("sys.exit()", 0), ("sys.exit(0)", 0), ("sys.exit(3)", 3), ("sys.exit(42)", 42),
    ("sys.exit(255)", 255), ("raise SystemExit(7)", 7), ("sys.exit('stopped by the user')", 1),
])
def test_sys_exit_keeps_the_programs_status(tmp_path, monkeypatch, ending, status):
    result = probe_cli(tmp_path, monkeypatch, ending)
    assert result.exit_code == status, result.stderr
    if "stopped" in ending:
        assert "stopped by the user" in result.stderr


def test_a_keyboard_interrupt_in_the_program_exits_130_with_everything_restored(tmp_path, monkeypatch):
    result = probe_cli(tmp_path, monkeypatch, "raise KeyboardInterrupt")
    assert result.exit_code == 130
    assert "KeyboardInterrupt" in result.stderr


def test_a_crash_in_the_program_shows_its_own_traceback(tmp_path, monkeypatch):
    result = probe_cli(tmp_path, monkeypatch, "def fail():\n    return 1 / 0\nfail()")
    assert result.exit_code == 1
    tail = result.stderr[result.stderr.index("Traceback"):]
    assert 'train.py", line 11, in <module>' in tail and 'train.py", line 10, in fail' in tail, tail
    assert tail.rstrip().endswith("ZeroDivisionError: division by zero")
    assert "tapecheck" not in tail.replace("tapecheck probe", "")  # no probe frames in the user's traceback


# -- an interrupt that lands anywhere --------------------------------------------------------------

def test_an_interrupt_landing_at_any_point_of_a_step_restores_every_patch():
    """`_thread.interrupt_main` raises KeyboardInterrupt at whatever bytecode runs then: inside
    TensorFlow, inside the probe's wrappers, between them. Whatever was interrupted, everything
    is put back and the next probe works."""
    before = patched_objects()
    w, b = tf.Variable(1.0), tf.Variable(2.0)
    gc.collect()  # garbage of earlier tests, whose finalizers could take the interrupt, goes now
    gc.freeze()  # and what lives on is left out of the collections below (each walked it all: 2-3 s in a
    # worker); never unfrozen: conftest.py freezes what collection built for the whole run, unfreeze undoes all
    for delay in (0.0, 0.002, 0.007, 0.013, 0.03, 0.05, 0.08, 0.12):
        lost = []
        timer = threading.Timer(delay, _thread.interrupt_main)
        deadline = time.monotonic() + 20
        gc.collect()  # the garbage of the interrupted steps before, likewise
        with pytest.raises(KeyboardInterrupt), tapecheck.probe(), unraisable_into(lost):
            timer.start()
            while time.monotonic() < deadline:  # ends by the interrupt, unless it is lost
                small_step(w, b)
        timer.join()
        assert not lost, f"the interrupt (after {delay} s) was lost: {lost}"
        assert_restored(before)
        assert probe_is_off()
    with tapecheck.probe() as p:  # a fresh probe after all that works as usual
        small_step(w, b)
    assert [(f.code, f.count) for f in p.findings] == [("TAP102", 1)]


@contextlib.contextmanager
def unraisable_into(lost: list):
    """Collect into `lost` what Python reports as "Exception ignored" (an exception in a finalizer).

    Meanwhile `gc.callbacks` are set aside: they are Python code run by the collector too, and
    the test environment has one (hypothesis times each collection), which would drop an
    interrupt that no program outside the tests would see dropped."""
    saved_hook, saved_callbacks = sys.unraisablehook, gc.callbacks[:]
    sys.unraisablehook = lambda u: lost.append(f"{u.exc_type.__name__} in {u.object!r}")
    gc.callbacks.clear()
    try:
        yield
    finally:
        gc.callbacks[:] = saved_callbacks
        sys.unraisablehook = saved_hook


@pytest.fixture(autouse=True)
def ctrl_c_raises():
    """Ctrl-C raises KeyboardInterrupt in the test, as in a plain `python` run: a pytest-xdist
    worker ignores SIGINT (its controller handles it), and `_thread.interrupt_main` then does
    nothing at all."""
    saved = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, saved)


def interrupt_then(*actions):
    """Ask for a KeyboardInterrupt and run `actions` with no bytecode of ours in between: the
    interrupt lands in the first Python code that the actions run, as a Ctrl-C can."""
    list(map(operator.methodcaller("__call__"), [_thread.interrupt_main, *actions]))


def dying_tape():
    return tf.GradientTape(persistent=True)


def dying_metric():
    metric = keras.metrics.Mean()
    metric.update_state(1.0)
    return metric


@pytest.mark.parametrize("make", [dying_tape, dying_metric])
def test_a_ctrl_c_while_a_tracked_object_dies_is_not_lost(make):
    """The probe forgets a tape or metric when it dies. If that ran Python code in the garbage
    collector, a Ctrl-C landing there would be printed as "Exception ignored" and dropped."""
    lost = []
    with tapecheck.probe(), unraisable_into(lost):
        objects = [make()]
        ref = weakref.ref(objects[0])
        gc.collect()  # no garbage of earlier tests left whose finalizers could take the interrupt
        gc.disable()
        try:
            interrupt_then(objects.clear, gc.collect)
        except KeyboardInterrupt:
            pass
        else:
            pytest.fail(f"the interrupt was lost: {lost}")
        finally:
            gc.enable()
    assert ref() is None, "the object did not die where the interrupt was waiting"
    assert lost == []


# -- nesting, threads, a stale probe ----------------------------------------------------------------

def test_a_probe_inside_a_probe_nests_and_the_outer_one_goes_on():
    before = patched_objects()
    w, b = tf.Variable(1.0), tf.Variable(2.0)
    with tapecheck.probe() as outer:
        small_step(w, b)
        with tapecheck.probe() as inner:  # as under `pytest --tapecheck` or `tapecheck probe`
            assert inner.running
            small_step(w, b)
        assert not inner.running and outer.running
        small_step(w, b)
        with pytest.raises(ProbeError, match="already running"):
            outer.start()  # the running probe itself, entered again
        small_step(w, b)
    assert [(f.code, f.count) for f in outer.findings] == [("TAP102", 4)]
    assert [(f.code, f.count) for f in inner.findings] == [("TAP102", 1)]
    assert_restored(before)
    assert probe_is_off()


def run_threads(target, count=2):
    errors = []

    def guarded(*args):
        try:
            target(*args)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


def test_one_probe_sees_training_in_two_threads_each_step_once():
    w, b = tf.Variable(1.0), tf.Variable(2.0)
    steps = 25
    with tapecheck.probe() as p:
        errors = run_threads(lambda i: [small_step(w, b) for _ in range(steps)])
    assert errors == []
    assert [(f.code, f.count) for f in p.findings] == [("TAP102", 2 * steps)]
    assert probe_is_off()


def test_two_threads_starting_probes_at_once_install_the_hooks_exactly_once():
    before = patched_objects()
    w, b = tf.Variable(1.0), tf.Variable(2.0)
    barrier = threading.Barrier(2)
    started = threading.Barrier(2)
    done = threading.Barrier(2)
    outcome = {}

    def worker(i):
        barrier.wait()
        with tapecheck.probe() as p:
            nested = p._parent is not None  # the later one nests in the first
            started.wait()
            small_step(w, b)
            done.wait()  # hold it while the other thread trains
        outcome[i] = (nested, p)

    assert run_threads(worker) == []
    assert sorted(nested for nested, _ in outcome.values()) == [False, True]
    for _, probe in outcome.values():  # both started before either step: each sees both threads' steps
        assert [(f.code, f.count) for f in probe.findings] == [("TAP102", 2)]
    assert_restored(before)
    assert probe_is_off()


def test_a_probe_left_running_by_a_crashed_run_can_be_stopped_and_reentered():
    before = patched_objects()
    w, b = tf.Variable(1.0), tf.Variable(2.0)
    stale = tapecheck.probe()

    def crashed_run():  # a notebook cell that started a probe and died before stopping it
        stale.start()
        small_step(w, b)
        raise Boom("the cell failed")

    with pytest.raises(Boom):
        crashed_run()
    small_step(w, b)  # training goes on under the stale probe
    with tapecheck.probe() as nested:  # nests in the stale one
        small_step(w, b)
    assert [(f.code, f.count) for f in nested.findings] == [("TAP102", 1)]
    stale.stop()
    stale.stop()  # stopping twice is harmless
    assert_restored(before)
    assert probe_is_off()
    with stale:  # the same object entered again
        small_step(w, b)
    assert_restored(before)
    assert [(f.code, f.count) for f in stale.findings] == [("TAP102", 4)]
    with tapecheck.probe() as fresh:
        small_step(w, b)
    assert [(f.code, f.count) for f in fresh.findings] == [("TAP102", 1)]


# -- MultiWorkerMirroredStrategy: two worker processes on localhost ------------------------------------

WORKER = """\
import json, os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import tensorflow as tf
import tapecheck

strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    w = tf.Variable(1.0)
    b = tf.Variable(2.0)

def replica_step(x):
    with tf.GradientTape() as tape:
        loss = w * x
    return tape.gradient(loss, [w, b])  # b is never read: None on every replica of every worker

with tapecheck.probe() as p:
    for step in range(3):
        strategy.run(replica_step, args=(tf.constant(float(step)),))
        strategy.run(tf.function(replica_step), args=(tf.constant(1.0),))
task = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
with open(f"worker{task}.json", "w") as out:
    out.write(p.report("json"))
"""


def free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


@pytest.mark.skipif(os.environ.get("TAPECHECK_SKIP_MULTIWORKER") == "1", reason="TAPECHECK_SKIP_MULTIWORKER=1")
def test_multi_worker_mirrored_strategy_findings_from_every_worker_each_once(tmp_path):
    (tmp_path / "worker.py").write_text(WORKER)
    ports = free_ports(2)
    cluster = {"worker": [f"127.0.0.1:{port}" for port in ports]}
    procs = []
    for index in range(2):
        env = {**os.environ, "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}}),
               "CUDA_VISIBLE_DEVICES": ""}
        procs.append(subprocess.Popen([sys.executable, "worker.py"], cwd=tmp_path, env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outputs = [proc.communicate(timeout=540)[0] for proc in procs]
    for proc, output in zip(procs, outputs):
        assert proc.returncode == 0, output[-3000:]
    for index in range(2):
        report = json.loads((tmp_path / f"worker{index}.json").read_text())
        findings = report["findings"] if isinstance(report, dict) else report
        eager = [f for f in findings if f["code"] == "TAP102"]
        assert eager, findings
        # one finding per site (the `tape.gradient` line), never one per replica call repeated
        sites = [(f["path"], f["line"]) for f in eager]
        assert len(sites) == len(set(sites)), findings
        assert all(f["line"] == 14 for f in eager), findings
        # 3 eager calls + 3 traces (a new tf.function each step), one replica per worker: 6, not 12
        assert [f["count"] for f in eager] == [6], findings

"""The per-file time budget: a file over it is reported on its own line and the run goes on.

Real files, the real CLI in a subprocess (the budget is a SIGALRM timer in the main thread of
the process that lints), no TensorFlow.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tapecheck.lint import parallel
from tapecheck.lint.config import ConfigError, parse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

HEAD = '''import tensorflow as tf

model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
optimizer = tf.keras.optimizers.Adam()
'''

STEP = '''

@tf.function
def step_{i}(x, y):
    with tf.GradientTape() as tape:
        pred = model(x, training=True)
        loss = tf.reduce_mean(tf.square(pred - y))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss
'''

BAD = HEAD + '''

def train_step(x, y):
    with tf.GradientTape() as tape:
        pred = model(x, training=True)
    loss = tf.reduce_mean(tf.square(pred - y))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss
'''


@pytest.fixture()
def files(tmp_path):
    # 2,000 step functions, 600 kB: libcst's parse alone takes over a second; the small file
    # takes ~0.02 s, far under the 0.5 s budget even on a loaded machine.
    big = tmp_path / "big_train.py"
    big.write_text(HEAD + "".join(STEP.format(i=i) for i in range(2000)))
    small = tmp_path / "small_train.py"
    small.write_text(BAD)
    return big, small


def _lint(*args, cwd=None):
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop(parallel.FAULT_ENV, None)
    return subprocess.run([sys.executable, "-m", "tapecheck", "lint", "--output-format", "concise", *args],
                          env=env, capture_output=True, text=True, timeout=120, cwd=cwd)


def test_a_file_over_the_budget_is_named_on_its_own_line_and_the_rest_is_linted(files, tmp_path):
    big, small = files
    # The small file first: the imports the first analysis pays (libcst, the model) stay out of the big one's.
    result = _lint("--no-cache", "-j", "1", "--file-time-budget", "0.5", str(small), str(big), cwd=tmp_path)
    lines = result.stdout.splitlines()
    stopped = [line for line in lines if "analysis stopped after 0.5 s" in line]
    assert stopped == [f"{big}: error: {parallel.stopped_message(0.5)}"], result.stdout + result.stderr
    assert any(line.startswith(f"{small}:") and " TAP101 " in line for line in lines)  # the rest was linted
    assert "1 file could not be linted" in result.stdout
    assert result.returncode == 1


def test_a_stopped_file_is_never_cached_as_stopped(tmp_path):
    medium = tmp_path / "medium_train.py"  # 30 step functions: no analysis of it takes under 1 ms
    medium.write_text(HEAD + "".join(STEP.format(i=i) for i in range(30)))
    stopped = _lint("-j", "1", "--file-time-budget", "0.001", str(medium), cwd=tmp_path)
    assert "analysis stopped after 0.001 s" in stopped.stdout, stopped.stdout
    # With the cache on: the stopped result was not kept, so the default budget lints it now.
    result = _lint("-j", "1", str(medium), cwd=tmp_path)
    assert "analysis stopped" not in result.stdout, result.stdout
    assert "could not be linted" not in result.stdout


def test_the_budget_applies_in_worker_processes_too(files, tmp_path):
    big, small = files
    others = []
    for i in range(8):
        other = tmp_path / f"train_{i}.py"
        other.write_text(BAD)
        others.append(str(other))
    result = _lint("--no-cache", "-j", "2", "--file-time-budget", "0.5", str(big), *others, cwd=tmp_path)
    assert sum("analysis stopped after 0.5 s" in line for line in result.stdout.splitlines()) >= 1
    assert f"{big}: error: analysis stopped" in result.stdout
    assert sum(" TAP101 " in line for line in result.stdout.splitlines()) >= 6, result.stdout


def test_the_configured_budget_is_read_and_checked(files, tmp_path):
    big, small = files
    (tmp_path / "pyproject.toml").write_text("[tool.tapecheck]\nfile-time-budget = 0.5\n")
    result = _lint("--no-cache", "-j", "1", str(small), str(big), cwd=tmp_path)
    assert f"{big}: error: analysis stopped after 0.5 s" in result.stdout, result.stdout + result.stderr
    assert parse({"file-time-budget": 0}, "pyproject.toml").time_budget == 0.0
    for bad in ("30", -1, True):
        with pytest.raises(ConfigError, match="file-time-budget"):
            parse({"file-time-budget": bad}, "pyproject.toml")


def test_the_timer_is_off_after_the_file():
    # No alarm is left pending after a budgeted analysis (it would kill a later, unrelated wait).
    import signal

    report = parallel._lint_one("ok.py", BAD.encode(), parallel.RULES, budget=5)
    assert report.findings and not report.errors
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    assert signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, signal.SIG_IGN, signal.default_int_handler, None)


def test_an_alarm_the_program_owns_is_left_alone():
    import signal

    fired = []
    previous = signal.signal(signal.SIGALRM, lambda *_: fired.append(1))
    try:
        signal.setitimer(signal.ITIMER_REAL, 30)
        with parallel.time_budget(0.001):
            pass
        remaining = signal.getitimer(signal.ITIMER_REAL)[0]
        assert 0 < remaining <= 30  # its timer still runs
        assert signal.getsignal(signal.SIGALRM) is not parallel._over_budget
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert not fired

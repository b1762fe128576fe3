"""The probe's runtime twins of the second-wave rules, and suppressions, on real TensorFlow.

Each program is a small script written to a temporary folder and run as
`__main__` under a probe in this process (one TensorFlow import for the module).
"""

from __future__ import annotations

import contextlib
import io
import runpy
import textwrap
import warnings
from pathlib import Path

import pytest

pytest.importorskip("tensorflow")

import tapecheck


@pytest.fixture(scope="module")
def run_script(tmp_path_factory):
    folder = tmp_path_factory.mktemp("twins")

    def run(name: str, source: str):
        """(findings, path): the script's findings under the probe, its own errors kept quiet."""
        path = folder / name
        path.write_text(textwrap.dedent(source), encoding="utf-8")
        with tapecheck.probe() as p, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with contextlib.suppress(Exception), contextlib.redirect_stdout(io.StringIO()):
                runpy.run_path(str(path), run_name="__main__")
        return p.findings, path

    return run


def lines_of(findings, path: Path, code: str):
    return sorted(f.line for f in findings if f.code == code and Path(f.path).resolve() == path.resolve())


def line_with(path: Path, text: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), start=1) if text in line)


SUPPRESSED = """
    import tensorflow as tf
    w = tf.Variable(2.0)
    for _ in range(2):
        with tf.GradientTape() as tape:
            y = w * w
        z = y + 1.0
        tape.gradient(z, w)  # tapecheck: ignore[TAP101]
    with tf.GradientTape() as tape:
        y = w * w
    z = y + 1.0
    tape.gradient(z, w)  # noqa: TAP102 (another code: does not hide TAP101)
    with tf.GradientTape() as tape:
        y = w * w
    z = y + 1.0
    tape.gradient(z, w)  # noqa: TAP101
"""


def test_suppression_comments_hide_probe_findings_on_their_line(run_script):
    findings, path = run_script("suppressed.py", SUPPRESSED)
    assert lines_of(findings, path, "TAP101") == [line_with(path, "another code")]
    assert len(findings) == 1  # the report, the CLI and the pytest plugin all read `findings`


PAIRING = """
    import tensorflow as tf
    w = tf.Variable(1.0, name="w")
    b = tf.Variable(0.0, name="b")
    opt = tf.keras.optimizers.SGD(0.1)

    def loss():
        return (3.0 * w + b - 1.0) ** 2

    @tf.function
    def traced_step():
        with tf.GradientTape() as tape:
            value = loss()
        grads = tape.gradient(value, [w, b])
        opt.apply_gradients(zip(grads, [b, w]))  # traced: swapped

    for _ in range(2):
        with tf.GradientTape() as tape:
            value = loss()
        grads = tape.gradient(value, [w, b])
        opt.apply_gradients(zip(grads, [b, w]))  # eager: swapped
        with tf.GradientTape() as tape:
            value = loss()
        grads = tape.gradient(value, [w, b])
        opt.apply_gradients(zip(grads, [w, b]))  # right
        with tf.GradientTape() as tape:
            value = loss()
        grads, _ = tf.clip_by_global_norm(tape.gradient(value, [w, b]), 1.0)
        opt.apply_gradients(zip(grads, [w, b]))  # clipped, right
    traced_step()
    traced_step()
"""


def test_gradients_applied_to_other_variables_are_reported_at_apply_gradients(run_script):
    findings, path = run_script("pairing.py", PAIRING)
    eager, traced = line_with(path, "# eager: swapped"), line_with(path, "# traced: swapped")
    assert lines_of(findings, path, "TAP401") == sorted([eager, traced])
    by_line = {f.line: f for f in findings if f.code == "TAP401"}
    assert by_line[eager].count == 2 and by_line[traced].count == 1  # traced once: Python runs while tracing
    assert "`[w, b]`" in by_line[eager].message and "`[b, w]`" in by_line[eager].message
    assert "another order" in by_line[eager].message

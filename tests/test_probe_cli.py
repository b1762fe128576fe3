"""`tapecheck probe` and the pytest plugin.

Most runs are in this process (click's runner, pytester), sharing one
TensorFlow import; one crash run goes through a real subprocess, end to end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("tensorflow")
pytest_plugins = ["pytester"]

TAPECHECK = [sys.executable, "-m", "tapecheck"]
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONWARNINGS": "ignore"}

BUGGY = """\
import sys
import tensorflow as tf

print("argv", sys.argv[1:])
w = tf.Variable(1.0, name="w")
b = tf.Variable(1.0, name="b")
for _ in range(3):
    with tf.GradientTape() as tape:
        loss = w * w
    grads = tape.gradient(loss, [w, b])
if "--exit" in sys.argv:
    sys.exit(int(sys.argv[-1]))
"""

REUSE = """\
import tensorflow as tf

w = tf.Variable(1.0)
with tf.GradientTape() as tape:
    y = w * w
first = tape.gradient(y, w)
second = tape.gradient(y, w)
"""


def run(args, cwd, **kwargs):
    return subprocess.run(TAPECHECK + args, capture_output=True, text=True, cwd=cwd, env=ENV, timeout=240, check=False, **kwargs)


def invoke(args, cwd, monkeypatch):
    """`tapecheck ...` in this process (TensorFlow is imported once for the module)."""
    from click.testing import CliRunner

    from tapecheck.cli import main

    monkeypatch.chdir(cwd)
    monkeypatch.setattr(sys, "path", list(sys.path))
    return CliRunner().invoke(main, args, catch_exceptions=False)


def test_script_with_its_own_arguments_text_report_and_exit_status(tmp_path, monkeypatch):
    (tmp_path / "train.py").write_text(BUGGY)
    argv = list(sys.argv)
    result = invoke(["probe", "--fail-on-findings", "train.py", "--epochs", "-m", "x", "--exit", "3"],
                    tmp_path, monkeypatch)
    assert result.exit_code == 3, result.output  # the program's own failure status wins
    assert "argv ['--epochs', '-m', 'x', '--exit', '3']" in result.stdout  # its stdout and argv
    assert "train.py:10:" in result.stderr and "TAP102" in result.stderr and "(3 times)" in result.stderr
    assert "tapecheck probe: 1 finding." in result.stderr
    assert sys.argv == argv


def test_module_json_output_file_and_fail_on_findings(tmp_path, monkeypatch):
    package = tmp_path / "probe_cli_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "train.py").write_text(BUGGY)
    report = tmp_path / "report.json"
    result = invoke(["probe", "--format", "json", "--output", str(report), "--fail-on-findings",
                     "-m", "probe_cli_pkg.train", "--exit", "0"], tmp_path, monkeypatch)
    assert result.exit_code == 1, result.output  # the program exited 0; findings make it 1
    data = json.loads(report.read_text())
    [finding] = data["findings"]
    assert (finding["code"], finding["line"], finding["count"], finding["origin"]) == ("TAP102", 10, 3, "probe")
    assert finding["name"] == "source-used-outside-tape" and finding["details"]["sources"] == ["b"]
    assert finding["path"].endswith(os.path.join("probe_cli_pkg", "train.py"))
    assert "tapecheck probe" not in result.stderr  # the report went to the file

    result = invoke(["probe", "-m", "probe_cli_pkg.train", "--exit", "0"], tmp_path, monkeypatch)
    assert result.exit_code == 0 and "TAP102" in result.stderr  # findings alone do not fail the run


def test_crashing_program_reports_first_then_the_unchanged_traceback(tmp_path):
    (tmp_path / "reuse.py").write_text(REUSE)
    done = run(["probe", "reuse.py"], tmp_path)
    assert done.returncode == 1
    report_at = done.stderr.index("reuse.py:7:")
    traceback_at = done.stderr.index("Traceback (most recent call last)")
    assert report_at < traceback_at
    assert "TAP201" in done.stderr and "line 6" in done.stderr
    assert done.stderr.rstrip().endswith(
        "RuntimeError: A non-persistent GradientTape can only be used to compute one set of gradients (or jacobians)")
    assert 'File "' + str(tmp_path / "reuse.py") + '", line 7' in done.stderr
    assert "tapecheck/probe" not in done.stderr.split("Traceback")[1]


def test_usage_errors_are_one_line(tmp_path, monkeypatch):
    result = invoke(["probe", "missing.py"], tmp_path, monkeypatch)
    assert result.exit_code == 2 and "missing.py: no such file" in result.stderr
    result = invoke(["probe"], tmp_path, monkeypatch)
    assert result.exit_code == 2 and "give a script to run" in result.stderr
    result = invoke(["probe", "-m", "no_such_module_here"], tmp_path, monkeypatch)
    assert result.exit_code == 2 and "no module named 'no_such_module_here'" in result.stderr


PLUGIN_TESTS = """\
import sys
import tensorflow as tf


def test_bad_training():
    w, b = tf.Variable(1.0), tf.Variable(1.0)
    with tf.GradientTape() as tape:
        y = w * 2.0
    tape.gradient(y, [w, b])


def test_clean_training():
    w = tf.Variable(1.0)
    with tf.GradientTape() as tape:
        y = w * 2.0
    assert tape.gradient(y, w) is not None


def test_failing_on_its_own():
    w, b = tf.Variable(1.0), tf.Variable(1.0)
    with tf.GradientTape() as tape:
        y = w * 2.0
    assert tape.gradient(y, [w, b])[1] is not None


def test_fixture(tapecheck_probe):
    w, b = tf.Variable(1.0), tf.Variable(1.0)
    with tf.GradientTape() as tape:
        y = w * 2.0
    tape.gradient(y, [w, b])
    assert [f.code for f in tapecheck_probe.findings] == ["TAP102"]
"""


def test_pytest_plugin_option_and_fixture(pytester):
    # In this process (TensorFlow is already imported): the plugin comes from the entry point.
    pytester.makepyfile(test_training=PLUGIN_TESTS)
    result = pytester.runpytest_inprocess("--tapecheck", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines([
        "*test_training.py:9:5: TAP102*",
        "*Captured tapecheck call*", "*test_training.py:23:12: TAP102*",  # beside the test's own error
        "FAILED test_training.py::test_bad_training*",
        "FAILED test_training.py::test_failing_on_its_own*",
    ])


def test_pytest_plugin_imports_nothing_heavy(tmp_path):
    (tmp_path / "test_light.py").write_text(textwrap.dedent("""\
        import sys

        def test_light(pytestconfig):
            assert pytestconfig.pluginmanager.has_plugin("tapecheck")
            assert "tensorflow" not in sys.modules and "keras" not in sys.modules
        """))
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_light.py"],
                          capture_output=True, text=True, cwd=tmp_path, env=ENV, timeout=120, check=False)
    assert "1 passed" in done.stdout, done.stdout[-3000:]


def test_without_tensorflow_the_error_says_what_to_install(tmp_path):
    (tmp_path / "train.py").write_text("print('never runs')\n")
    code = ("import sys; sys.modules['tensorflow'] = None; sys.modules['keras'] = None\n"
            "from tapecheck.cli import main; main(['probe', 'train.py'])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                          env=ENV, timeout=120, check=False)
    assert done.returncode == 2, done.stderr
    assert "needs tensorflow" in done.stderr and "tapecheck[tensorflow-cpu]" in done.stderr
    assert "Traceback" not in done.stderr and "never runs" not in done.stdout


NOTEBOOK = {
    "cells": [
        {"cell_type": "markdown", "metadata": {}, "source": ["# Training\n"]},
        {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
         "source": ["%matplotlib inline\n", "import tensorflow as tf\n"]},
        {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
         "source": ["w = tf.Variable(1.0, name='w')\n", "b = tf.Variable(1.0, name='b')\n"]},
        {"cell_type": "code", "execution_count": 3, "metadata": {}, "outputs": [],
         "source": ["with tf.GradientTape() as tape:\n", "    loss = w * w\n",
                    "grads = tape.gradient(loss, [w, b])\n", "print('gradient of b:', grads[1])\n"]},
    ],
    "metadata": {"kernelspec": {"name": "python3", "language": "python", "display_name": "Python 3"}},
    "nbformat": 4, "nbformat_minor": 5,
}


def test_notebook_runs_its_code_cells_and_findings_name_the_cell(tmp_path, monkeypatch):
    from tapecheck import __version__

    (tmp_path / "train.ipynb").write_text(json.dumps(NOTEBOOK))  # `null` in the JSON: not Python
    report = tmp_path / "report.json"
    result = invoke(["probe", "--format", "json", "--output", str(report), "train.ipynb"], tmp_path, monkeypatch)
    assert result.exit_code == 0, result.output
    assert "gradient of b: None" in result.stdout
    data = json.loads(report.read_text())
    assert (data["version"], data["tool"]["name"], data["tool"]["version"]) == (1, "tapecheck", __version__)
    assert data["summary"] == {"findings": 1, "by_code": {"TAP102": 1}, "explained_errors": 0}
    [finding] = data["findings"]
    assert (finding["code"], finding["cell"], finding["line"]) == ("TAP102", 4, 3)  # cell 4, its third line
    assert finding["path"] == "train.ipynb" and "`b`" in finding["message"]  # the call's text, read from the cell

    text = invoke(["probe", "train.ipynb"], tmp_path, monkeypatch)
    assert "train.ipynb:cell 4:3:" in text.stderr and "TAP102" in text.stderr


def test_a_notebook_that_is_not_one_is_a_usage_error(tmp_path, monkeypatch):
    (tmp_path / "broken.ipynb").write_text("{not json")
    result = invoke(["probe", "broken.ipynb"], tmp_path, monkeypatch)
    assert result.exit_code == 2 and "not a valid notebook" in result.stderr


OWN_PROBE = """\
import tensorflow as tf
import tapecheck

w, b = tf.Variable(1.0), tf.Variable(1.0)
with tapecheck.probe() as mine:
    with tf.GradientTape() as tape:
        y = w * 2.0
    tape.gradient(y, [w, b])
print("inner", [(f.code, f.line) for f in mine.findings])
"""


def test_a_probe_inside_tapecheck_probe_nests(tmp_path, monkeypatch):
    (tmp_path / "own.py").write_text(OWN_PROBE)
    result = invoke(["probe", "own.py"], tmp_path, monkeypatch)
    assert result.exit_code == 0, result.output
    assert "inner [('TAP102', 8)]" in result.stdout
    assert "own.py:8:" in result.stderr and "1 finding." in result.stderr  # the outer report has it too


NESTED_TESTS = """\
import tensorflow as tf
import tapecheck


def test_own_probe():
    w, b = tf.Variable(1.0), tf.Variable(1.0)
    with tapecheck.probe() as p:
        with tf.GradientTape() as tape:
            y = w * 2.0
        tape.gradient(y, [w, b])
    assert [f.code for f in p.findings] == ["TAP102"]


def test_own_clean_probe():
    w = tf.Variable(1.0)
    with tapecheck.probe() as p:
        with tf.GradientTape() as tape:
            y = w * 2.0
        tape.gradient(y, w)
    assert p.findings == []
"""


def test_a_probe_inside_pytest_tapecheck_nests(pytester):
    pytester.makepyfile(test_nested=NESTED_TESTS)
    result = pytester.runpytest_inprocess("--tapecheck", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)  # the outer probe still fails the test with findings
    result.stdout.fnmatch_lines(["*tapecheck probe findings during this test*", "*test_nested.py:10:9: TAP102*"])
    result.stdout.no_fnmatch_line("*already running*")


HIDDEN_FRAMES = """\
import tensorflow as tf


def test_apply_raises():
    w = tf.Variable([1.0, 2.0])
    tf.keras.optimizers.SGD(0.1).apply_gradients([(tf.constant([1.0, 2.0, 3.0]), w)])


def test_gradient_raises():
    w = tf.Variable(1.0)
    with tf.GradientTape() as tape:
        y = w * w
    tape.gradient(y, w)
    tape.gradient(y, w)
"""


def test_pytest_tracebacks_show_no_frame_of_the_probe(pytester):
    # issue 27: the hooks' wrappers set __tracebackhide__, so the user's traceback goes from
    # their line straight into TensorFlow
    pytester.makepyfile(test_hidden=HIDDEN_FRAMES)
    result = pytester.runpytest_inprocess("--tapecheck", "-p", "no:cacheprovider", "--tb=long")
    result.assert_outcomes(failed=2)
    output = result.stdout.str()
    assert "test_hidden.py:6: " in output and "test_hidden.py:14: " in output
    assert "InvalidArgumentError" in output and "RuntimeError: A non-persistent GradientTape" in output
    assert "tapecheck/probe" not in output and "tapecheck\\probe" not in output

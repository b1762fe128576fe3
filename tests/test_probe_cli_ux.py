"""`tapecheck probe` as a lint user tries it (issue 27): lint's option spellings, click's
"no such option", a syntax error reported before TensorFlow is imported, TensorFlow's start-up
lines held back, notebook tracebacks at `cell N, line M`, `--merge` naming what it was given.

One TensorFlow process: the probe run in a subprocess (its standard error, file descriptor 2,
is what a user sees). The other runs import no TensorFlow, and the tests check that they did not.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tapecheck.cli import main

ROOT = Path(__file__).resolve().parents[1]
ENV = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}  # a user's default environment
ENV["PYTHONPATH"] = str(ROOT)
# Runs `tapecheck ...` and then says whether TensorFlow was imported in that process.
WATCHED = ("import atexit, sys\n"
           "atexit.register(lambda: sys.stdout.write('tensorflow imported: %s\\n' % ('tensorflow' in sys.modules)))\n"
           "from tapecheck.cli import main\n"
           "main(sys.argv[1:], prog_name='tapecheck')\n")


def tapecheck(args, cwd, timeout=60):
    return subprocess.run([sys.executable, "-c", WATCHED, *args], cwd=cwd, env=ENV, capture_output=True,
                          text=True, timeout=timeout)


def notebook(cells: list[list[str]]) -> str:
    return json.dumps({
        "cells": [{"cell_type": "markdown", "metadata": {}, "source": ["# notes\n"]}] + [
            {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": source}
            for source in cells],
        "metadata": {"kernelspec": {"name": "python3", "language": "python", "display_name": "Python 3"}},
        "nbformat": 4, "nbformat_minor": 5,
    })


SETUP = ["import tensorflow as tf\n", "w = tf.Variable(1.0, name='w')\n"]
REUSED = ["with tf.GradientTape() as tape:\n", "    y = w * w\n", "first = tape.gradient(y, w)\n",
          "second = tape.gradient(y, w)\n"]  # TAP201: the second call raises RuntimeError


def test_a_syntax_error_fails_at_once_without_importing_tensorflow(tmp_path):
    (tmp_path / "train.py").write_text("import tensorflow as tf\n\nmodel = tf.keras.Sequential([\nprint('x')\n")
    done = tapecheck(["probe", "train.py", "--epochs", "3"], tmp_path)
    assert done.returncode == 1
    assert done.stdout == "tensorflow imported: False\n"
    assert done.stderr.startswith(f'  File "{tmp_path / "train.py"}", line 3\n')
    assert done.stderr.rstrip().endswith("SyntaxError: '[' was never closed")
    assert "finding" not in done.stderr and "Traceback" not in done.stderr
    # -m: the module's file is compiled first too; a notebook's error is placed in its cell
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "train.py").write_text("def step(:\n    pass\n")
    done = tapecheck(["probe", "-m", "pkg.train", "--epochs", "3"], tmp_path)
    assert done.returncode == 1 and done.stdout == "tensorflow imported: False\n"
    assert "SyntaxError: invalid syntax" in done.stderr and "finding" not in done.stderr
    (tmp_path / "nb.ipynb").write_text(notebook([SETUP, ["with tf.GradientTape() as tape:\n", "    y = (w * w\n"]]))
    done = tapecheck(["probe", "nb.ipynb"], tmp_path)
    assert done.returncode == 1 and done.stdout == "tensorflow imported: False\n"
    assert done.stderr.startswith(f'  File "{tmp_path / "nb.ipynb"}", cell 3, line 2\n'), done.stderr
    assert "    y = (w * w\n" in done.stderr and "finding" not in done.stderr


def test_unknown_options_are_clicks_usage_errors_with_a_suggestion(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("print('never runs')\n")
    for wrong, suggested in (("--formt", "--format"), ("--output-fle", "--output-file"), ("--fail-on-finding", "--fail-on-findings")):
        result = CliRunner().invoke(main, ["probe", wrong, "json", "train.py"])
        assert result.exit_code == 2, result.output
        assert f"No such option '{wrong}'" in result.output and suggested in result.output
        assert "give a script" not in result.output and "never runs" not in result.output
    # a usage error imports nothing (asked of a fresh process: this one may hold TensorFlow already)
    done = tapecheck(["probe", "--formt", "json", "train.py"], tmp_path)
    assert done.returncode == 2 and done.stdout == "tensorflow imported: False\n", done.stdout + done.stderr


def test_merge_names_what_it_was_given(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("x = 1\n")
    lint_report = CliRunner().invoke(main, ["lint", "--output-format", "json", "-o", "lint.json", "train.py"])
    assert lint_report.exit_code == 0
    (tmp_path / "other.json").write_text(json.dumps({"findings": [], "tool": {"name": "ruff"}}))
    for name, said in (("lint.json", "a `tapecheck lint` report"), ("other.json", "written by 'ruff'")):
        result = CliRunner().invoke(main, ["probe", "--merge", name])
        assert result.exit_code == 2 and said in result.output and "None" not in result.output, result.output
    done = tapecheck(["probe", "--merge", "other.json"], tmp_path)
    assert done.returncode == 2 and done.stdout == "tensorflow imported: False\n", done.stdout + done.stderr


@pytest.mark.skipif(__import__("importlib").util.find_spec("tensorflow") is None, reason="needs TensorFlow")
def test_a_probe_run_is_quiet_takes_lints_spellings_and_places_notebook_frames_in_cells(tmp_path):
    (tmp_path / "train.ipynb").write_text(notebook([SETUP, ["print('ready')\n"], REUSED]))
    done = tapecheck(["probe", "--output-format", "json", "-o", "reports/probe/run.json", "train.ipynb"],
                     tmp_path, timeout=240)
    assert done.returncode == 1  # the notebook's own RuntimeError
    assert done.stdout == "ready\ntensorflow imported: True\n"
    # TensorFlow's start-up lines (absl's notice, cpu_feature_guard, oneDNN) are held back
    for noise in ("absl::InitializeLog", "cpu_feature_guard", "oneDNN", "rebuild TensorFlow"):
        assert noise not in done.stderr, done.stderr
    # the traceback cites the notebook's cell and line, and no frame of the probe
    assert done.stderr.startswith("Traceback (most recent call last):\n"), done.stderr
    assert f'  File "{tmp_path / "train.ipynb"}", cell 4, line 4, in <module>\n    second = tape.gradient(y, w)\n' in done.stderr
    assert "tapecheck" not in done.stderr
    assert done.stderr.rstrip().endswith("RuntimeError: A non-persistent GradientTape can only be used to "
                                         "compute one set of gradients (or jacobians)")
    report = json.loads((tmp_path / "reports" / "probe" / "run.json").read_text())  # -o made the folders
    [finding] = report["findings"]
    assert (finding["code"], finding["cell"], finding["line"]) == ("TAP201", 4, 4)

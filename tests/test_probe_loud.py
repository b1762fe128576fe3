"""Loud failures explained: the finding behind the exception that ends a run.

Each `fixtures/probe/loud/bad_*.py` is a training program (trainer classes,
loss helpers, `fit` with `compile(loss=...)`, `train_step` overrides,
`tf.function` steps) that fails under TensorFlow 2.21 / Keras 3 with the
exception its docstring names (`raises: Type: text`); its `# probe-expect:`
line is where the finding must be. Each is run three times in this process
(one TensorFlow import): plainly, under `with tapecheck.probe()` and under
`tapecheck probe` (click's runner), and the exception, its text and the exit
status must be the same each time. Each `good_*.py` twin runs clean.
"""

from __future__ import annotations

import os
import re
import runpy
import subprocess
import sys
import traceback
import warnings
from pathlib import Path

import pytest

pytest.importorskip("tensorflow")
pytest_plugins = ["pytester"]

from fixture_runs import fixture_run

import tapecheck

LOUD = Path(__file__).resolve().parents[1] / "fixtures" / "probe" / "loud"
BAD = sorted(LOUD.glob("bad_*.py"))
GOOD = sorted(LOUD.glob("good_*.py"))
EXPECT = re.compile(r"#\s*probe-expect:\s*(TAP\d{3})")
RAISES = re.compile(r"^raises: (\w+): (.+)$", re.MULTILINE)


def expectation(path: Path):
    text = path.read_text(encoding="utf-8")
    lines = [(n, m.group(1)) for n, line in enumerate(text.splitlines(), 1) if (m := EXPECT.search(line))]
    kind, fragment = RAISES.search(text).groups()
    return lines, kind, fragment


def normalized(text: str) -> str:
    """Digits (Keras's name counters, which the first model of a process lacks, initial values) and
    autograph's temporary file names vary per run."""
    text = re.sub(r"__autograph_generated_file\w+", "AG", text)
    return re.sub(r"\d+", "N", re.sub(r"(?<=[a-z])_\d+(?=[/:,>])", "", text))  # sequential_3/ -> sequential/


def run_plain(path: Path):
    with fixture_run(path):
        try:
            runpy.run_path(str(path), run_name="__main__")
        except Exception as exc:  # noqa: BLE001 - the failure under test
            return exc
    return None


def run_probed(path: Path):
    error = None
    with fixture_run(path):
        probe = tapecheck.probe()
        try:
            with probe:
                runpy.run_path(str(path), run_name="__main__")
        except Exception as exc:  # noqa: BLE001 - the failure under test
            error = exc
    return probe, error


def same_exception(first, second):
    assert type(second) is type(first)
    assert normalized("".join(traceback.format_exception_only(second))) == \
        normalized("".join(traceback.format_exception_only(first)))


@pytest.mark.parametrize("path", BAD, ids=lambda p: p.name)
def test_bad_fixture_fails_and_the_probe_explains_it_at_the_line(path, monkeypatch):
    lines, kind, fragment = expectation(path)
    plain = run_plain(path)
    assert plain is not None, "the fixture no longer fails under this TensorFlow"
    assert type(plain).__name__ == kind and fragment in str(plain)

    probe, error = run_probed(path)
    same_exception(plain, error)  # the program's own exception goes on, unchanged
    found = [(f.line, f.code) for f in probe.findings if Path(f.path).name == path.name]
    assert found == lines, probe.report()
    [finding] = probe.findings
    assert finding.details["explains"].startswith(f"{kind}: ")
    assert fragment.split(" [")[0] in finding.details["explains"]
    assert f"    explains: {finding.details['explains']}" in probe.report()

    # `tapecheck probe`: the report first, then the same traceback; the program's exit status
    from click.testing import CliRunner

    from tapecheck.cli import main

    monkeypatch.chdir(path.parent)
    monkeypatch.setattr(sys, "path", list(sys.path))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = CliRunner().invoke(main, ["probe", path.name], catch_exceptions=False)
    assert result.exit_code == 1
    line, code = lines[0]
    report_at = result.stderr.index(f"{path.name}:{line}:")
    assert result.stderr[report_at:].split("\n", 1)[0].split(": ", 1)[1].startswith(code)
    assert report_at < result.stderr.index("Traceback (most recent call last)")
    assert normalized(result.stderr).rstrip().endswith(
        normalized("".join(traceback.format_exception_only(plain))).rstrip())


@pytest.mark.parametrize("path", GOOD, ids=lambda p: p.name)
def test_good_twin_runs_clean(path):
    probe, error = run_probed(path)
    assert error is None
    assert probe.findings == []


def test_an_exception_the_program_catches_is_not_reported():
    import tensorflow as tf

    first, second = tf.Variable([1.0]), tf.Variable([[2.0]])
    optimizer = tf.keras.optimizers.SGD(0.1)
    with tapecheck.probe() as probe:
        optimizer.apply_gradients([(tf.constant([1.0]), first)])
        try:
            optimizer.apply_gradients([(tf.constant([[1.0]]), second)])  # Unknown variable
        except ValueError as exc:
            caught = exc
        try:
            tf.keras.metrics.Mean().reset_states()
        except AttributeError:
            pass
    assert "Unknown variable" in str(caught)
    assert probe.findings == []

    class Boom(Exception):
        pass

    with pytest.raises(Boom), tapecheck.probe() as probe:  # an error no mistake explains
        raise Boom("no gradients provided for any variable")
    assert probe.findings == []


def test_real_cli_exit_status_and_traceback_are_the_programs(tmp_path):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONWARNINGS": "ignore"}
    script = "bad_shared_optimizer_gan.py"
    plain = subprocess.run([sys.executable, script], capture_output=True, text=True, cwd=LOUD, env=env,
                           timeout=240, check=False)
    probed = subprocess.run([sys.executable, "-m", "tapecheck", "probe", "--format", "json", "--output",
                             str(tmp_path / "report.json"), script],
                            capture_output=True, text=True, cwd=LOUD, env=env, timeout=240, check=False)
    assert plain.returncode == probed.returncode == 1
    last = plain.stderr.rstrip().splitlines()[-1]
    assert last.startswith("ValueError: Unknown variable")
    assert normalized(probed.stderr.rstrip().splitlines()[-1]) == normalized(last)
    import json

    [finding] = json.loads((tmp_path / "report.json").read_text())["findings"]
    assert (finding["code"], finding["line"]) == ("TAP404", 31)
    assert finding["details"]["explains"].startswith("ValueError: Unknown variable")
    assert "line 26" in finding["message"]  # where the optimizer was built for the other net


PLUGIN_TEST = """\
import tensorflow as tf


def test_epoch_loop():
    accuracy = tf.keras.metrics.Mean()
    accuracy.update_state(1.0)
    accuracy.reset_states()
"""


def test_pytest_plugin_shows_the_explanation_beside_the_error(pytester):
    pytester.makepyfile(test_keras2=PLUGIN_TEST)
    result = pytester.runpytest_inprocess("--tapecheck", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*AttributeError: 'Mean' object has no attribute 'reset_states'*",
        "*Captured tapecheck call*",
        "*test_keras2.py:7:1: TAP302*",
        "*explains: AttributeError: 'Mean' object has no attribute 'reset_states'",
    ])


def test_tracebacks_leave_the_probe_out_while_it_runs_and_the_setting_is_restored():
    from tensorflow.python.util import traceback_utils

    before = traceback_utils._EXCLUDED_PATHS
    probe_dir = os.path.dirname(os.path.abspath(tapecheck.probe.session.__file__))
    with tapecheck.probe():
        assert not traceback_utils.include_frame(os.path.join(probe_dir, "optimizer.py"))
    assert traceback_utils._EXCLUDED_PATHS is before
    assert traceback_utils.include_frame(os.path.join(probe_dir, "optimizer.py"))


def test_an_eager_shared_optimizer_is_explained_though_keras_prints_the_variable_over_lines():
    """Eager Keras puts the variable's value, over several lines, inside the "Unknown variable"
    message; the probe reads the whole text, and agrees with lint's TAP404 line."""
    from tapecheck.lint import lint_file

    path = Path(__file__).resolve().parents[1] / "fixtures" / "model" / "bad" / "gan_trainer_shared_optimizer.py"
    probe, error = run_probed(path)
    assert type(error) is ValueError and "\n" in str(error)
    static = [(f.line, f.code) for f in lint_file(str(path)).findings]
    assert [(f.line, f.code) for f in probe.findings if f.code == "TAP404"] == static == [(46, "TAP404")]


def test_a_second_optimizer_handed_to_a_traced_step_is_tap409_to_the_lint_and_the_probe():
    """The lint reports the call that hands the traced step its second optimizer; the probe, the
    step's update whose new trace makes that optimizer's variables, naming the line that made it
    (it used to say TAP402, "a new optimizer is made here at every call", which was not so)."""
    from tapecheck.lint import lint_file

    path = LOUD / "bad_second_optimizer_retrace.py"
    probe, error = run_probed(path)
    assert type(error) is ValueError and "only supports singleton tf.Variables" in str(error)
    assert [(f.line, f.code) for f in lint_file(str(path)).findings] == [(37, "TAP409")]
    assert lint_file(str(LOUD / "good_second_optimizer_retrace.py")).findings == []
    [finding] = probe.findings
    assert (finding.line, finding.code, finding.details["cause"]) == (20, "TAP409", "optimizer-built-in-later-trace")
    assert "the `RMSprop` it is given now (made at line 36)" in finding.message

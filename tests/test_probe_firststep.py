"""Cuts named on the first step, eager or traced (issue 13, item 2).

In eager code Keras 3 raises "No gradients provided for any variable" on the
first step whose gradients are all None: there is no second step to learn
from. Each `fixtures/probe/firststep/bad_*.py` is a training program (a trainer
class with a NumPy loss helper, `stop_gradient` on the prediction, fast weights
copied through `.numpy()` inside the tape, a cut in a loss given to `compile()`
under `fit`, a `tf.function` step, a `train_step` override) that fails with the
exception its docstring names; the probe must report TAP104 at its
`# probe-expect:` line, name the op, give the call path from the tape, and
leave the exception unchanged. Each `good_*.py` twin runs clean. One
TensorFlow import for the module; each run is a few steps of a tiny model.
"""

from __future__ import annotations

import re
import runpy
import sys
import traceback
from pathlib import Path

import pytest

tf = pytest.importorskip("tensorflow")

from fixture_runs import fixture_run

import tapecheck

FOLDER = Path(__file__).resolve().parents[1] / "fixtures" / "probe" / "firststep"
BAD = sorted(FOLDER.glob("bad_*.py"))
GOOD = sorted(FOLDER.glob("good_*.py"))
EXPECT = re.compile(r"#\s*probe-expect:\s*(TAP\d{3})")
RAISES = re.compile(r"^raises: (\w+): (.+)$", re.MULTILINE)

# fixture -> (what the message must name, how the probe found it, words of the call path)
EXPECTED = {
    "bad_trainer_numpy_loss.py": ("`.numpy()`", "static pass", ["`weighted_crossentropy` (called at line 30)"]),
    "bad_stop_gradient_prediction.py": ("`StopGradient`", "run", []),
    "bad_fast_weights_copy.py": ("`.numpy()`", "static pass", []),
    "bad_fit_compile_loss.py": ("`Round`", "run", ["`star_error` (run by `fit`, line 22)"]),
    "bad_tf_function_step.py": ("`Greater`", "run", ["`hit_rate_loss` (called at line 20)"]),
    "bad_train_step_override.py": ("`ArgMax`", "run", ["`error_rate` (called at line 35)"]),
}


def run(path: Path, probed: bool = True):
    probe, error = tapecheck.probe(), None
    with fixture_run(path):
        try:
            if probed:
                with probe:
                    runpy.run_path(str(path), run_name="__main__")
            else:
                runpy.run_path(str(path), run_name="__main__")
        except Exception as exc:  # noqa: BLE001 - the failure under test
            error = exc
    return probe, error


def expectation(path: Path):
    text = path.read_text(encoding="utf-8")
    lines = [(n, m.group(1)) for n, line in enumerate(text.splitlines(), 1) if (m := EXPECT.search(line))]
    kind, fragment = RAISES.search(text).groups()
    return lines, kind, fragment


def _token(text: str) -> str:
    text = text.strip("`").removeprefix("tf.").removesuffix("()").lstrip(".")
    return text.split(".")[-1]


def assert_each_line_says_what_is_on_it(message: str, path: Path):
    """Every "line N" names, just before it, something that is on line N of the file."""
    source = path.read_text(encoding="utf-8").splitlines()
    matches = list(re.finditer(r"line (\d+)(?! of)", message))
    assert matches, message  # each message names the `gradient` call's line at least
    for match in matches:
        line = int(match.group(1))
        before = message[:match.start()]
        named = re.findall(r"`[^`]+`", before)[-3:]
        assert named, (message, line)
        assert any(_token(n) and _token(n) in source[line - 1] for n in named), (message, line, named)


@pytest.mark.parametrize("path", BAD, ids=lambda p: p.name)
def test_bad_fixture_the_cut_is_named_on_the_first_step(path):
    lines, kind, fragment = expectation(path)
    plain = run(path, probed=False)[1]
    assert plain is not None and type(plain).__name__ == kind and fragment in str(plain)
    probe, error = run(path)
    assert type(error) is type(plain)
    assert "".join(traceback.format_exception_only(error)).replace(str(path), "") == \
        "".join(traceback.format_exception_only(plain)).replace(str(path), "")
    found = [(f.line, f.code) for f in probe.findings]
    assert found == lines, probe.report()
    [finding] = probe.findings
    op, how, path_words = EXPECTED[path.name]
    assert op.strip("`") in finding.message, finding.message  # the message itself names the op
    assert finding.details["explains"] == f"{kind}: {fragment}"
    assert finding.details["cause"] in ("target-cut-off", "no-differentiable-path")
    assert (finding.details.get("located_by") == "static pass") == (how == "static pass")
    for words in path_words:
        assert words in finding.message, finding.message
    assert "TAP101" not in probe.report()
    assert_each_line_says_what_is_on_it(finding.message, path)


@pytest.mark.parametrize("path", GOOD, ids=lambda p: p.name)
def test_good_twin_gives_no_finding(path):
    probe, error = run(path)
    assert error is None
    assert probe.findings == []


def test_every_bad_fixture_has_a_good_twin():
    assert sorted(p.name.removeprefix("bad_") for p in BAD) == sorted(p.name.removeprefix("good_") for p in GOOD)
    assert sorted(EXPECTED) == [p.name for p in BAD]


def test_a_target_computed_after_the_block_is_still_TAP101_on_the_first_step():
    w = tf.Variable(2.0, name="w")
    with tapecheck.probe() as probe:
        with tf.GradientTape() as tape:
            y = w * 3.0
        z = y + 1.0
        tape.gradient(z, [w])
    assert [(f.code, f.details["cause"]) for f in probe.findings] == [("TAP101", "target-after-block")]


def test_an_eager_cut_in_a_helper_with_a_call_path_two_calls_deep():
    w = tf.Variable([1.0, 2.0], name="w")

    def rank(values):
        return tf.cast(tf.argmax(values), tf.float32)  # the op

    def score(values):
        return rank(values * 2.0) + 1.0

    with tapecheck.probe() as probe:
        with tf.GradientTape() as tape:
            loss = score(w)
        assert tape.gradient(loss, w) is None
    [finding] = probe.findings
    source = Path(__file__).read_text(encoding="utf-8").splitlines()
    assert source[finding.line - 1].strip().endswith("# the op")
    assert "`ArgMax`" in finding.message and "`score` (called at line" in finding.message
    assert ", then `rank` (called at line" in finding.message
    assert_each_line_says_what_is_on_it(finding.message, Path(__file__))


def test_the_first_step_trace_leaves_no_callback_and_changes_no_gradient():
    from tensorflow.python.framework import op_callbacks

    model = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(4), tf.keras.layers.Dense(1)])
    x = tf.constant([[1.0, 2.0, 3.0], [0.5, -1.0, 2.0]])

    def grads():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x)))
        return [g.numpy() for g in tape.gradient(loss, model.trainable_variables)]

    plain = grads()
    with tapecheck.probe() as probe:
        probed = grads()
        assert probe._tapes.tracer.traced_once  # the first recording of that line ran under the trace
        assert not probe._tapes.tracer.armed
    assert not op_callbacks.should_invoke_op_callbacks()
    assert len(plain) == len(probed) and all((a == b).all() for a, b in zip(plain, probed))
    assert probe.findings == []


def test_an_eager_loop_keeps_one_finding_at_the_op_line_in_another_module():
    sys.path.insert(0, str(FOLDER))
    try:
        from _ranking import top_choice_loss
    finally:
        sys.path.remove(str(FOLDER))
    w = tf.Variable([[1.0, 2.0, 0.5]], name="scores")
    with tapecheck.probe() as probe:
        for _ in range(3):
            with tf.GradientTape() as tape:
                loss = top_choice_loss(w * 2.0)
            assert tape.gradient(loss, w) is None
    [finding] = probe.findings
    helper = (FOLDER / "_ranking.py").read_text(encoding="utf-8").splitlines()
    assert Path(finding.path).name == "_ranking.py" and "tf.argmax" in helper[finding.line - 1]
    assert finding.count == 3  # the first step named it; the later ones, untraced, fold into it
    assert "`top_choice_loss` (called at line" in finding.message and "of test_probe_firststep.py" in finding.message


def test_a_cut_neither_the_run_nor_lint_can_place_is_reported_at_the_gradient_call():
    model = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(1)])
    losses = {"mse": lambda y, p: tf.reduce_mean(tf.square(y - p.numpy()))}  # picked by name: lint cannot follow
    x, y = tf.ones((4, 3)), tf.ones((4, 1))
    with tapecheck.probe() as probe:
        with tf.GradientTape() as tape:
            loss = losses["mse"](y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)  # the report
    assert grads == [None, None]
    [finding] = probe.findings
    source = Path(__file__).read_text(encoding="utf-8").splitlines()
    assert source[finding.line - 1].strip().endswith("# the report")
    assert (finding.code, finding.details["cause"]) == ("TAP104", "target-cut-off")
    assert "none of the ops that lead to it reads the sources" in finding.message

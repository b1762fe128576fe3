"""Issue 26 on real TensorFlow: what Keras does for the user, named as the user's code names it.

Each `fixtures/probe/keras26/bad_*.py` is a training program (a trainer class, a
plain loop over NumPy batches, `fit` with custom pieces) with one mistake that
lives in what Keras does or does not do for you; its `good_*.py` twin has the fix.
All run in this process as modules (one TensorFlow import), `main()` under a probe.

Checked: a bad program gets exactly its `# probe-expect:` findings, naming the
object as the user's code does (`acc`, `self.net`, not `binary_accuracy` or
`sequential`) in a hint that can be pasted; the twin gets none; `main()` returns
the same values with and without the probe; every patched object is put back.
"""

from __future__ import annotations

import contextlib
import io
import re
import runpy
import sys
import warnings
from pathlib import Path

import pytest

pytest.importorskip("tensorflow")

from probe_objects import assert_restored, patched_objects

import tapecheck
from tapecheck.lint import lint_file

FOLDER = Path(__file__).resolve().parents[1] / "fixtures" / "probe" / "keras26"
EXPECT = re.compile(r"#\s*probe-expect:\s*(TAP\d{3})")
BAD = sorted(FOLDER.glob("bad_*.py"))
GOOD = sorted(FOLDER.glob("good_*.py"))

# fixture -> the name in the message and the hint that can be pasted
NAMES = {
    "bad_plain_loop_metric.py": ("metric `acc` is read here", "Call `acc.reset_state()` at the start of each epoch."),
    "bad_trainer_dropout_flag.py": ("`self.net` runs its Dropout layer", "Call `self.net(..., training=True)` inside the tape."),
    "bad_fit_metrics_property.py": ("metric `self.acc_tracker` is updated here under `fit`, but `fit` never resets it",
                                    "Return `self.acc_tracker` from the model's `metrics` property too "
                                    "(`fit` resets only what it returns)."),
    "bad_compile_metric_fn.py": ("metric `mae_state` is updated here under `fit`", "Make `mae_state` an attribute of "
                                 "the model (Keras tracks it and `fit` resets it), or compute the value without a "
                                 "metric object (a plain function given to `compile` is averaged by Keras)."),
    "bad_partial_reset_metric.py": ("`MeanAbsError.reset_state()` does not reset `count`",
                                    "Reset every variable in `reset_state` (`for v in self.variables: "
                                    "v.assign(tf.zeros_like(v))`, or each one to its starting value)."),
    "bad_compiled_metrics_shim.py": ("the `Mean` tracker `loss` with `y_pred` alone",
                                     "Update the trackers yourself: `self.compute_loss(x, y, y_pred)` for the loss, "
                                     "then `m.update_state(loss)` for the loss tracker and `m.update_state(y, y_pred)` "
                                     "for the other metrics."),
    "bad_compiled_loss_shim.py": ("never updates the loss tracker `loss`; this step never updates it either, so "
                                  "the `loss` that `fit` reports (`history.history[\"loss\"]`) is 0.0",
                                  "Use `batch_loss = self.compute_loss(y=y, y_pred=logits)` (it adds `self.losses` "
                                  "itself), then, after the tape, update the loss tracker yourself: "
                                  "`m.update_state(batch_loss)` for the `m` in `self.metrics` named `\"loss\"`."),
    "bad_compiled_loss_penalty_twice.py": ("line 37 adds the penalties again, so the loss differentiated at line 38 "
                                           "counts the regularization of `self.encoder.kernel` twice",
                                           "Use `reconstruction = self.compute_loss(y=x, y_pred=x_hat)` and do not "
                                           "add `self.losses` to it again (line 37): it holds them already."),
    "bad_traced_reset_flag.py": ("Python reads `self.new_epoch` only while tracing (it was true then), so the "
                                 "traced function resets `self.train_acc` at every call; it has just been called "
                                 "with `self.new_epoch` false",
                                 "Reset the metric outside the `tf.function`, where Python runs at every call: "
                                 "`if self.new_epoch: self.train_acc.reset_state()` before calling `train_step(...)` "
                                 "(or `self.train_acc.reset_state()` at the start of each epoch)."),
    "bad_cached_variables_batchnorm.py": ("is a non-trainable variable (a BatchNormalization moving statistic",
                                          "Ask for `model.trainable_variables` (not `model.variables` or "
                                          "`model.weights`, nor a list cached from them)."),
    "bad_gp_watch_after_use.py": ("source `mixed` is watched at line 32, after line 31 already used it",
                                  "Move `gp_tape.watch(mixed)` up, first in the `with` block, before line 31 uses "
                                  "`mixed`."),
    "bad_gp_watch_after_use_tf_function.py": ("source `mixed` is watched at line 32, after line 31 already used it",
                                              "Move `gp_tape.watch(mixed)` up, first in the `with` block, before "
                                              "line 31 uses `mixed`."),
    "bad_gp_watch_after_use_fit.py": ("source `interpolated` is watched at line 45, after line 44 already used it",
                                      "Move `gp_tape.watch(interpolated)` up, first in the `with` block, before "
                                      "line 44 uses `interpolated`."),
    "bad_reset_states_override.py": ("`BestBatchError.reset_states()` overrides Keras 2's method, which Keras 3 never "
                                     "calls", "Rename it to `reset_state(self)` (singular)."),
    "bad_step_returns_loss.py": ("`Denoiser.train_step` returns {\"loss\": ...}, but Keras 3's `fit` "
                                 "(`model.fit(...)` at line 49) logs the results of `model.metrics` instead",
                                 "Keep a tracker: `self.loss_tracker = keras.metrics.Mean(name=\"loss\")` in "
                                 "`__init__`, returned by a `metrics` property (`return [self.loss_tracker]`); in the "
                                 "step, call `self.loss_tracker.update_state(loss)`, then "
                                 "`return {m.name: m.result() for m in self.metrics}`."),
}

LINT_TOO = {"bad_plain_loop_metric.py", "bad_step_returns_loss.py"}


def load(path: Path):
    sys.path.insert(0, str(FOLDER))
    siblings = {p.stem for p in FOLDER.glob("_*.py")}  # `_data`: other fixture folders have one too
    for name in [n for n, m in sys.modules.items() if n.startswith("_") and (
            n in siblings or str(getattr(m, "__file__", "") or "").startswith(str(FOLDER)))]:
        del sys.modules[name]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return runpy.run_path(str(path), run_name="keras26_fixture")
    finally:
        sys.path.remove(str(FOLDER))


def run(path: Path):
    """(findings, main()'s value under the probe, main()'s value without it)."""
    module = load(path)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        with tapecheck.probe() as p:
            probed = module["main"]()
        plain = module["main"]()
    return p.findings, probed, plain


def expected(path: Path):
    return sorted((path.name, number, m.group(1))
                  for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
                  if (m := EXPECT.search(line)))


def test_every_bad_fixture_has_a_good_twin_and_names_to_check():
    assert [p.name.removeprefix("bad_") for p in BAD] == [p.name.removeprefix("good_") for p in GOOD]
    assert {p.name for p in BAD} == set(NAMES)


@pytest.mark.parametrize("path", BAD, ids=lambda p: p.name)
def test_the_mistake_is_reported_at_its_line_with_the_users_name(path):
    before = patched_objects()
    findings, probed, plain = run(path)
    assert_restored(before)
    assert sorted((Path(f.path).name, f.line, f.code) for f in findings) == expected(path)
    assert probed == plain  # the probe changes nothing the program computes
    (finding,) = findings
    said, hint = NAMES[path.name]
    assert said in finding.message and finding.hint == hint
    # the lint says the same at the same line where it sees the mistake too (the others are run time only)
    if path.name in LINT_TOO:
        assert (finding.line, finding.code) in {(f.line, f.code) for f in lint_file(str(path)).findings}


@pytest.mark.parametrize("path", GOOD, ids=lambda p: p.name)
def test_the_twin_is_silent(path):
    findings, probed, plain = run(path)
    assert findings == [] and probed == plain


def test_compiled_loss_used_as_keras_3_means_it_is_not_reported(tmp_path):
    """The shim's value is right when nothing is added to it and the loss tracker is updated: deprecated, not
    wrong (Keras warns itself); `regularization_losses=self.losses` read but not added is no second penalty."""
    bad = (FOLDER / "bad_compiled_loss_penalty_twice.py").read_text(encoding="utf-8")
    right = bad.replace("self.compiled_loss(x, x_hat)  # probe-expect: TAP302",
                        "self.compiled_loss(x, x_hat, regularization_losses=self.losses)")
    right = right.replace("total = reconstruction + tf.add_n(self.losses)", "total = reconstruction")
    assert "regularization_losses=self.losses)\n" in right and "total = reconstruction\n" in right
    with _variant_module(tmp_path, "right_compiled_loss.py", right) as module, warnings.catch_warnings(), \
            contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        with tapecheck.probe() as p:
            losses, norm = module["main"]()
    assert p.findings == []
    assert norm == 2.1046  # one penalty: the Keras 3 twin's weights (the bad one's, twice: 1.4982)


@contextlib.contextmanager
def _variant_module(tmp_path, name, text):
    """A variant of a fixture, written to `tmp_path` beside the folder's `_data.py` and loaded
    (its `main` not run); `sys.path` and `sys.modules` are put back on exit."""
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    (tmp_path / "_data.py").write_text((FOLDER / "_data.py").read_text(encoding="utf-8"), encoding="utf-8")
    sys.path.insert(0, str(tmp_path))
    sys.modules.pop("_data", None)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            module = runpy.run_path(str(path), run_name="keras26_fixture")
        yield module
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("_data", None)


def _run_variant(tmp_path, name, text):
    with _variant_module(tmp_path, name, text) as module, warnings.catch_warnings(), \
            contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        with tapecheck.probe() as p:
            probed = module["main"]()
        plain = module["main"]()
    return p.findings, probed, plain


TRACED = (FOLDER / "bad_traced_reset_flag.py").read_text(encoding="utf-8")


def test_a_reset_left_out_of_the_trace_by_its_flag_is_reported_when_the_flag_turns(tmp_path):
    """False at the first call (the first epoch starts clean): the reset is never traced, and never runs."""
    text = TRACED.replace("            self.new_epoch = True\n", "            self.new_epoch = bool(history)\n")
    text = text.replace("                self.new_epoch = False\n", "")
    assert "bool(history)" in text and "self.new_epoch = False" not in text
    findings, probed, plain = _run_variant(tmp_path, "never_traced_reset.py", text)
    assert probed == plain
    by_code = {f.code: f for f in findings}
    assert by_code["TAP501"].line == 32
    assert ("(it was false then), so the traced function never resets `self.train_acc`; it has just been called "
            "with `self.new_epoch` true") in by_code["TAP501"].message
    assert set(by_code) == {"TAP501", "TAP301"}  # and the reads at each epoch's end are stale (TAP301 there)


def test_a_traced_reset_whose_flag_never_turns_is_not_reported(tmp_path):
    """A flag that stays True resets at every call on purpose (a per-batch metric): nothing says otherwise."""
    text = TRACED.replace("                self.new_epoch = False\n", "")
    assert "self.new_epoch = False" not in text
    findings, probed, plain = _run_variant(tmp_path, "per_batch_reset.py", text)
    assert findings == [] and probed == plain


def test_a_late_watch_is_not_reported_when_the_first_op_also_reads_a_watched_variable(tmp_path):
    """Without `standardize`, the critic's `MatMul` reads its (watched) kernel: the op is recorded with the
    interpolates as an input, so the late `watch` still gives the right gradient (the same penalty as the
    watch first): nothing to report, under `fit` too."""
    bad = (FOLDER / "bad_gp_watch_after_use_fit.py").read_text(encoding="utf-8")
    late = bad.replace("scores = self(self.standardize(interpolated), training=True)",
                       "scores = self(interpolated, training=True)")
    first = late.replace("            scores = self(interpolated, training=True)\n            gp_tape.watch(interpolated)\n",
                         "            gp_tape.watch(interpolated)\n            scores = self(interpolated, training=True)\n")
    assert late != bad and first != late
    findings, probed, plain = _run_variant(tmp_path, "late_watch_after_matmul.py", late)
    assert findings == [] and probed == plain and all(v > 0 for v in probed)
    _, watched_first, _ = _run_variant(tmp_path, "watch_first.py", first)
    assert probed == watched_first


FIT_FLAG = '''
import keras
import tensorflow as tf

from _data import toy_binary


class Net(keras.Model):
    def __init__(self):
        super().__init__()
        self.hidden, self.out = keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)
        self.acc = keras.metrics.BinaryAccuracy(threshold=0.0, name="acc")
        self.new_epoch = True

    def call(self, x, training=False):
        return self.out(self.hidden(x))

    def train_step(self, data):
        x, y = data
        if self.new_epoch:
            self.acc.reset_state()
        with tf.GradientTape() as tape:
            logits = self(x, training=True)
            loss = self.compute_loss(x, y, logits)
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        self.acc.update_state(y, logits)
        return {"acc": self.acc.result()}


class EpochFlag(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.model.new_epoch = True

    def on_train_batch_end(self, batch, logs=None):
        self.model.new_epoch = False


def main():
    keras.utils.set_random_seed(9)
    x, y = toy_binary(seed=9)
    model = Net()
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss=keras.losses.BinaryCrossentropy(from_logits=True),
                  run_eagerly=EAGER)
    history = model.fit(x, y, batch_size=16, epochs=3, shuffle=False, verbose=0, callbacks=[EpochFlag()])
    return [round(v, 4) for v in history.history["acc"]]
'''


def test_a_flag_gated_reset_in_a_train_step_under_fit_is_reported_and_run_eagerly_is_not(tmp_path):
    findings, probed, plain = _run_variant(tmp_path, "fit_flag.py", "EAGER = False\n" + FIT_FLAG)
    assert probed == plain == [0.5, 0.5625, 0.5625]  # the last batch's accuracy: reset at every step
    (finding,) = findings
    assert (finding.code, finding.line) == ("TAP501", 22)
    assert "is under `if self.new_epoch:` inside `train_step`, which `fit` traces" in finding.message
    assert finding.hint.startswith("Take the reset out of `train_step`: reset `self.acc` where Python runs")
    # run eagerly, Python reads the flag at every step: the reset runs once per epoch, as written
    findings, probed, plain = _run_variant(tmp_path, "fit_flag_eager.py", "EAGER = True\n" + FIT_FLAG)
    assert findings == [] and probed == plain == [0.6094, 0.6719, 0.7188]


SIAMESE = Path(__file__).resolve().parents[1] / "fixtures" / "model" / "silent"


def test_a_step_dict_replaced_by_trackers_is_reported_by_the_probe_where_the_lint_reports_it():
    """TAP304 at run time, on the lint's own fixture: `train_step` and `test_step` return `{"loss": loss}`, `fit`
    (and `evaluate` on the validation data) log the untouched loss tracker's 0.0; the twin, with a tracker, is
    silent. Results bit-identical with and without the probe, every patch put back."""
    for kind in ("bad", "good"):
        path = SIAMESE / kind / "siamese_step_returns_loss.py"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            module = runpy.run_path(str(path), run_name="keras26_fixture")
            before = patched_objects()
            with tapecheck.probe() as p:
                probed = module["run"]()
            assert_restored(before)
            plain = module["run"]()
        assert probed == plain
        lint = sorted((f.line, f.code) for f in lint_file(str(path)).findings)
        assert sorted((f.line, f.code) for f in p.findings) == lint
        if kind == "good":
            assert lint == [] and min(plain[0]) > 0
            continue
        assert plain[0] == plain[1] == [0.0, 0.0, 0.0] and lint == [(39, "TAP304"), (43, "TAP304")]
        train, test = sorted(p.findings, key=lambda f: f.line)
        assert train.message.startswith("`SiameseModel.train_step` returns {\"loss\": ...}, but Keras 3's `fit` "
                                        "(`model.fit(...)` at line 65)")
        assert '`history.history["loss"]` is 0.0 at every epoch' in train.message
        assert test.message.startswith("`SiameseModel.test_step` returns {\"loss\": ...}, but Keras 3's `evaluate` "
                                       "(run by `model.fit(...)` at line 65 on the validation data)")
        assert "the `loss` that `evaluate` returns (`val_loss` at each epoch of `fit`) is 0.0" in test.message
        assert "`self.loss_tracker.update_state(contrastive_loss(self(pair), same))`" in test.hint
        assert train.details["model"] == "model" and train.col == 9


def test_a_step_dict_held_in_a_name_gets_a_hint_that_names_no_variable_it_cannot_see(tmp_path):
    """The step returns `logs`, a dict built from `recon`: the probe cannot read which name holds the loss, so
    the hint asks for the returned value instead of naming a `loss` the step does not have."""
    bad = (FOLDER / "bad_step_returns_loss.py").read_text(encoding="utf-8")
    text = bad.replace("            loss = tf.reduce_mean(", "            recon = tf.reduce_mean(")
    text = text.replace("        grads = tape.gradient(loss, ", "        grads = tape.gradient(recon, ")
    text = text.replace('        return {"loss": loss}  # probe-expect: TAP304\n',
                        '        logs = {"loss": recon}\n        return logs\n')
    assert "recon = tf" in text and "gradient(recon, " in text and "return logs" in text
    findings, probed, plain = _run_variant(tmp_path, "logs_in_a_name.py", text)
    assert probed == plain
    (finding,) = findings
    assert (finding.code, finding.line) == ("TAP304", 33)  # no `return {...}` with these keys: the step's `def`
    assert "update_state(loss)" not in finding.hint
    assert ('`self.loss_tracker.update_state(...)` with the value the step returns as `"loss"`, then '
            "`return {m.name: m.result() for m in self.metrics}`") in finding.hint


def test_the_step_logs_check_runs_at_each_epoch_end_not_at_each_step(monkeypatch):
    """Nothing is added to a step: the check is entered once per epoch of `fit` (8 epochs of 4 batches), from
    Keras's own end-of-epoch call, and never inside the traced step."""
    from tapecheck.probe.steplogs import StepLogsHooks

    entered = []
    original = StepLogsHooks._replaced

    def counted(self, model, logs, logged, caller):
        entered.append((caller, tf_executing_eagerly()))
        return original(self, model, logs, logged, caller)

    monkeypatch.setattr(StepLogsHooks, "_replaced", counted)
    module = load(FOLDER / "good_step_returns_loss.py")
    with warnings.catch_warnings(), tapecheck.probe() as p:
        warnings.simplefilter("ignore")
        losses, _ = module["main"]()
    assert len(losses) == 8 and p.findings == []
    assert entered == [("fit", True)] * 8  # 32 steps


def tf_executing_eagerly() -> bool:
    import tensorflow as tf

    return tf.executing_eagerly()


def test_metrics_given_to_compile_that_a_returned_loss_leaves_unbuilt_are_explained_and_the_hint_works(tmp_path):
    """With `compile(metrics=["mae"])`, the step returning `{"loss": loss}` never updates the compiled metrics:
    Keras raises `Cannot get result() since the metric has not yet been built` at the first epoch's end. The
    probe explains it with TAP304 at the `return` line; the step the hint describes trains with no finding."""
    bad = (FOLDER / "bad_step_returns_loss.py").read_text(encoding="utf-8")
    compiled = bad.replace("model.compile(optimizer=keras.optimizers.Adam(0.01))",
                           'model.compile(optimizer=keras.optimizers.Adam(0.01), metrics=["mae"])')
    assert compiled != bad
    with _variant_module(tmp_path, "compiled_metrics_unbuilt.py", compiled) as module, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        before = patched_objects()
        with pytest.raises(ValueError, match="has not yet been built"), tapecheck.probe() as p:
            module["main"]()
        assert_restored(before)
    (finding,) = p.findings
    assert (finding.line, finding.code, finding.details["cause"]) == (39, "TAP304", "metrics-never-updated")
    assert finding.details["explains"] == "ValueError: Cannot get result() since the metric has not yet been built."
    assert finding.message.startswith("`Denoiser.train_step` never updates the metrics given to "
                                      "`compile(metrics=...)`: at the epoch's end Keras 3's `fit` reads the result "
                                      "of every metric in `model.metrics`")
    assert finding.hint.startswith("Update the trackers in the step: `m.update_state(loss)` for the `m` in "
                                   "`self.metrics` named `\"loss\"`, then `return self.compute_metrics(x, y, y_pred, "
                                   "sample_weight=None)`")
    fixed = compiled.replace('        return {"loss": loss}  # probe-expect: TAP304\n',
                             "        for m in self.metrics:\n"
                             "            if m.name == \"loss\":\n"
                             "                m.update_state(loss)\n"
                             "        return self.compute_metrics(noisy, clean, self(noisy), sample_weight=None)\n")
    assert fixed != compiled
    findings, probed, plain = _run_variant(tmp_path, "compiled_metrics_updated.py", fixed)
    assert findings == [] and probed == plain and len(probed[0]) == 8 and min(probed[0]) > 0

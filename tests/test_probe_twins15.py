"""The probe's twins of TAP105, TAP106 and TAP601, on real TensorFlow.

Each `fixtures/probe/twins15/bad_*.py` is a training program (a trainer class, a loss
helper, a `train_step` override run by `fit`, a `tf.function` step, a `strategy.run`
step) with the mistake; its `good_*.py` twin has the fix. Every one runs as `__main__`
under `with tapecheck.probe()`, in a fresh subprocess: TAP601 needs a `MirroredStrategy`
over two logical CPU devices, and logical devices can only be set before TensorFlow runs
its first op (other test modules share the pytest process). One subprocess runs them all,
but the eager `strategy.run` pair, which gets a second one (see `results`).

Checked: the bad program gets exactly its `# probe-expect:` findings, at the line the
linter reports too where it has an `# expect:`; the good twin gets none; each message's
"line N" names what is on line N; TensorFlow itself shows the mistake (a doubled update,
skipped variables, a smaller kernel norm with the penalty); and the probe changes no
weight and puts every patched object back.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("tensorflow")

from tapecheck.lint import lint_file

TWINS = Path(__file__).resolve().parents[1] / "fixtures" / "probe" / "twins15"
BAD = sorted(TWINS.glob("bad_*.py"))
GOOD = sorted(TWINS.glob("good_*.py"))
CODES = {"TAP105", "TAP106", "TAP601"}
PROBE_EXPECT = re.compile(r"#\s*probe-expect:\s*(TAP\d{3})")
LINT_EXPECT = re.compile(r"#\s*expect:\s*(TAP\d{3})")
RAISES = re.compile(r"^raises: (\w+: .+)$", re.MULTILINE)
# The linter's own fixtures for these rules, run under the probe too (the probe must agree).
OTHERS = sorted(p for folder in ("silent", "distribute") for kind in ("bad", "good")
                for p in (TWINS.parents[1] / folder / kind).glob("*.py") if not p.name.startswith("_"))
PLAIN = ["bad_regularized_trainer.py", "bad_sparse_autoencoder.py", "bad_weight_norm.py", "bad_replica_trainer.py",
         "bad_eager_replica_loop.py"]

RUNNER = r'''
import contextlib, io, json, os, runpy, sys, traceback, warnings
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import keras
import tapecheck
from tensorflow.python.eager import backprop

def originals():
    return {
        "losses": keras.Layer.__dict__["losses"],
        "add_loss": keras.Layer.__dict__["add_loss"],
        "gradient": backprop.GradientTape.__dict__["gradient"],
    }

def weights(namespace):
    model = namespace.get("model") if namespace else None
    if model is None:
        calibrator = namespace.get("calibrator") if namespace else None
        model = getattr(calibrator, "scaling", None)
    if model is None:
        return None
    return [[v.path, v.numpy().ravel().tolist()] for v in model.trainable_variables]

def forget_siblings(folder):
    """A twin's helper modules (`_data`, `_regularized_models`) are imported afresh from its own folder."""
    for name, module in list(sys.modules.items()):
        if name.startswith("_") and os.path.dirname(getattr(module, "__file__", None) or "") == folder:
            del sys.modules[name]

def run(path, probed):
    folder = os.path.dirname(path)
    sys.path.insert(0, folder)
    saved_argv, sys.argv = sys.argv, [path]
    forget_siblings(folder)
    keras.utils.set_random_seed(0)
    before = originals()
    probe = tapecheck.probe()
    namespace, error, caught = None, None, []
    try:
        with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("always")
            try:
                if probed:
                    with probe:
                        namespace = runpy.run_path(path, run_name="__main__")
                else:
                    namespace = runpy.run_path(path, run_name="__main__")
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
    finally:
        sys.argv = saved_argv
        sys.path.remove(folder)
        forget_siblings(folder)
    after = originals()
    return {
        "findings": [f.to_dict() for f in probe.findings] if probed else [],
        "error": error,
        "weights": weights(namespace),
        "skipped_warnings": [str(w.message) for w in caught if "Gradients do not exist" in str(w.message)],
        "restored": all(after[k] is before[k] for k in before),
    }

def cli(path):
    from click.testing import CliRunner
    from tapecheck.cli import main
    folder = os.path.dirname(path)
    here = os.getcwd()
    os.chdir(folder)
    sys.path.insert(0, folder)
    sys.modules.pop("_data", None)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = CliRunner().invoke(main, ["probe", "--format", "json", os.path.basename(path)], catch_exceptions=False)
    finally:
        os.chdir(here)
        sys.path.remove(folder)
    return {"exit_code": result.exit_code, "report": result.stderr}

def key(path):
    """`bad_x.py` for the twins, `silent/bad/x.py` for the linter's own fixtures."""
    parts = path.split(os.sep)
    return parts[-1] if parts[-2] == "twins15" else "/".join(parts[-3:])

results = {}
for job in json.loads(sys.argv[1]):
    kind, path = job
    try:
        results[f"{kind}:{key(path)}"] = cli(path) if kind == "cli" else run(path, kind == "probe")
    except Exception:
        results[f"{kind}:{key(path)}"] = {"crash": traceback.format_exc()}
print("RESULTS " + json.dumps(results))
'''


@pytest.fixture(scope="module")
def results():
    jobs = [["probe", str(p)] for p in BAD + GOOD + OTHERS] + [["plain", str(TWINS / name)] for name in PLAIN]
    jobs.append(["cli", str(TWINS / "bad_weight_norm.py")])
    # Measured on TF 2.21: once a MirroredStrategy has run its collectives eagerly, a traced one in
    # the same process fails in CollectiveReduceV2 ("Collective ops is aborted"), and the other way
    # round, even without the probe. The eager `strategy.run` programs get a process of their own.
    found = {}
    for eager in (False, True):
        batch = [job for job in jobs if ("eager" in Path(job[1]).name) == eager]
        done = subprocess.run([sys.executable, "-c", RUNNER, json.dumps(batch)], capture_output=True, text=True,
                              timeout=600, check=False)
        lines = [line for line in done.stdout.splitlines() if line.startswith("RESULTS ")]
        assert done.returncode == 0 and lines, done.stderr[-4000:]
        found.update(json.loads(lines[-1][len("RESULTS "):]))
    crashed = {name: r["crash"] for name, r in found.items() if "crash" in r}
    assert not crashed, crashed
    return found


def expected_lines(path: Path, pattern) -> list[tuple[int, str]]:
    return [(n, m.group(1)) for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
            if (m := pattern.search(line))]


def test_fixtures_come_in_twins():
    assert BAD and {p.name[4:] for p in BAD} == {p.name[5:] for p in GOOD}
    covered = {code for p in BAD for _, code in expected_lines(p, PROBE_EXPECT)}
    assert covered == CODES


@pytest.mark.parametrize("path", BAD, ids=lambda p: p.name)
def test_bad_program_gets_its_finding_at_the_line(results, path):
    run = results[f"probe:{path.name}"]
    raises = RAISES.search(path.read_text(encoding="utf-8"))
    if raises:  # inside tf.function the text starts with autograph's "in user code:" frames
        assert run["error"].startswith(raises.group(1).split(":")[0]) and run["error"].rstrip().endswith(
            raises.group(1).split(": ", 1)[1])
    else:
        assert run["error"] is None  # a silent mistake stays silent
    found = sorted((f["line"], f["code"]) for f in run["findings"] if Path(f["path"]).name == path.name)
    assert found == expected_lines(path, PROBE_EXPECT), run["findings"]
    assert all(f["origin"] == "probe" for f in run["findings"])
    assert len(run["findings"]) == len(found)  # nothing else, in this file or another one
    # the linter's twin reports the same code at the same line, where it can see the mistake
    lint = sorted((f.line, f.code) for f in lint_file(str(path)).findings if f.code in CODES)
    assert lint == expected_lines(path, LINT_EXPECT)
    assert set(lint) <= set(found)


@pytest.mark.parametrize("path", GOOD, ids=lambda p: p.name)
def test_good_twin_gets_no_finding(results, path):
    run = results[f"probe:{path.name}"]
    assert run["error"] is None
    assert run["findings"] == []
    assert [f for f in lint_file(str(path)).findings if f.code in CODES] == []


LINE_MENTION = re.compile(r"line (\d+)")


@pytest.mark.parametrize("path", BAD, ids=lambda p: p.name)
def test_each_line_a_message_names_holds_what_it_says(results, path):
    source = path.read_text(encoding="utf-8").splitlines()
    findings = results[f"probe:{path.name}"]["findings"]
    assert findings  # a bad twin has its finding: the loop below checks something
    for finding in findings:
        message = finding["message"]
        assert LINE_MENTION.search(message), message  # each names the tape or the `gradient` call
        for match in LINE_MENTION.finditer(message):
            line = source[int(match.group(1)) - 1]
            after = message[match.end():match.end() + 40]
            before = message[max(0, match.start() - 40):match.start()]
            if "GradientTape" in after:
                assert "tf.GradientTape()" in line, (message, line)
            else:
                assert "gradient" in after + before and ".gradient(" in line, (message, line)


def line_of(path: Path, text: str) -> int:
    [line] = [n for n, content in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if text in content]
    return line


def finding_of(results, name, code):
    [finding] = [f for f in results[f"probe:{name}"]["findings"] if f["code"] == code]
    return finding


def test_tap105_names_the_model_as_the_program_does_and_what_regularizes_it(results):
    trainer = finding_of(results, "bad_regularized_trainer.py", "TAP105")
    assert trainer["message"].startswith("`self.model` has regularization (a weight regularizer (L2) on `")
    assert "never adds `self.model.losses`" in trainer["message"]
    assert "`loss = loss + sum(self.model.losses)`" in trainer["hint"]
    assert trainer["details"]["cause"] == "regularization-losses-dropped"
    step = finding_of(results, "bad_sparse_autoencoder.py", "TAP105")
    assert "an activity regularizer on layer `" in step["message"] and "`self.losses`" in step["message"]


def kernel_norm(run):
    return sum(x * x for path, values in run["weights"] if path.endswith("/kernel") for x in values)


def test_tap105_the_twin_with_the_penalty_ends_with_smaller_kernels(results):
    bad, good = results["probe:bad_regularized_trainer.py"], results["probe:good_regularized_trainer.py"]
    assert 0 < kernel_norm(good) < kernel_norm(bad)


def test_tap106_the_skipped_variables_are_the_ones_tensorflow_skips(results):
    bad, good = results["probe:bad_weight_norm.py"], results["probe:good_weight_norm.py"]
    finding = finding_of(results, "bad_weight_norm.py", "TAP106")
    assert "`self.kernel` is computed here from `self.g`, `self.v` in `WeightNormDense.build`" in finding["message"]
    assert finding["details"]["gradient_call"].endswith(f"bad_weight_norm.py:{line_of(TWINS / 'bad_weight_norm.py', '.gradient(')}")
    assert sorted(finding["details"]["skipped_by_apply_gradients"]) == sorted(finding["details"]["sources"])
    assert {name.rsplit("/", 1)[-1] for name in finding["details"]["sources"]} == {"v", "g"}
    # TensorFlow's own warning names those variables; the good twin trains them all
    assert bad["skipped_warnings"]
    for warning in bad["skipped_warnings"]:
        skipped = warning.partition("[")[2].partition("]")[0]
        assert sorted(name.strip(" '") for name in skipped.split(",")) == sorted(finding["details"]["sources"])
    assert good["skipped_warnings"] == []
    assert not any(f["code"] == "TAP102" for f in bad["findings"])  # the static line turned TAP102 into TAP106


def test_tap106_explains_the_loud_failure_and_the_twin_learns(results):
    bad, good = results["probe:bad_temperature_scaling.py"], results["probe:good_temperature_scaling.py"]
    assert bad["error"].rstrip().endswith("No gradients provided for any variable.")
    finding = finding_of(results, "bad_temperature_scaling.py", "TAP106")
    assert finding["details"]["explains"] == "ValueError: No gradients provided for any variable."
    assert "in `TemperatureScaling.__init__`" in finding["message"]
    [(_, [log_temperature])] = good["weights"]
    assert good["error"] is None and log_temperature != 0.0


def test_tap601_the_bad_update_is_twice_the_good_one_on_two_devices(results):
    trainer = finding_of(results, "bad_replica_trainer.py", "TAP601")
    assert "on 2 replicas" in trainer["message"] and "each update is 2 times too large" in trainer["message"]
    assert "this replica's batch of 4" in trainer["message"] and trainer["details"]["replicas"] == 2
    # eager `strategy.run`: the first step arms the tape's line, the second names the op (once)
    eager = finding_of(results, "bad_eager_replica_loop.py", "TAP601")
    gradient_line = line_of(TWINS / "bad_eager_replica_loop.py", ".gradient(")
    assert eager["count"] == 1 and eager["details"]["gradient_call"].endswith(f"bad_eager_replica_loop.py:{gradient_line}")
    for name in ("replica_trainer.py", "replica_script.py", "eager_replica_loop.py"):
        [(_, [bad, _, _])] = results[f"probe:bad_{name}"]["weights"]
        [(_, [good, _, _])] = results[f"probe:good_{name}"]["weights"]
        # kernel ones, x ones, y zeros, SGD(0.05), two steps: each step multiplies the weight by 1 - lr * 6
        good_factor, bad_factor = math.sqrt(good), math.sqrt(bad)
        assert good_factor == pytest.approx(1 - 0.05 * 6, rel=1e-5)
        assert 1 - bad_factor == pytest.approx(2 * (1 - good_factor), rel=1e-5)  # twice the step


@pytest.mark.parametrize("name", PLAIN)
def test_the_probe_changes_no_weight_and_puts_every_hook_back(results, name):
    probed, plain = results[f"probe:{name}"], results[f"plain:{name}"]
    values = [w for _, w in probed["weights"] or []]
    assert values and values == [w for _, w in plain["weights"]]  # bit for bit (names carry Keras's counters)
    assert probed["error"] == plain["error"]
    assert probed["restored"] and plain["restored"]


def test_tapecheck_probe_on_the_command_line_reports_the_twin(results):
    run = results["cli:bad_weight_norm.py"]
    assert run["exit_code"] == 0
    report = json.loads(run["report"][run["report"].index("{"):])
    [finding] = report["findings"]
    assert (finding["code"], finding["line"]) == ("TAP106", line_of(TWINS / "bad_weight_norm.py", "probe-expect"))
    assert report["summary"]["by_code"] == {"TAP106": 1}


@pytest.mark.parametrize("path", OTHERS, ids=lambda p: f"{p.parents[1].name}/{p.parent.name}/{p.name}")
def test_the_probe_agrees_with_the_linter_on_its_other_fixtures_for_these_rules(results, path):
    run = results[f"probe:{path.parents[1].name}/{path.parent.name}/{path.name}"]
    found = sorted((f["line"], f["code"]) for f in run["findings"]
                   if f["code"] in CODES and Path(f["path"]).resolve() == path.resolve())
    assert found == [e for e in expected_lines(path, LINT_EXPECT) if e[1] in CODES], run["findings"]
    assert run["error"] is None
    if path.parent.name == "good":
        assert run["findings"] == []

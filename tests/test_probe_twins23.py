"""The probe's twins of TAP109 and TAP303, on real TensorFlow (tapecheck/probe/building.py).

Each `fixtures/probe/twins23/bad_*.py` is a training program with the mistake (a DQN agent
and an actor-critic trainer whose networks define `__call__`, eager and in a `tf.function`
step; weight decay or a constraint set on a built model, before `fit` and a tape loop); its
`good_*.py` twin has the fix. They run as `__main__` under `with tapecheck.probe()` and
without it, in one fresh subprocess (one TensorFlow import for the module).

Checked: the bad program gets exactly its `# probe-expect:` findings, at the line the linter
reports too where it has an `# expect:`; the good twin gets none; each "line N" of a message
names what is on line N; TensorFlow shows the mistake (a model never built, `model.losses`
empty, a NonNeg kernel gone negative); the probe changes no weight and puts every patched
object back (the two objects this module patches compared by identity, and every attribute of
every probed class through tests/probe_objects.py).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("tensorflow")

from tapecheck.lint import lint_file

TWINS = Path(__file__).resolve().parents[1] / "fixtures" / "probe" / "twins23"
BAD = sorted(TWINS.glob("bad_*.py"))
GOOD = sorted(TWINS.glob("good_*.py"))
CODES = {"TAP109", "TAP303"}
PROBE_EXPECT = re.compile(r"#\s*probe-expect:\s*(TAP\d{3})")
LINT_EXPECT = re.compile(r"#\s*expect:\s*(TAP\d{3})")

RUNNER = r'''
import contextlib, io, json, os, runpy, sys, traceback, warnings
sys.path.insert(0, sys.argv[2])
import tensorflow as tf
import keras
import tapecheck
from keras.src.ops.operation import Operation
from probe_objects import patched_objects

def originals():
    return {"setattr_hook": Operation.__dict__["_setattr_hook"], "model_init": keras.Model.__dict__["__init__"]}

def weights(namespace):
    model = (namespace or {}).get("model")
    if model is None:
        return None
    return [v.numpy().ravel().tolist() for v in model.weights]

def facts(namespace):
    model = (namespace or {}).get("model")
    if model is None:
        return {}
    kernels = [v for v in model.weights if v.path.endswith("kernel")]
    return {"built": bool(model.built), "losses": len(model.losses),
            "min_last_kernel": float(tf.reduce_min(kernels[-1])) if kernels else None}

def run(path, probed):
    folder = os.path.dirname(path)
    sys.path.insert(0, folder)
    sys.modules.pop("_data", None)
    saved_argv, sys.argv = sys.argv, [path]
    keras.utils.set_random_seed(0)
    before, every = originals(), patched_objects()
    probe = tapecheck.probe()
    namespace, error = None, None
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
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
        sys.modules.pop("_data", None)
    after, every_after = originals(), patched_objects({cls for cls, _ in every})
    return {
        "findings": [f.to_dict() for f in probe.findings] if probed else [],
        "error": error,
        "weights": weights(namespace),
        "facts": facts(namespace),
        "restored": all(after[k] is before[k] for k in before)
                    and all(every_after.get(k, "absent") is v for k, v in every.items()),
    }

results = {}
for kind, path in json.loads(sys.argv[1]):
    try:
        results[f"{kind}:{os.path.basename(path)}"] = run(path, kind == "probe")
    except Exception:
        results[f"{kind}:{os.path.basename(path)}"] = {"crash": traceback.format_exc()}
print("RESULTS " + json.dumps(results))
'''


@pytest.fixture(scope="module")
def results():
    jobs = [["probe", str(p)] for p in BAD + GOOD] + [["plain", str(p)] for p in BAD + GOOD]
    done = subprocess.run([sys.executable, "-c", RUNNER, json.dumps(jobs), str(Path(__file__).parent)],
                          capture_output=True, text=True, timeout=600, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULTS ")]
    assert done.returncode == 0 and lines, done.stderr[-4000:]
    found = json.loads(lines[-1][len("RESULTS "):])
    crashed = {name: r["crash"] for name, r in found.items() if "crash" in r}
    assert not crashed, crashed
    return found


def expected_lines(path: Path, pattern) -> list[tuple[int, str]]:
    return [(n, m.group(1)) for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
            if (m := pattern.search(line))]


def test_fixtures_come_in_twins():
    assert BAD and {p.name[4:] for p in BAD} == {p.name[5:] for p in GOOD}
    assert {code for p in BAD for _, code in expected_lines(p, PROBE_EXPECT)} == CODES


@pytest.mark.parametrize("path", BAD, ids=lambda p: p.name)
def test_bad_program_gets_its_finding_at_the_line(results, path):
    run = results[f"probe:{path.name}"]
    assert run["error"] is None  # a silent mistake stays silent
    found = sorted((f["line"], f["code"]) for f in run["findings"] if Path(f["path"]).name == path.name)
    assert found == expected_lines(path, PROBE_EXPECT), run["findings"]
    assert len(run["findings"]) == len(found)  # nothing else, in this file or another one
    assert all(f["origin"] == "probe" for f in run["findings"])
    lint = sorted((f.line, f.code) for f in lint_file(str(path)).findings if f.code in CODES)
    assert lint == expected_lines(path, LINT_EXPECT)
    assert set(lint) <= set(found)


@pytest.mark.parametrize("path", GOOD, ids=lambda p: p.name)
def test_good_twin_gets_no_finding(results, path):
    run = results[f"probe:{path.name}"]
    assert run["error"] is None
    assert run["findings"] == []
    assert [f for f in lint_file(str(path)).findings if f.code in CODES] == []


@pytest.mark.parametrize("path", BAD, ids=lambda p: p.name)
def test_each_line_a_message_names_holds_what_it_says(results, path):
    source = path.read_text(encoding="utf-8").splitlines()
    for finding in results[f"probe:{path.name}"]["findings"]:
        for match in re.finditer(r"line (\d+)", finding["message"]):
            line = source[int(match.group(1)) - 1]
            if finding["code"] == "TAP303":
                assert "def __call__(" in line or ".gradient(" in line, (finding["message"], line)
        if finding["code"] == "TAP109":
            assert "_regularizer = " in source[finding["line"] - 1] or "_constraint = " in source[finding["line"] - 1]


def finding_of(results, name, code):
    [finding] = [f for f in results[f"probe:{name}"]["findings"] if f["code"] == code]
    return finding


def test_tap303_names_the_class_and_the_model_as_the_program_holds_it(results):
    agent = finding_of(results, "bad_dunder_call_agent.py", "TAP303")
    assert agent["message"].startswith("`QNetwork.__call__` (line 22) replaces Keras's `Model.__call__`")
    assert "`self.q_net` is trained (its 4 variables are differentiated at line 39)" in agent["message"]
    assert "`self.q_net.built` is False" in agent["message"] and "Rename `QNetwork.__call__` to `call`" in agent["hint"]
    traced = finding_of(results, "bad_dunder_call_traced.py", "TAP303")  # both networks, one base: one finding
    assert traced["message"].startswith("`MLPBase.__call__` (line 22)") and traced["count"] == 2
    assert "`self.critic` is trained" in traced["message"]


def test_tap303_tensorflow_never_builds_the_bad_networks_and_builds_the_twins(results):
    for name in ("dunder_call_agent.py", "dunder_call_traced.py"):
        assert results[f"probe:bad_{name}"]["facts"]["built"] is False
        assert results[f"probe:good_{name}"]["facts"]["built"] is True


def test_tap109_the_penalty_and_the_constraint_are_missing_in_the_bad_programs_only(results):
    bad, good = results["probe:bad_weight_decay_helper.py"], results["probe:good_weight_decay_helper.py"]
    assert bad["facts"]["losses"] == 0 and good["facts"]["losses"] == 3
    finding = finding_of(results, "bad_weight_decay_helper.py", "TAP109")
    assert finding["message"].startswith("`kernel_regularizer` is set here on the already built layer(s) `conv2d")
    assert finding["details"]["sources"][-1].startswith("dense") and len(finding["details"]["sources"]) == 3
    assert "`model.losses` gets nothing from it" in finding["message"] and "from_config" in finding["hint"]
    constraint = finding_of(results, "bad_constraint_after_build.py", "TAP109")
    assert "`kernel_constraint` is set here on the already built layer(s) `score`" in constraint["message"]
    assert results["probe:bad_constraint_after_build.py"]["facts"]["min_last_kernel"] < 0
    assert results["probe:good_constraint_after_build.py"]["facts"]["min_last_kernel"] >= 0


@pytest.mark.parametrize("path", BAD + GOOD, ids=lambda p: p.name)
def test_the_probe_changes_no_weight_and_puts_every_hook_back(results, path):
    probed, plain = results[f"probe:{path.name}"], results[f"plain:{path.name}"]
    assert probed["weights"] and probed["weights"] == plain["weights"]  # bit for bit
    assert probed["facts"] == plain["facts"] and probed["error"] == plain["error"]
    assert probed["restored"] and plain["restored"]

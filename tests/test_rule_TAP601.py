"""TAP601 loss-not-scaled-for-replicas: the fixtures in fixtures/distribute/, linted and run.

The mistake is silent, so the run is compared numerically: each fixture trains one step
under a `MirroredStrategy` over one or two logical CPU devices, in a subprocess per device count
(logical devices must be configured before anything else touches TensorFlow, and the other test
modules share one TensorFlow process). The bad fixture's weight moves twice as far on two
devices as on one; the good twin moves the same distance on both.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path

import pytest

from expectations import expected, findings_of, found

ROOT = Path(__file__).resolve().parents[1] / "fixtures" / "distribute"
BAD = sorted((ROOT / "bad").glob("*.py"))
GOOD = sorted((ROOT / "good").glob("*.py"))

RUNNER = """
import json, runpy, sys, warnings
warnings.simplefilter("ignore")
import tensorflow as tf
cpus = tf.config.list_physical_devices("CPU")
tf.config.set_logical_device_configuration(cpus[0], [tf.config.LogicalDeviceConfiguration()] * int(sys.argv[1]))
for path in sys.argv[2:]:
    namespace = runpy.run_path(path, run_name="tapecheck_fixture")
    model = namespace["main"](steps=1)
    print("KERNEL", json.dumps([path, model.trainable_variables[0].numpy().ravel().tolist()]))
"""


def test_fixtures_come_in_twins():
    assert BAD and {p.name for p in BAD} == {p.name for p in GOOD}


@pytest.mark.parametrize("path", BAD, ids=lambda p: p.name)
def test_bad_fixture_gives_exactly_its_annotated_findings(path):
    expectations = expected(path.read_text(encoding="utf-8"))
    assert expectations and found(findings_of(path)) == expectations


@pytest.mark.parametrize("path", GOOD, ids=lambda p: p.name)
def test_good_fixture_is_clean(path):
    assert findings_of(path) == []


@functools.lru_cache(maxsize=None)
def _kernels(devices: int) -> dict[str, list[float]]:
    """Every fixture's first kernel after one step on `devices` replicas, from one subprocess
    (one TensorFlow start per device count, not per fixture)."""
    pytest.importorskip("tensorflow")
    paths = [str(p) for p in (*BAD, *GOOD)]
    done = subprocess.run([sys.executable, "-c", RUNNER, str(devices), *paths],
                          capture_output=True, text=True, timeout=600)
    kernels = dict(json.loads(line[len("KERNEL "):]) for line in done.stdout.splitlines() if line.startswith("KERNEL "))
    assert done.returncode == 0 and set(kernels) == set(paths), done.stderr[-3000:]
    return kernels


def moved(path: Path, devices: int) -> float:
    """How far the first kernel weight moved (from 1.0) in one step on `devices` replicas."""
    return 1.0 - _kernels(devices)[str(path)][0]


@pytest.mark.parametrize("name", [p.name for p in BAD])
def test_bad_fixture_steps_twice_as_far_on_two_devices_and_the_good_twin_does_not(name):
    bad_one, bad_two = moved(ROOT / "bad" / name, 1), moved(ROOT / "bad" / name, 2)
    good_one, good_two = moved(ROOT / "good" / name, 1), moved(ROOT / "good" / name, 2)
    assert bad_one > 0.01
    assert bad_two == pytest.approx(2 * bad_one, rel=1e-4)  # N times too large on N devices
    assert good_two == pytest.approx(good_one, rel=1e-4)
    assert good_one == pytest.approx(bad_one, rel=1e-4)  # on one device the mistake does not show

"""The probe on the bundled fixtures, against the static pass.

- Every bad fixture: the probe reports the same codes at the same lines as
  `tapecheck lint` does (for the codes the probe checks), also for fixtures
  that crash on purpose (the finding is made before the error propagates).
- Every good fixture: the probe is silent too.
- `fixtures/probe/`: mistakes the static pass cannot see (a helper in another
  module, a NumPy round trip inside a loss class, a reset at the wrong loop
  level); each flagged line carries `# probe-expect: CODE`.

All fixtures run in this process (one TensorFlow import), as `__main__`.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import runpy
import sys
import warnings
from pathlib import Path

import pytest

pytest.importorskip("tensorflow")

import tapecheck
from tapecheck.lint import lint_file

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
# The codes the probe checks at run time; the others (TAP302, ...) are static only for now.
PROBE_CODES = {"TAP101", "TAP102", "TAP103", "TAP104", "TAP201", "TAP202", "TAP301", "TAP401", "TAP402", "TAP403"}
PROBE_EXPECT = re.compile(r"#\s*probe-expect:\s*((?:TAP\d{3}\s*,?\s*)+)")


def run_under_probe(path: Path):
    """Run a fixture as `__main__` under a probe; its own errors are expected and kept."""
    sys.path.insert(0, str(path.parent))
    saved_argv, sys.argv = sys.argv, [str(path)]  # the fixture's own argv, not pytest's
    error = None
    try:
        with tapecheck.probe() as p, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                with contextlib.redirect_stdout(io.StringIO()):
                    kept = runpy.run_path(str(path), run_name="__main__")
            except Exception as exc:  # noqa: BLE001 - fixtures that crash on purpose (tape reuse, no gradients)
                error, kept = exc, None
            findings_before_stop = list(p.findings)
            p.stop()  # while the program's globals are still alive (module-level tapes)
            del kept
    finally:
        sys.path.remove(str(path.parent))
        sys.argv = saved_argv
    return p.findings, findings_before_stop, error


def at(findings, path: Path):
    return sorted((f.line, f.code) for f in findings
                  if f.code in PROBE_CODES and os.path.realpath(f.path) == os.path.realpath(path))


@pytest.mark.parametrize("path", sorted((FIXTURES / "bad").glob("*.py")), ids=lambda p: p.name)
def test_bad_fixture_same_codes_at_the_same_lines_as_the_static_pass(path):
    static = sorted((f.line, f.code) for f in lint_file(str(path)).findings if f.code in PROBE_CODES)
    findings, before_stop, error = run_under_probe(path)
    assert at(findings, path) == static
    if error is not None:
        # the report was made before the error left the program, not by the probe's exit
        assert {(f.line, f.code) for f in before_stop} >= {x for x in static if x[1] != "TAP202"}


@pytest.mark.parametrize("path", sorted((FIXTURES / "good").glob("*.py")), ids=lambda p: p.name)
def test_good_fixture_is_clean_at_run_time(path):
    findings, _, error = run_under_probe(path)
    assert error is None
    assert findings == []


def probe_expectations(folder: Path):
    out = []
    for path in sorted(folder.glob("*.py")):
        for number, text in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            match = PROBE_EXPECT.search(text)
            if match:
                out.extend((path.name, number, code) for code in re.findall(r"TAP\d{3}", match.group(1)))
    return sorted(out)


# Modules whose name starts with "_" are helpers imported by the runnable ones.
PROBE_ONLY = [p for p in sorted((FIXTURES / "probe").glob("*.py")) if not p.name.startswith("_")]
HELPERS = [p.name for p in sorted((FIXTURES / "probe").glob("_*.py"))]


@pytest.mark.parametrize("path", PROBE_ONLY, ids=lambda p: p.name)
def test_probe_finds_what_the_static_pass_cannot(path):
    findings, _, _ = run_under_probe(path)
    found = sorted((Path(f.path).name, f.line, f.code) for f in findings)
    mine = {path.name} | {name for name in HELPERS if name[1:-3] in path.read_text(encoding="utf-8")}
    expected = [e for e in probe_expectations(path.parent) if e[0] in mine]
    assert found == expected and found
    for name, line, code in found:
        static = lint_file(str(path.parent / name)).findings
        assert (line, code) not in {(f.line, f.code) for f in static}

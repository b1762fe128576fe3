"""pytest plugin: keep a training loop honest in CI.

- `pytest --tapecheck` runs every test under a probe and fails a test whose
  training made findings (the report is the failure message).
- The fixture `tapecheck_probe` gives a running probe to a test that wants to
  assert on `tapecheck_probe.findings` itself (the option then leaves it alone).

Loaded in every pytest run through the `pytest11` entry point, so this module
imports nothing heavy: TensorFlow is imported only when a probe starts.
"""

from __future__ import annotations

import pytest

FIXTURE = "tapecheck_probe"


def pytest_addoption(parser):
    group = parser.getgroup("tapecheck")
    group.addoption("--tapecheck", action="store_true", default=False,
                    help="fail tests whose TensorFlow training makes tapecheck probe findings")


def pytest_configure(config):
    config.addinivalue_line("markers", "tapecheck_off: do not run this test under the tapecheck probe")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    if (not item.config.getoption("tapecheck") or FIXTURE in getattr(item, "fixturenames", ())
            or item.get_closest_marker("tapecheck_off")):
        return (yield)
    from tapecheck.probe.session import Probe

    session = Probe().start()
    try:
        result = yield
    except BaseException as exc:
        session.explain(exc)
        session.stop()
        if session.findings:  # the test failed on its own: show the findings beside its error
            item.add_report_section("call", "tapecheck", session.report())
        raise
    session.stop()
    if session.findings:
        pytest.fail("tapecheck probe findings during this test:\n" + session.report(), pytrace=False)
    return result


@pytest.fixture
def tapecheck_probe():
    """A running `tapecheck` probe; assert on `.findings` in the test."""
    from tapecheck.probe.session import Probe

    session = Probe().start()
    try:
        yield session
    finally:
        session.stop()

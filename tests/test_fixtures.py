"""Lint every bundled fixture and compare with its `# expect:` annotations, exactly."""

from __future__ import annotations

from pathlib import Path

import pytest

from expectations import expected, found
from tapecheck.lint import lint_file

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
BAD = sorted((FIXTURES / "bad").glob("*.py"))
GOOD = sorted((FIXTURES / "good").glob("*.py"))


def test_there_are_fixtures_of_both_kinds():
    assert len(BAD) >= 8 and len(GOOD) >= 8


@pytest.mark.parametrize("path", BAD, ids=lambda p: p.name)
def test_bad_fixture_gives_exactly_its_annotated_findings(path):
    expectations = expected(path.read_text(encoding="utf-8"))
    assert expectations, f"{path.name} is a bad fixture without `# expect:` annotations"
    report = lint_file(str(path))
    assert report.errors == []
    assert found(report.findings) == expectations


@pytest.mark.parametrize("path", GOOD, ids=lambda p: p.name)
def test_good_fixture_is_clean(path):
    assert expected(path.read_text(encoding="utf-8")) == []
    report = lint_file(str(path))
    assert report.errors == [] and report.findings == []

"""Read `# expect: TAP101, TAP103` annotations: the findings a line must produce; lint one fixture."""

from __future__ import annotations

import re

EXPECT = re.compile(r"#\s*expect:\s*((?:TAP\d{3}\s*,?\s*)+)")


def expected(source: str) -> list[tuple[int, str]]:
    out = []
    for number, line in enumerate(source.splitlines(), start=1):
        match = EXPECT.search(line)
        if match:
            out.extend((number, code) for code in re.findall(r"TAP\d{3}", match.group(1)))
    return sorted(out)


def found(findings) -> list[tuple[int, str]]:
    return sorted((f.line, f.code) for f in findings)


def findings_of(path) -> list:
    """The findings of linting one fixture file on its own (one process, no error allowed)."""
    from tapecheck.lint import lint_paths

    report = lint_paths([str(path)], jobs=1)
    assert report.errors == []
    return report.findings

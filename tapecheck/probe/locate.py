"""Ask the static pass where, inside a tape's lines, a path was cut (eager code only)."""

from __future__ import annotations

import functools
import os


@functools.lru_cache(maxsize=64)
def _lint(path: str, mtime: float):
    from tapecheck.lint import lint_file

    try:
        findings = lint_file(path).findings
        if path.endswith(".ipynb"):  # the linter reports (cell, line in cell); the probe runs program lines
            from tapecheck.probe.notebook import program_for

            program = program_for(path)
            if program is None:
                return ()
            lines = ((program.program_line(f.cell, f.line) if f.cell else None, f.code) for f in findings)
            return tuple((line, code) for line, code in lines if line is not None)
        return tuple((f.line, f.code) for f in findings)
    except Exception:  # noqa: BLE001 - unreadable now, or the linter cannot parse it: keep the run-time line
        return ()


def static_lines(path: str, code: str, first: int, last: int) -> list[int]:
    try:
        mtime = os.stat(path).st_mtime  # a file edited since (a notebook cell re-run) is linted again
    except OSError:
        return []
    return sorted(line for line, found in _lint(path, mtime) if found == code and first <= line <= last)

"""Ask the static pass where, inside a tape's lines, a path was cut (eager code only)."""

from __future__ import annotations

import functools
import os


@functools.lru_cache(maxsize=64)
def _lint(path: str, mtime: float):
    from tapecheck.lint import lint_file

    try:
        return tuple((f.line, f.code) for f in lint_file(path).findings)
    except Exception:  # noqa: BLE001 - unreadable now, or the linter cannot parse it: keep the run-time line
        return ()


def static_lines(path: str, code: str, first: int, last: int) -> list[int]:
    try:
        mtime = os.stat(path).st_mtime  # a file edited since (a notebook cell re-run) is linted again
    except OSError:
        return []
    return sorted(line for line, found in _lint(path, mtime) if found == code and first <= line <= last)

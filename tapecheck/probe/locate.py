"""Ask the static pass where a path was cut, when the run cannot say.

Eager tensors keep no producer, so a cut seen on the first step (Keras 3
raises "No gradients provided" there, before a second step could be watched)
has no op to name at run time when it is a NumPy round trip. The linter's
TAP104 finding for that very `gradient` call (or for the loss given to
`compile()`, under `fit`) has it: the op, its line and the call path from the
tape. Files are linted once per (path, mtime), only when a gradient came back
None; lint never imports TensorFlow.
"""

from __future__ import annotations

import functools
import os
import re
from typing import NamedTuple


class StaticCut(NamedTuple):
    line: int
    message: str
    what: str  # the op as lint names it: "`.numpy()`", "`tf.round()`", "the comparison `>`"


@functools.lru_cache(maxsize=64)
def _lint(path: str, mtime: float) -> tuple:
    """(line, code, message) of each finding of `path`, at program lines (notebooks mapped)."""
    from tapecheck.lint import lint_file

    try:
        findings = lint_file(path).findings
        if path.endswith(".ipynb"):  # the linter reports (cell, line in cell); the probe runs program lines
            from tapecheck.probe.notebook import program_for

            program = program_for(path)
            if program is None:
                return ()
            lines = ((program.program_line(f.cell, f.line) if f.cell else None, f) for f in findings)
            return tuple((line, f.code, f.message) for line, f in lines if line is not None)
        return tuple((f.line, f.code, f.message) for f in findings)
    except Exception:  # noqa: BLE001 - unreadable now, or the linter cannot parse it: keep the run-time line
        return ()


def _findings(path: str) -> tuple:
    if not path or path.startswith("<"):
        return ()
    try:
        mtime = os.stat(path).st_mtime  # a file edited since (a notebook cell re-run) is linted again
    except OSError:
        return ()
    return _lint(path, mtime)


def static_lines(path: str, code: str, first: int, last: int) -> list[int]:
    return sorted(line for line, found, _ in _findings(path) if found == code and first <= line <= last)


_WHAT = re.compile(r"^(the comparison `[^`]+`|`[^`]+`)")


def _cut(line, message) -> StaticCut:
    what = _WHAT.match(message)
    return StaticCut(line, message, what.group(1) if what else "")


def cut_for_gradient(path: str, gradient_line: int, first: int | None = None) -> StaticCut | None:
    """Lint's TAP104 finding that explains the `gradient` call at `gradient_line` of `path`.

    Lint names that call in its message ("`tape.gradient` (line 31)"); a finding
    at a line inside the tape's lines (`first`..`gradient_line`) counts too.
    """
    named = re.compile(rf"`\w+\.gradient` \(line {gradient_line}\)")
    inside = None
    for line, code, message in _findings(path):
        if code != "TAP104" or "zero gradient" in message:
            continue
        if named.search(message):
            return _cut(line, message)
        if inside is None and first is not None and first <= line <= gradient_line:
            inside = _cut(line, message)
    return inside


def cut_for_fit(path: str, fit_line: int | None, op_line: int | None = None) -> StaticCut | None:
    """Lint's TAP104 finding for a loss given to `compile()` (or a `call` that `fit` at `fit_line` runs).

    With several, the one at `op_line` (the run's own op, when it has one), else
    the one that names this `fit` call, else the only one.
    """
    found = []
    for line, code, message in _findings(path):
        if code != "TAP104" or "zero gradient" in message:
            continue
        if "given to `compile`" in message or (fit_line is not None and f"`fit` (line {fit_line})" in message):
            found.append(_cut(line, message))
    if op_line is not None:
        for cut in found:
            if cut.line == op_line:
                return cut
    for cut in found:
        if fit_line is not None and f"`fit` (line {fit_line})" in cut.message:
            return cut
    return found[0] if len(found) == 1 else None

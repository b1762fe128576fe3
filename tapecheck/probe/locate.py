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
    """(line, code, message, details) of each finding of `path`, at program lines (notebooks mapped)."""
    from tapecheck.lint import lint_file

    try:
        findings = lint_file(path).findings
        if path.endswith(".ipynb"):  # the linter reports (cell, line in cell); the probe runs program lines
            from tapecheck.probe.notebook import program_for

            program = program_for(path)
            if program is None:
                return ()
            lines = ((program.program_line(f.cell, f.line) if f.cell else None, f) for f in findings)
            return tuple((line, f.code, f.message, f.details) for line, f in lines if line is not None)
        return tuple((f.line, f.code, f.message, f.details) for f in findings)
    except Exception:  # noqa: BLE001 - unreadable now, or the linter cannot parse it: keep the run-time line
        return ()


def findings(path: str) -> tuple:
    """(line, code, message, details) of lint's findings in `path`, linted once per modification time."""
    if not path or path.startswith("<"):
        return ()
    try:
        mtime = os.stat(path).st_mtime  # a file edited since (a notebook cell re-run) is linted again
    except OSError:
        return ()
    return _lint(path, mtime)


def static_lines(path: str, code: str, first: int, last: int) -> list[int]:
    return sorted(line for line, found, _, _ in findings(path) if found == code and first <= line <= last)


_WHAT = re.compile(r"^(the comparison `[^`]+`|`[^`]+`)")


def _cut(line, message, details) -> StaticCut:
    if details.get("op"):
        return StaticCut(line, message, details["op"])
    what = _WHAT.match(message)
    return StaticCut(line, message, what.group(1) if what else "")


def _zero(message, details) -> bool:
    return details["zero"] if "zero" in details else "zero gradient" in message


def cut_for_gradient(path: str, gradient_line: int, first: int | None = None) -> StaticCut | None:
    """Lint's TAP104 finding that explains the `gradient` call at `gradient_line` of `path`.

    Lint names that call in its message ("`tape.gradient` (line 31)"); a finding
    at a line inside the tape's lines (`first`..`gradient_line`) counts too.
    """
    named = re.compile(rf"`\w+\.gradient` \(line {gradient_line}\)")
    inside = None
    for line, code, message, details in findings(path):
        if code != "TAP104" or _zero(message, details):
            continue
        # lint says which call it explains in `details` (older cache entries: in the message)
        if details.get("gradient_line") == gradient_line or ("gradient_line" not in details and named.search(message)):
            return _cut(line, message, details)
        if inside is None and first is not None and first <= line <= gradient_line:
            inside = _cut(line, message, details)
    return inside


def cut_for_fit(path: str, fit_line: int | None, op_line: int | None = None) -> StaticCut | None:
    """Lint's TAP104 finding for a loss given to `compile()` (or a `call` that `fit` at `fit_line` runs).

    With several, the one at `op_line` (the run's own op, when it has one), else
    the one that names this `fit` call, else the only one.
    """
    found = []
    for line, code, message, details in findings(path):
        if code != "TAP104" or _zero(message, details):
            continue
        compiled = "compile_line" in details or "given to `compile`" in message
        if compiled or (fit_line is not None and (details.get("fit_line") == fit_line or f"`fit` (line {fit_line})" in message)):
            found.append((_cut(line, message, details), details))
    if op_line is not None:
        for cut, _ in found:
            if cut.line == op_line:
                return cut
    for cut, details in found:
        if fit_line is not None and (details.get("fit_line") == fit_line or f"`fit` (line {fit_line})" in cut.message):
            return cut
    return found[0][0] if len(found) == 1 else None

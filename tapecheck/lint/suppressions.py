"""Line suppressions: `# tapecheck: ignore[TAP101]` and `# noqa: TAP101`.

A suppression comment on a finding's line hides that finding. Both forms take
a list of codes (`# noqa: TAP101, TAP201`, `# tapecheck: ignore[TAP101,TAP201]`)
or none, which hides every finding on the line. Only real comments count (the
source is tokenized), so the text inside a string never suppresses anything.

The same function serves lint and probe findings: it reads the source lines of
each finding's file itself (`apply_suppressions(findings)`).
"""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass, field
from typing import Callable, Iterable

from tapecheck.findings import Finding

_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Za-z]+[0-9]+(?:[\s,]+[A-Za-z]+[0-9]+)*))?", re.I)
_IGNORE = re.compile(r"#\s*tapecheck:\s*ignore(?:\[(?P<codes>[^\]]*)\])?")
_CODE = re.compile(r"[A-Za-z]+[0-9]+")
_SCREEN = re.compile(rb"(?i)noqa|tapecheck:")  # files without either are not tokenized


@dataclass(frozen=True)
class Suppression:
    path: str
    line: int  # 1-based; within the cell for notebooks
    col: int  # 1-based column of the comment's `#`
    cell: int | None
    kind: str  # "tapecheck" or "noqa"
    codes: tuple[str, ...] | None  # None: every code on the line
    text: str  # the suppression as written

    def covers(self, code: str) -> bool:
        return self.codes is None or code in self.codes


@dataclass(frozen=True)
class UnusedSuppression:
    """A suppression (or one code of it) that hid nothing."""

    path: str
    line: int
    col: int
    cell: int | None
    text: str
    codes: tuple[str, ...]  # the unused codes; empty for a code-less `tapecheck: ignore`

    def location(self) -> str:
        where = f"cell {self.cell}:" if self.cell is not None else ""
        return f"{self.path}:{where}{self.line}:{self.col}"

    def format(self) -> str:
        what = ", ".join(self.codes) if self.codes else "any code"
        return f"{self.location()}: unused suppression `{self.text}`: no finding of {what} on this line"

    def to_dict(self) -> dict:
        return {"path": self.path, "line": self.line, "col": self.col, "cell": self.cell, "text": self.text, "codes": list(self.codes)}


def _comments(source: str) -> Iterable[tuple[int, int, str]]:
    """(line, 0-based col, text) of each comment; a line scan when tokenizing fails."""
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.COMMENT:
                yield token.start[0], token.start[1], token.string
        return
    except (tokenize.TokenError, SyntaxError, ValueError):
        pass
    for number, line in enumerate(source.splitlines(), start=1):
        index = line.find("#")
        if index >= 0:
            yield number, index, line[index:]


def parse_comment(comment: str) -> list[tuple[str, tuple[str, ...] | None, str, int]]:
    """The suppressions in one comment: (kind, codes or None, text, offset in the comment)."""
    found = []
    for kind, pattern in (("tapecheck", _IGNORE), ("noqa", _NOQA)):
        for match in pattern.finditer(comment):
            raw = match.group("codes")
            codes = tuple(code.upper() for code in _CODE.findall(raw)) if raw else None
            found.append((kind, codes or None, match.group(0).strip(), match.start()))
    return found


def scan(source: str, path: str, cell_line: Callable[[int], tuple[int | None, int]] | None = None) -> list[Suppression]:
    """Every suppression in a source text. `cell_line` maps program lines to (cell, line) for notebooks."""
    if not _SCREEN.search(source.encode("utf-8", "replace")):
        return []
    found = []
    for line, col, comment in _comments(source):
        for kind, codes, text, offset in parse_comment(comment):
            cell, cell_line_number = cell_line(line) if cell_line else (None, line)
            found.append(Suppression(path, cell_line_number, col + offset + 1, cell, kind, codes, text))
    return found


def read_suppressions(path: str, data: bytes | None = None) -> list[Suppression]:
    """The suppressions in a file (a notebook's code cells for `.ipynb`); [] when unreadable."""
    if data is None:
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except OSError:
            return []
    if not _SCREEN.search(data):
        return []
    if path.endswith(".ipynb"):
        from tapecheck.lint.notebooks import NotebookError, notebook_program

        try:
            program = notebook_program(data)
        except NotebookError:
            return []
        return scan(program.source, path, program.cell_line)
    return scan(decode(data), path)


def decode(data: bytes) -> str:
    """Python source bytes as text, honouring a coding cookie or BOM; lossy rather than failing."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError:
        encoding = "utf-8"
    try:
        return data.decode(encoding)
    except (LookupError, UnicodeDecodeError):
        return data.decode("utf-8", errors="replace")


@dataclass
class SuppressionResult:
    kept: list[Finding] = field(default_factory=list)
    suppressed: list[Finding] = field(default_factory=list)
    unused: list[UnusedSuppression] = field(default_factory=list)


def _by_line(suppressions: Iterable[Suppression]) -> dict[tuple[str, int | None, int], list[Suppression]]:
    table: dict[tuple[str, int | None, int], list[Suppression]] = {}
    for suppression in suppressions:
        table.setdefault((suppression.path, suppression.cell, suppression.line), []).append(suppression)
    return table


def split(
    findings: Iterable[Finding],
    sources: dict[str, bytes] | None = None,
    report_unused_in: Iterable[str] = (),
    enabled: Callable[[str, str], bool] | None = None,
) -> SuppressionResult:
    """Separate suppressed findings from the others.

    `sources` gives file contents already in hand (stdin); other files are read.
    With `report_unused_in` (the files linted), suppressions in those files that
    hid nothing are listed; a bare `# noqa` and other tools' codes are left
    alone (they may be for flake8 or ruff), as are codes `enabled` turns off.
    """
    findings = list(findings)
    sources = sources or {}
    paths = dict.fromkeys([f.path for f in findings] + list(report_unused_in))
    suppressions = [s for path in paths for s in read_suppressions(path, sources.get(path))]
    table = _by_line(suppressions)
    result = SuppressionResult()
    used: set[tuple[Suppression, str]] = set()
    for finding in findings:
        matches = [s for s in table.get((finding.path, finding.cell, finding.line), ()) if s.covers(finding.code)]
        if matches:
            result.suppressed.append(finding)
            used.update((s, finding.code) for s in matches)
        else:
            result.kept.append(finding)
    wanted = set(report_unused_in)
    used_any = {s for s, _ in used}
    for suppression in suppressions:
        if suppression.path not in wanted:
            continue
        if suppression.codes is None:
            if suppression.kind == "tapecheck" and suppression not in used_any:
                result.unused.append(_unused(suppression, ()))
            continue
        ours = [c for c in suppression.codes if c.startswith("TAP") and (enabled is None or enabled(c, suppression.path))]
        idle = tuple(c for c in ours if (suppression, c) not in used)
        if idle:
            result.unused.append(_unused(suppression, idle))
    result.unused.sort(key=lambda u: (u.path, u.cell or 0, u.line, u.col))
    return result


def _unused(suppression: Suppression, codes: tuple[str, ...]) -> UnusedSuppression:
    return UnusedSuppression(suppression.path, suppression.line, suppression.col, suppression.cell, suppression.text, codes)


def apply_suppressions(findings: Iterable[Finding], sources: dict[str, bytes] | None = None) -> list[Finding]:
    """The findings that no suppression comment on their line hides (lint or probe findings)."""
    return split(findings, sources).kept

"""What the language server shows for one editor buffer: findings placed in LSP documents.

Plain data in, plain data out; no pygls here (tapecheck/server/lsp.py speaks the
protocol). A buffer is a `Snapshot` of the editor's text taken when it changed: a
`.py` document is one cell, a notebook is its cells in order. It is linted in
memory with the engine (`lint_python`), the configuration of the file's project
(`[tool.tapecheck]`: selected rules, per-file ignores) and the suppression
comments of the buffer itself; nothing is read from the file on disk and nothing
is written anywhere.

Positions: tapecheck counts 1-based lines and columns in characters; LSP counts
0-based lines and columns in code units of the negotiated encoding (UTF-16 unless
the client offers another). Lines end at "\\r\\n", "\\r" or "\\n", as both define.
"""

from __future__ import annotations

import functools
import io
import json
import os
import re
import threading
import tokenize
from dataclasses import dataclass, field
from typing import Sequence

from tapecheck.findings import Edit, Finding

_NEWLINE = re.compile(r"\r\n|\r|\n")
_WORD = re.compile(r"[\w.]+")
_WHERE = re.compile(r"\bline (\d+)(?:, column (\d+))?")
SUPPRESSION = "# noqa: {code}"  # the form ruff users know; tapecheck honours it (lint/suppressions.py)
# Where the rule pages (rules/TAP101.md ...) are published, when they are. The project
# has no public site yet: diagnostics then link to the page in the checkout tapecheck
# runs from (a file URI), and carry no link from an installed wheel.
RULES_BASE_URL: str | None = None


def rule_url(code: str) -> str | None:
    """The rule's page (rules/CODE.md). The project has no published site: the page in the
    checkout tapecheck runs from, as a file URI, when it is there (a clone or an editable
    install); None for an installed wheel, which carries no pages."""
    if RULES_BASE_URL:
        return f"{RULES_BASE_URL.rstrip('/')}/{code}.md"
    page = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "rules", f"{code}.md")
    if os.path.isfile(page):
        from pathlib import Path

        return Path(page).as_uri()
    return None


def split_lines(text: str) -> list[str]:
    """The lines of a text without their line endings (a final line ending starts an empty line)."""
    return _NEWLINE.split(text)


def code_units(text: str, encoding: str) -> int:
    """The length of `text` in the client's position units."""
    if encoding == "utf-8":
        return len(text.encode("utf-8", "surrogatepass"))
    if encoding == "utf-32":
        return len(text)
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


@dataclass(frozen=True)
class Cell:
    uri: str  # the text document the editor shows (a notebook cell, or the file itself)
    text: str
    code: bool = True  # a Python code cell (markdown and other languages' cells are not linted)
    version: int | None = None


@dataclass(frozen=True)
class Snapshot:
    """The text of one buffer at one version: what one lint sees."""

    key: str  # the document's URI (the notebook's, for a notebook)
    path: str  # file system path: decides the configuration and the per-file ignores
    version: object
    cells: tuple[Cell, ...]
    notebook: bool = False


@dataclass(frozen=True)
class Place:
    """A 1-based (line, col) in one cell's text."""

    uri: str
    line: int
    col: int


@dataclass
class Located:
    """A finding (moved to its cell for notebooks) and what the editor can do about it."""

    finding: Finding
    uri: str
    line: int  # 1-based, in that document
    col: int
    fix: list[tuple[str, Edit]] | None = None  # the safe fix, as edits of the editor's documents
    # How to work out `suppress` when it is first asked for (a code action), not at each lint:
    # (the buffer's `_Comments`, its `_Program`, the finding's line in the program). Placing the
    # comment may need a tokenize of the whole buffer (~80 ms at 5,000 lines).
    where: tuple | None = field(default=None, repr=False, compare=False)

    @functools.cached_property
    def suppress(self) -> tuple[str, Edit] | None:
        """The edit that adds `# noqa: CODE` on the line (None where no comment fits)."""
        if self.where is None:
            return None
        comments, program, line = self.where
        edit = comments.suppression(line, self.finding.code)
        if edit is None:
            return None
        placed = program.edits([edit])
        return placed[0] if placed else None


@dataclass
class Problem:
    """A buffer that could not be linted (a syntax error while typing, a broken configuration)."""

    uri: str
    line: int
    col: int
    message: str


class ConfigProblem:
    """A configuration error placed in the `pyproject.toml` it comes from, at the line of the
    key it names (the `[tool.tapecheck]` header when none): where the user fixes it."""

    def __init__(self, path: str, line: int, message: str):
        self.path, self.line, self.message = path, line, message

    @classmethod
    def from_error(cls, message: str) -> "ConfigProblem | None":
        import re

        head, _, rest = message.partition(": ")
        if not rest or os.path.basename(head) != "pyproject.toml" or not os.path.isfile(head):
            return None
        try:
            with open(head, encoding="utf-8", errors="replace") as handle:
                lines = handle.read().splitlines()
        except OSError:
            return None
        key = re.search(r"unknown key '([^']+)'", rest) or re.match(r"\[tool\.tapecheck[^\]]*\] ([\w.-]+)", rest)
        header = next((n for n, text in enumerate(lines, 1) if text.strip().startswith("[tool.tapecheck")), 1)
        line = header
        if key:
            name = key.group(1).split(".")[0]
            pattern = re.compile(r"\s*[\"']?" + re.escape(name) + r"[\"']?\s*=")
            line = next((n for n, text in enumerate(lines, 1) if n >= header and pattern.match(text)), header)
        return cls(head, line, rest)


@dataclass
class Result:
    snapshot: Snapshot
    located: list[Located] = field(default_factory=list)
    problem: Problem | None = None
    config: ConfigProblem | None = None  # the same configuration error, placed in its pyproject.toml

    def by_uri(self) -> dict[str, list[Located]]:
        found: dict[str, list[Located]] = {cell.uri: [] for cell in self.snapshot.cells if cell.code}
        for item in self.located:
            found.setdefault(item.uri, []).append(item)
        return found


class _Program:
    """The text the engine lints and how its lines map back to the editor's documents."""

    def __init__(self, snapshot: Snapshot):
        self.snapshot = snapshot
        if snapshot.notebook:
            from tapecheck.lint.notebooks import notebook_program

            document = {
                "cells": [
                    {"cell_type": "code" if cell.code else "markdown", "source": cell.text, "metadata": {}}
                    for cell in snapshot.cells
                ],
                "metadata": {}, "nbformat": 4, "nbformat_minor": 5,
            }
            self.data = json.dumps(document).encode("utf-8")  # what the suppression scanner reads
            self.program = notebook_program(self.data)
            self.text = self.program.source
        else:
            self.program = None
            self.text = snapshot.cells[0].text
            self.data = self.text.encode("utf-8", "surrogatepass")
        self.lines = split_lines(self.text)

    def place(self, line: int, col: int) -> Place:
        if self.program is None:
            return Place(self.snapshot.cells[0].uri, line, col)
        cell, cell_line = self.program.cell_line(line)
        if line > len(self.program.line_map):  # just past the end: the end of the last cell
            cell_line = len(split_lines(self.snapshot.cells[cell - 1].text.rstrip("\r\n"))) + 1
        return Place(self.snapshot.cells[cell - 1].uri, cell_line, col)

    def newline(self, uri: str) -> str:
        cell = next((c for c in self.snapshot.cells if c.uri == uri), None)
        match = _NEWLINE.search(cell.text) if cell else None
        return match.group(0) if match else "\n"

    def edits(self, edits: Sequence[Edit]) -> list[tuple[str, Edit]] | None:
        """The program's edits as edits of the editor's documents; None when one straddles two cells."""
        out = []
        for edit in edits:
            start, end = self.place(edit.line, edit.col), self.place(edit.end_line, edit.end_col)
            if start.uri != end.uri:
                return None
            text = edit.text.replace("\n", self.newline(start.uri))
            out.append((start.uri, Edit(start.line, start.col, end.line, end.col, text)))
        return out


def lint_snapshot(snapshot: Snapshot, settings) -> Result:
    """Lint one buffer. `settings` is a `tapecheck.lint.config.Settings`."""
    from tapecheck.lint.config import ConfigError
    from tapecheck.lint.engine import LintError, lint_python
    from tapecheck.lint.notebooks import NotebookError, relocate
    from tapecheck.lint.suppressions import split

    result = Result(snapshot)
    first = next((cell.uri for cell in snapshot.cells if cell.code), snapshot.key)
    if not any(cell.code for cell in snapshot.cells):
        return result
    try:
        rules = settings.rules_for([snapshot.path])
        enabled = settings.for_path(snapshot.path).enabled
    except ConfigError as exc:
        result.problem = Problem(first, 1, 1, f"tapecheck: configuration error: {exc}")
        result.config = ConfigProblem.from_error(str(exc))
        return result
    from tapecheck.lint.engine import MAX_FILE_BYTES

    size = sum(len(cell.text) for cell in snapshot.cells)
    if size > MAX_FILE_BYTES:  # the limit `tapecheck lint` has for files
        result.problem = Problem(first, 1, 1, f"tapecheck: buffer too large to lint (over {MAX_FILE_BYTES // 2**20} MiB)")
        return result
    try:
        program = _Program(snapshot)
    except NotebookError as exc:  # not expected from cells the server builds itself
        result.problem = Problem(first, 1, 1, f"tapecheck: {exc}")
        return result
    trees = _take_trees(snapshot.key, size)
    try:
        raw = lint_python(program.data if program.program is None else program.text.encode("utf-8"), snapshot.path, rules,
                          trees=trees)
    except LintError as exc:
        result.problem = _problem(str(exc), program)
        return result
    finally:
        _give_back_trees(snapshot.key, trees)
    if program.program is not None and raw:
        raw = _with_fixes(program.text, snapshot.path, raw)
    pairs = []
    for finding in raw:
        shown = relocate(finding, program.program) if program.program is not None else finding
        if enabled(shown.code, snapshot.path):
            pairs.append((shown, finding))
    kept = {id(f) for f in split([shown for shown, _ in pairs], {snapshot.path: program.data}).kept}
    comments = _Comments(program.text, snapshot.path)
    for shown, finding in pairs:
        if id(shown) not in kept:
            continue
        place = program.place(finding.line, finding.col)
        fix = program.edits(finding.fix.edits) if finding.fix is not None and finding.fix.safe else None
        # the `# noqa` edit is placed when a code action asks for it (`Located.suppress`)
        result.located.append(Located(shown, place.uri, place.line, place.col, fix or None, (comments, program, finding.line)))
    return result


# The parsed runs of the last lint of each of the last few large buffers (`parts.Runs`): an edit
# re-parses and re-walks only the runs whose text (or entry state) changed. The trees and positions
# kept take about 100-150 bytes of memory per character of source (tracemalloc: 19-29 MB for the
# 205 KB buffer of benchmarks/lsp_latency.py) and the runs' facts about 45 more (~9 MB there), so
# only buffers up to KEEP_TREES_CHARS keep theirs, at most KEEP_TREES_BUFFERS of them (the most
# recently linted): at most ~200 MB in all.
KEEP_TREES_CHARS = 512 * 1024
KEEP_TREES_BUFFERS = 2
_trees: dict = {}  # `parts.Runs` by the buffer's key, least recently linted first
_trees_lock = threading.Lock()


def _take_trees(key: str, size: int):
    """`key`'s store of parsed runs, taken out of the shared ones while a lint uses it (empty when
    none; a lint of the same buffer on another thread meanwhile starts with none), or None when
    the buffer is too large to keep them. `_give_back_trees` puts it back."""
    with _trees_lock:
        trees = _trees.pop(key, None)
    if size > KEEP_TREES_CHARS:
        return None
    if trees is None:
        from tapecheck.lint.parts import Runs

        trees = Runs()
    return trees


def _give_back_trees(key: str, trees) -> None:
    if not trees:
        return  # nothing kept (too large, not cut into runs): it would only take another buffer's place
    with _trees_lock:
        _trees.pop(key, None)
        _trees[key] = trees
        while len(_trees) > KEEP_TREES_BUFFERS:
            del _trees[next(iter(_trees))]


def forget(key: str) -> None:
    """Drop a closed buffer's parsed runs."""
    with _trees_lock:
        _trees.pop(key, None)


def _with_fixes(text: str, path: str, findings: list[Finding]) -> list[Finding]:
    """Fixes for a notebook's findings, worked out on its program as for a `.py` file.

    `tapecheck lint --fix` leaves notebooks alone (it would have to rewrite the JSON);
    in the editor a fix is a plain edit of one cell, so the engine's fixers apply. An
    edit that would straddle two cells is dropped by the caller."""
    from tapecheck.lint.fixes import attach_fixes

    fixable = [f for f in findings if f.fix is None]
    if not fixable:
        return findings
    stem = path[: -len(".ipynb")] if path.endswith(".ipynb") else path
    return attach_fixes(text.encode("utf-8"), stem + ".py", findings)


def _problem(message: str, program: _Program) -> Problem:
    match = _WHERE.search(message)
    line, col = (int(match.group(1)), int(match.group(2) or 1)) if match else (1, 1)
    line = max(1, min(line, len(program.lines)))
    place = program.place(line, col)
    if program.program is not None:
        from tapecheck.lint.notebooks import _relocate_text

        message = _relocate_text(message, program.program, None)
    return Problem(place.uri, place.line, place.col, f"tapecheck could not lint this file: {message}")


class _Comments:
    """Where a suppression for a finding goes: appended to its line, or into the one already there."""

    def __init__(self, text: str, path: str):
        self.text, self.path = text, path
        self.lines = split_lines(text)
        self._scanned = None
        self._continued: set[int] | None = None
        # Worked out when a code action first asks (`Located.suppress`), maybe on two threads at once:
        # each index is built whole, then published.
        self._lock = threading.Lock()

    def _suppressions(self):
        with self._lock:
            if self._scanned is None:
                from tapecheck.lint.suppressions import scan

                scanned: dict = {}
                for suppression in scan(self.text, self.path):
                    scanned.setdefault(suppression.line, []).append(suppression)
                self._scanned = scanned
            return self._scanned

    def _inside_tokens(self) -> set[int]:
        """Lines whose end lies inside a token (a string over several lines): no comment fits there."""
        with self._lock:
            if self._continued is None:
                continued: set[int] = set()
                try:
                    for token in tokenize.generate_tokens(io.StringIO(self.text).readline):
                        if token.start[0] < token.end[0] and token.type not in (tokenize.NL, tokenize.NEWLINE):
                            continued.update(range(token.start[0], token.end[0]))
                except (tokenize.TokenError, SyntaxError, ValueError):
                    pass
                self._continued = continued
            return self._continued

    def suppression(self, line: int, code: str) -> Edit | None:
        if not 1 <= line <= len(self.lines):
            return None
        for existing in self._suppressions().get(line, ()):
            if existing.codes is None:
                return None  # a bare `# noqa` already hides everything here
            end = existing.col - 1 + len(existing.text)
            if existing.kind == "tapecheck":
                end -= 1  # before the closing `]`
            return Edit(line, end + 1, line, end + 1, f", {code}")
        text = self.lines[line - 1]
        if text.rstrip().endswith("\\") or line in self._inside_tokens():
            return None  # a comment would end the continued line or land inside a string
        content = len(text.rstrip())
        return Edit(line, content + 1, line, len(text) + 1, "  " + SUPPRESSION.format(code=code))


def word_end(line_text: str, col: int) -> int:
    """The 1-based column just past the name or dotted name starting at `col` (a 1-character
    range when none starts there, an empty one at the end of the line)."""
    match = _WORD.match(line_text, col - 1)
    if match and match.end() > col - 1:
        return match.end() + 1
    return min(col + 1, len(line_text) + 1)


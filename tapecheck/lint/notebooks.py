"""Jupyter notebooks: the code cells, in order, linted as one program.

IPython syntax that is not Python (`%magic`, `%%cell magic`, `!shell`,
`name?`) is turned into comments by overwriting its first character with `#`,
so every other line and column stays where it was. Findings come back with the
notebook's cell number (1-based, counting every cell, markdown included, as the
notebook shows them) and the line inside that cell.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field

from tapecheck.findings import Finding

# Cell magics whose body is still Python: only their `%%` line is neutralised.
PYTHON_CELL_MAGICS = frozenset({"time", "timeit", "capture", "prun", "debug", "tensorflow_version"})
_ASSIGNED_MAGIC = re.compile(r"^\s*[\w.,\s()\[\]*]+=\s*[%!]")  # `files = !ls`, `t = %timeit f()`
_HELP = re.compile(r"^\s*(\?\??[\w.]+|[\w.]+\?\??)\s*$")  # `model?`, `??tf.function`
_LINE_IN_MESSAGE = re.compile(r"\bline (\d+)\b")


class NotebookError(ValueError):
    """A file that is not a readable notebook; the message says why."""


@dataclass
class NotebookProgram:
    source: str  # the code cells joined, IPython syntax commented out
    line_map: list[tuple[int, int]] = field(default_factory=list)  # program line - 1 -> (cell, line in cell)
    language: str = "python"  # the kernel's language; another one's notebook has no program

    def cell_line(self, line: int) -> tuple[int, int]:
        """(cell, line in cell) of a 1-based program line."""
        if 1 <= line <= len(self.line_map):
            return self.line_map[line - 1]
        last_cell = self.line_map[-1][0] if self.line_map else 1
        return last_cell, max(line - len(self.line_map), 1)

    def program_line(self, cell: int, line: int) -> int | None:
        for index, (cell_number, cell_line) in enumerate(self.line_map):
            if cell_number == cell and cell_line == line:
                return index + 1
        return None


def _neutralise(line: str) -> str:
    """The line with its first non-blank character replaced by `#`."""
    stripped = len(line) - len(line.lstrip())
    if stripped >= len(line.rstrip("\r\n")):
        return line
    return line[:stripped] + "#" + line[stripped + 1:]


def _is_ipython_line(line: str) -> bool:
    text = line.lstrip()
    return text.startswith(("%", "!")) or bool(_ASSIGNED_MAGIC.match(line)) or bool(_HELP.match(line))


class _Continuation:
    """Whether the next line continues a statement (open bracket or string, or a `\\`):
    such a line is Python even when it starts with `%` or `!`, never a magic."""

    def __init__(self):
        self.depth = 0
        self.quote = ""  # the open string's quote, "" when none
        self.backslash = False

    @property
    def inside(self) -> bool:
        return self.depth > 0 or bool(self.quote) or self.backslash

    def feed(self, line: str) -> None:
        index, self.backslash = 0, False
        while index < len(line):
            char = line[index]
            if self.quote:
                if char == "\\":
                    index += 1
                elif line.startswith(self.quote, index):
                    index += len(self.quote) - 1
                    self.quote = ""
            elif char == "#":
                break
            elif char in "\"'":
                triple = line[index:index + 3]
                self.quote = triple if triple in ('"""', "'''") else char
                index += len(self.quote) - 1
            elif char in "([{":
                self.depth += 1
            elif char in ")]}":
                self.depth = max(self.depth - 1, 0)
            index += 1
        if self.quote in ('"', "'"):
            self.quote = ""  # an unterminated short string ends with its line (a syntax error anyway)
        self.backslash = line.rstrip("\r\n").endswith("\\") and not self.quote


def cell_to_python(text: str) -> list[str]:
    """A code cell's lines (each ending in "\\n") with IPython syntax commented out."""
    lines = re.split(r"\r\n|\r|\n", text)  # not str.splitlines: a form feed is no line break to the parser
    if lines[-1] == "":
        lines.pop()
    out: list[str] = []
    whole_cell = False
    if lines and lines[0].lstrip().startswith("%%"):
        magic = lines[0].lstrip()[2:].split(maxsplit=1)
        whole_cell = not magic or magic[0] not in PYTHON_CELL_MAGICS  # %%bash, %%writefile...
        out.append(_neutralise(lines[0]))
        lines = lines[1:]
    continued = False  # a magic line ending in `\\` goes on
    statement = _Continuation()
    for line in lines:
        if whole_cell or continued or (not statement.inside and _is_ipython_line(line)):
            out.append(_neutralise(line))
            continued = not whole_cell and line.rstrip().endswith("\\")
        else:
            out.append(line)
            statement.feed(line)
    return [line + "\n" for line in out]


def _cell_text(cell: object, number: int) -> str | None:
    """The source of a code cell, None for other cells; NotebookError when malformed."""
    if not isinstance(cell, dict):
        raise NotebookError(f"cell {number} is not a JSON object")
    kind = cell.get("cell_type")
    if not isinstance(kind, str):
        raise NotebookError(f"cell {number} has no 'cell_type'")
    if kind != "code":
        return None
    source = cell.get("source")
    if isinstance(source, list) and all(isinstance(part, str) for part in source):
        return "".join(source)
    if isinstance(source, str):
        return source
    raise NotebookError(f"cell {number} has no 'source' string or list of strings")


def kernel_language(document: dict) -> str | None:
    """The notebook's language from its metadata (`language_info.name`, else
    `kernelspec.language`); None when it does not say (then it is taken as Python)."""
    metadata = document.get("metadata")
    if not isinstance(metadata, dict):
        return None
    for key, field_name in (("language_info", "name"), ("kernelspec", "language")):
        table = metadata.get(key)
        if isinstance(table, dict) and isinstance(table.get(field_name), str) and table[field_name].strip():
            return table[field_name].strip()
    return None


def notebook_program(data: bytes | str) -> NotebookProgram:
    """The Python program of a notebook file's contents. Raises NotebookError."""
    try:
        document = json.loads(data)
    except json.JSONDecodeError as exc:
        raise NotebookError(f"not a valid notebook: bad JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    except (UnicodeDecodeError, RecursionError) as exc:
        raise NotebookError(f"not a valid notebook: {type(exc).__name__}") from None
    if not isinstance(document, dict):
        raise NotebookError("not a valid notebook: the top level is not a JSON object")
    cells = document.get("cells")
    if not isinstance(cells, list):
        hint = " (nbformat 3: convert it with `jupyter nbconvert --to notebook`)" if "worksheets" in document else ""
        raise NotebookError(f"not a valid notebook: no 'cells' list{hint}")
    program = NotebookProgram("")
    language = kernel_language(document)
    if language is not None and not language.lower().startswith("python"):
        program.language = language  # an R or Julia notebook: no Python to lint, as ruff skips it
        return program
    parts: list[str] = []
    for number, cell in enumerate(cells, start=1):
        text = _cell_text(cell, number)
        if text is None:
            continue
        lines = cell_to_python(text)
        parts.extend(lines)
        program.line_map.extend((number, index) for index in range(1, len(lines) + 1))
    program.source = "".join(parts)
    return program


def _relocate_text(text: str, program: NotebookProgram, own_cell: int | None) -> str:
    """Rewrite "line N" (program lines) in a message as lines of the notebook's cells."""

    def replace(match: re.Match) -> str:
        cell, line = program.cell_line(int(match.group(1)))
        return f"line {line}" if cell == own_cell else f"cell {cell}, line {line}"

    return _LINE_IN_MESSAGE.sub(replace, text)


def relocate(finding: Finding, program: NotebookProgram) -> Finding:
    """A finding on the joined program, moved to its cell and line in the notebook."""
    cell, line = program.cell_line(finding.line)
    return dataclasses.replace(
        finding,
        line=line,
        cell=cell,
        message=_relocate_text(finding.message, program, cell),
        hint=_relocate_text(finding.hint, program, cell),
    )


def lint_notebook(data: bytes | str, path: str, rules) -> list[Finding]:
    """Findings for a notebook's contents. Raises LintError for a broken notebook."""
    from tapecheck.lint.engine import LintError, lint_python

    try:
        program = notebook_program(data)
    except NotebookError as exc:
        raise LintError(str(exc)) from None
    source = program.source.encode("utf-8")
    try:
        findings = lint_python(source, path, rules)
        if not findings and program.source:
            from tapecheck.lint.engine import may_fire
            from tapecheck.lint.parallel import syntax_problem

            # Screened out: Python's parser still says whether the cells are valid Python.
            problem = None if may_fire(source, rules) else syntax_problem(source)
            if problem is not None:
                raise LintError(problem)
    except LintError as exc:
        raise LintError(_relocate_text(str(exc), program, None)) from None
    return sorted(relocate(finding, program) for finding in findings)

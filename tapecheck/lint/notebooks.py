"""Jupyter notebooks: the code cells, in order, linted as one program.

IPython syntax that is not Python (`%magic`, `%%cell magic`, `!shell`,
`name?`) is turned into comments by overwriting its first character with `#`,
so every other line and column stays where it was. An indented one (the body of
`if 'google.colab' in sys.modules:`) becomes `pass#...` instead, overwriting its
first five characters: a comment alone would leave the block empty. Findings come back with the
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


def _placeholder(line: str) -> str:
    """An indented magic line as a statement that does nothing: `pass#` over its first five
    characters (the block it is the body of stays a block), the rest a comment."""
    indent = len(line) - len(line.lstrip())
    text = line[indent:]
    return line[:indent] + ("pass#" + text[5:] if len(text) > 5 else "pass")


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
            indented = not whole_cell and not continued and line[:1] in (" ", "\t")
            out.append(_placeholder(line) if indented else _neutralise(line))
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


# -- where a cell's line lies in the .ipynb file (SARIF, GitHub annotations) --------------
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
_JSON_WHITESPACE = re.compile(r"[ \t\r\n]*")
_JSON_PLAIN = re.compile(r'[^"{}\[\]]*')
_JSON_LITERAL = re.compile(r'[^,\]}\s]+')


class _Scanner:
    """Just enough of a JSON reader to find where each code cell's `source` strings are."""

    def __init__(self, text: str):
        self.text, self.pos = text, 0

    def peek(self) -> str:
        self.pos = _JSON_WHITESPACE.match(self.text, self.pos).end()
        return self.text[self.pos:self.pos + 1]

    def expect(self, char: str) -> None:
        if self.peek() != char:
            raise ValueError(f"expected {char!r} at offset {self.pos}")
        self.pos += 1

    def string(self) -> tuple[int, int]:
        self.peek()
        match = _JSON_STRING.match(self.text, self.pos)
        if match is None:
            raise ValueError(f"expected a string at offset {self.pos}")
        self.pos = match.end()
        return match.start(), match.end()

    def key(self) -> str:
        start, end = self.string()
        return json.loads(self.text[start:end])

    def skip(self) -> None:
        char = self.peek()
        if char == '"':
            self.string()
            return
        if char not in "{[":
            match = _JSON_LITERAL.match(self.text, self.pos)
            if match is None or not match.group(0):
                raise ValueError(f"unexpected {char!r} at offset {self.pos}")
            self.pos = match.end()
            return
        depth = 0
        while True:
            self.pos = _JSON_PLAIN.match(self.text, self.pos).end()
            char = self.text[self.pos:self.pos + 1]
            if not char:
                raise ValueError("unterminated JSON value")
            if char == '"':
                self.string()
                continue
            self.pos += 1
            depth += 1 if char in "{[" else -1
            if depth == 0:
                return

    def members(self):
        """Each key of an object, with the scanner at its value (the caller reads or skips it)."""
        self.expect("{")
        if self.peek() == "}":
            self.pos += 1
            return
        while True:
            key = self.key()
            self.expect(":")
            yield key
            if self.peek() == ",":
                self.pos += 1
                continue
            self.expect("}")
            return

    def elements(self):
        self.expect("[")
        if self.peek() == "]":
            self.pos += 1
            return
        while True:
            yield
            if self.peek() == ",":
                self.pos += 1
                continue
            self.expect("]")
            return


def _decoded_offsets(text: str, start: int, end: int) -> tuple[str, list[int]]:
    """A JSON string literal's value and, for each of its characters, its offset in `text`."""
    chars, offsets = [], []
    index = start + 1
    while index < end - 1:
        if text[index] != "\\":
            chars.append(text[index])
            offsets.append(index)
            index += 1
            continue
        kind = text[index + 1]
        if kind == "u":
            code = int(text[index + 2:index + 6], 16)
            width = 6
            if 0xD800 <= code < 0xDC00 and text[index + 6:index + 8] == "\\u":
                low = int(text[index + 8:index + 12], 16)
                if 0xDC00 <= low < 0xE000:
                    code, width = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00), 12
            chars.append(chr(code))
        else:
            chars.append(json.loads(f'"\\{kind}"'))
            width = 2
        offsets.append(index)
        index += width
    return "".join(chars), offsets


class NotebookPositions:
    """Where (cell, line, col) of a notebook's code lies in the `.ipynb` file itself (1-based),
    for formats whose consumers open the file as text (SARIF code scanning, GitHub annotations).
    Built from the file's JSON text, not from a re-serialisation, so it matches the file as saved."""

    def __init__(self, data: bytes | str):
        text = data.decode("utf-8-sig") if isinstance(data, bytes) else data
        self._line_starts = [0] + [match.end() for match in re.finditer(r"\r\n|\r|\n", text)]
        self._cells: dict[int, tuple[str, list[int], list[int]]] = {}
        scanner = _Scanner(text)
        for key in scanner.members():
            if key != "cells":
                scanner.skip()
                continue
            for number, _ in enumerate(scanner.elements(), start=1):
                if scanner.peek() != "{":
                    scanner.skip()
                    continue
                for cell_key in scanner.members():
                    if cell_key != "source":
                        scanner.skip()
                    elif scanner.peek() == "[":
                        values, offsets = [], []
                        for _ in scanner.elements():
                            value, where = _decoded_offsets(text, *scanner.string())
                            values.append(value)
                            offsets.extend(where)
                        self._add(number, "".join(values), offsets)
                    else:
                        self._add(number, *_decoded_offsets(text, *scanner.string()))

    def _add(self, cell: int, value: str, offsets: list[int]) -> None:
        starts = [0] + [match.end() for match in re.finditer(r"\r\n|\r|\n", value)]
        self._cells[cell] = (value, offsets, starts)

    def position(self, cell: int, line: int, col: int) -> tuple[int, int] | None:
        """(line, col) in the file of a character of a cell; None when the cell has no such line."""
        import bisect

        found = self._cells.get(cell)
        if found is None:
            return None
        value, offsets, starts = found
        if not 1 <= line <= len(starts) or not offsets:
            return None
        index = starts[line - 1] + max(col, 1) - 1
        next_start = starts[line] if line < len(starts) else len(value)
        index = min(index, max(next_start - 1, starts[line - 1]), len(offsets) - 1)
        offset = offsets[index]
        file_line = bisect.bisect_right(self._line_starts, offset)
        return file_line, offset - self._line_starts[file_line - 1] + 1


def notebook_positions(data: bytes | str) -> NotebookPositions | None:
    """The positions of a notebook's file, None when its JSON cannot be read that way."""
    try:
        return NotebookPositions(data)
    except (ValueError, IndexError, UnicodeDecodeError, RecursionError):
        return None

"""Print a lint run: `text`, `json`, `sarif` or `github`, and `--statistics`.

Each formatter turns an `Outcome` into one string, so formats are easy to test
and a format never mixes with another on stdout. `json` is imported by the formats
that write it, not by every run.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import click

from tapecheck._version import __version__
from tapecheck.findings import FileError, Finding
from tapecheck.lint.suppressions import UnusedSuppression
from tapecheck.rules import RULES, RULES_BY_CODE, rule_name

FORMATS = ("full", "concise", "json", "sarif", "github", "text")  # text: full, its old name
JSON_VERSION = 1  # bumped only when a field changes meaning or goes away
SARIF_SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
UNUSED_ID = "unused-suppression"


@dataclass
class Outcome:
    findings: list[Finding] = field(default_factory=list)
    errors: list[FileError] = field(default_factory=list)
    unused: list[UnusedSuppression] = field(default_factory=list)
    files_checked: int = 0
    fixed: int = 0  # findings removed by --fix
    unsafe_fixes: bool = False  # whether unsafe fixes count as available
    sources: dict = field(default_factory=dict)  # contents already in hand (stdin): path -> bytes
    fixed_findings: list[Finding] = field(default_factory=list)  # what --fix fixed (for --show-fixes)
    keras2: dict = field(default_factory=dict)  # path -> why the file is read as Keras 2

    def fixable(self, finding: Finding) -> bool:
        return finding.fix is not None and (finding.fix.safe or self.unsafe_fixes)


def sort_key(finding: Finding):
    return (finding.path, finding.cell or 0, finding.line, finding.col, finding.code, finding.message)


def plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def use_color(stream_is_tty: bool) -> bool:
    """Colors only on a terminal, and never when NO_COLOR is set (https://no-color.org)."""
    return stream_is_tty and not os.environ.get("NO_COLOR")


def relative_path(path: str) -> str:
    """The path from the working folder, with `/` (what GitHub's annotations and `git apply`
    read) when the file lies under it; otherwise the path as given."""
    if not os.path.isabs(path):
        return path.replace(os.sep, "/")
    try:
        relative = os.path.relpath(path)
    except ValueError:  # another drive (Windows)
        return path
    if relative == os.curdir or relative.split(os.sep, 1)[0] == os.pardir:
        return path
    return relative.replace(os.sep, "/")


# -- text -------------------------------------------------------------------------
CONTEXT_LINES = 2  # lines of source shown above and below a finding's line, as ruff shows
_NEWLINE = re.compile(r"\r\n|\r|\n")  # the line ends Python's tokenizer knows (not form feeds)
_WORD = re.compile(r"\w+(?:\.\w+)*")


class SourceLines:
    """The source lines findings point at, read once per file and only for `full` output.

    `sources` holds contents already in hand (standard input); other files are read.
    A notebook's lines are its code cells' lines, by (cell, line in cell).
    Nothing here imports libcst; a file that cannot be read or decoded has no lines.
    """

    def __init__(self, sources: dict[str, bytes] | None = None):
        self.sources = sources or {}
        self._files: dict[str, object] = {}

    def _load(self, path: str):
        if path in self._files:
            return self._files[path]
        data = self.sources.get(path)
        loaded = None
        try:
            if data is None:
                with open(path, "rb") as handle:
                    data = handle.read()
            if path.endswith(".ipynb"):
                from tapecheck.lint.notebooks import notebook_program

                program = notebook_program(data)
                cells: dict[int, list[str]] = {}
                for (cell, _), text in zip(program.line_map, _NEWLINE.split(program.source)):
                    cells.setdefault(cell, []).append(text)
                loaded = cells
            else:
                from tapecheck.lint.suppressions import decode

                loaded = {None: _NEWLINE.split(decode(data))}
        except (OSError, ValueError):  # unreadable, or no longer a notebook: the finding line alone
            loaded = None
        self._files[path] = loaded
        return loaded

    def lines(self, path: str, cell: int | None) -> list[str]:
        """The lines of the file (or of the notebook cell), index 0 is line 1; [] when unknown."""
        loaded = self._load(path)
        return (loaded or {}).get(cell, [])


def _display(text: str) -> str:
    return text.expandtabs(4)


def _width(text: str) -> int:
    """Columns the text takes on a terminal: wide (CJK) characters take two."""
    if text.isascii():
        return len(text)
    import unicodedata

    return sum(2 if unicodedata.east_asian_width(char) in "WF" else 1 for char in text)


def code_frame(lines: list[str], line: int, col: int, style=lambda value, **kw: value) -> list[str]:
    """ruff's `full` code frame: the finding's line between up to CONTEXT_LINES of context, with
    carets under the word at `col` (not followed by the code, which the heading line already
    names: a report holds each code once per finding). [] when the line is not in `lines`."""
    if not 1 <= line <= len(lines):
        return []
    first, last = max(1, line - CONTEXT_LINES), min(len(lines), line + CONTEXT_LINES)
    while first < line and not lines[first - 1].strip():
        first += 1
    while last > line and not lines[last - 1].strip():
        last -= 1
    gutter = len(str(last))
    bar = style("|", fg="blue", bold=True)
    empty = " " * gutter + " " + bar
    out = [empty]
    for number in range(first, last + 1):
        text = _display(lines[number - 1]).rstrip()
        out.append(f"{style(str(number).rjust(gutter), fg='blue', bold=True)} {bar} {text}".rstrip())
        if number == line:
            source = lines[number - 1]
            start = min(max(col - 1, 0), len(source))
            word = _WORD.match(source, start)
            length = max(_width(word.group(0)) if word else 1, 1)
            offset = _width(_display(source[:start]))
            out.append(f"{empty} {' ' * offset}{style('^' * length, fg='red', bold=True)}")
    out.append(empty)
    return out


def fixable_line(outcome: "Outcome") -> str | None:
    """ruff's closing line about fixes; None when no finding has a fix at all."""
    fixable = sum(outcome.fixable(f) for f in outcome.findings)
    hidden = sum(f.fix is not None and not outcome.fixable(f) for f in outcome.findings)
    more = ""
    if hidden:
        more = f"{hidden} hidden fix{'' if hidden == 1 else 'es'} can be enabled with the `--unsafe-fixes` option"
    if fixable:
        return f"[*] {fixable} fixable with the `--fix` option" + (f" ({more})." if more else ".")
    if hidden:
        return f"No fixes available ({more})."
    return None


def summary_line(outcome: "Outcome") -> str:
    summary = f"{plural(len(outcome.findings), 'finding')} in {plural(outcome.files_checked, 'file')}"
    if outcome.fixed:
        summary += f" ({outcome.fixed} fixed)"
    if outcome.unused:
        summary += f"; {plural(len(outcome.unused), 'unused suppression')}"
    if outcome.errors:
        summary += f"; {plural(len(outcome.errors), 'file')} could not be linted"
    return summary + "."


def _fix_preview(finding: Finding, lines: list[str], style) -> list[str]:
    """`--show-fixes`: what the fix would change, as ruff shows it: only the changed lines, with
    up to CONTEXT_LINES unchanged lines around each change, numbered before and after."""
    import difflib

    from tapecheck.lint.fixes import apply_edits

    fix = finding.fix
    kind = "Safe fix" if fix.safe else "Unsafe fix"
    out = [f"  {style('i', fg='cyan', bold=True)} {kind}: {fix.title}"]
    first = min(e.line for e in fix.edits)
    last = max(e.end_line for e in fix.edits)
    if not lines or last > len(lines):
        return out
    start = max(first - CONTEXT_LINES, 1)  # the window: the edited lines and their context
    before = lines[start - 1:min(last + CONTEXT_LINES, len(lines))]
    shifted = [type(e)(e.line - start + 1, e.col, e.end_line - start + 1, e.end_col, e.text) for e in fix.edits]
    try:
        after = apply_edits("".join(text + "\n" for text in before), shifted)
    except ValueError:
        return out
    after = after[:-1].split("\n") if after.endswith("\n") else after.split("\n")
    groups = difflib.SequenceMatcher(None, before, after, autojunk=False).get_grouped_opcodes(CONTEXT_LINES)
    width = len(str(start + max(len(before), len(after))))
    bar = style("|", fg="blue", bold=True)

    def row(old: int | None, new: int | None, sign: str, text: str, color: str | None) -> str:
        numbers = f"{'' if old is None else old + start:>{width}} {'' if new is None else new + start:>{width}}"
        body = f"{sign}{_display(text)}".rstrip()
        return f"  {style(numbers, fg='blue', bold=True)} {bar}{style(body, fg=color) if color else body}".rstrip()

    for number, group in enumerate(groups):
        if number:
            out.append(f"  {' ' * width} {' ' * width} {bar} ...")
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                out += [row(i, j, " ", before[i], None) for i, j in zip(range(i1, i2), range(j1, j2))]
                continue
            out += [row(i, None, "-", before[i], "red") for i in range(i1, i2)]
            out += [row(None, j, "+", after[j], "green") for j in range(j1, j2)]
    return out


def text(outcome: Outcome, color: bool = False, output_format: str = "full", quiet: bool = False,
         show_fixes: bool = False) -> str:
    """The report for a terminal: ruff's `full` (each finding with a code frame and its hint)
    or `concise` (one line per finding). `quiet`: the findings only, no summary."""

    def style(value: str, **kwargs) -> str:
        return click.style(value, **kwargs) if color else value

    full = output_format in ("full", "text")
    frames = SourceLines(outcome.sources) if full else None
    lines = [style(error.format(), fg="red") for error in outcome.errors]
    for finding in outcome.findings:
        mark = " " + style("[*]", fg="cyan") if outcome.fixable(finding) else ""
        line = f"{style(finding.location(), bold=True)}: {style(finding.code, fg='red', bold=True)}{mark} {finding.message}"
        if finding.count > 1:
            line += f" ({finding.count} times)"
        lines.append(line)
        if not full:
            continue
        source = frames.lines(finding.path, finding.cell)
        lines += code_frame(source, finding.line, finding.col, style)
        if finding.hint:
            lines.append(f"  = {style('help', bold=True)}: {finding.hint}")
        if show_fixes and finding.fix is not None:
            lines += [""] + _fix_preview(finding, source, style)
        lines.append("")
    lines += [style(unused.format(), fg="yellow") for unused in outcome.unused]
    if show_fixes and outcome.fixed_findings:
        lines += fixed_summary(outcome)
    if not quiet:
        closing = fixable_line(outcome)
        if closing:
            lines.append(closing)
        lines.append(summary_line(outcome))
    return "".join(line + "\n" for line in lines)


def fixed_summary(outcome: Outcome) -> list[str]:
    """`--fix --show-fixes`: what was fixed, per file and rule (ruff's enumeration)."""
    by_path: dict[str, Counter] = {}
    for finding in outcome.fixed_findings:
        by_path.setdefault(finding.path, Counter())[finding.code] += 1
    total = sum(sum(counts.values()) for counts in by_path.values())
    lines = [f"Fixed {plural(total, 'finding')}:"]
    for path in sorted(by_path):
        lines.append(f"- {path}:")
        for code, count in sorted(by_path[path].items()):
            rule = RULES_BY_CODE.get(code)
            lines.append(f"    {count} \u00d7 {code} ({rule.name if rule else ''})")
    return lines + [""]


# -- json ---------------------------------------------------------------------------
def _finding_json(finding: Finding, outcome: Outcome) -> dict:
    fix = None
    if finding.fix is not None:
        fix = {
            "title": finding.fix.title,
            "applicability": "safe" if finding.fix.safe else "unsafe",
            "edits": [
                {"line": e.line, "col": e.col, "end_line": e.end_line, "end_col": e.end_col, "text": e.text}
                for e in finding.fix.edits
            ],
        }
    return {
        "path": finding.path,
        "cell": finding.cell,
        "line": finding.line,
        "col": finding.col,
        "code": finding.code,
        "name": rule_name(finding.code),
        "message": finding.message,
        "hint": finding.hint,
        "origin": finding.origin,
        "count": finding.count,
        "details": finding.details,
        "fix": fix,
    }


def to_json(outcome: Outcome) -> str:
    import json

    document = {
        "version": JSON_VERSION,
        "tool": {"name": "tapecheck", "version": __version__},
        "findings": [_finding_json(f, outcome) for f in outcome.findings],
        "errors": [{"path": e.path, "message": e.message} for e in outcome.errors],
        "unused_suppressions": [u.to_dict() for u in outcome.unused],
        "keras2": [{"path": path, "reason": why} for path, why in sorted(outcome.keras2.items())],
        "summary": {
            "files_checked": outcome.files_checked,
            "findings": len(outcome.findings),
            "fixed": outcome.fixed,
            "errors": len(outcome.errors),
            "unused_suppressions": len(outcome.unused),
        },
    }
    return json.dumps(document, indent=2) + "\n"


# -- sarif ----------------------------------------------------------------------------
def _artifact(path: str) -> dict:
    """A URI relative to %SRCROOT% (the working folder) when the file is under it, else absolute
    (SARIF: an absolute URI has no uriBaseId)."""
    absolute = Path(os.path.abspath(path))
    try:
        return {"uri": absolute.relative_to(Path.cwd()).as_posix(), "uriBaseId": "%SRCROOT%"}
    except ValueError:
        return {"uri": absolute.as_uri()}


class FilePositions:
    """Positions as the file's own text has them: a notebook cell's (line, col) becomes the line
    and column of the `.ipynb` file where that character is written (see notebooks.py)."""

    def __init__(self, sources: dict[str, bytes] | None = None):
        self.sources = sources or {}
        self._notebooks: dict[str, object] = {}

    def locate(self, path: str, cell: int | None, line: int, col: int) -> tuple[int, int] | None:
        """(line, col) in the file; None for a notebook position that cannot be placed."""
        if cell is None:
            return line, col
        if path not in self._notebooks:
            from tapecheck.lint.notebooks import notebook_positions

            data = self.sources.get(path)
            if data is None:
                try:
                    with open(path, "rb") as handle:
                        data = handle.read()
                except OSError:
                    data = None
            self._notebooks[path] = notebook_positions(data) if data is not None else None
        positions = self._notebooks[path]
        return positions.position(cell, line, col) if positions is not None else None


def _location(path: str, line: int, col: int) -> dict:
    return {
        "physicalLocation": {
            "artifactLocation": _artifact(path),
            "region": {"startLine": max(line, 1), "startColumn": max(col, 1)},
        }
    }


def _sarif_rule(rule) -> dict:
    return {
        "id": rule.code,
        "name": rule.name,
        "shortDescription": {"text": rule.summary},
        "fullDescription": {"text": rule.summary},
        "help": {"text": rule.doc, "markdown": rule.doc},
        "defaultConfiguration": {"level": "error"},
        "properties": {"tags": ["tensorflow", "GradientTape"]},
    }


def to_sarif(outcome: Outcome) -> str:
    import json

    rules = [_sarif_rule(rule) for rule in RULES]
    index = {rule.code: position for position, rule in enumerate(RULES)}
    rules.append({
        "id": UNUSED_ID,
        "name": UNUSED_ID,
        "shortDescription": {"text": "a suppression comment that hides no finding"},
        "defaultConfiguration": {"level": "warning"},
    })
    results = []
    positions = FilePositions(outcome.sources)
    for finding in outcome.findings:
        message = finding.message if not finding.hint else f"{finding.message}. {finding.hint}"
        if finding.cell is not None:
            message = f"cell {finding.cell}, line {finding.line}: {message}"
        # code scanning opens the .ipynb as text: a notebook finding points at its line there
        line, col = positions.locate(finding.path, finding.cell, finding.line, finding.col) or (1, 1)
        result = {
            "ruleId": finding.code,
            "level": "error",
            "message": {"text": message},
            "locations": [_location(finding.path, line, col)],
        }
        if finding.code in index:
            result["ruleIndex"] = index[finding.code]
        if finding.cell is not None:
            result["properties"] = {"cell": finding.cell}
        results.append(result)
    for unused in outcome.unused:
        message = unused.format().split(": ", 1)[1]
        if unused.cell is not None:
            message = f"cell {unused.cell}, line {unused.line}: {message}"
        line, col = positions.locate(unused.path, unused.cell, unused.line, unused.col) or (1, 1)
        results.append({
            "ruleId": UNUSED_ID,
            "ruleIndex": len(rules) - 1,
            "level": "warning",
            "message": {"text": message},
            "locations": [_location(unused.path, line, col)],
        })
    notifications = [
        {"level": "error", "message": {"text": f"{error.path}: {error.message}"}, "locations": [_location(error.path, 1, 1)]}
        for error in outcome.errors
    ]
    document = {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {"driver": {"name": "tapecheck", "version": __version__, "rules": rules}},
                "originalUriBaseIds": {"%SRCROOT%": {"uri": Path.cwd().as_uri() + "/"}},
                "invocations": [{"executionSuccessful": not outcome.errors, "toolExecutionNotifications": notifications}],
                "results": results,
            }
        ],
    }
    return json.dumps(document, indent=2) + "\n"


# -- github -----------------------------------------------------------------------------
def _escape_data(value: str) -> str:
    return value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(value: str) -> str:
    return _escape_data(value).replace(":", "%3A").replace(",", "%2C")


def _annotation(kind: str, path: str, message: str, title: str, line: int | None = None, col: int | None = None,
                end: tuple[int, int] | None = None) -> str:
    props = [f"title={_escape_property(title)}", f"file={_escape_property(relative_path(path))}"]
    if line is not None:
        props += [f"line={line}", f"col={col}"]
        if end is not None:
            props += [f"endLine={end[0]}", f"endColumn={end[1]}"]
    return f"::{kind} {','.join(props)}::{_escape_data(message)}"


_ERROR_AT = re.compile(r"(?:at |)(?:cell (\d+), )?line (\d+)(?:, column (\d+))?")


def _word_end(source: SourceLines, path: str, cell: int | None, line: int, col: int) -> tuple[int, int]:
    """(line, column) in the cell or file just after the word at (line, col), ruff's end column
    (exclusive); the column after `col` when the line is not known."""
    lines = source.lines(path, cell)
    if 1 <= line <= len(lines):
        word = _WORD.match(lines[line - 1], max(col - 1, 0))
        if word:
            return line, col + len(word.group(0))
    return line, col + 1


def to_github(outcome: Outcome) -> str:
    """GitHub Actions workflow commands, as ruff writes them: one annotation per finding, error
    and unused suppression, at the file's line and column with the end of the flagged word,
    and the hint under the message. A file that could not be linted is annotated at the line
    its error names (a syntax error), on the file otherwise."""
    positions = FilePositions(outcome.sources)
    source = SourceLines(outcome.sources)

    def place(path: str, cell: int | None, line: int, col: int):
        start = positions.locate(path, cell, line, col)
        if start is None:
            return None, None, None
        end_line, end_col = _word_end(source, path, cell, line, col)
        end = positions.locate(path, cell, end_line, end_col - 1) if cell is not None else (end_line, end_col - 1)
        return start[0], start[1], (end[0], end[1] + 1) if end is not None else None

    lines = []
    for e in outcome.errors:
        at = _ERROR_AT.search(e.message) if "syntax error" in e.message else None
        line = col = end = None
        if at is not None:
            cell = int(at.group(1)) if at.group(1) else None
            if cell is None or e.path.endswith(".ipynb"):
                line, col, end = place(e.path, cell, int(at.group(2)), int(at.group(3) or 1))
        lines.append(_annotation("error", e.path, e.message, "tapecheck error", line, col, end))
    for f in outcome.findings:
        title = f"tapecheck ({f.code} {rule_name(f.code)})"
        # a notebook finding: at its line of the .ipynb file, the cell named in the message
        message = f.message if f.cell is None else f"cell {f.cell}, line {f.line}: {f.message}"
        if f.hint:
            message += f"\nhelp: {f.hint}"
        line, col, end = place(f.path, f.cell, f.line, f.col)
        lines.append(_annotation("error", f.path, message, title, line, col, end))
    for u in outcome.unused:
        message = u.format().split(": ", 1)[1]
        if u.cell is not None:
            message = f"cell {u.cell}, line {u.line}: {message}"
        line, col, end = place(u.path, u.cell, u.line, u.col)
        lines.append(_annotation("warning", u.path, message, "tapecheck (unused suppression)", line, col, end))
    return "".join(line + "\n" for line in lines)


# -- statistics ---------------------------------------------------------------------------
def statistics(outcome: Outcome, as_json: bool = False) -> str:
    """Findings counted per code, most frequent first (`--statistics`)."""
    counts = Counter(f.code for f in outcome.findings)
    fixable = Counter(f.code for f in outcome.findings if outcome.fixable(f))
    rows = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    if as_json:
        import json

        table = [
            {"code": code, "name": getattr(RULES_BY_CODE.get(code), "name", ""), "count": count, "fixable": fixable[code]}
            for code, count in rows
        ]
        return json.dumps(table, indent=2) + "\n"
    width = max((len(str(count)) for _, count in rows), default=1)
    lines = []
    for code, count in rows:
        rule = RULES_BY_CODE.get(code)
        mark = "[*]" if fixable[code] else "   "
        lines.append(f"{count:>{width}}  {code}  {mark} {rule.name if rule else ''}".rstrip())
    return "".join(line + "\n" for line in lines)


def write_atomically(path: str, data: bytes) -> None:
    """`--output-file`: the new report replaces the old one all at once, so a reader never sees
    half a report and a failed write leaves the old one. OSError on failure."""
    from tapecheck.lint.atomic import replace_file

    replace_file(path, data)


def render(outcome: Outcome, output_format: str, color: bool = False, quiet: bool = False,
           show_fixes: bool = False) -> str:
    if output_format == "json":
        return to_json(outcome)
    if output_format == "sarif":
        return to_sarif(outcome)
    if output_format == "github":
        return to_github(outcome)
    return text(outcome, color, output_format, quiet, show_fixes)

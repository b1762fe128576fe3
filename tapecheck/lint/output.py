"""Print a lint run: `text`, `json`, `sarif` or `github`, and `--statistics`.

Each formatter turns an `Outcome` into one string, so formats are easy to test
and a format never mixes with another on stdout. `json` is imported by the formats
that write it, not by every run.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import click

from tapecheck import __version__
from tapecheck.findings import FileError, Finding
from tapecheck.lint.suppressions import UnusedSuppression
from tapecheck.rules import RULES, RULES_BY_CODE

FORMATS = ("text", "json", "sarif", "github")
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

    def fixable(self, finding: Finding) -> bool:
        return finding.fix is not None and (finding.fix.safe or self.unsafe_fixes)


def sort_key(finding: Finding):
    return (finding.path, finding.cell or 0, finding.line, finding.col, finding.code, finding.message)


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def use_color(stream_is_tty: bool) -> bool:
    """Colors only on a terminal, and never when NO_COLOR is set (https://no-color.org)."""
    return stream_is_tty and not os.environ.get("NO_COLOR")


# -- text -------------------------------------------------------------------------
def text(outcome: Outcome, color: bool = False) -> str:
    def style(value: str, **kwargs) -> str:
        return click.style(value, **kwargs) if color else value

    lines = [style(error.format(), fg="red") for error in outcome.errors]
    for finding in outcome.findings:
        mark = " " + style("[*]", fg="cyan") if outcome.fixable(finding) else ""
        line = f"{style(finding.location(), bold=True)}: {style(finding.code, fg='red', bold=True)}{mark} {finding.message}"
        if finding.count > 1:
            line += f" ({finding.count} times)"
        lines.append(line)
    lines += [style(unused.format(), fg="yellow") for unused in outcome.unused]
    fixable = sum(outcome.fixable(f) for f in outcome.findings)
    hidden = sum(f.fix is not None and not outcome.fixable(f) for f in outcome.findings)
    if fixable or hidden:
        more = f" ({hidden} more with `--unsafe-fixes`)" if hidden else ""
        lines.append(f"[*] {fixable} fixable with `--fix`{more}.")
    summary = f"{_plural(len(outcome.findings), 'finding')} in {_plural(outcome.files_checked, 'file')}"
    if outcome.fixed:
        summary += f" ({outcome.fixed} fixed)"
    if outcome.unused:
        summary += f"; {_plural(len(outcome.unused), 'unused suppression')}"
    if outcome.errors:
        summary += f"; {_plural(len(outcome.errors), 'file')} could not be linted"
    lines.append(summary + ".")
    return "\n".join(lines) + "\n"


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
        "name": finding.name,
        "message": finding.message,
        "hint": finding.hint,
        "origin": finding.origin,
        "count": finding.count,
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
    for finding in outcome.findings:
        message = finding.message if not finding.hint else f"{finding.message}. {finding.hint}"
        if finding.cell is not None:
            message = f"cell {finding.cell}, line {finding.line}: {message}"
        result = {
            "ruleId": finding.code,
            "level": "error",
            "message": {"text": message},
            "locations": [_location(finding.path, finding.line, finding.col)],
        }
        if finding.code in index:
            result["ruleIndex"] = index[finding.code]
        if finding.cell is not None:
            result["properties"] = {"cell": finding.cell}
        results.append(result)
    for unused in outcome.unused:
        results.append({
            "ruleId": UNUSED_ID,
            "ruleIndex": len(rules) - 1,
            "level": "warning",
            "message": {"text": unused.format().split(": ", 1)[1]},
            "locations": [_location(unused.path, unused.line, unused.col)],
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


def _annotation(kind: str, path: str, message: str, title: str, line: int | None = None, col: int | None = None) -> str:
    props = [f"title={_escape_property(title)}", f"file={_escape_property(path)}"]
    if line is not None:
        props += [f"line={line}", f"col={col}"]
    return f"::{kind} {','.join(props)}::{_escape_data(message)}"


def to_github(outcome: Outcome) -> str:
    """GitHub Actions workflow commands: one annotation per finding, error and unused suppression."""
    lines = [_annotation("error", e.path, e.message, "tapecheck error") for e in outcome.errors]
    for f in outcome.findings:
        title = f"tapecheck ({f.code} {f.name})"
        if f.cell is None:
            lines.append(_annotation("error", f.path, f.message, title, f.line, f.col))
        else:  # a cell line is not a line of the .ipynb file: annotate the file, say where
            lines.append(_annotation("error", f.path, f"cell {f.cell}, line {f.line}: {f.message}", title))
    for u in outcome.unused:
        if u.cell is None:
            lines.append(_annotation("warning", u.path, u.format().split(": ", 1)[1], "tapecheck (unused suppression)", u.line, u.col))
        else:
            lines.append(_annotation("warning", u.path, u.format(), "tapecheck (unused suppression)"))
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


def render(outcome: Outcome, output_format: str, color: bool = False) -> str:
    if output_format == "json":
        return to_json(outcome)
    if output_format == "sarif":
        return to_sarif(outcome)
    if output_format == "github":
        return to_github(outcome)
    return text(outcome, color)

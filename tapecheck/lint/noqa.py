"""`--add-noqa`: a `# noqa: CODE` comment on every line with a finding, as ruff adds them.

The comment goes at the end of the flagged line (the line a suppression must be on),
merged into a `# noqa: ...` already there, or after another comment on that line. A
line that ends inside a string, or with a backslash continuation, cannot take a comment
without changing the code: it is skipped and named. The new text must still parse
wherever the old did, and every added comment must suppress what it was added for, or
the file is left untouched; files are replaced atomically with their encoding, BOM,
line endings and mode kept.
"""

from __future__ import annotations

import io
import re
import tokenize
from collections.abc import Sequence

from tapecheck.findings import Finding

_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)?")
_NOQA_CODES = re.compile(r"(#\s*noqa:\s*[A-Za-z]+[0-9]+(?:[\s,]+[A-Za-z]+[0-9]+)*)", re.I)
_BARE_NOQA = re.compile(r"#\s*noqa(?!:)\b", re.I)


class NoqaError(Exception):
    """A file that was not changed; the message says why."""


def _decode(data: bytes) -> tuple[str, str]:
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        return data.decode(encoding), encoding
    except (SyntaxError, LookupError, UnicodeDecodeError) as exc:
        raise NoqaError(f"not changed: cannot decode ({exc})") from None


def _parses(text: str) -> bool:
    import ast
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


def _blocked_lines(text: str) -> tuple[dict[int, str], dict[int, tuple[int, str]]]:
    """(lines that cannot take a comment -> why, line -> (0-based col, text) of its comment)."""
    blocked: dict[int, str] = {}
    comments: dict[int, tuple[int, str]] = {}
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text, newline="").readline))
    except (tokenize.TokenError, SyntaxError) as exc:
        raise NoqaError(f"not changed: cannot tokenize ({exc})") from None
    ends_logical: set[int] = set()
    for token in tokens:
        if token.type == tokenize.COMMENT:
            comments[token.start[0]] = (token.start[1], token.string)
        elif token.type in (tokenize.NEWLINE, tokenize.NL):
            ends_logical.add(token.start[0])
        if token.end[0] > token.start[0] and token.type not in (tokenize.NEWLINE, tokenize.NL, tokenize.DEDENT):
            for line in range(token.start[0], token.end[0]):  # a string running on past these lines
                blocked.setdefault(line, "the line ends inside a string")
    for number, line in enumerate(_LINE.findall(text), start=1):
        if number not in blocked and line.rstrip("\r\n").endswith("\\") and number not in comments:
            if number not in ends_logical:
                blocked[number] = "the line ends with a backslash continuation"
    return blocked, comments


def add_noqa(path: str, findings: Sequence[Finding]) -> tuple[int, list[tuple[int, str]]]:
    """Add the comments to one file; (comments added or extended, [(line, why not)])."""
    from tapecheck.lint.fixes import FixError, atomic_write
    from tapecheck.lint.suppressions import scan

    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        raise NoqaError(f"cannot read: {exc.strerror or exc}") from None
    text, encoding = _decode(data)
    codes_by_line: dict[int, set[str]] = {}
    for finding in findings:
        codes_by_line.setdefault(finding.line, set()).add(finding.code)
    blocked, comments = _blocked_lines(text)
    lines = _LINE.findall(text)
    if lines and lines[-1] == "":
        lines.pop()
    added, skipped = 0, []
    for number, codes in sorted(codes_by_line.items()):
        if not 1 <= number <= len(lines):
            continue
        if number in blocked:
            skipped.append((number, blocked[number]))
            continue
        line = lines[number - 1]
        body = line.rstrip("\r\n")
        ending = line[len(body):]
        wanted = ", ".join(sorted(codes))
        comment = comments.get(number)
        if comment is not None:
            col, comment_text = comment
            if _BARE_NOQA.search(comment_text) and not _NOQA_CODES.search(comment_text):
                continue  # a bare `# noqa` already hides everything on the line
            existing = _NOQA_CODES.search(comment_text)
            if existing:
                merged = f"{existing.group(1)}, {wanted}"
                new_comment = comment_text[:existing.start()] + merged + comment_text[existing.end():]
            else:
                new_comment = f"{comment_text.rstrip()}  # noqa: {wanted}"
            body = body[:col] + new_comment + body[col + len(comment_text):]
        else:
            body = f"{body.rstrip()}  # noqa: {wanted}"
        lines[number - 1] = body + ending
        added += 1
    if not added:
        return 0, skipped
    new_text = "".join(lines)
    if _parses(text) and not _parses(new_text):
        raise NoqaError("not changed: the comments would break the file (please report it)")
    hidden = {(s.line, code) for s in scan(new_text, path) for code in (s.codes or ("*",))}
    for number, codes in codes_by_line.items():
        if number in blocked or not 1 <= number <= len(lines):
            continue
        for code in codes:
            if (number, code) not in hidden and (number, "*") not in hidden:
                raise NoqaError(f"not changed: a comment at line {number} would not suppress {code} (please report it)")
    try:
        atomic_write(path, new_text.encode(encoding))
    except FixError as exc:
        raise NoqaError(str(exc)) from None
    return added, skipped

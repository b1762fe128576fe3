"""The fix loop: apply one fix at a time, lint the result again, keep the fix only when it helps.

`fix_source` works on a file's bytes and writes nothing: each pass takes the first fix left
(safe ones, or unsafe ones too when asked), lints the fixed text with the same rules and
keeps it only if the text still parses, loses a finding of that code and gains none of
another. Above the engine: it calls the engine, the engine never calls it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tapecheck.findings import Finding
from tapecheck.lint.engine import LintError, lint_python
from tapecheck.lint.fixes import MAX_PASSES, FixError, SourceText, apply_edits, atomic_write  # noqa: F401 (the CLI uses FixError, atomic_write)
from tapecheck.rules import RULES, Rule


@dataclass
class FixOutcome:
    path: str
    original: bytes
    fixed: bytes
    fixed_count: int
    remaining: list[Finding]

    @property
    def changed(self) -> bool:
        return self.fixed != self.original

    def diff(self, name: str | None = None) -> str:
        """A unified diff with `a/NAME` and `b/NAME` headers (NAME: the path by default), as
        `git diff` writes them, so `git apply` takes it."""
        import difflib

        before = SourceText.from_bytes(self.original)
        after = SourceText.from_bytes(self.fixed)
        lines = difflib.unified_diff(
            before.text.splitlines(keepends=True), after.text.splitlines(keepends=True),
            fromfile=f"a/{name or self.path}", tofile=f"b/{name or self.path}",
        )
        return "".join(line if line.endswith(("\n", "\r")) else line + "\n\\ No newline at end of file\n" for line in lines)


def _lint(text: str, source: SourceText, path: str, keep: Callable[[Finding, str], bool], rules: Sequence[Rule]) -> list[Finding]:
    return [f for f in lint_python(source.encode(text), path, rules) if keep(f, text)]


def _improves(before: list[Finding], after: list[Finding], code: str) -> bool:
    old, new = Counter(f.code for f in before), Counter(f.code for f in after)
    return new[code] < old[code] and all(new[c] <= old[c] for c in new if c != code)


def fix_source(
    data: bytes,
    path: str,
    keep: Callable[[Finding, str], bool] = lambda finding, text: True,
    unsafe: bool = False,
    rules: Sequence[Rule] = RULES,
) -> FixOutcome:
    """Apply every applicable fix to a file's contents; nothing is written here.

    `keep(finding, text)` says whether a finding counts (configuration and
    suppressions); a fix is kept only if the result parses, loses one finding
    of its code and gains none of another.
    """
    source = SourceText.from_bytes(data)
    text = source.text
    findings = _lint(text, source, path, keep, rules)
    start_count = len(findings)
    rejected: set[tuple] = set()
    for _ in range(MAX_PASSES):
        candidates = [
            f for f in findings  # lint_python attached their fixes
            if f.fix is not None and (f.fix.safe or unsafe) and (f.code, f.fix.edits) not in rejected
        ]
        if not candidates:
            break
        finding = candidates[0]
        try:
            new_text = apply_edits(text, finding.fix.edits, source.newline)
            after = _lint(new_text, source, path, keep, rules)
        except (ValueError, LintError, UnicodeEncodeError):
            after = None
        if after is None or new_text == text or not _improves(findings, after, finding.code):
            rejected.add((finding.code, finding.fix.edits))
            continue
        text, findings = new_text, after
    fixed = source.encode(text) if text != source.text else data
    return FixOutcome(path, data, fixed, start_count - len(findings), findings)

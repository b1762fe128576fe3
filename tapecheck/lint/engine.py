"""Lint source text and files: read, screen, parse once, extract facts, run every rule.

Bad input never raises out of here: each file that cannot be linted becomes a
`FileError` naming the problem, and the other files go on.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from tapecheck.findings import FileError, Finding
from tapecheck.lint.source import (  # noqa: F401 (MAX_FILE_BYTES, parse: also the engine's public names)
    MAX_FILE_BYTES, LintError, facts_of, no_cyclic_collection, parse, read_source, syntax_problem,
)
from tapecheck.rules import RULES, Rule, one_cause_one_finding

@dataclass
class Report:
    findings: list[Finding] = field(default_factory=list)
    errors: list[FileError] = field(default_factory=list)
    files_checked: int = 0

    def extend(self, other: "Report") -> None:
        self.findings.extend(other.findings)
        self.errors.extend(other.errors)
        self.files_checked += other.files_checked


@functools.lru_cache(maxsize=None)
def rule_screen(rule: Rule):
    """The rule's byte-level test: `screen(source)` if it has one, else any of its TRIGGERS occurs.

    Either way it must be exact in one direction: False only for a file the rule cannot fire on.
    """
    custom = getattr(rule.module, "screen", None)
    if custom is not None:
        return custom
    needles = tuple(getattr(rule.module, "TRIGGERS", ()))
    return lambda source: any(needle in source for needle in needles)


def may_fire(source: bytes, rules: Sequence[Rule]) -> bool:
    """The cheap screen: skip parsing files that mention nothing any rule looks at."""
    return any(rule_screen(rule)(source) for rule in rules)


def lint_source(
    source: bytes | str, path: str = "<stdin>", rules: Sequence[Rule] = RULES, *, screened: bool = False
) -> list[Finding]:
    """Findings for one file's source, sorted by position. Raises LintError on bad input.

    A path ending in `.ipynb` is read as a Jupyter notebook (its code cells). `screened`: the
    caller already ran the byte screen on these bytes and it let them through.
    """
    if path.endswith(".ipynb"):
        return lint_notebook(source, path, rules)
    return lint_python(source, path, rules, screen=not screened)


def lint_notebook(data: bytes | str, path: str, rules) -> list[Finding]:
    """Findings for a notebook's contents. Raises LintError for a broken notebook."""
    from tapecheck.lint.notebooks import NotebookError, _relocate_text, notebook_program, relocate

    try:
        program = notebook_program(data)
    except NotebookError as exc:
        raise LintError(str(exc)) from None
    source = program.source.encode("utf-8")
    try:
        findings = lint_python(source, path, rules)
        if not findings and program.source:
            # Screened out: Python's parser still says whether the cells are valid Python.
            problem = None if may_fire(source, rules) else syntax_problem(source)
            if problem is not None:
                raise LintError(problem)
    except LintError as exc:
        raise LintError(_relocate_text(str(exc), program, None)) from None
    return sorted(relocate(finding, program) for finding in findings)


def lint_python(
    source: bytes | str, path: str = "<stdin>", rules: Sequence[Rule] = RULES, *, screen: bool = True,
    trees=None,
) -> list[Finding]:
    """Findings for Python source, sorted by position. Raises LintError on bad input.

    `screen=False` parses even a file no rule's screen admits (tests prove the screen exact).
    `trees`: the language server's parsed runs of the buffer's last version (`parts.Runs`)."""
    if isinstance(source, str):
        source = source.encode("utf-8", "surrogatepass")  # lone surrogates: "not valid utf-8", not a crash
    if screen and not may_fire(source, rules):
        return []
    with no_cyclic_collection():
        return _lint_parsed(source, path, rules, trees)


@functools.lru_cache(maxsize=8)
def _codes(rules: tuple[Rule, ...]) -> tuple[frozenset, frozenset]:
    """(the codes of the rules, those of the fixable ones): worked out once per selection, not per file."""
    return frozenset(rule.code for rule in rules), frozenset(rule.code for rule in rules if rule.fixable)


def _lint_parsed(source: bytes, path: str, rules: Sequence[Rule], trees=None) -> list[Finding]:
    selected, fixable = _codes(tuple(rules))
    kept: list | None = [] if fixable else None  # the tree and its positions, for the fixers
    facts = facts_of(source, path, kept, trees)
    findings: set[Finding] = set()
    try:
        for rule in rules:
            if rule.check is None:
                continue
            try:
                findings.update(rule.check(facts))
            except RecursionError:
                raise LintError(f"code nested too deeply for {rule.code} to analyse") from None
            except Exception as exc:  # a bug in one rule must not stop the run over every other file
                raise LintError(
                    f"internal error in {rule.code} ({type(exc).__name__}: {exc}); please report it with this file"
                ) from exc
    finally:
        if facts.model is not None:  # without its cycles, the model and the facts go with the file
            facts.model.close()
            facts.model = None
    found = one_cause_one_finding(sorted(findings), selected)
    if any(finding.code in fixable for finding in found):
        # Fixes are worked out here, in the linting pass (and its worker process), so they
        # are cached with the findings: a warm run never parses the file again to show them.
        from tapecheck.lint.fixes import attach_fixes

        # The lint's own tree, positions and facts when the file was parsed whole: the same
        # tree, ranges and facts a second parse of the text would give (tests/test_fixes.py).
        parsed = (*kept[0], facts) if kept else None
        # Parsed in runs the server keeps (`trees`): the fixers look at those runs, not a new parse.
        found = attach_fixes(source, path, found, parsed, facts, None if kept else trees)
        if facts.model is not None:  # a fixer asked the model again
            facts.model.close()
            facts.model = None
    return found


def lint_file(path: str, rules: Sequence[Rule] = RULES) -> Report:
    report = Report(files_checked=1)
    try:
        report.findings = lint_source(read_source(path), path, rules)
    except LintError as exc:
        report.errors.append(FileError(path, str(exc)))
    return report

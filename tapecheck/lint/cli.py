"""`tapecheck lint`, `tapecheck rules` and `tapecheck rule CODE`."""

from __future__ import annotations

import atexit
import gc
import sys

import click

from tapecheck.rules import RULES, get_rule


class _Suppressed:
    """`keep(finding, text)` for the fixer: enabled by the configuration and not suppressed in `text`."""

    def __init__(self, settings, path: str):
        self.settings, self.path = settings, path
        self._text: str | None = None
        self._lines: set = set()

    def __call__(self, finding, text: str) -> bool:
        from tapecheck.lint.suppressions import scan

        if not self.settings.enabled(finding.code, self.path):
            return False
        if text is not self._text:
            self._text = text
            self._lines = {(s.line, code) for s in scan(text, self.path) for code in (s.codes or ("*",))}
        return (finding.line, finding.code) not in self._lines and (finding.line, "*") not in self._lines


def _skip_the_last_collections() -> None:
    """At exit, freeze the collector's objects instead of letting it walk them again.

    Python's finalization runs full collections over everything still alive, libcst's
    ~28,000 module-level objects (classes, dataclass-generated functions) included, and
    tears their cycles down one by one: ~25 ms of a small run, all spent after the
    output is written. `gc.freeze()` as an exit handler (those run before the final
    collections) leaves them to the operating system. Nothing the linter leaves
    alive needs a finalizer (files are closed by `with`, worker pools shut down by
    `with`); registered from `lint` only, never for the TensorFlow commands, and it
    does nothing until the process exits, so a caller's collector is untouched.
    """
    atexit.unregister(gc.freeze)  # once per process, however many times lint runs in it
    atexit.register(gc.freeze)


@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--stdin-filename", default=None, help="The file name to report when reading source from `-`.")
@click.option("--config", "config_file", type=click.Path(dir_okay=False), default=None,
              help="Use this pyproject.toml's [tool.tapecheck] for every file (no search).")
@click.option("--select", default=None, metavar="CODES", help="Comma-separated codes or prefixes to check (replaces the configured select and ignore).")
@click.option("--ignore", default=None, metavar="CODES", help="Comma-separated codes or prefixes not to check (added to the configured ignore).")
@click.option("--output-format", type=click.Choice(["text", "json", "sarif", "github"]), default="text", show_default=True,
              help="text (colors on a terminal unless NO_COLOR is set), json, sarif (2.1.0) or github (workflow annotations).")
@click.option("--statistics", is_flag=True, help="Count findings per rule instead of listing them.")
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when there are findings.")
@click.option("--fix", is_flag=True, help="Apply the safe fixes, in place.")
@click.option("--diff", is_flag=True, help="Print the fixes as a diff; write nothing.")
@click.option("--unsafe-fixes", is_flag=True, help="Also apply (or show) fixes that may change what the code does.")
@click.option("--report-unused-suppressions", is_flag=True, help="Report `# noqa: TAP...` / `# tapecheck: ignore[...]` comments that hide nothing.")
@click.option("--force-exclude", is_flag=True, help="Apply `exclude` to files named on the command line too (for pre-commit).")
@click.option("--no-cache", is_flag=True, help="Neither read nor write .tapecheck_cache (results of unchanged files).")
@click.option("--jobs", "-j", type=click.IntRange(min=0), default=0, metavar="N",
              help="Processes to lint with; 0 (default) picks by the amount of work, 1 stays in one process.")
def lint(paths, stdin_filename, config_file, select, ignore, output_format, statistics, exit_zero, fix, diff,
         unsafe_fixes, report_unused_suppressions, force_exclude, no_cache, jobs):
    """Lint PATHS (files or folders; `-` reads standard input) for GradientTape pitfalls.

    Exit status: 0 clean, 1 findings or unreadable files, 2 usage or configuration error.
    """
    from tapecheck.lint.config import ConfigError

    _skip_the_last_collections()
    if (fix or diff) and "-" in paths:
        raise click.UsageError("--fix and --diff rewrite files; they do not apply to standard input")
    try:
        status = _run(paths, stdin_filename, config_file, select, ignore, output_format, statistics, fix, diff,
                      unsafe_fixes, report_unused_suppressions, force_exclude, no_cache, jobs)
    except ConfigError as exc:
        click.echo(f"tapecheck: error: {exc}", err=True)
        sys.exit(2)
    sys.exit(0 if exit_zero else status)


def _run(paths, stdin_filename, config_file, select, ignore, output_format, statistics, fix, diff,
         unsafe_fixes, report_unused_suppressions, force_exclude, no_cache=False, jobs=0) -> int:
    from tapecheck.findings import FileError
    from tapecheck.lint.config import Overrides, Settings
    from tapecheck.lint.engine import LintError, Report, lint_paths, lint_source
    from tapecheck.lint.files import discover
    from tapecheck.lint.output import Outcome, render, sort_key, use_color
    from tapecheck.lint.output import statistics as statistics_table
    from tapecheck.lint.suppressions import split

    settings = Settings(config_file, Overrides.from_flags(select, ignore))
    report = Report()
    sources: dict[str, bytes] = {}
    if "-" in paths:
        name = stdin_filename or "<stdin>"
        from tapecheck.lint.engine import MAX_FILE_BYTES

        sources[name] = sys.stdin.buffer.read(MAX_FILE_BYTES + 1)  # the limit files have, not all of memory
        report.files_checked += 1
        try:
            if len(sources[name]) > MAX_FILE_BYTES:
                sources[name] = b""
                raise LintError(f"input too large to lint (over {MAX_FILE_BYTES // 2**20} MiB)")
            report.findings.extend(lint_source(sources[name], name, settings.rules_for([name])))
        except LintError as exc:
            report.errors.append(FileError(name, str(exc)))
    files, missing = discover([p for p in paths if p != "-"], settings.excluded, force_exclude)
    report.errors.extend(missing)
    if files:
        # Deselected rules never run: their screens do not make files parse, their index is not built.
        report.extend(lint_paths(files, settings.rules_for(files), jobs=jobs or None, cache=not no_cache))

    findings = [f for f in report.findings if settings.enabled(f.code, f.path)]
    linted = list(sources) + files
    suppressed = split(findings, sources, linted if report_unused_suppressions else (), settings.enabled)
    findings = suppressed.kept
    outcome = Outcome(errors=list(report.errors), unused=suppressed.unused,
                      files_checked=report.files_checked, unsafe_fixes=unsafe_fixes)

    by_path: dict[str, list] = {}
    for finding in findings:
        by_path.setdefault(finding.path, []).append(finding)
    diffs = []
    if fix or diff:  # findings come with their fixes (engine, cache): only rewriting needs the fixers here
        from tapecheck.lint import fixes as fixing
    for path, found in by_path.items():
        if not (fix or diff) or not any(f.fix is not None for f in found):
            outcome.findings.extend(found)
            continue
        data = sources.get(path)
        if data is None:
            try:
                with open(path, "rb") as handle:
                    data = handle.read()
            except OSError as exc:
                outcome.errors.append(FileError(path, f"cannot read: {exc.strerror or exc}"))
                outcome.findings.extend(found)
                continue
        try:
            result = fixing.fix_source(data, path, _Suppressed(settings, path), unsafe_fixes)
        except (LintError, SyntaxError, UnicodeDecodeError, LookupError) as exc:  # changed since it was linted
            outcome.errors.append(FileError(path, f"not fixed: {exc}"))
            outcome.findings.extend(found)
            continue
        if diff:
            if result.changed:
                diffs.append(result.diff())
            outcome.findings.extend(found)
            continue
        if result.changed:
            try:
                fixing.atomic_write(path, result.fixed)
            except fixing.FixError as exc:
                outcome.errors.append(FileError(path, str(exc)))
                outcome.findings.extend(found)
                continue
        outcome.fixed += result.fixed_count
        outcome.findings.extend(result.remaining)
    outcome.findings.sort(key=sort_key)
    outcome.errors.sort()

    if diff:
        click.echo("".join(diffs), nl=False)
        for error in outcome.errors:
            click.echo(error.format(), err=True)
        would = sum(1 for _ in diffs)
        click.echo(f"Would fix {would} file{'' if would == 1 else 's'}." if would else "No fixes available.", err=True)
        return 1 if diffs or outcome.errors else 0
    if statistics:
        for error in outcome.errors:
            click.echo(error.format(), err=True)
        click.echo(statistics_table(outcome, as_json=output_format == "json"), nl=False)
    else:
        color = output_format == "text" and use_color(sys.stdout.isatty())
        click.echo(render(outcome, output_format, color), nl=False, color=color)
    return 1 if outcome.findings or outcome.errors or outcome.unused else 0


@click.command()
def rules():
    """List every rule: code, name, where it is checked (lint, probe, fix) and what it flags."""
    rows = [("CODE", "NAME", "CHECKED BY", "FLAGS")]
    for rule in RULES:
        where = ", ".join(w for w, on in (("lint", rule.check is not None), ("probe", rule.in_probe), ("fix", rule.fixable)) if on)
        rows.append((rule.code, rule.name, where, rule.summary))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    for row in rows:
        click.echo("  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[3])


@click.command()
@click.argument("code")
def rule(code):
    """Print the documentation of one rule (by code or name)."""
    found = get_rule(code)
    if found is None:
        raise click.BadParameter(f"no rule {code!r}; `tapecheck rules` lists them", param_hint="CODE")
    click.echo(found.doc, nl=False)

"""`tapecheck lint`, `tapecheck rules` and `tapecheck rule CODE`."""

from __future__ import annotations

import atexit
import gc
import sys

import click

from tapecheck.rules import RULES, get_rule


class _Suppressed:
    """`keep(finding, text)` for the fixer: enabled by the configuration and not suppressed in `text`."""

    def __init__(self, settings, path: str, keras: str = "3"):
        self.settings, self.path, self.keras = settings, path, keras
        self._text: str | None = None
        self._lines: set = set()

    def __call__(self, finding, text: str) -> bool:
        from tapecheck.lint.config import for_keras
        from tapecheck.lint.suppressions import scan

        if not self.settings.enabled(finding.code, self.path) or for_keras(finding, self.keras) is None:
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


FORMAT_CHOICES = ["full", "concise", "json", "sarif", "github", "text"]


@click.command()
@click.argument("paths", nargs=-1, type=click.Path())
@click.option("--stdin-filename", default=None, help="The file name to report when reading source from `-`.")
@click.option("--config", "config_file", type=click.Path(dir_okay=False), default=None,
              help="Use this pyproject.toml's [tool.tapecheck] for every file (no search).")
@click.option("--select", multiple=True, metavar="CODES", help="Comma-separated codes or prefixes to check (replaces the configured select, extend-select and ignore); repeats add up.")
@click.option("--extend-select", multiple=True, metavar="CODES", help="Comma-separated codes or prefixes to check on top of the selection; repeats add up.")
@click.option("--ignore", multiple=True, metavar="CODES", help="Comma-separated codes or prefixes not to check (added to the configured ignore); repeats add up.")
@click.option("--output-format", type=click.Choice(FORMAT_CHOICES), default="full", show_default=True,
              help="full (code frame and hint; colors on a terminal unless NO_COLOR is set; `text` is its old name), "
                   "concise (one line per finding), json, sarif (2.1.0) or github (workflow annotations).")
@click.option("--output-file", "-o", type=click.Path(dir_okay=False), default=None,
              help="Write the report to this file (replaced atomically) instead of standard output.")
@click.option("--quiet", "-q", is_flag=True, help="Print the findings only: no summary lines.")
@click.option("--statistics", is_flag=True, help="Count findings per rule instead of listing them.")
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when there are findings.")
@click.option("--fix", is_flag=True, help="Apply the safe fixes, in place (on `-`: the fixed source goes to standard output).")
@click.option("--diff", is_flag=True, help="Print the fixes as a diff; write nothing.")
@click.option("--unsafe-fixes", is_flag=True, help="Also apply (or show) fixes that may change what the code does.")
@click.option("--show-fixes", is_flag=True, help="Show what each fix would change; with --fix, list what was fixed.")
@click.option("--add-noqa", is_flag=True, help="Add `# noqa: CODE` to every line with a finding (Python files, in place).")
@click.option("--report-unused-suppressions", is_flag=True, help="Report `# noqa: TAP...` / `# tapecheck: ignore[...]` comments that hide nothing.")
@click.option("--force-exclude", is_flag=True, help="Apply `exclude` to files named on the command line too (for pre-commit).")
@click.option("--file-time-budget", type=click.FloatRange(min=0), default=None, metavar="SECONDS",
              help="Stop analysing a file after this many seconds and report it (default 30; 0: no limit; config: file-time-budget).")
@click.option("--no-cache", is_flag=True, help="Neither read nor write .tapecheck_cache (results of unchanged files).")
@click.option("--jobs", "-j", type=click.IntRange(min=0), default=0, metavar="N",
              help="Processes to lint with; 0 (default) picks by the amount of work, 1 stays in one process.")
def lint(paths, exit_zero, **options):
    """Lint PATHS (files or folders, default `.`; `-` reads standard input) for GradientTape pitfalls.

    Exit status: 0 clean, 1 findings or unreadable files, 2 usage or configuration error.
    """
    from types import SimpleNamespace

    from tapecheck.lint.config import ConfigError

    _skip_the_last_collections()
    paths = paths or (".",)
    for name in ("select", "extend_select", "ignore"):  # as ruff: `--select A --select B` is `--select A,B`
        options[name] = ",".join(options[name]) if options[name] else None
    options = SimpleNamespace(**options)
    if options.add_noqa and (options.fix or options.diff):
        raise click.UsageError("--add-noqa cannot be combined with --fix or --diff")
    if options.add_noqa and "-" in paths:
        raise click.UsageError("--add-noqa rewrites files; it does not apply to standard input")
    try:
        status = _run(paths, options)
    except ConfigError as exc:
        click.echo(f"tapecheck: error: {exc}", err=True)
        sys.exit(2)
    sys.exit(0 if exit_zero else status)


class _Printer:
    """Where the report goes: standard output, standard error (when stdout carries fixed
    source), or a file written atomically at the end."""

    def __init__(self, output_file: str | None, report_to_stderr: bool):
        self.output_file = output_file
        self.to_stderr = report_to_stderr and output_file is None
        self.parts: list[str] = []

    @property
    def is_terminal(self) -> bool:
        stream = sys.stderr if self.to_stderr else sys.stdout
        return self.output_file is None and stream.isatty()

    def report(self, text: str, color: bool = False) -> None:
        if self.output_file is not None:
            self.parts.append(text)
        else:
            click.echo(text, nl=False, color=color, err=self.to_stderr)

    def note(self, text: str) -> None:
        """A message about the run, not the report: standard error, or the file."""
        if self.output_file is not None:
            self.parts.append(text + "\n")
        else:
            click.echo(text, err=True)

    def close(self) -> None:
        if self.output_file is None:
            return
        from tapecheck.lint.output import write_atomically

        import os

        folder = os.path.dirname(self.output_file)
        try:  # as ruff: the folders the report goes into are made when missing
            if folder:
                os.makedirs(folder, exist_ok=True)
        except OSError as exc:
            error = click.FileError(self.output_file, hint=f"cannot make the folder {folder!r}: {exc.strerror or exc}")
            error.exit_code = 2
            raise error from None
        try:
            write_atomically(self.output_file, "".join(self.parts).encode("utf-8"))
        except OSError as exc:  # an input/output error is a usage error: exit 2, never the findings' 1
            error = click.FileError(self.output_file, hint=exc.strerror or str(exc))
            error.exit_code = 2
            raise error from None


def _run(paths, options) -> int:
    from tapecheck.findings import FileError
    from tapecheck.lint.config import Overrides, Settings
    from tapecheck.lint.engine import LintError, Report
    from tapecheck.lint.files import discover
    from tapecheck.lint.output import Outcome, fixable_line, plural, relative_path, render, sort_key, summary_line, use_color
    from tapecheck.lint.output import statistics as statistics_table
    from tapecheck.lint.config import for_keras, keras_version
    from tapecheck.lint.parallel import collecting_keras2_markers, lint_files, lint_stdin
    from tapecheck.lint.suppressions import split

    fix, diff = options.fix, options.diff
    settings = Settings(options.config_file, Overrides.from_flags(options.select, options.ignore, options.extend_select))
    report = Report()
    sources: dict[str, bytes] = {}
    stdin_name = None
    with collecting_keras2_markers() as keras2_files:
        if "-" in paths:
            stdin_name = options.stdin_filename or "<stdin>"
            data, stdin_report = lint_stdin(sys.stdin.buffer, stdin_name, settings.rules_for([stdin_name]))
            sources[stdin_name] = data
            report.extend(stdin_report)
        files, missing = discover([p for p in paths if p != "-"], settings.excluded, options.force_exclude)
        report.errors.extend(missing)
        if files:
            # Deselected rules never run: their screens do not make files parse.
            found = lint_files(files, settings.rules_for(files), jobs=options.jobs or None,
                               cache=not options.no_cache, budget=_time_budget(options, settings))
            found.findings.sort()
            found.errors.sort()
            report.extend(found)
    printer = _Printer(options.output_file, report_to_stderr=fix and stdin_name is not None)
    keras2: dict[str, str] = {}  # path -> why it is read as Keras 2 (the note, the JSON field)

    def keras_of(path: str) -> str:
        version, why = keras_version(settings.for_path(path), path, keras2_files)
        if why is not None:
            keras2[path] = why
        return version

    def targeted(found) -> list:  # as the Keras the file's project targets sees them (TAP302)
        return [g for g in (for_keras(f, keras_of(f.path)) for f in found) if g is not None]

    findings = targeted(f for f in report.findings if settings.enabled(f.code, f.path))
    linted = list(sources) + files
    suppressed = split(findings, sources, linted if options.report_unused_suppressions else (), settings.enabled)
    findings = suppressed.kept
    outcome = Outcome(errors=list(report.errors), unused=suppressed.unused, files_checked=report.files_checked,
                      unsafe_fixes=options.unsafe_fixes, sources=sources, keras2=keras2)
    for path in linted:
        keras_of(path)  # every file read as Keras 2 is said so, with or without findings
    if options.add_noqa:
        return _add_noqa(findings, outcome, printer, options.quiet)

    by_path: dict[str, list] = {}
    for finding in findings:
        by_path.setdefault(finding.path, []).append(finding)
    diffs = []
    fixed_stdin = None
    if fix or diff:  # findings come with their fixes (engine, cache): only rewriting needs the fixers here
        from tapecheck.lint import fixing
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
            result = fixing.fix_source(data, path, _Suppressed(settings, path, keras_of(path)), options.unsafe_fixes)
        except (LintError, SyntaxError, UnicodeDecodeError, LookupError) as exc:  # changed since it was linted
            outcome.errors.append(FileError(path, f"not fixed: {exc}"))
            outcome.findings.extend(found)
            continue
        if diff:
            if result.changed:
                diffs.append(result.diff(relative_path(path)))
            outcome.findings.extend(found)
            continue
        if path == stdin_name and path in sources:
            fixed_stdin = result.fixed  # standard input: the fixed source goes to standard output
        elif result.changed:
            try:
                fixing.atomic_write(path, result.fixed)
            except fixing.FixError as exc:
                outcome.errors.append(FileError(path, str(exc)))
                outcome.findings.extend(found)
                continue
        remaining = targeted(result.remaining)
        outcome.fixed += result.fixed_count
        outcome.fixed_findings.extend(_fixed(found, remaining))
        outcome.findings.extend(remaining)
    outcome.findings.sort(key=sort_key)
    outcome.errors.sort()
    if fix and stdin_name is not None:
        # As ruff: with --fix, standard input comes back on standard output, fixed or not.
        click.echo(fixed_stdin if fixed_stdin is not None else sources[stdin_name], nl=False)
        if stdin_name in sources:  # the frames show the fixed text
            sources[stdin_name] = fixed_stdin if fixed_stdin is not None else sources[stdin_name]

    try:
        if diff:
            printer.report("".join(diffs))
            for error in outcome.errors:
                printer.note(error.format())
            would = len(diffs)
            if not options.quiet:
                printer.note(f"Would fix {plural(would, 'file')}." if would else "No fixes available.")
            return 1 if diffs or outcome.errors else 0
        if options.statistics:
            for error in outcome.errors:
                printer.note(error.format())
            as_json = options.output_format == "json"
            printer.report(statistics_table(outcome, as_json=as_json))
            if not as_json and not options.quiet:  # ruff's closing lines follow the table
                closing = fixable_line(outcome)
                printer.report("".join(line + "\n" for line in (closing, summary_line(outcome)) if line))
        else:
            text_format = options.output_format in ("full", "concise", "text")
            if not linted and not outcome.errors:
                # as ruff: nothing to lint is a warning on standard error, not "0 findings in 0 files"
                # (json, sarif and github still write their empty report, for the tools that read it)
                click.echo("warning: No Python files found under the given path(s)", err=True)
                if text_format:
                    return 0
            color = text_format and use_color(printer.is_terminal)
            if text_format and not options.quiet:
                for path, why in sorted(keras2.items()):
                    if path in keras2_files:  # what the file does; a configured version is no news
                        printer.note(f"{path}: note: read as Keras 2 (tf_keras), its findings as Keras 2 has them: {why}")
            printer.report(render(outcome, options.output_format, color, quiet=options.quiet,
                                  show_fixes=options.show_fixes), color=color)
    finally:
        printer.close()
    return 1 if outcome.findings or outcome.errors or outcome.unused else 0


def _time_budget(options, settings) -> float | None:
    """Seconds per file: --file-time-budget, else `file-time-budget` of the configuration of the
    folder the run starts in, else the default; 0 means no limit."""
    from tapecheck.lint.parallel import DEFAULT_TIME_BUDGET

    budget = options.file_time_budget
    if budget is None:
        budget = settings.for_path(".").time_budget
    if budget is None:
        budget = DEFAULT_TIME_BUDGET
    return budget or None


def _fixed(before, remaining) -> list:
    """The findings of `before` that --fix removed, by code (positions move as lines are edited)."""
    from collections import Counter

    left = Counter(f.code for f in remaining)
    fixed = []
    for finding in before:
        if left[finding.code]:
            left[finding.code] -= 1
        else:
            fixed.append(finding)
    return fixed


def _add_noqa(findings, outcome, printer, quiet: bool) -> int:
    """`--add-noqa`: a `# noqa: CODE` comment on each line with a finding, files replaced atomically."""
    from tapecheck.findings import FileError
    from tapecheck.lint.noqa import NoqaError, add_noqa
    from tapecheck.lint.output import plural

    by_path: dict[str, list] = {}
    for finding in findings:
        if finding.origin == "lint":
            by_path.setdefault(finding.path, []).append(finding)
    added = 0
    errors = list(outcome.errors)
    for path, found in sorted(by_path.items()):
        if path.endswith(".ipynb"):  # a note, not an error: the run did what it can (exit 0, as ruff)
            printer.note(f"{path}: warning: --add-noqa leaves notebooks alone; add the comments in the cells")
            continue
        try:
            count, skipped = add_noqa(path, found)
        except NoqaError as exc:
            errors.append(FileError(path, str(exc)))
            continue
        added += count
        for line, why in skipped:
            printer.note(f"{path}:{line}: no noqa added: {why}")
    try:
        for error in errors:
            printer.note(error.format())
        if not quiet:
            printer.note(f"Added {plural(added, 'noqa directive')}.")
    finally:
        printer.close()
    return 1 if errors else 0


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

"""`tapecheck lint`, `tapecheck rules` and `tapecheck rule CODE`."""

from __future__ import annotations

import sys

import click

from tapecheck.rules import RULES, get_rule


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--stdin-filename", default=None, help="The file name to report when reading source from `-`.")
def lint(paths, stdin_filename):
    """Lint PATHS (files or folders; `-` reads standard input) for GradientTape pitfalls.

    Exit status: 0 clean, 1 findings or unreadable files, 2 usage error.
    """
    from tapecheck.lint.engine import LintError, Report, lint_paths, lint_source
    from tapecheck.findings import FileError

    report = Report()
    file_paths = [p for p in paths if p != "-"]
    if "-" in paths:
        name = stdin_filename or "<stdin>"
        report.files_checked += 1
        try:
            report.findings.extend(lint_source(sys.stdin.buffer.read(), name))
        except LintError as exc:
            report.errors.append(FileError(name, str(exc)))
    if file_paths:
        report.extend(lint_paths(file_paths))
    report.findings.sort()
    for error in report.errors:
        click.echo(error.format())
    for finding in report.findings:
        click.echo(finding.format())
    summary = f"{_plural(len(report.findings), 'finding')} in {_plural(report.files_checked, 'file')}"
    if report.errors:
        summary += f"; {_plural(len(report.errors), 'file')} could not be linted"
    click.echo(summary + ".")
    sys.exit(1 if report.findings or report.errors else 0)


@click.command()
def rules():
    """List every rule: code, name, and where it is checked."""
    for rule in RULES:
        where = ", ".join(w for w, on in (("lint", rule.check is not None), ("probe", rule.in_probe), ("fix", rule.fixable)) if on)
        click.echo(f"{rule.code}  {rule.name:<32} {where:<16} {rule.summary}")


@click.command()
@click.argument("code")
def rule(code):
    """Print the documentation of one rule (by code or name)."""
    found = get_rule(code)
    if found is None:
        raise click.BadParameter(f"no rule {code!r}; `tapecheck rules` lists them", param_hint="CODE")
    click.echo(found.doc, nl=False)

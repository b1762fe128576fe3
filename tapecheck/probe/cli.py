"""`tapecheck probe [options] script.py [args...]` / `tapecheck probe -m module [args...]`.

Runs the program as `__main__` with its own argv under a probe, then prints
the report (also when the program raises or calls `sys.exit`). The exit
status is the program's own, unless `--fail-on-findings` and findings.
"""

from __future__ import annotations

import os
import runpy
import sys
import traceback

import click


class _ProbeCommand(click.Command):
    """Options before the program are the probe's (unknown ones are click's usage errors, with
    a suggestion); everything after the script, or after `-m MODULE`, is the program's own."""

    def parse_args(self, ctx, args):
        valued = {name for param in self.params if isinstance(param, click.Option) and not param.is_flag
                  for name in param.opts}
        args = list(args)
        index = 0
        while index < len(args):
            arg = args[index]
            if arg == "--" or not arg.startswith("-") or arg == "-":
                break
            if arg == "-m" or (arg.startswith("-m") and not arg.startswith("--")):
                split = index + (2 if arg == "-m" else 1)
                if split <= len(args):  # as `python -m MODULE ARGS`: the rest is the module's
                    args.insert(split, "--")
                break
            index += 2 if arg in valued else 1
        return super().parse_args(ctx, args)


@click.command(cls=_ProbeCommand, context_settings={"allow_interspersed_args": False})
@click.option("-m", "module", default=None, metavar="MODULE", help="Run a module as `python -m MODULE` does.")
@click.option("--output-format", "--format", "fmt", type=click.Choice(["text", "full", "json"]), default="text",
              show_default=True, help="Report format (`full` is `text`, lint's spelling; --format is the old name).")
@click.option("--output-file", "-o", "--output", "output", type=click.Path(dir_okay=False), default=None,
              help="Write the report to this file (its folders made when missing) instead of standard error.")
@click.option("--fail-on-findings", is_flag=True, help="Exit with status 1 when there are findings (if the program itself succeeded).")
@click.option("--merge", "merge", is_flag=True,
              help="Merge the JSON reports given (one per MultiWorker worker) into one report; runs nothing.")
@click.option("--verbose", "-v", is_flag=True, help="Show TensorFlow's start-up log lines (hidden by default).")
@click.argument("program", nargs=-1, type=click.UNPROCESSED)
def probe(module, fmt, output, fail_on_findings, merge, verbose, program):
    """Run a training program under the runtime probe and report why gradients were None.

    \b
    tapecheck probe train.py --epochs 3
    tapecheck probe -m mypackage.train --epochs 3
    tapecheck probe --output-format json -o probe.json train.py
    tapecheck probe notebook.ipynb              # its code cells, in order
    tapecheck probe --merge worker0.json worker1.json   # one report of a cluster

    The report goes to standard error (or -o); the program keeps stdout.
    Inside @tf.function (and fit) the checks run while the function is traced.
    """
    fmt = "text" if fmt == "full" else fmt
    if merge:
        _merge(module, fmt, output, fail_on_findings, program)
        return
    if module is None and not program:
        raise click.UsageError("give a script to run, or -m MODULE")
    if module is None:
        script, args = program[0], list(program[1:])
        if not os.path.isfile(script):
            raise click.BadParameter(f"{script}: no such file", param_hint="SCRIPT")
    else:
        script, args = None, list(program)
        sys.path.insert(0, os.getcwd())  # where `python -m` looks first
        try:
            if not _module_found(module):
                raise click.BadParameter(f"no module named {module!r}", param_hint="-m")
        finally:
            sys.path.pop(0)
    notebook = None
    if script is not None and script.endswith(".ipynb"):
        from tapecheck.lint.notebooks import NotebookError
        from tapecheck.probe import notebook as notebooks

        try:
            notebook = notebooks.load(script)  # its code cells, not the JSON
        except (NotebookError, OSError) as exc:
            raise click.BadParameter(f"{script}: {exc}", param_hint="SCRIPT") from None

    # A syntax error shows before TensorFlow is imported (seconds): as Python shows it, no report.
    code_error = _syntax_error(script, module, notebook)
    if code_error is not None:
        shown = "".join(traceback.format_exception_only(type(code_error), code_error))
        if notebook is not None:
            shown = _in_cells(shown, {os.path.abspath(script): notebook})
        sys.stderr.write(shown)
        sys.exit(1)

    from tapecheck._quiet import import_tensorflow, show_held

    try:
        import_tensorflow(verbose)  # its start-up lines (absl, oneDNN, cpu_feature_guard) held back
    except ImportError:
        pass  # reported below, by the probe's own start
    if verbose:
        show_held()
    from tapecheck.probe.session import Probe

    session = Probe()
    status, error = 0, None
    kept = None  # the program's globals, alive until the probe has looked at them
    saved_argv, saved_path0 = sys.argv[:], sys.path[0] if sys.path else None
    try:
        session.start()
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in ("tensorflow", "keras"):
            raise
        raise click.UsageError(
            f"`tapecheck probe` needs {exc.name.split('.')[0]}, which is not installed: "
            "pip install 'tapecheck[tensorflow-cpu]' (or [tensorflow])"
        ) from None
    try:
        if script is not None:
            sys.argv = [script, *args]
            sys.path[0] = os.path.dirname(os.path.abspath(script))
            if notebook is not None:
                kept = notebooks.run(script, notebook)
            else:
                kept = runpy.run_path(os.path.abspath(script), run_name="__main__")  # absolute, as python does
        else:
            sys.argv = [module, *args]  # runpy puts the module's path in argv[0]
            sys.path[0] = os.getcwd()
            kept = runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        status = _exit_status(exc.code)
    except KeyboardInterrupt as exc:
        status, error = 130, exc
    except BaseException as exc:  # noqa: BLE001 - the program's own error: reported, then shown as Python would
        status, error = 1, exc
        session.explain(exc)  # the finding behind it, while the hooks' notes are there
    finally:
        session.stop()
        _restore(saved_argv, saved_path0)
    del kept
    findings = session.findings
    text = session.report(fmt)
    if output:
        _write_report(output, text)
    else:
        sys.stderr.write(text)
    if error is not None:
        _print_traceback(error)
    if fail_on_findings and findings and status == 0:
        status = 1
    sys.exit(status)


def _merge(module, fmt, output, fail_on_findings, reports):
    """`--merge REPORT...`: each finding once, with the workers that saw it."""
    from tapecheck.probe.merge import MergeError, merge
    from tapecheck.probe.report import render

    if module is not None:
        raise click.UsageError("--merge reads reports: it runs no module (-m)")
    if not reports:
        raise click.UsageError("--merge needs the JSON reports to merge (tapecheck probe --format json --output ...)")
    try:
        findings, merged = merge(list(reports))
    except MergeError as exc:
        raise click.BadParameter(str(exc), param_hint="REPORT") from None
    text = render(findings, fmt, merged=merged)
    if output:
        _write_report(output, text)
    else:
        sys.stdout.write(text)  # nothing else runs: the merged report is the command's output
    sys.exit(1 if fail_on_findings and findings else 0)


def _write_report(output: str, text: str) -> None:
    """The report to `-o`: its folders made when missing, the file replaced at once (a failed
    write leaves the old one); a file that cannot be written is a usage error (exit 2)."""
    from tapecheck.lint.atomic import replace_file

    try:
        folder = os.path.dirname(output)
        if folder:
            os.makedirs(folder, exist_ok=True)
        replace_file(output, text.encode("utf-8"))
    except OSError as exc:
        error = click.FileError(output, hint=exc.strerror or str(exc))
        error.exit_code = 2
        raise error from None


def _syntax_error(script, module, notebook) -> SyntaxError | None:
    """The program's syntax error, found by compiling it (nothing runs, nothing is imported)."""
    if notebook is not None:
        source, name = notebook.source, os.path.abspath(script)
    else:
        if script is None:
            import importlib.util

            sys.path.insert(0, os.getcwd())
            try:
                spec = importlib.util.find_spec(module)
            except (ImportError, ValueError):
                spec = None
            finally:
                sys.path.pop(0)
            script = getattr(spec, "origin", None) if spec is not None else None
            if spec is not None and spec.submodule_search_locations is not None:  # a package: its __main__
                script = os.path.join(spec.submodule_search_locations[0], "__main__.py")
            if not script or not script.endswith(".py") or not os.path.isfile(script):
                return None
        name = os.path.abspath(script)
        try:
            with open(script, "rb") as handle:
                source = handle.read()
        except OSError:
            return None  # running it reports the problem, as Python would
    try:
        compile(source, name, "exec", dont_inherit=True)
    except SyntaxError as exc:
        return exc
    except ValueError:  # NUL bytes: Python reports them when it runs the file
        return None
    return None


def _exit_status(code) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    sys.stderr.write(f"{code}\n")  # what Python does with sys.exit("message")
    return 1


def _module_found(name: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _restore(argv, path0):
    sys.argv = argv
    if path0 is not None and sys.path:
        sys.path[0] = path0


def _print_traceback(error):
    """The traceback Python would print, without the probe's and runpy's frames."""
    here = os.path.dirname(os.path.abspath(__file__)) + os.sep
    report = traceback.TracebackException(type(error), error, error.__traceback__)
    report.stack = traceback.StackSummary.from_list([
        frame for frame in report.stack
        if not frame.filename.startswith(here) and "runpy" not in frame.filename
    ])
    sys.stderr.write(_in_cells("".join(report.format())))


def _in_cells(text: str, programs: dict | None = None) -> str:
    """A traceback's lines of a notebook that ran (or of `programs`: path -> NotebookProgram), at
    `cell N, line M` instead of the line of the joined program."""
    import re

    if programs is None:
        from tapecheck.probe import notebook as notebooks

        programs = dict(notebooks._programs)
    for path, program in programs.items():
        def place(match, program=program):
            cell, line = program.cell_line(int(match.group(2)))
            return f"{match.group(1)}, cell {cell}, line {line}"

        text = re.sub(r'(File "' + re.escape(path) + r'"), line (\d+)', place, text)
    return text

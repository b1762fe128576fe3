"""`tapecheck probe notebook.ipynb`: run a notebook's code cells, in order, as one program.

The cells are joined as the linter joins them (`tapecheck.lint.notebooks`:
IPython magics and shell lines become comments, every other line keeps its
place) and run as `__main__` under the notebook's own path, with the source
registered in `linecache` so tracebacks, the probe's call-site texts and the
static pass read the cells, not the JSON. Findings are moved back to their
cell and line (`Finding.cell`).
"""

from __future__ import annotations

import builtins
import linecache
import os

_programs: dict[str, object] = {}  # absolute notebook path -> NotebookProgram run under the probe


def load(path: str):
    """The notebook's program (raises `tapecheck.lint.notebooks.NotebookError`)."""
    from tapecheck.lint.notebooks import notebook_program

    with open(path, "rb") as handle:
        program = notebook_program(handle.read())
    if program.language != "python":
        from tapecheck.lint.notebooks import NotebookError

        raise NotebookError(f"the notebook's kernel is {program.language}, not Python")
    return program


def run(path: str, program) -> dict:
    """Run the program as `__main__`; its globals (kept by the caller while the probe looks at them)."""
    path = os.path.abspath(path)
    _programs[path] = program
    lines = program.source.splitlines(keepends=True)
    linecache.cache[path] = (len(program.source), None, lines, path)  # mtime None: never re-read from disk
    code = compile(program.source, path, "exec")
    namespace = {"__name__": "__main__", "__file__": path, "__builtins__": builtins,
                 "__package__": None, "__spec__": None, "__loader__": None, "__doc__": None}
    exec(code, namespace)  # noqa: S102 - running the user's notebook is the command's purpose
    return namespace


def program_for(path: str):
    return _programs.get(os.path.abspath(path))


def relocate(findings):
    """Findings on a notebook that ran, moved from program lines to (cell, line in cell)."""
    if not _programs:
        return findings
    from tapecheck.lint.notebooks import relocate as to_cell

    out = []
    for finding in findings:
        program = program_for(finding.path) if finding.cell is None else None
        out.append(to_cell(finding, program) if program is not None else finding)
    return sorted(out)

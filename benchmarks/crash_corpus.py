"""Lint every .py file of big installed trees through the engine API: no internal errors.

    python benchmarks/crash_corpus.py                 # tensorflow, keras, sklearn, numpy, stdlib
    python benchmarks/crash_corpus.py --full          # also parse+extract+check files the byte
                                                      # screen would skip (the real crash hunt)
    python benchmarks/crash_corpus.py PATH...         # other trees

A file that cannot be linted (syntax error in a deliberately broken test file, not UTF-8,
too large) is an *error*: a `FileError` with a message, which is expected and counted by
kind. An *internal error* is any exception escaping the engine, or a finding whose
position is outside the file: there must be none, and the exit status is 1 if there are.

The default mode is exactly what `tapecheck lint` does (`lint_file`: read, byte screen,
parse, extract, rules). `--full` skips the screen, so every file goes through libcst and
the fact extraction. Prints files, errors by kind, internal errors and wall time per tree.
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import os
import sys
import sysconfig
import time
import traceback

from tapecheck.lint import engine
from tapecheck.lint.files import discover


def default_trees() -> list[tuple[str, str]]:
    trees = []
    for name in ("tensorflow", "keras", "sklearn", "numpy"):
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations:
            trees.append((name, next(iter(spec.submodule_search_locations))))
    trees.append(("stdlib", sysconfig.get_paths()["stdlib"]))
    return trees


def all_python_files(root: str) -> list[str]:
    """Every .py under root, including test folders and vendored code (no .gitignore, no skips)."""
    out = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in ("site-packages", "__pycache__"))
        out.extend(os.path.join(folder, n) for n in sorted(names) if n.endswith(".py"))
    return out


def error_kind(message: str) -> str:
    return message.split(" at ")[0].split(":")[0].split("(")[0].strip()


def lint_full(path: str):
    """lint_file without the byte screen: every file is parsed and extracted."""
    report = engine.Report(files_checked=1)
    try:
        report.findings = engine.lint_python(engine.read_source(path), path, screen=False)
    except engine.LintError as exc:
        report.errors.append(engine.FileError(path, str(exc)))
    return report


def run_tree(name: str, root: str, full: bool, show: int) -> dict:
    files = all_python_files(root)
    errors: collections.Counter[str] = collections.Counter()
    examples: dict[str, str] = {}
    internal: list[tuple[str, str]] = []
    findings = 0
    parsed = 0
    start = time.perf_counter()
    for path in files:
        try:
            report = lint_full(path) if full else engine.lint_file(path)
        except Exception:  # noqa: BLE001 - this is what we are hunting
            internal.append((path, traceback.format_exc()))
            continue
        findings += len(report.findings)
        for error in report.errors:
            kind = error_kind(error.message)
            errors[kind] += 1
            examples.setdefault(kind, f"{error.path}: {error.message}")
        if not report.errors:
            parsed += 1
        lines = None
        for finding in report.findings:
            if lines is None:
                with open(path, "rb") as handle:
                    lines = handle.read().splitlines() or [b""]
            if not (1 <= finding.line <= len(lines) and finding.col >= 1):
                internal.append((path, f"finding outside the file: {finding}"))
    elapsed = time.perf_counter() - start
    print(f"{name}: {len(files)} files, {findings} findings, {sum(errors.values())} errors, "
          f"{len(internal)} internal errors, {elapsed:.1f} s  ({root})")
    for kind, count in errors.most_common():
        print(f"    {count:6d}  {kind}    e.g. {examples[kind]}")
    for path, text in internal[:show]:
        print(f"  INTERNAL ERROR {path}\n{text}")
    return {"files": len(files), "errors": sum(errors.values()), "internal": len(internal), "seconds": elapsed}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("paths", nargs="*", help="trees to lint (default: TF, Keras, sklearn, numpy, stdlib)")
    parser.add_argument("--full", action="store_true", help="bypass the byte screen: parse and extract every file")
    parser.add_argument("--show", type=int, default=5, help="tracebacks to print per tree")
    args = parser.parse_args(argv)
    trees = [(p, p) for p in args.paths] if args.paths else default_trees()
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 1000))
    totals = collections.Counter()
    for name, root in trees:
        result = run_tree(name, root, args.full, args.show)
        totals.update(result)
    print(f"total: {totals['files']} files, {totals['errors']} errors, {totals['internal']} internal errors, "
          f"{totals['seconds']:.1f} s ({'full: every file parsed' if args.full else 'engine: byte screen on'})")
    # discovery itself over the same trees must not raise either
    discover([root for _, root in trees])
    return 1 if totals["internal"] else 0


if __name__ == "__main__":
    sys.exit(main())

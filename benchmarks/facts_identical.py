"""Are the facts of real files the same with tapecheck's cheap positions as with libcst's? Prints a verdict.

    python benchmarks/facts_identical.py                    # the screened installed tensorflow+keras
    python benchmarks/facts_identical.py PATH...            # another tree
    python benchmarks/facts_identical.py --dump facts.pkl   # also pickle the facts (path -> facts or error)
    python benchmarks/facts_identical.py --against facts.pkl  # compare with facts dumped before (another version)

For every file tapecheck parses (those its screen lets through), `source.facts_of` runs
twice in this process: with `fastcst.Positions` as it is, and with a `Positions` that
asks libcst's own `PositionProvider` for every range. The facts (dataclasses) must be
equal, and the cheap positions must never have had to ask libcst themselves (a node
without marks). Large files are parsed in parts as tapecheck parses them. Takes a few
minutes on tensorflow+keras (libcst's provider costs about twice the parse).
"""

from __future__ import annotations

import argparse
import os
import pickle
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from lint_speed import default_tree, screened_files

from tapecheck.lint import extract, fastcst, source


class LibcstPositions(fastcst.Positions):
    """libcst's PositionProvider for every node (the fallback `Positions` keeps)."""

    def __init__(self, module):
        self._fallback = None
        self._module = module
        self._use_libcst()


class CountingPositions(fastcst.Positions):
    fallbacks = 0

    def _use_libcst(self):
        if self._module.body and "\r" not in self._module.code:
            CountingPositions.fallbacks += 1  # a node without marks (an empty or CR module is expected)
        super()._use_libcst()


def facts_of(path: str, positions) -> object:
    extract.Positions = positions
    try:
        with open(path, "rb") as handle:
            return source.facts_of(handle.read(), path)
    except source.LintError as exc:
        return f"LintError: {exc}"
    finally:
        extract.Positions = fastcst.Positions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*")
    parser.add_argument("--dump", help="pickle {path: facts} (cheap positions) here")
    parser.add_argument("--against", help="compare with a pickle written by --dump (skips libcst's provider)")
    args = parser.parse_args()
    files, *_ = screened_files(args.paths or default_tree())
    previous = None
    if args.against:
        with open(args.against, "rb") as handle:
            previous = pickle.load(handle)
    ours_all, differ = {}, []
    timings = {"cheap": 0.0, "libcst": 0.0}
    for path in files:
        start = time.process_time()
        ours = facts_of(path, CountingPositions)
        timings["cheap"] += time.process_time() - start
        ours_all[path] = ours
        if previous is not None:
            if previous.get(path) != ours:
                differ.append(path)
            continue
        start = time.process_time()
        theirs = facts_of(path, LibcstPositions)
        timings["libcst"] += time.process_time() - start
        if ours != theirs:
            differ.append(path)
    if args.dump:
        with open(args.dump, "wb") as handle:
            pickle.dump(ours_all, handle)
    errors = sum(isinstance(f, str) for f in ours_all.values())
    against = f"the facts in {args.against}" if args.against else "libcst's PositionProvider"
    print(f"{len(files)} files ({errors} LintErrors, compared as messages): facts with fastcst.Positions "
          f"vs {against}: {len(files) - len(differ)} identical, {len(differ)} differ")
    for path in differ[:20]:
        print(f"  differs: {path}")
    print(f"fastcst.Positions fell back to libcst's provider {CountingPositions.fallbacks} times")
    print(f"CPU s: facts with fastcst.Positions {timings['cheap']:.1f}"
          + (f", with libcst's provider {timings['libcst']:.1f}" if not args.against else ""))
    if previous is not None and set(previous) != set(ours_all):
        print(f"!! the file lists differ: {len(set(previous) ^ set(ours_all))} files in one only")
        differ.append("file list")
    raise SystemExit(1 if differ or CountingPositions.fallbacks else 0)


if __name__ == "__main__":
    main()

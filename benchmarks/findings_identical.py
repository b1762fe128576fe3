"""Are tapecheck's findings the same as those of another version? Prints a verdict.

    python benchmarks/findings_identical.py --save before.json           # record (default trees)
    python benchmarks/findings_identical.py --against before.json        # compare with a record
    python benchmarks/findings_identical.py --save x.json PATH...        # other trees
    git worktree add /tmp/old HEAD~3 && python benchmarks/findings_identical.py --code /tmp/old --save old.json

The default trees are what a behaviour-preserving change must not move: the project's
fixtures (and `tests/data`), the installed tensorflow and keras packages, and the real-bug
corpus's rebuilt files (`benchmarks/real_bugs/work`, when `real_bugs/rebuild.py` made it).
Each tree is linted in one `tapecheck lint --output-format json --no-cache` process, from the
tree's parent, with every rule selected; a finding is its path, line, column, end, code,
message, hint, details and fix (the whole JSON record). `--code DIR` lints with the tapecheck
of another checkout (a `git worktree` of an older commit): Python runs without its site
hooks (`-S`), so this checkout's editable install does not shadow it. Exit 0 when the records agree, 1 when they differ (the first differences
are printed), 2 on a usage error.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import sysconfig

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def default_trees() -> list[str]:
    site = sysconfig.get_paths()["purelib"]
    trees = [os.path.join(ROOT, "fixtures"), os.path.join(ROOT, "tests", "data")]
    trees += [os.path.join(site, name) for name in ("tensorflow", "keras")]
    work = os.path.join(ROOT, "benchmarks", "real_bugs", "work")
    if os.path.isdir(work):
        trees.append(work)
    return [tree for tree in trees if os.path.isdir(tree)]


def findings_of(tree: str, code: str | None = None) -> list[str]:
    env = None
    python = [sys.executable]
    if code:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.abspath(code), sysconfig.get_paths()["purelib"]]))
        python = [sys.executable, "-S"]
    command = [*python, "-m", "tapecheck", "lint", "--output-format", "json", "--no-cache",
               "--select", "TAP", "--exit-zero", os.path.basename(tree)]
    done = subprocess.run(command, cwd=os.path.dirname(tree), capture_output=True, text=True, env=env)
    if done.returncode not in (0, 1):
        raise SystemExit(f"tapecheck failed on {tree}: {done.stderr.strip()[-400:]}")
    report = json.loads(done.stdout)
    rows = [json.dumps(item, sort_keys=True) for item in report["findings"]]
    rows += [json.dumps({"error": item}, sort_keys=True) for item in report.get("errors", [])]
    return sorted(rows)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--save", metavar="FILE", help="write the findings to FILE")
    group.add_argument("--against", metavar="FILE", help="compare the findings with FILE")
    parser.add_argument("--code", metavar="DIR", help="lint with the tapecheck of this checkout instead")
    parser.add_argument("trees", nargs="*", help="folders to lint (default: fixtures, tests/data, tensorflow, keras, real bugs)")
    args = parser.parse_args(argv)
    trees = [os.path.abspath(tree) for tree in args.trees] or default_trees()
    record = {}
    for tree in trees:
        record[tree] = findings_of(tree, args.code)
        print(f"{len(record[tree]):6d} findings  {tree}", file=sys.stderr)
    if args.save:
        with open(args.save, "w", encoding="utf-8") as out:
            json.dump(record, out, indent=0)
        return 0
    with open(args.against, encoding="utf-8") as handle:
        before = json.load(handle)
    differ = 0
    for tree in trees:
        old, new = before.get(tree, []), record[tree]
        if tree not in before:
            print(f"not in the record: {tree}")
            differ += 1
            continue
        gone = sorted(set(old) - set(new))
        added = sorted(set(new) - set(old))
        for label, rows in (("gone", gone), ("new", added)):
            for row in rows[:10]:
                print(f"{label}: {row}")
        differ += len(gone) + len(added)
    print("identical" if not differ else f"{differ} differences")
    return 0 if not differ else 1


if __name__ == "__main__":
    sys.exit(main())

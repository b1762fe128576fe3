"""Recall of `tapecheck lint` on real bugs that public repositories fixed in a commit.

    python benchmarks/real_bugs/rebuild.py     # once: the pre/post files from the fetched mirrors
    python benchmarks/real_bugs.py             # the tables (markdown) and every finding to judge
    python benchmarks/real_bugs.py --json results.json

Each bug of `benchmarks/real_bugs/bugs/*.json` is linted as a new user would: one
`tapecheck lint --output-format json --no-cache` process on the buggy file (its context files
beside it, in the repository's layout, so imports resolve), every rule selected, and one on
the fixed file. A bug is **found** when a finding on the buggy file sits within 3 lines of one
of its `bad_lines`, or its message cites such a line ("line N" of that file); found **by its
rule** when such a finding is of the bug's own class (a finding of another rule nearby can be a
coincidence). Reported:

- recall by class (the rule the mistake belongs to, or `new:...` for kinds no rule covers) and
  by where the mistake sits (tape scope, helper, Layer/Model method, train_step, ...);
- findings on the fixed file at the fixed lines (the fix should have silenced them);
- every other finding, on either side, listed for judging by hand (a true finding elsewhere in
  the file, or a false alarm).

An entry whose `verdict` starts with "harmless" (a fix that changes nothing on Keras 3, measured)
is left out of recall and listed on its own, with whether anything flagged it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "real_bugs"))

from rebuild import DEFAULT_OUT, load_corpus  # noqa: E402

WINDOW = 3
_CITED = re.compile(r"\bline (\d+)(?! of )")


def lint(path: str) -> list[dict]:
    """The findings of one `tapecheck lint` process on one file (run from its folder)."""
    command = [sys.executable, "-m", "tapecheck", "lint", "--output-format", "json", "--no-cache", "--select", "TAP",
               "--exit-zero", os.path.basename(path)]
    done = subprocess.run(command, cwd=os.path.dirname(path), capture_output=True, text=True)
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:  # tapecheck itself did not run: every bug would look missed
        raise SystemExit(f"tapecheck did not run on {path} (use the Python tapecheck is installed in): "
                         f"{done.stderr.strip()[-300:]}") from None
    errors = [{"code": "ERROR", "line": 0, "message": error.get("message", "")} for error in report.get("errors", [])]
    return report["findings"] + errors


def near(finding: dict, lines: list[int]) -> bool:
    """Within WINDOW lines of one of `lines`, or a line of this file the message cites is."""
    candidates = [finding.get("line") or 0] + [int(n) for n in _CITED.findall(finding.get("message", ""))]
    return any(abs(candidate - line) <= WINDOW for candidate in candidates for line in lines)


def judge(entry: dict, work: str) -> dict:
    root = os.path.join(work, entry["id"])
    pre, post = os.path.join(root, "pre", entry["path"]), os.path.join(root, "post", entry["post_path"])
    if not os.path.isfile(pre):
        return {"entry": entry, "missing": True}
    before = lint(pre)
    after = lint(post) if os.path.isfile(post) else []
    hits = [f for f in before if f["code"] != "ERROR" and near(f, entry["bad_lines"])]
    at_fix = [f for f in after if f["code"] != "ERROR" and near(f, entry["fixed_lines"])]
    own = [f for f in hits if f["code"] == entry["class"]]  # found by the rule of the bug's class
    return {
        "entry": entry, "missing": False, "found": bool(hits), "own": bool(own), "hits": own + [f for f in hits if f not in own],
        "at_fix": at_fix,
        "other_before": [f for f in before if f not in hits], "other_after": [f for f in after if f not in at_fix],
    }


def table(title: str, groups: dict[str, list[dict]]) -> str:
    """Found: any finding at the line; by its rule: a finding of the bug's own class there."""
    rows = [f"| {title} | bugs | found | recall | by its rule |", "|---|---:|---:|---:|---:|"]
    for name in sorted(groups, key=lambda key: (-len(groups[key]), key)):
        results = groups[name]
        found = sum(result["found"] for result in results)
        own = sum(result["own"] for result in results)
        rows.append(f"| {name} | {len(results)} | {found} | {found / len(results):.2f} | {own} |")
    return "\n".join(rows)


def brief(finding: dict) -> str:
    return f"{finding.get('line')}: {finding['code']} {finding.get('message', '')[:160]}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", default=DEFAULT_OUT, help="the rebuilt files (benchmarks/real_bugs/rebuild.py --out)")
    parser.add_argument("--json", metavar="FILE", help="also write every result as JSON")
    parser.add_argument("--jobs", type=int, default=2, help="lint processes at once")
    parser.add_argument("--quiet", action="store_true", help="the tables only, no findings to judge")
    parser.add_argument("--only", metavar="TEXT", action="append", default=[],
                        help="only the bugs whose id or class contains TEXT (repeatable)")
    args = parser.parse_args(argv)
    corpus = [entry for entry in load_corpus()
              if not args.only or any(text in entry["id"] or text == entry["class"] for text in args.only)]
    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        results = list(pool.map(lambda entry: judge(entry, args.work), corpus))
    missing = [result["entry"]["id"] for result in results if result["missing"]]
    harmless = [result for result in results if not result["missing"] and result["entry"].get("verdict", "").startswith("harmless")]
    results = [result for result in results if not result["missing"] and result not in harmless]
    if not results:
        print(f"no rebuilt bugs in {args.work}: run benchmarks/real_bugs/rebuild.py first", file=sys.stderr)
        return 2
    by_class, by_where, by_kind = defaultdict(list), defaultdict(list), defaultdict(list)
    for result in results:
        entry = result["entry"]
        by_class[entry["class"] if not entry["class"].startswith("new:") else "new (no rule yet)"].append(result)
        by_where[entry["where"]].append(result)
        by_kind["a rule's class" if not entry["class"].startswith("new:") else "new kinds"].append(result)
    found = sum(result["found"] for result in results)
    repos = {result["entry"]["repo"] for result in results}
    own = sum(result["own"] for result in results)
    print(f"# Real bugs: {found} of {len(results)} found (recall {found / len(results):.2f}), "
          f"{own} by the rule of their class, {len(repos)} repositories\n")
    print(table("kind", by_kind) + "\n")
    print(table("class", by_class) + "\n")
    print(table("where the mistake sits", by_where) + "\n")
    fixed_flagged = [result for result in results if result["at_fix"]]
    print(f"Findings on the fixed file at the fixed lines: {sum(len(r['at_fix']) for r in fixed_flagged)} "
          f"in {len(fixed_flagged)} bugs")
    if harmless:
        print(f"\nFixed upstream but harmless on Keras 3, measured, so not counted ({len(harmless)}; "
              f"{sum(bool(r['hits']) for r in harmless)} flagged): {', '.join(r['entry']['id'] for r in harmless)}")
    if missing:
        print(f"\nNot rebuilt ({len(missing)}): {', '.join(missing)}")
    if not args.quiet:
        print("\n## Found\n")
        for result in results:
            if result["found"]:
                print(f"- {result['entry']['id']} ({result['entry']['class']}): {brief(result['hits'][0])}")
        print("\n## Missed\n")
        for result in results:
            if not result["found"]:
                entry = result["entry"]
                print(f"- {entry['id']} ({entry['class']}, {entry['where']}, lines {entry['bad_lines']}): {entry['evidence']}")
        print("\n## To judge: findings on the fixed lines of the fixed file\n")
        for result in fixed_flagged:
            for finding in result["at_fix"]:
                print(f"- {result['entry']['id']} post {brief(finding)}")
        print("\n## To judge: every other finding\n")
        for result in results:
            for side in ("before", "after"):
                for finding in result[f"other_{side}"]:
                    print(f"- {result['entry']['id']} {'pre' if side == 'before' else 'post'} {brief(finding)}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(results, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

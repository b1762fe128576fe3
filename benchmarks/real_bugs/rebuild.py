"""Rebuild the pre-fix and post-fix files of the real-bug corpus from fetched mirrors.

    python benchmarks/real_bugs/rebuild.py                     # mirrors in ../.mirror (the tool library's fetch)
    python benchmarks/real_bugs/rebuild.py --mirrors DIR --out DIR

Standard library only. For each entry of `bugs/*.json`, the buggy file (and its `context`
files) at the parent commit go to `OUT/<id>/pre/<path>`, the same paths at the fix commit to
`OUT/<id>/post/<path>`, in the repository's own layout (so an import of a sibling module
finds it). A mirror is the git directory `DIR/<owner>+<name>/repo` (or its `.git`), as
`fetch github:<owner>/<name>` makes it; an entry whose mirror is missing is listed and
skipped. Nothing of those repositories is committed: `OUT` is ignored by git.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PROJECT = os.path.dirname(os.path.dirname(HERE))
DEFAULT_MIRRORS = os.path.join(os.path.dirname(PROJECT), ".mirror")
DEFAULT_OUT = os.path.join(HERE, "work")
FIELDS = ("id", "repo", "fix", "parent", "path", "post_path", "context", "bad_lines", "fixed_lines", "class", "where",
          "evidence")


def load_corpus(folder: str = os.path.join(HERE, "bugs")) -> list[dict]:
    """Every entry of the corpus, checked for the fields of the format (README.md)."""
    entries, seen = [], set()
    for path in sorted(glob.glob(os.path.join(folder, "*.json"))):
        with open(path, encoding="utf-8") as handle:
            try:
                items = json.load(handle)
            except json.JSONDecodeError as exc:
                raise SystemExit(f"{path}: not valid JSON ({exc})") from None
        for item in items:
            missing = [name for name in FIELDS if name not in item]
            if missing:
                raise SystemExit(f"{path}: entry {item.get('id', '?')} lacks {', '.join(missing)}")
            if item["id"] in seen:
                raise SystemExit(f"{path}: entry id {item['id']} appears twice in the corpus")
            seen.add(item["id"])
            entries.append(item)
    return entries


def mirror_of(mirrors: str, repo: str) -> str:
    """The git directory of a mirror: `owner+name/repo` (bare), or its `.git` when it has a work tree."""
    folder = os.path.join(mirrors, repo.replace("/", "+"), "repo")
    inner = os.path.join(folder, ".git")
    return inner if os.path.isdir(inner) else folder


def show(git_dir: str, commit: str, path: str) -> bytes | None:
    done = subprocess.run(["git", f"--git-dir={git_dir}", "show", f"{commit}:{path}"], capture_output=True)
    return done.stdout if done.returncode == 0 else None


def write(path: str, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    temporary = path + ".part"
    with open(temporary, "wb") as handle:
        handle.write(data)
    os.replace(temporary, path)


def rebuild(entry: dict, mirrors: str, out: str) -> str | None:
    """Write one entry's files; the reason when it cannot be rebuilt, else None."""
    git_dir = mirror_of(mirrors, entry["repo"])
    if not os.path.isdir(git_dir):
        return f"no mirror at {git_dir} (fetch github:{entry['repo']})"
    root = os.path.join(out, entry["id"])
    sides = (("pre", entry["parent"], [entry["path"], *entry["context"]]),
             ("post", entry["fix"], [entry["post_path"], *entry["context"]]))
    for side, commit, paths in sides:
        for number, path in enumerate(paths):
            data = show(git_dir, commit, path)
            if data is None:
                if number == 0:
                    return f"{path} is not in {commit[:12]} of {entry['repo']}"
                continue  # a context file the fix removed or renamed
            write(os.path.join(root, side, path), data)
    return None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mirrors", default=DEFAULT_MIRRORS, help="folder of fetched mirrors (owner+name/repo)")
    parser.add_argument("--out", default=DEFAULT_OUT, help="where the pre/post files go")
    args = parser.parse_args(argv)
    entries = load_corpus()
    problems = []
    for entry in entries:
        reason = rebuild(entry, args.mirrors, args.out)
        if reason:
            problems.append(f"{entry['id']}: {reason}")
    repos = {entry["repo"] for entry in entries}
    print(f"{len(entries) - len(problems)} of {len(entries)} bugs rebuilt ({len(repos)} repositories) in {args.out}")
    for problem in problems:
        print(f"  skipped {problem}", file=sys.stderr)
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())

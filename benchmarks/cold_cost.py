"""Does this checkout's cold lint cost more CPU than another's? Prints the ratio.

    git worktree add /tmp/old HEAD~5
    python benchmarks/cold_cost.py --code /tmp/old                 # installed tensorflow+keras, 3 rounds
    python benchmarks/cold_cost.py --code /tmp/old --runs 5 PATH...
    python benchmarks/cold_cost.py --this /tmp/new --code /tmp/old     # two other checkouts

Each round runs `tapecheck lint --no-cache --jobs 1 -q --exit-zero TREE` once with this
checkout's tapecheck and once with the other's (Python without its site hooks, `-S`, so the
editable install does not shadow it), in alternating order, and records the CPU seconds
(user+system) of each process. The figure is the ratio of the medians, this / other, from one
run: on a shared machine the load falls on both alike, so the ratio is steadier than either time.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import sysconfig

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cpu_of(command: list[str], env: dict) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--code", required=True, metavar="DIR", help="the other checkout (a git worktree)")
    parser.add_argument("--this", metavar="DIR", help="measure this other checkout as 'this' instead")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("paths", nargs="*", help="the trees (default: the installed tensorflow and keras)")
    args = parser.parse_args(argv)
    site = sysconfig.get_paths()["purelib"]
    paths = args.paths or [os.path.join(site, "tensorflow"), os.path.join(site, "keras")]
    lint = ["-m", "tapecheck", "lint", "--no-cache", "--jobs", "1", "-q", "--exit-zero", *paths]
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    other_env = dict(env, PYTHONPATH=os.pathsep.join([os.path.abspath(args.code), site]))
    this_run = ([sys.executable, *lint], env)
    if args.this:
        this_run = ([sys.executable, "-S", *lint], dict(env, PYTHONPATH=os.pathsep.join([os.path.abspath(args.this), site])))
    kinds = {"this": this_run, "other": ([sys.executable, "-S", *lint], other_env)}
    for command, environment in kinds.values():
        cpu_of(command, environment)  # unmeasured: bytecode compiled, files in the page cache
    seconds = {name: [] for name in kinds}
    for round_number in range(args.runs):
        order = list(kinds) if round_number % 2 == 0 else list(reversed(kinds))
        for name in order:
            seconds[name].append(cpu_of(*kinds[name]))
    this, other = statistics.median(seconds["this"]), statistics.median(seconds["other"])
    print(f"cold CPU, one process, median of {args.runs}: this {this:.2f} s, other {other:.2f} s "
          f"({args.code}): ratio {this / other:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

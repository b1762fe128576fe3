"""How fast is `tapecheck lint`, against the libcst parse floor and against ruff? Prints figures.

    python benchmarks/lint_speed.py                      # installed tensorflow+keras, 3 runs
    python benchmarks/lint_speed.py --runs 5 PATH...     # another tree
    python benchmarks/lint_speed.py --quick              # the bundled fixtures only

Every figure is the median of `--runs` runs of a fresh process (start to exit), the
kinds interleaved within each round so that load from other work on the machine
falls on all of them alike. Wall seconds and CPU seconds (user+system of the whole
process tree: workers included) are both shown; on a shared machine CPU seconds are
the steadier measure of work, wall seconds what a user waits.

- tapecheck cold: `tapecheck lint --no-cache` (processes chosen by the amount of work),
  and the same with `--jobs 1` (one process).
- tapecheck warm: the same tree again with the cache filled by the run just before.
- libcst floor: a process that only reads and `libcst.parse_module`s the files
  tapecheck parses (those that pass its screen): the least any libcst tool can do.
- unvalidated parse: the same with tapecheck's own parse, which skips libcst's
  re-validation of each parsed node (see fastcst.parse_module); against it, the cold
  run shows what positions, the walk and the rules add to the parse.
- ruff: `ruff check --no-cache --isolated` of the same tree, when ruff is installed.
- one small file end to end, the pre-commit case, beside `python -c "import libcst"`
  (the floor of any libcst tool's start-up) and `tapecheck --version`.

Bytecode: every measured process runs with bytecode writing allowed
(PYTHONDONTWRITEBYTECODE is removed from its environment, as no real install sets it)
and every command runs once unmeasured first, so the .pyc files exist and no figure
includes compiling tapecheck's or libcst's source (~70 ms a process otherwise).

Peak memory is the largest resident size the process tree reached, sampled from /proc
every 10 ms on Linux (else the largest single process from getrusage): summed RSS, and
summed PSS, which counts a page forked workers share with their parent once.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from importlib.util import find_spec
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FLOOR = """
import sys, libcst
parse_module = libcst.parse_module
if sys.argv[2:] == ["--unvalidated"]:
    from tapecheck.lint.fastcst import parse_module
for name in open(sys.argv[1], encoding="utf-8").read().splitlines():
    with open(name, "rb") as handle:
        source = handle.read()
    try:
        parse_module(source)
    except Exception:
        pass
"""


def default_tree() -> list[str]:
    paths = []
    for name in ("tensorflow", "keras"):
        spec = find_spec(name)  # finds the package without importing it
        if spec is not None and spec.submodule_search_locations:
            paths.append(next(iter(spec.submodule_search_locations)))
    return paths


def _tree_memory(pid: int) -> tuple[int, int]:
    """Resident bytes of a process and all its descendants (Linux /proc): summed RSS, which
    counts pages a forked worker shares with its parent once per process, and summed PSS,
    which splits each shared page among the processes sharing it (what the tree really holds)."""
    rss = pss = 0
    stack = [pid]
    while stack:
        current = stack.pop()
        try:
            with open(f"/proc/{current}/statm") as handle:
                resident = int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
            rss += resident
            try:
                with open(f"/proc/{current}/smaps_rollup") as handle:
                    pss += next(int(line.split()[1]) * 1024 for line in handle if line.startswith("Pss:"))
            except (OSError, StopIteration):
                pss += resident
            for task in os.listdir(f"/proc/{current}/task"):
                with open(f"/proc/{current}/task/{task}/children") as handle:
                    stack.extend(int(child) for child in handle.read().split())
        except (OSError, ValueError):
            continue
    return rss, pss


def child_env() -> dict[str, str]:
    """This environment, less PYTHONDONTWRITEBYTECODE: measured processes read (and, when
    priming, write) .pyc files, as an installed tapecheck does."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def prime(commands, cwd: str) -> None:
    """Run each command once, unmeasured: writes the .pyc files its imports need."""
    for command in commands:
        subprocess.run(command, cwd=cwd, env=child_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       check=False)


def measure(command: list[str], cwd: str) -> dict:
    """Wall seconds, CPU seconds and peak tree memory of one run of `command`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    process = subprocess.Popen(command, cwd=cwd, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    peak = [0, 0]  # summed RSS, summed PSS
    sampling = os.path.isdir("/proc/self/task")

    def sample():
        while process.poll() is None:
            rss, pss = _tree_memory(process.pid)
            peak[0], peak[1] = max(peak[0], rss), max(peak[1], pss)
            time.sleep(0.01)

    sampler = threading.Thread(target=sample, daemon=True)
    if sampling:
        sampler.start()
    output, _ = process.communicate()
    wall = time.perf_counter() - start
    if sampling:
        sampler.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    largest = after.ru_maxrss * (1 if sys.platform == "darwin" else 1024)
    if process.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(command)} failed ({process.returncode}):\n{output.decode()[-2000:]}")
    return {"wall": wall, "cpu": cpu, "memory": peak[0] or largest, "pss": peak[1] or largest,
            "output": output.decode()}


def screened_files(paths: list[str]) -> tuple[list[str], int, int, int]:
    """Files tapecheck would lint, those it parses, and the lines of each set."""
    from tapecheck.lint.engine import LintError, read_source
    from tapecheck.lint.files import discover
    from tapecheck.lint.parallel import _needs_parse
    from tapecheck.rules import RULES

    files, _ = discover(paths)
    parsed, lines, parsed_lines = [], 0, 0
    for path in files:
        try:
            source = read_source(path)
        except LintError:
            continue
        lines += source.count(b"\n")
        if _needs_parse(path, source, RULES):
            parsed.append(path)
            parsed_lines += source.count(b"\n")
    return parsed, len(files), lines, parsed_lines


def median(results: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in results)


def bench_tree(name: str, paths: list[str], runs: int, work: str) -> dict:
    tapecheck = [sys.executable, "-m", "tapecheck", "lint", "--exit-zero"]
    ruff = shutil.which("ruff", path=os.path.dirname(sys.executable)) or shutil.which("ruff")
    parsed, file_count, lines, parsed_lines = screened_files(paths)
    listing = os.path.join(work, f"{name}-parsed.txt")
    Path(listing).write_text("\n".join(os.path.abspath(p) for p in parsed), encoding="utf-8")
    floor_script = os.path.join(work, "floor.py")
    Path(floor_script).write_text(FLOOR)
    project = os.path.join(work, name)  # cwd with a pyproject.toml: the cache lives here
    os.makedirs(project, exist_ok=True)
    Path(project, "pyproject.toml").write_text("[project]\nname = 'bench'\n")
    absolute = [os.path.abspath(p) for p in paths]

    kinds = {
        "tapecheck cold": [*tapecheck, "--no-cache", *absolute],
        "tapecheck cold, 1 process": [*tapecheck, "--no-cache", "--jobs", "1", *absolute],
        "tapecheck warm": [*tapecheck, *absolute],
        "libcst parse floor": [sys.executable, floor_script, listing],
        "unvalidated parse": [sys.executable, floor_script, listing, "--unvalidated"],
    }
    if ruff:
        kinds["ruff check (no cache)"] = [ruff, "check", "--no-cache", "--isolated", "--exit-zero", "-q", *absolute]
    results: dict[str, list[dict]] = {kind: [] for kind in kinds}
    summaries = set()
    prime(kinds.values(), project)
    for round_ in range(runs):
        for kind, command in kinds.items():
            if kind == "tapecheck warm":  # fill the cache right before: edits elsewhere change its key
                shutil.rmtree(os.path.join(project, ".tapecheck_cache"), ignore_errors=True)
                measure(command, project)
            result = measure(command, project)
            if "parse" in kind and result["output"]:  # the floors print nothing unless they broke
                raise SystemExit(f"{kind} failed:\n{result['output'][-2000:]}")
            results[kind].append(result)
            if kind.startswith("tapecheck"):
                summaries.add(result["output"].strip().splitlines()[-1] if result["output"].strip() else "")
        print(f"  round {round_ + 1}/{runs} done", file=sys.stderr, flush=True)

    print(f"\n## {name}: {file_count} files, {lines:,} lines; tapecheck parses {len(parsed)} files, "
          f"{parsed_lines:,} lines (the rest fail the byte screen)")
    if len(summaries) != 1:
        print(f"!! tapecheck runs disagree: {sorted(summaries)}")
    else:
        print(f"tapecheck says: {summaries.pop()}")
    print(f"median of {runs} runs, each a fresh process; CPU = user+system of the process tree\n")
    print(f"| {'run':<28} | {'wall s':>8} | {'CPU s':>8} | {'peak RSS MB':>11} | {'peak PSS MB':>11} |")
    print(f"|{'-' * 30}|{'-' * 10}|{'-' * 10}|{'-' * 13}|{'-' * 13}|")
    table = {}
    for kind, measured in results.items():
        table[kind] = {key: median(measured, key) for key in ("wall", "cpu", "memory", "pss")}
        row = table[kind]
        print(f"| {kind:<28} | {row['wall']:>8.2f} | {row['cpu']:>8.2f} | {row['memory'] / 2**20:>11.0f} "
              f"| {row['pss'] / 2**20:>11.0f} |")
    floor = table["libcst parse floor"]
    cold, single, warm = table["tapecheck cold"], table["tapecheck cold, 1 process"], table["tapecheck warm"]
    print()
    print(f"cold / floor:            wall {cold['wall'] / floor['wall']:.2f}x   CPU {cold['cpu'] / floor['cpu']:.2f}x")
    print(f"cold 1 process / floor:  wall {single['wall'] / floor['wall']:.2f}x   CPU {single['cpu'] / floor['cpu']:.2f}x")
    own = table["unvalidated parse"]
    print(f"cold 1 process / unvalidated parse: wall {single['wall'] / own['wall']:.2f}x   "
          f"CPU {single['cpu'] / own['cpu']:.2f}x   (unvalidated / floor: CPU {own['cpu'] / floor['cpu']:.2f}x)")
    if ruff:
        rf = table["ruff check (no cache)"]
        print(f"warm / ruff:             wall {warm['wall'] / rf['wall']:.2f}x   CPU {warm['cpu'] / rf['cpu']:.2f}x")
        print(f"cold / ruff:             wall {cold['wall'] / rf['wall']:.2f}x")
    print(f"largest parsed file peak (floor process): {floor['memory'] / 2**20:.0f} MB")
    return table


def bench_small_file(runs: int, work: str) -> None:
    small = min((p for p in (ROOT / "fixtures" / "good").glob("*.py")), key=lambda p: p.stat().st_size)
    project = os.path.join(work, "small")
    os.makedirs(project, exist_ok=True)
    Path(project, "pyproject.toml").write_text("[project]\nname = 'bench'\n")
    base = [sys.executable, "-m", "tapecheck", "lint", "--exit-zero"]
    kinds = {"cold (--no-cache)": [*base, "--no-cache", str(small)], "warm (cached)": [*base, str(small)],
             "tapecheck --version": [sys.executable, "-m", "tapecheck", "--version"],
             'python -c "import libcst"': [sys.executable, "-c", "import libcst"]}
    results: dict[str, list[dict]] = {kind: [] for kind in kinds}
    prime(kinds.values(), project)  # .pyc written, and the cache filled for the warm runs
    for _ in range(max(runs, 5)):
        for kind, command in kinds.items():
            results[kind].append(measure(command, project))
    lines = small.read_bytes().count(b"\n")
    print(f"\n## one small file end to end ({small.relative_to(ROOT)}, {lines} lines; median of {max(runs, 5)})\n")
    for kind, measured in results.items():
        print(f"- {kind}: {median(measured, 'wall'):.3f} s wall, {median(measured, 'cpu'):.3f} s CPU, "
              f"{median(measured, 'memory') / 2**20:.0f} MB")
    floor = median(results['python -c "import libcst"'], "wall")
    cold, warm = median(results["cold (--no-cache)"], "wall"), median(results["warm (cached)"], "wall")
    print(f"- cold / import libcst: {cold / floor:.2f}x wall ({(cold - floor) * 1000:+.0f} ms); "
          f"warm / import libcst: {warm / floor:.2f}x wall ({(warm - floor) * 1000:+.0f} ms)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", help="the tree (default: the installed tensorflow and keras)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="only the bundled fixtures and the small file")
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average "
          f"{', '.join(f'{x:.1f}' for x in os.getloadavg())} at start")
    removed = " (removed: it is set here)" if "PYTHONDONTWRITEBYTECODE" in os.environ else ""
    print(f"measured processes run without PYTHONDONTWRITEBYTECODE{removed}; each command runs once "
          "unmeasured first (writes the .pyc files), so no figure includes compiling source")
    with tempfile.TemporaryDirectory(prefix="tapecheck-bench-") as work:
        bench_tree("fixtures", [str(ROOT / "fixtures")], args.runs, work)
        if not args.quick:
            paths = args.paths or default_tree()
            if not paths:
                raise SystemExit("tensorflow/keras are not installed here: name a tree to measure")
            bench_tree("tree", paths, args.runs, work)
        bench_small_file(args.runs, work)
    print(f"\nload average {', '.join(f'{x:.1f}' for x in os.getloadavg())} at the end")


if __name__ == "__main__":
    main()

"""Lint many files: screen in this process, serve cached results, spread the parsing over processes.

The parent reads each file once and applies the byte screen; a file no rule can
fire on is finished there (it is never parsed, so it is never cached or sent
anywhere). A file that passes is looked up in the cache, and the misses are
linted here (small runs) or by worker processes (large runs). Each file's
result is the same object `lint_file` would give, and results come back in the
order of `paths`, so a run with any number of processes equals a single-process
run.
"""

from __future__ import annotations

import gc
import os
import re
import stat as stat_module
from collections.abc import Iterable, Sequence
from contextlib import contextmanager
from contextvars import ContextVar

from tapecheck.findings import FileError
from tapecheck.lint.engine import Report, lint_source, may_fire
from tapecheck.lint.source import LintError, read_source, syntax_problem
from tapecheck.rules import RULES, RULES_BY_CODE, Rule

# Below this much work a pool costs more than it saves (start-up ~0.1 s per worker).
MIN_PARALLEL_FILES = 8
MIN_PARALLEL_BYTES = 512 * 1024


# Keras 2 is decided per file, from what the file's own code does (never from a comment, a
# string, or another file): it imports `tf_keras`, or it sets `TF_USE_LEGACY_KERAS` (the switch
# that makes `tf.keras` Keras 2) in the environment: `os.environ["TF_USE_LEGACY_KERAS"] = "1"`,
# `os.environ.setdefault(...)` / `.update(...)`, `os.putenv(...)`, `monkeypatch.setenv(...)`, or
# a notebook's `%env TF_USE_LEGACY_KERAS=1`. Where it sets it does not matter: treating a file
# as Keras 2 only silences or rewords findings (TAP302, TAP404), the safe direction.
KERAS2_MARKER = re.compile(rb"\b(?:import|from)[ \t]+tf_keras\b|TF_USE_LEGACY_KERAS")
_SWITCH = "TF_USE_LEGACY_KERAS"
_ON = ("1", "true", "True")  # what TensorFlow's check accepts
_ENV_MAGIC = re.compile(r"^#env\s+TF_USE_LEGACY_KERAS(?:\s*=\s*|\s+)(\S*)\s*$")  # `%env`, as notebooks.py writes it


def keras2_marked(source: bytes) -> bool:
    """KERAS2_MARKER occurs in `source` (a byte screen: a mention, maybe in a comment; the
    decision is keras2_reason's). Its pattern starts with `\\b`, so `re` tries it at every
    byte: the plain substring tests first (memchr speed) made the search of the 2,815 files
    of tensorflow+keras 0.04 s, was 0.63 s."""
    if b"tf_keras" not in source and b"TF_USE_LEGACY_KERAS" not in source:
        return False
    return KERAS2_MARKER.search(source) is not None


def keras2_reason(source: bytes, path: str) -> str | None:
    """Why this file's code targets Keras 2 ("line 3: `import tf_keras as keras`"), or None."""
    if not keras2_marked(source):
        return None
    import ast

    where = lambda line: f"line {line}"  # noqa: E731
    text = source
    if path.endswith(".ipynb"):
        from tapecheck.lint.notebooks import NotebookError, notebook_program

        try:
            program = notebook_program(source)
        except NotebookError:
            return None

        def where(line):  # noqa: F811
            cell, at = program.line_map[line - 1] if 0 < line <= len(program.line_map) else (None, line)
            return f"cell {cell}, line {at}" if cell is not None else f"line {at}"

        text = program.source
        for number, line in enumerate(text.splitlines(), start=1):
            magic = _ENV_MAGIC.match(line)
            if magic and magic.group(1).strip("'\"") in _ON:
                return f"{where(number)}: `%env {_SWITCH}={magic.group(1)}`"
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    lines = text.splitlines() if isinstance(text, str) else text.decode("utf-8", "replace").splitlines()

    def said(node) -> str:
        code = lines[node.lineno - 1].strip() if 0 < node.lineno <= len(lines) else ""
        return f"{where(node.lineno)}: `{code[:100]}`"

    def switched_on(value) -> bool:  # a constant other than "1"/"true" leaves Keras 3; unknown: Keras 2
        return not isinstance(value, ast.Constant) or str(value.value) in _ON

    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "tf_keras" for a in node.names):
            return said(node)
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "tf_keras":
            return said(node)
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if (isinstance(target, ast.Subscript) and isinstance(target.slice, ast.Constant)
                        and target.slice.value == _SWITCH and switched_on(node.value)):
                    return said(node)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            name, args = node.func.attr, node.args
            if name in ("setdefault", "putenv", "setenv") and len(args) >= 2:
                if isinstance(args[0], ast.Constant) and args[0].value == _SWITCH and switched_on(args[1]):
                    return said(node)
            elif name == "update":
                pairs = [(k.arg, k.value) for k in node.keywords]
                if args and isinstance(args[0], ast.Dict):
                    pairs += [(k.value, v) for k, v in zip(args[0].keys, args[0].values) if isinstance(k, ast.Constant)]
                if any(key == _SWITCH and switched_on(value) for key, value in pairs):
                    return said(node)
    return None


_keras2_files: ContextVar[dict | None] = ContextVar("tapecheck_keras2_files", default=None)


@contextmanager
def collecting_keras2_markers():
    """Within it, each file read whose own code targets Keras 2 is added to the yielded dict,
    path -> why (keras2_reason), as the files are linted: no second pass over the files."""
    found: dict[str, str] = {}
    token = _keras2_files.set(found)
    try:
        yield found
    finally:
        _keras2_files.reset(token)


def _note_markers(path: str, source: bytes) -> None:
    found = _keras2_files.get()
    if found is not None:
        reason = keras2_reason(source, path)
        if reason is not None:
            found[path] = reason


def available_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _dependency_stat(deps, stamps: dict[str, str]) -> str:
    """The project files a file imports, by path, size and modification time: its results depend
    on what the program model read in them. Unknown (an entry from before): never a hit.
    `stamps` keeps each file's stamp for the run: a module many files import is stat'ed once."""
    if deps is None:
        return "\0deps?" + os.urandom(8).hex()
    parts = []
    for dependency in deps:
        stamp = stamps.get(dependency)
        if stamp is None:
            try:
                st = os.stat(dependency)
                stamp = f"{dependency}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"
            except OSError:
                stamp = f"{dependency}:?"
            stamps[dependency] = stamp
        parts.append(stamp)
    return "\0" + "\0".join(parts)


def _needs_parse(path: str, source: bytes, rules: Sequence[Rule]) -> bool:
    # Notebooks are JSON: their code is screened cell by cell after decoding.
    return path.endswith(".ipynb") or may_fire(source, rules)


def _lint_one(path: str, source: bytes, rules: Sequence[Rule], budget: float | None = None) -> Report:
    """Lint a file `_needs_parse` admitted (every caller asks it first). `budget`: seconds the
    analysis may take (None: no limit); over it, the file's report is one error saying so."""
    report = Report(files_checked=1)
    try:
        with time_budget(budget):
            report.findings = lint_source(source, path, rules, screened=True)
    except LintError as exc:
        report.errors.append(FileError(path, str(exc)))
    except OverBudget:
        report.errors.append(FileError(path, stopped_message(budget)))
    return report


# -- the per-file time budget ---------------------------------------------------------

DEFAULT_TIME_BUDGET = 30.0  # seconds per file; `file-time-budget` in [tool.tapecheck], --file-time-budget
STOPPED = "analysis stopped after "  # how a file over its budget is reported (never cached)


def stopped_message(budget: float) -> str:
    return (f"{STOPPED}{budget:g} s (the per-file time budget; raise it with --file-time-budget "
            f"or file-time-budget in [tool.tapecheck]); the rest was linted")


class OverBudget(BaseException):
    """Raised by the timer into the analysis of a file over its budget. A BaseException: the
    engine's `except Exception` around each rule (a rule's bug becomes a file error) lets it by."""


def _over_budget(signum, frame):
    raise OverBudget()


@contextmanager
def time_budget(seconds: float | None):
    """Within it, the main thread is interrupted by OverBudget after `seconds` (a real-time
    timer, SIGALRM). Elsewhere (another thread, no SIGALRM, no budget) it does nothing, and
    where the program already uses the alarm (a handler of its own, or a timer running, as
    pytest-timeout does) it leaves it alone: no budget rather than a broken alarm."""
    import signal
    import threading

    if (not seconds or seconds <= 0 or not hasattr(signal, "setitimer")
            or threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGALRM) not in (signal.SIG_DFL, signal.SIG_IGN, _over_budget)
            or signal.getitimer(signal.ITIMER_REAL)[0] > 0):
        yield
        return
    previous = signal.signal(signal.SIGALRM, _over_budget)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)




def screened_out(path: str, source: bytes) -> Report:
    """The result of a file no selected rule can fire on: clean, or the reason it is not Python."""
    report = Report(files_checked=1)
    problem = syntax_problem(source)
    if problem is not None:
        report.errors.append(FileError(path, problem))
    return report


def lint_stdin(stream, name: str, rules: Sequence[Rule]) -> tuple[bytes, Report]:
    """Read standard input (at most the limit files have, not all of memory) and lint it as `name`."""
    from tapecheck.lint.engine import MAX_FILE_BYTES

    data = stream.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        report = Report(files_checked=1)
        report.errors.append(FileError(name, f"input too large to lint (over {MAX_FILE_BYTES // 2**20} MiB)"))
        return b"", report
    _note_markers(name, data)
    if not _needs_parse(name, data, rules):
        return data, screened_out(name, data)
    return data, _lint_one(name, data, rules)


def _learn(path: str, source: bytes, rules: Sequence[Rule], with_digest: bool) -> dict:
    """What a run needs to know from a file's bytes (and the stat index keeps, see cache.py)."""
    if _needs_parse(path, source, rules):
        screen = None
    else:
        screen = [error.message for error in screened_out(path, source).errors]
    return {
        "digest": content_digest_of(source) if with_digest else "",
        "screen": screen,
        "keras2": keras2_reason(source, path),  # why it is Keras 2, or None
    }


def content_digest_of(source: bytes) -> str:
    from tapecheck.lint.cache import content_digest

    return content_digest(source)


def _stat(path: str):
    try:
        status = os.stat(path)
    except OSError:
        return None
    return status if stat_module.S_ISREG(status.st_mode) else None


def lint_files(paths: Sequence[str], rules: Sequence[Rule], jobs: int | None = None, cache=None,
               budget: float | None = DEFAULT_TIME_BUDGET) -> Report:
    """`lint_file` for every path, merged in order. `jobs`: None picks, 1 is one process.

    `cache`: a `tapecheck.lint.cache.Cache`, True for the default one, None/False for none.
    With a cache, each file is stat'ed first and read only if it changed since the last run
    (the cache's stat index). What a file's results depend on in other files (the project
    modules the program model reads for it) is part of its cache key. `budget`: seconds each
    file's analysis may take (None: no limit); a file over it is one error, never cached.
    """
    if cache is True:
        from tapecheck.lint.cache import Cache

        cache = Cache(rule_codes=[rule.code for rule in rules])
    stats = cache.stat_index() if cache else None
    results: list[Report | None] = [None] * len(paths)
    dependency_stamps: dict[str, str] = {}
    record_deps: dict[str, list | None] = {}
    statuses: dict[str, object] = {}
    admitted: list[tuple[int, str, bytes | None, str]] = []  # index, path, source (None: unread), digest
    for position, path in enumerate(paths):
        status = _stat(path) if stats is not None else None  # taken before reading: a later edit changes it
        statuses[path] = status
        record = stats.lookup(path, status) if stats is not None else None
        if record is not None and ("deps" not in record or record.get("keras2") is True):
            record = None  # remembered before imports (or why it is Keras 2) were recorded: read it again, once
        source = None
        if record is None:
            try:
                source = read_source(path)
            except LintError as exc:
                results[position] = Report(errors=[FileError(path, str(exc))], files_checked=1)
                continue
            record = _learn(path, source, rules, with_digest=bool(cache))
            if cache:
                from tapecheck.model.project import dependencies

                # project files the model may read for it (a screened-out file has no cached results)
                record["deps"] = dependencies(path, source) if record["screen"] is None else []
            if stats is not None:
                stats.store(path, status, record)
        if record["keras2"]:
            found = _keras2_files.get()
            if found is not None:
                found[path] = record["keras2"]
        if record["screen"] is not None:  # no rule can fire: finished here (never parsed, nothing to cache)
            results[position] = Report(errors=[FileError(path, m) for m in record["screen"]], files_checked=1)
            continue
        record_deps[path] = record.get("deps")
        admitted.append((position, path, source, record["digest"]))

    pending: list[tuple[int, str, bytes, str | None]] = []  # index, path, source, cache key
    pending_bytes = 0
    for position, path, source, digest in admitted:
        key = None
        if cache:
            key = cache.key_for(path, digest + _dependency_stat(record_deps.get(path), dependency_stamps))
            hit = cache.get(key, path)
            if hit is not None:
                results[position] = Report(findings=hit[0], errors=hit[1], files_checked=1)
                continue
            if source is None:  # remembered, but its results are not cached (evicted, or a module it reads changed)
                try:
                    source = read_source(path)
                except LintError as exc:
                    results[position] = Report(errors=[FileError(path, str(exc))], files_checked=1)
                    continue
                if content_digest_of(source) != digest:  # changed under an unchanged stat: learn it again
                    from tapecheck.model.project import dependencies

                    record = _learn(path, source, rules, with_digest=True)
                    record["deps"] = dependencies(path, source) if record["screen"] is None else []
                    if stats is not None:
                        stats.store(path, statuses.get(path), record)
                    if record["screen"] is not None:
                        results[position] = Report(errors=[FileError(path, m) for m in record["screen"]], files_checked=1)
                        continue
                    key = cache.key_for(path, record["digest"] + _dependency_stat(record["deps"], dependency_stamps))
        pending.append((position, path, source, key))
        pending_bytes += len(source)

    workers = _choose_jobs(jobs, len(pending), pending_bytes, rules)
    if workers <= 1:  # each file is linted with the cyclic collector paused (engine.no_cyclic_collection)
        if pending and budget:
            import tapecheck.lint.extract  # noqa: F401  (its imports are not the first file's analysis)
        done = [_lint_one(path, source, rules, budget) for _, path, source, _ in pending]
    else:
        done = _in_processes(pending, rules, workers, budget)
    for (position, path, _, key), report in zip(pending, done):
        results[position] = report
        if report.errors and any(e.message.startswith((STOPPED, NOT_LINTED)) for e in report.errors):
            continue  # not a result of the file's contents: the next run tries it again
        if cache and key is not None:
            cache.put(key, path, report.findings, report.errors)
    if stats is not None:
        stats.save()

    merged = Report()
    for report in results:
        merged.extend(report)
    return merged


def _choose_jobs(jobs: int | None, files: int, size: int, rules: Sequence[Rule]) -> int:
    if any(RULES_BY_CODE.get(rule.code) is not rule for rule in rules):
        return 1  # rules outside the catalog cannot be named to another process
    if not may_start_processes():
        return 1  # a worker (or any process but the one that imported this module) never starts more
    if jobs is not None and jobs > 0:
        return min(jobs, max(files, 1), MAX_WORKERS)
    if files < MIN_PARALLEL_FILES or size < MIN_PARALLEL_BYTES:
        return 1
    return max(1, min(available_cpus(), files // 4, MAX_WORKERS))


# -- worker processes ---------------------------------------------------------------
#
# Bounded by construction (issue 25: a chain of 2,529 lint processes once filled a machine):
# - only the process that imported this module, and is no multiprocessing child, starts
#   workers (`may_start_processes`); a worker marks itself and never starts any;
# - a worker that fails before its first task (its initializer) leaves with `os._exit`, never
#   returning into code it inherited from the parent; a worker whose parent dies exits too;
# - a run starts at most MAX_WORKERS + MAX_RESTARTS processes, whatever fails; a file whose
#   worker died, once the run may start no more, is reported as not linted, and the run goes on;
# - a pool that cannot be started (fork refused: `ulimit -u`, memory) is not retried: the
#   files are linted in this process.
# Start method: fork where this process has one thread (a worker inherits the imports: a pool
# of 2 answered its first task in 0.02-0.06 s here, forkserver 2.0-2.4 s, spawn 1.6-2.2 s, as
# each of those imports libcst and the rules again); spawn otherwise (fork with threads is unsafe).

MAX_WORKERS = 32  # processes of one pool, even for --jobs 1000
MAX_RESTARTS = 8  # processes a run may start after its pool broke (one per death)
NOT_LINTED = "not linted: "  # how a file no process could lint is reported (never cached)

# Test-only fault injection, read by the workers alone (tests/test_processes.py). Unset in
# normal runs: then each batch costs one dictionary look-up. Values, `;`-separated:
#   init-raise         the worker's initializer raises (the worker dies before any task)
#   kill:NAME          the worker SIGKILLs itself before linting a file named NAME
#   kill-once:NAME:P   the same, only while the file P does not exist (it creates P first)
#   hang:NAME          the worker sleeps (a minute) before linting NAME
FAULT_ENV = "TAPECHECK_TEST_FAULT"

_OWNER_PID = os.getpid()
_in_worker = False


def may_start_processes() -> bool:
    """Whether this process may create a pool: it is the one that imported this module (not a
    fork of it), it is no multiprocessing child (spawned children import the module afresh)
    and it is not a worker."""
    if _in_worker or os.getpid() != _OWNER_PID:
        return False
    import multiprocessing

    return multiprocessing.parent_process() is None


def _inject_fault(path: str | None) -> None:
    faults = os.environ.get(FAULT_ENV)
    if not faults:
        return
    import signal
    import time

    name = os.path.basename(path) if path is not None else None
    for fault in faults.split(";"):
        kind, _, arg = fault.partition(":")
        if path is None and kind == "init-raise":
            raise RuntimeError(f"{FAULT_ENV}: init-raise")
        if path is None:
            continue
        if kind == "kill" and arg == name:
            os.kill(os.getpid(), signal.SIGKILL)
        elif kind == "kill-once":
            target, _, marker = arg.partition(":")
            if target == name and not os.path.exists(marker):
                open(marker, "w").close()
                os.kill(os.getpid(), signal.SIGKILL)
        elif kind == "hang" and arg == name:
            time.sleep(60)


def _watch_parent(parent: int) -> None:
    import time

    while os.getppid() == parent:
        time.sleep(0.25)
    os._exit(0)  # the parent is gone (killed, timed out): nobody will read this worker's results


def _init_worker(parent: int) -> None:
    global _in_worker
    _in_worker = True
    try:
        import threading

        threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
        _inject_fault(None)
        gc.freeze()  # what the imports made: never scanned again
    except BaseException:  # noqa: B036 - a worker that cannot start leaves, whatever the reason
        os._exit(70)


def _ready() -> int:
    return os.getpid()


def _work(path: str, source: bytes, codes: tuple[str, ...], budget: float | None = None) -> Report:
    _inject_fault(path)
    return _lint_one(path, source, [RULES_BY_CODE[code] for code in codes], budget)


def _work_many(items: list[tuple[str, bytes]], codes: tuple[str, ...], budget: float | None = None) -> list[Report]:
    rules = [RULES_BY_CODE[code] for code in codes]
    done = []
    for path, source in items:
        _inject_fault(path)
        done.append(_lint_one(path, source, rules, budget))
    return done


# Files go to the workers in batches of about this many bytes of source (one large file alone):
# one task per file costs the parent a few ms each in pickling and bookkeeping, which a few
# hundred small files add up to; batches this size still leave each worker many tasks to balance.
BATCH_BYTES = 256 * 1024


def _batches(pending, order: list[int]) -> list[list[int]]:
    """`order` (largest file first) cut into runs of about BATCH_BYTES of source."""
    batches: list[list[int]] = []
    size = BATCH_BYTES
    for i in order:
        if size >= BATCH_BYTES:
            batches.append([])
            size = 0
        batches[-1].append(i)
        size += len(pending[i][2])
    return batches


def _context():
    import multiprocessing
    import threading

    methods = multiprocessing.get_all_start_methods()
    # fork shares the parent's imports (libcst, the rules) for free; only safe without threads.
    if "fork" in methods and threading.active_count() == 1:
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context("spawn")


class _CannotStart(Exception):
    """No worker process could be started, or none lived to take its first task."""


def _pool(workers: int):
    from concurrent.futures import ProcessPoolExecutor

    return ProcessPoolExecutor(workers, mp_context=_context(), initializer=_init_worker, initargs=(os.getpid(),))


def _in_processes(pending, rules: Sequence[Rule], workers: int, budget: float | None = None) -> list[Report]:
    from concurrent.futures.process import BrokenProcessPool

    import tapecheck.lint.extract  # noqa: F401  (imported once here, inherited by forked workers)

    codes = tuple(rule.code for rule in rules)
    # Largest files first, so no worker is left with a big one at the end.
    order = sorted(range(len(pending)), key=lambda i: -len(pending[i][2]))
    done: list[Report | None] = [None] * len(pending)
    try:
        with _pool(workers) as pool:
            futures = [
                (batch, pool.submit(_work_many, [(pending[i][1], pending[i][2]) for i in batch], codes, budget))
                for batch in _batches(pending, order)
            ]
            for batch, future in futures:
                for i, report in zip(batch, future.result()):
                    done[i] = report
    except BrokenProcessPool:
        # A worker died (killed, a crash in native code, or before its first task): the pool is
        # gone with every file still in flight. Retry those in a pool of one process, one file
        # at a time, so only the guilty file is reported; each death costs one new process, as
        # long as the run may start one.
        left = [i for i in order if done[i] is None]
        try:
            for i, report in zip(left, _one_by_one([(pending[i][1], pending[i][2]) for i in left], codes,
                                                   budget, workers)):
                done[i] = report
        except _CannotStart:  # not these files: processes do not start or do not live here
            for i in left:
                if done[i] is None:
                    done[i] = _lint_one(pending[i][1], pending[i][2], rules, budget)
    except (OSError, RuntimeError):
        # The pool could not start (fork or a thread refused: `ulimit -u`, memory): lint here.
        for i in order:
            if done[i] is None:
                done[i] = _lint_one(pending[i][1], pending[i][2], rules, budget)
    return done


def _not_linted(path: str, why: str) -> Report:
    return Report(errors=[FileError(path, NOT_LINTED + why)], files_checked=1)


def _one_by_one(items, codes: tuple[str, ...], budget: float | None, workers: int):
    """Yield each file's report, linted by a process of a one-process pool, started again after
    each death (at most MAX_RESTARTS times). _CannotStart when a new process fails before its
    first task (it never answered `_ready`), or cannot be started at all."""
    from concurrent.futures.process import BrokenProcessPool

    restarts = MAX_RESTARTS
    pool = None
    try:
        for path, source in items:
            if pool is None:
                if restarts <= 0:
                    yield _not_linted(path, f"worker processes kept dying, and this run started the most "
                                            f"processes it may ({workers} + {MAX_RESTARTS} after failures)")
                    continue
                restarts -= 1
                try:
                    pool = _pool(1)
                    pool.submit(_ready).result()
                except (BrokenProcessPool, OSError, RuntimeError):
                    raise _CannotStart() from None
            try:
                yield pool.submit(_work, path, source, codes, budget).result()
            except BrokenProcessPool:
                yield _not_linted(path, "the linting process died on this file (please report it)")
                pool.shutdown(wait=True)
                pool = None
    finally:
        if pool is not None:
            pool.shutdown(wait=True)


def lint_paths(paths: Iterable[str], rules: Sequence[Rule] = RULES, *, jobs: int | None = None, cache=None) -> Report:
    """Lint files and folders. `jobs`: processes (None: chosen by the amount of work, 1: this
    process only); `cache`: True for `.tapecheck_cache`, or a `cache.Cache` (see parallel.py)."""
    from tapecheck.lint.files import discover

    report = Report()
    files, errors = discover(paths)
    report.errors.extend(errors)
    report.extend(lint_files(files, rules, jobs=jobs, cache=cache))
    report.findings.sort()
    report.errors.sort()
    return report

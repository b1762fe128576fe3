"""Files to facts: read a file, check what libcst may see, parse it once, walk it into facts.

`read_source` reads a file within the size limit (a FIFO or a device is refused); the checks
(`_checked`) refuse binaries, undecodable text and code nested too deeply for libcst's parser;
`facts_of` parses (a large file in parts) and runs the one walk (`extract`) on a deep stack
when it must; `syntax_problem` says, with Python's own parser, why a file the screen skipped is
not Python. Every failure is a `LintError` whose message names the problem, never the file.
Nothing here knows rules or the program model.
"""

from __future__ import annotations

import gc
import os
import re
import stat
from contextlib import contextmanager
from itertools import accumulate

MAX_FILE_BYTES = 10 * 1024 * 1024  # larger files are generated code, not training loops


class LintError(Exception):
    """A file that cannot be linted; the message names the problem, not the file."""


def _check_encoding(source: bytes) -> str:
    """The decoded text of the file; LintError when it does not decode with its encoding."""
    import io
    import tokenize

    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(source).readline)
    except SyntaxError as exc:
        if "unknown encoding" in str(exc):
            raise LintError(f"{exc}: the coding cookie names an encoding Python does not know") from None
        encoding = "utf-8"  # no usable cookie and undecodable first lines: say where
    try:
        return source.decode(encoding)
    except UnicodeDecodeError as exc:
        line = source.count(b"\n", 0, exc.start) + 1
        raise LintError(
            f"not valid {encoding} (byte {exc.start}, line {line}); declare the file's encoding with a coding cookie"
        ) from None


def _decoded(source: bytes) -> str:
    """The file's text; LintError for a binary file or one that does not decode."""
    if b"\0" in source:
        raise LintError("binary file (contains NUL bytes), not Python source")
    return _check_encoding(source)


def _checked(source: bytes) -> tuple[str, object]:
    """The checks before libcst may see a file: its decoded text and, when Python's parser ran, its `ast` tree."""
    return _decoded(source), _check_nesting(source)


def parse(source: bytes):
    """Parse a whole file with libcst (which honours coding cookies and BOMs)."""
    _checked(source)
    return _libcst_parse(source)


def _libcst_parse(source: bytes | str):
    import libcst as cst

    from tapecheck.lint.fastcst import parse_module

    try:
        return parse_module(source)
    except cst.ParserSyntaxError as exc:
        raise LintError(_syntax_error_message(source, exc)) from None
    except UnicodeDecodeError as exc:
        raise LintError(f"cannot decode as {exc.encoding} at byte {exc.start}; declare the encoding with a coding cookie") from None
    except (LookupError, SyntaxError) as exc:
        raise LintError(f"cannot read source: {exc}") from None
    except RecursionError:
        raise LintError("expression nested too deeply to parse") from None


# libcst's native parser recurses on the C stack with no limit of its own: a few thousand
# nested operators (`a and a and ...`, `x[0][0]...`, `lambda: lambda: ...`) or ~1500 nested
# brackets kill the whole process with SIGSEGV, and its time grows faster than linearly
# with depth (5000 chained `+` take ~45 s). Python gives up near 3000 levels and at 200
# brackets. Code nested deeper than MAX_NESTING is refused before libcst sees it.
MAX_NESTING = 1000


NESTING_SCREEN = 400  # below this many nesting tokens in the whole file, no check is needed


_NESTING_TOKENS = re.compile(rb"[-+~*/%@&|^<>.(\[{]|\b(?:not|and|or|if|else|lambda|await|yield)\b")


# The same count line by line, in C: each keyword becomes one `~`, then every byte that is
# neither a one-byte token nor a line break is deleted (a test compares it with findall).
_NESTING_KEYWORDS = re.compile(rb"\b(?:not|and|or|if|else|lambda|await|yield)\b")


_NOT_NESTING_BYTES = bytes(sorted(set(range(256)) - set(b"-+~*/%@&|^<>.([{\n")))


def nesting_tokens_per_line(source: bytes):
    """How many `_NESTING_TOKENS` each line of `source` (split on \\n) holds."""
    return map(len, _NESTING_KEYWORDS.sub(b"~", source).translate(None, _NOT_NESTING_BYTES).split(b"\n"))


# Below a node, `ast` nests at most 3 levels per nesting token on its lines (`a[x:b[...], 0]`
# is Subscript > Tuple > Slice per `[`; 4 keeps a margin), plus at most 2 per indentation
# level for statements without a token (`for`, `try`, `with`), which Python caps at 100.
# A subtree whose lines hold few tokens cannot reach MAX_NESTING and is not walked: the
# check walks little more than the statements (a test compares it with the full walk).
LEVELS_PER_TOKEN = 4


STATEMENT_LEVELS = 2 * 100 + 3


def _check_nesting(source: bytes):
    """Raise LintError for code nested too deeply for libcst to parse safely; else Python's
    `ast` tree of the file when the check needed it (None when the file is plainly shallow)."""
    tokens_before = list(accumulate(nesting_tokens_per_line(source), initial=0))
    if tokens_before[-1] <= NESTING_SCREEN:
        return None  # no expression nests deeper than the operators, brackets and keywords it holds
    try:
        tree = _python_tree(source)
    except SyntaxError as exc:
        if "too many nested parentheses" in str(exc.msg) or "too many levels of indentation" in str(exc.msg):
            raise LintError(f"syntax error at line {exc.lineno}: {exc.msg}") from None
        return None  # other syntax errors (or syntax newer than this Python): libcst reports or parses them
    except (RecursionError, MemoryError):
        raise LintError("expression nested too deeply to parse") from None
    except ValueError:
        return None
    # Python also ends lines at a lone CR: then ast's line numbers do not count the lines split on \\n.
    _check_depth(tree, tokens_before, b"\r" not in source)
    return tree


def _python_tree(source: bytes | str):
    """Python's `ast` of `source`; SyntaxWarnings (invalid escapes) are not ours to print."""
    import ast
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ast.parse(source)


def _check_depth(tree, tokens_before: list[int], bounded: bool) -> None:
    """LintError when a node of `tree` lies more than MAX_NESTING levels deep (walking only the
    subtrees whose lines hold enough nesting tokens to get there, when `bounded`)."""
    import ast

    stack = [(tree, 0)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, ast.BoolOp):
            level += len(node.values) - 2  # libcst nests `a and b and c` one level per operator
        if level > MAX_NESTING:
            where = f" (line {node.lineno})" if hasattr(node, "lineno") else ""
            raise LintError(f"code nested too deeply to lint: more than {MAX_NESTING} levels{where}")
        end = getattr(node, "end_lineno", None)
        if bounded and end is not None:
            tokens = tokens_before[end] - tokens_before[node.lineno - 1]
            if level + LEVELS_PER_TOKEN * tokens + STATEMENT_LEVELS <= MAX_NESTING:
                continue
        stack.extend((child, level + 1) for child in ast.iter_child_nodes(node))


def _run_tree(text: str):
    """Python's `ast` of one run of a file (`parts.respan`), checked as `_check_nesting` checks a
    file; None when it is not valid Python alone, or is nested too deeply (the whole file's check
    then says why)."""
    try:
        tree = _python_tree(text)
        _check_depth(tree, list(accumulate(nesting_tokens_per_line(text.encode("utf-8", "surrogatepass")), initial=0)), True)
    except (SyntaxError, ValueError, RecursionError, MemoryError, LintError):
        return None
    return tree


def _syntax_error_message(source: bytes, exc) -> str:
    """Python's own message when it has one: it points at the right place more often than libcst."""
    try:
        _python_tree(source)
    except SyntaxError as syntax:
        return f"syntax error at line {syntax.lineno}, column {syntax.offset or 1}: {syntax.msg}"
    except (ValueError, RecursionError, MemoryError):
        pass
    else:  # Python accepts it: a libcst limit (e.g. thousands of adjacent string literals), not the user's error
        return f"libcst cannot parse this file, though Python can (line {exc.raw_line}: {exc.message})"
    return f"syntax error at line {exc.raw_line}, column {exc.raw_column + 1}: {exc.message}"


@contextmanager
def no_cyclic_collection():
    """Python's cyclic collector paused while one file is parsed, walked and checked.

    libcst's tree of a file is millions of acyclic objects, freed by reference counting
    when the file is done; while it is alive every collection the parse's allocations set
    off walks it again, and the full ones walk all of it. Measured on the installed
    tensorflow+keras in one process: 37.4 s of CPU with the collector, 29.4 s without
    (`benchmarks/lint_speed.py` shows the run). Nothing a lint builds holds a cycle (the
    program model is closed after the rules ran; a test checks it), so reference counting
    frees it all with the file. A caller that turned the collector off finds it off."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


REUSED_PART_CHARS = 2 * 1024  # the runs of a buffer whose trees are kept (`trees`): an edit re-parses one


def facts_of(source: bytes, path: str, keep: list | None = None, trees=None):
    """The facts of one file's source (`FileFacts`): checked, parsed (in parts when large), walked
    once. Raises LintError on bad input. `keep`: a list that gets `(module, positions)` appended
    when the file was parsed whole (the fixers reuse the tree instead of parsing it again).
    `trees`: the language server's store of one buffer's runs (`parts.Runs`): the file is cut into
    smaller runs, the runs whose text the last lint saw are not parsed again, and those it entered
    in the same state are not walked again (their facts are spliced in, renumbered:
    `lint/runfacts.py`); when the store
    holds the last text that parsed, only the runs an edit touched are checked and cut again
    (`parts.respan`), else the whole file is. The store keeps the last text that parsed through a
    syntax error, so the lint after it is again an edit of that text."""
    # Imported only past the screen: a run on files no rule can fire on never loads libcst.
    from tapecheck.lint import parts
    from tapecheck.lint.extract import extract

    if trees is not None and trees.text is not None:
        # an edit of the buffer the server last linted: only the edited runs are checked and cut
        text = _decoded(source)
        spans = parts.respan(trees, text, _run_tree, REUSED_PART_CHARS)
        if spans is not None:
            try:
                return _walk(lambda: extract(parts.parse_each(text, spans, trees), path, runs=trees))
            except parts.Unparsable:
                pass  # an edited run libcst refuses alone: the whole file decides
    text, tree = _checked(source)
    # a large file: in parts, to bound memory (or, with `trees`, to re-parse only what changed)
    spans = parts.split(text, tree) if trees is None else parts.split(text, tree, REUSED_PART_CHARS)
    del tree  # Python's tree of a large file is tens of MB: gone before libcst's is built
    if spans is not None:
        try:
            return _walk(lambda: extract(parts.parse_each(text, spans, trees), path, runs=trees))
        except parts.Unparsable:
            pass  # a cut libcst does not accept alone: the whole file decides
    module = _libcst_parse(source)
    return _walk(lambda: extract(module, path, keep))


def _walk(extracting):
    try:
        return extracting()
    except RecursionError:  # deep but valid (hundreds of adjacent strings, long `+` chains): more stack
        return _on_a_deep_stack(extracting)


DEEP_STACK_BYTES = 512 * 2**20  # reserved address space; only the pages touched are used


DEEP_RECURSION_LIMIT = 60_000


def _on_a_deep_stack(function):
    """`function()` on a thread with a large stack and recursion limit.

    libcst's tree walks recurse once or more per nesting level; `_check_nesting` bounds
    the depth, so this always ends. LintError when it still cannot be analysed."""
    import contextvars
    import sys
    import threading

    outcome: dict = {}
    context = contextvars.copy_context()

    def target():
        try:
            outcome["value"] = context.run(function)
        except BaseException as exc:  # noqa: BLE001 - handed back to the calling thread
            outcome["error"] = exc

    old_limit = sys.getrecursionlimit()
    try:
        old_size = threading.stack_size(DEEP_STACK_BYTES)
    except (ValueError, RuntimeError):
        raise LintError("code nested too deeply to analyse") from None
    try:
        sys.setrecursionlimit(max(old_limit, DEEP_RECURSION_LIMIT))
        thread = threading.Thread(target=target, name="tapecheck-deep-walk")
        thread.start()
        thread.join()
    except RuntimeError:  # the thread could not be started (no address space for its stack)
        raise LintError("code nested too deeply to analyse") from None
    finally:
        threading.stack_size(old_size)
        sys.setrecursionlimit(old_limit)
    if isinstance(outcome.get("error"), RecursionError):
        raise LintError("code nested too deeply to analyse") from None
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def read_source(path: str) -> bytes:
    try:
        size = os.path.getsize(path)
        if size > MAX_FILE_BYTES:
            raise LintError(f"file too large to lint ({size / 2**20:.1f} MiB, limit {MAX_FILE_BYTES // 2**20} MiB)")
        # O_NONBLOCK: opening a FIFO (or a device) that appeared after discovery must not hang
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
        with open(descriptor, "rb") as handle:
            if not stat.S_ISREG(os.fstat(descriptor).st_mode):
                raise LintError("not a regular file (a FIFO, socket or device), not Python source")
            return handle.read()
    except FileNotFoundError:
        if os.path.islink(path):
            raise LintError("broken symbolic link (its target does not exist)") from None
        raise LintError("no such file (deleted while linting?)") from None
    except IsADirectoryError:
        raise LintError("is a directory, not a file") from None
    except PermissionError:
        raise LintError("permission denied") from None
    except OSError as exc:
        raise LintError(f"cannot read: {exc.strerror or exc}") from None


def syntax_problem(source: bytes) -> str | None:
    """Why Python cannot parse this file, None when it can: for files the byte screen rejects.

    The screen decides that no rule can fire, not that the file is Python: a syntax error
    or a binary renamed `.py` must still be reported (as ruff does). Python's own parser,
    in C, costs about a tenth of libcst's; nothing here imports libcst. It runs through
    `symtable`, which parses in C and builds no Python objects for the tree (0.70x the
    time of `ast.parse` on the 2,318 files of tensorflow+keras the screen skips), and
    also reports what Python refuses when it compiles the names (`nonlocal` at module
    level, a parameter declared global).
    """
    import symtable
    import warnings

    if b"\0" in source:
        return "binary file (contains NUL bytes), not Python source"
    try:
        text = _check_encoding(source)
    except LintError as exc:
        return str(exc)
    try:
        with warnings.catch_warnings(), no_cyclic_collection():
            warnings.simplefilter("ignore")  # SyntaxWarnings (invalid escapes) are not ours to print
            symtable.symtable(text, "<lint>", "exec")
    except SyntaxError as exc:
        return f"syntax error at line {exc.lineno}, column {exc.offset or 1}: {exc.msg}"
    except (RecursionError, MemoryError):
        return "expression nested too deeply to parse"
    except ValueError as exc:
        return f"cannot parse: {exc}"
    return None

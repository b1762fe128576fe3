"""Bad input through the real `tapecheck lint` (a subprocess, real files): never a traceback.

Each case puts one bad file beside `ok.py`, which has one known finding, and checks:
one `path: error: ...` line naming the bad file, the finding of `ok.py` still reported
(the run went on), exit status 1, and no traceback. Also races between discovery and
reading (through the engine API, with real file-system changes), and two concurrent
runs over one tree (with the cache shared, and without).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tapecheck.lint.engine import MAX_FILE_BYTES
from tapecheck.lint.files import discover

# TAP101 at line 7 (the gradient call), col 9
LOOP = """import tensorflow as tf
w = tf.Variable(1.0)
x = tf.constant(2.0)
with tf.GradientTape() as tape:
    y = w * x
z = y + 1.0
grads = tape.gradient(z, [w])
"""
LOOP_FINDING = (7, "TAP101")
HANG_GUARD = 300  # seconds: only so that a hang fails the test instead of the whole run


def run_lint(*args, cwd) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, "-m", "tapecheck", "lint", *map(str, args)],
        cwd=cwd, capture_output=True, text=True, timeout=HANG_GUARD, check=False,
        env={**os.environ, "NO_COLOR": "1", "PYTHONFAULTHANDLER": "1"},
    )
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    assert proc.returncode in (0, 1, 2), f"died with {proc.returncode}: {proc.stderr[-2000:]}"
    return proc


def error_lines(proc, path) -> list[str]:
    return [line for line in proc.stdout.splitlines() if line.startswith(f"{path}: error: ")]


def finding_lines(proc, path) -> list[tuple[int, str]]:
    out = []
    for line in proc.stdout.splitlines():
        if line.startswith(f"{path}:") and ": error: " not in line:
            location, _, rest = line.partition(": ")
            out.append((int(location.split(":")[-2]), rest.split()[0]))
    return out


@pytest.fixture
def tree(tmp_path):
    (tmp_path / "ok.py").write_text(LOOP)
    return tmp_path


def assert_one_error_and_the_run_goes_on(proc, tree, bad, *words):
    errors = error_lines(proc, bad)
    assert len(errors) == 1, proc.stdout
    for word in words:
        assert word in errors[0], errors[0]
    assert finding_lines(proc, tree / "ok.py") == [LOOP_FINDING], proc.stdout
    assert proc.returncode == 1


# -- files that cannot be linted ---------------------------------------------------------

BAD_SOURCES = {
    "syntax": ((LOOP + "def broken(:\n").encode(), "syntax error at line 8"),
    "nul-early": (b"import tensorflow as tf\0\nwith tf.GradientTape() as t:\n    pass\n", "NUL"),
    "nul-late": ((LOOP + "x = 1\n" * 3000 + "s = 'a\0b'\n").encode(), "NUL"),
    "not-utf8": ((LOOP + "name = 'caf\xe9'\n").encode("latin-1"), "not valid utf-8"),
    "unknown-cookie": (b"# -*- coding: klingon -*-\n" + LOOP.encode(), "klingon"),
    "deep-brackets": (("# GradientTape\nx = " + "(" * 100_000 + "1" + ")" * 100_000 + "\n").encode(), "nested"),
    "deep-boolop": (("# GradientTape\nx = " + " and ".join(["a"] * 10_000) + "\n").encode(), "nested too deeply"),
    "deep-unary": (("# GradientTape\nx = " + "-" * 5000 + "1\n").encode(), "nested too deeply"),
    "deep-subscript": (("# GradientTape\nx = a" + "[0]" * 5000 + "\n").encode(), "nested too deeply"),
    # valid Python that libcst 1.9 cannot parse: said so, not called a syntax error
    "adjacent-strings": (("# GradientTape\nx = " + "'a' " * 5000 + "\n").encode(), "though Python can"),
    "deep-lambda": (("# GradientTape\nx = " + "lambda: " * 5000 + "1\n").encode(), "nested"),
}


@pytest.mark.parametrize("case", sorted(BAD_SOURCES))
def test_a_file_that_cannot_be_linted_is_one_error_line_and_the_run_goes_on(tree, case):
    data, words = BAD_SOURCES[case]
    bad = tree / "bad.py"
    bad.write_bytes(data)
    proc = run_lint(tree, cwd=tree)
    assert_one_error_and_the_run_goes_on(proc, tree, bad, words)


def test_a_50_mb_file_is_refused_without_reading_it_all(tree):
    bad = tree / "huge.py"
    with open(bad, "wb") as handle:
        handle.write(LOOP.encode())
        chunk = b"x = 1  # GradientTape\n" * 50_000
        while handle.tell() < 50 * 2**20:
            handle.write(chunk)
    assert bad.stat().st_size > MAX_FILE_BYTES
    proc = run_lint(tree, cwd=tree)
    assert_one_error_and_the_run_goes_on(proc, tree, bad, "too large")


def test_deep_nesting_is_refused_by_the_engine_before_libcst_can_crash_the_process(tmp_path):
    # libcst 1.9's native parser segfaults on ~1500 nested brackets or ~4000 chained operators:
    # run in a child so a regression shows as a signal, not as a dead test session
    code = (
        "from tapecheck.lint.engine import lint_source, LintError\n"
        "for src in ['x = ' + '-' * 20000 + '1', 'x = ' + ' or '.join(['a'] * 50000), 'x = a' + '.b' * 20000,"
        " 'x = ' + '[' * 3000 + ']' * 3000]:\n"
        "    try:\n"
        "        lint_source(src + '  # GradientTape\\n', 'x.py')\n"
        "    except LintError as exc:\n"
        "        print('refused:', exc)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG_GUARD, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.count("refused:") == 4, proc.stdout


DEEP_BUT_VALID = {  # Python accepts these; a recursive walk with the default limit does not
    "sum": "x = " + " + ".join(["w"] * 900),
    "unary": "x = " + "-" * 950 + "w",
    "boolop": "x = " + " or ".join(["w"] * 950),
    "subscript": "x = w" + "[0]" * 950,
    "lambda": "x = " + "lambda: " * 950 + "w",
    "adjacent-strings": "doc = (" + " ".join(["'word '"] * 3000) + ")",
}


@pytest.mark.parametrize("case", sorted(DEEP_BUT_VALID))
def test_deep_code_python_accepts_below_the_limit_still_lints(tmp_path, case):
    (tmp_path / "deep.py").write_text(LOOP + DEEP_BUT_VALID[case] + "\n")
    proc = run_lint(tmp_path / "deep.py", cwd=tmp_path)
    assert error_lines(proc, tmp_path / "deep.py") == [], proc.stdout
    assert finding_lines(proc, tmp_path / "deep.py") == [LOOP_FINDING], proc.stdout


def _full_walk_refuses(source: bytes) -> bool:
    """The nesting check as it was: every node of Python's tree walked, none skipped."""
    import ast

    from tapecheck.lint.source import MAX_NESTING

    stack = [(ast.parse(source), 0)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, ast.BoolOp):
            level += len(node.values) - 2
        if level > MAX_NESTING:
            return True
        stack.extend((child, level + 1) for child in ast.iter_child_nodes(node))
    return False


NEAR_THE_LIMIT = {  # one level of nesting per unit; the limit falls inside each range
    "sum": lambda n: "x = " + " + ".join(["w"] * n),
    "unary": lambda n: "x = " + "-" * n + "w",
    "not": lambda n: "x = " + "not " * n + "w",
    "boolop": lambda n: "x = " + " or ".join(["w"] * n),
    "attribute": lambda n: "x = w" + ".a" * n,
    "lambda": lambda n: "x = " + "lambda: " * n + "w",
    "ifexp": lambda n: "x = " + "w if w else " * n + "w",
    "calls": lambda n: "x = " + "f(k=" * 150 + "-" * (n - 300) + "w" + ")" * 150,  # Call > keyword: 2 levels
    "in-loops": lambda n: "".join("    " * i + "for i in w:\n" for i in range(90)) + "    " * 90 + "x = " + "-" * n + "w",
}


@pytest.mark.parametrize("case", sorted(NEAR_THE_LIMIT))
def test_the_nesting_check_refuses_exactly_what_the_full_walk_refuses(case):
    from tapecheck.lint.source import LintError, _check_nesting

    outcomes = set()
    for n in range(880, 1120, 7):
        source = (NEAR_THE_LIMIT[case](n) + "  # GradientTape\n").encode()
        try:
            _check_nesting(source)
            refused = False
        except LintError:
            refused = True
        assert refused == _full_walk_refuses(source), (case, n)
        outcomes.add(refused)
    assert outcomes == {True, False}, "the range must straddle the limit"


# -- files that lint fine however they are written ------------------------------------------

def expected_from(text: str, shift: int = 0) -> list[tuple[int, str]]:
    return [(LOOP_FINDING[0] + shift, LOOP_FINDING[1])]


ENCODED = {
    "latin1-cookie": (b"# -*- coding: latin-1 -*-\n" + b"name = 'caf\xe9 cr\xe8me'\n" + LOOP.encode("latin-1"), 2),
    "cp1252-cookie-line2": (b"#!/usr/bin/env python\n# vim: set fileencoding=cp1252 :\n" + LOOP.encode() + b"s = '\x93q\x94'\n", 2),
    "bom": (b"\xef\xbb\xbf" + LOOP.encode(), 0),
    "bom-and-utf8-cookie": (b"\xef\xbb\xbf# coding: utf-8\n" + LOOP.encode(), 1),
    "crlf": (LOOP.replace("\n", "\r\n").encode(), 0),
    "mixed-crlf-lf": ("".join(line + ("\r\n" if i % 2 else "\n") for i, line in enumerate(LOOP.splitlines())).encode(), 0),
    "cr-only": (LOOP.replace("\n", "\r").encode(), 0),
    "tabs": (LOOP.replace("    ", "\t").encode(), 0),
    "no-final-newline": (LOOP.rstrip("\n").encode(), 0),
    "form-feed": (b"\x0c\n" + LOOP.encode(), 1),
    "utf8-identifiers": (("\u00e9t\u00e9 = 1  # \u65e5\u672c\n" + LOOP).encode(), 1),
}


@pytest.mark.parametrize("case", sorted(ENCODED))
def test_encodings_and_line_endings_lint_with_findings_at_the_right_lines(tmp_path, case):
    data, shift = ENCODED[case]
    path = tmp_path / "loop.py"
    path.write_bytes(data)
    proc = run_lint(path, cwd=tmp_path)
    assert error_lines(proc, path) == [], proc.stdout
    assert finding_lines(proc, path) == expected_from(LOOP, shift), proc.stdout
    assert proc.returncode == 1


def test_an_empty_file_is_clean(tmp_path):
    path = tmp_path / "empty.py"
    path.write_bytes(b"")
    proc = run_lint(path, cwd=tmp_path)
    assert proc.returncode == 0 and error_lines(proc, path) == [], proc.stdout


# -- paths ---------------------------------------------------------------------------------

def test_a_path_that_does_not_exist(tree):
    proc = run_lint(tree / "ok.py", tree / "missing.py", cwd=tree)
    assert_one_error_and_the_run_goes_on(proc, tree, tree / "missing.py", "no such file")


def test_a_dangling_symlink_in_a_tree(tree):
    (tree / "gone.py").write_text(LOOP)
    os.symlink(tree / "gone.py", tree / "link.py")
    os.remove(tree / "gone.py")  # the file was deleted; the link to it is what discovery finds
    proc = run_lint(tree, cwd=tree)
    assert_one_error_and_the_run_goes_on(proc, tree, tree / "link.py", "broken symbolic link")


@pytest.mark.parametrize("named", [False, True], ids=["in-a-tree", "named"])
def test_a_fifo_named_like_source_is_an_error_and_never_blocks(tree, named):
    fifo = tree / "pipe.py"
    os.mkfifo(fifo)  # nobody ever writes to it: opening it for reading would block forever
    proc = run_lint(*([tree, fifo] if named else [tree]), cwd=tree)
    assert_one_error_and_the_run_goes_on(proc, tree, fifo, "not a regular file")


@pytest.mark.parametrize("named", [False, True], ids=["in-a-tree", "named"])
def test_a_symlink_loop(tree, named):
    os.symlink("b.py", tree / "a.py")
    os.symlink("a.py", tree / "b.py")
    proc = run_lint(*([tree, tree / "a.py"] if named else [tree]), cwd=tree)
    for path in (tree / "a.py", tree / "b.py"):
        assert len(error_lines(proc, path)) == 1, proc.stdout
    assert finding_lines(proc, tree / "ok.py") == [LOOP_FINDING] and proc.returncode == 1


def test_a_folder_symlink_loop_ends_and_each_file_is_linted_once(tree):
    (tree / "pkg").mkdir()
    (tree / "pkg" / "m.py").write_text(LOOP)
    os.symlink("..", tree / "pkg" / "up")
    proc = run_lint(tree, cwd=tree)
    assert finding_lines(proc, tree / "ok.py") == [LOOP_FINDING]
    assert finding_lines(proc, tree / "pkg" / "m.py") == [LOOP_FINDING]
    assert proc.stdout.count("TAP101") == 2, proc.stdout


def test_a_folder_named_like_a_source_file_is_walked_as_a_folder(tree):
    # a directory is never read as a file: `x.py/` is a folder and its sources are linted
    (tree / "x.py").mkdir()
    (tree / "x.py" / "inner.py").write_text(LOOP)
    proc = run_lint(tree, tree / "x.py", cwd=tree)
    assert finding_lines(proc, tree / "x.py" / "inner.py") == [LOOP_FINDING], proc.stdout
    assert error_lines(proc, tree / "x.py") == []


def test_an_unreadable_file(tree):
    # root reads through chmod 000 (and this interpreter is not runnable by other users), so the
    # unreadable file is a real one: /proc/self/mem is a regular file whose read fails with EIO
    os.symlink("/proc/self/mem", tree / "unreadable.py")
    proc = run_lint(tree, cwd=tree)
    assert_one_error_and_the_run_goes_on(proc, tree, tree / "unreadable.py", "cannot read")


# -- changes between discovery and reading (real file-system changes, engine API) -------------

def test_files_changed_between_discovery_and_reading(tmp_path):
    for name in ("deleted", "now_dir", "now_fifo", "now_link_loop", "now_unreadable"):
        (tmp_path / f"{name}.py").write_text(LOOP)
    files, errors = discover([str(tmp_path)])
    assert errors == [] and len(files) == 5
    os.remove(tmp_path / "deleted.py")
    os.remove(tmp_path / "now_dir.py")
    os.mkdir(tmp_path / "now_dir.py")
    os.remove(tmp_path / "now_fifo.py")
    os.mkfifo(tmp_path / "now_fifo.py")
    os.remove(tmp_path / "now_link_loop.py")
    os.symlink("now_link_loop.py", tmp_path / "now_link_loop.py")
    os.remove(tmp_path / "now_unreadable.py")
    os.symlink("/proc/self/mem", tmp_path / "now_unreadable.py")  # EIO on read even for root
    # in a child: if opening the FIFO blocked, the child is killed instead of this session
    code = (
        "import sys\nfrom tapecheck.lint.engine import lint_file\n"
        "for path in sys.argv[1:]:\n"
        "    report = lint_file(path)\n"
        "    assert report.findings == [] and len(report.errors) == 1, report\n"
        "    print(report.errors[0].format())\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, *files], capture_output=True, text=True, timeout=HANG_GUARD,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    lines = dict(line.split(": error: ") for line in proc.stdout.splitlines())
    assert "deleted" in lines[str(tmp_path / "deleted.py")]
    assert "directory" in lines[str(tmp_path / "now_dir.py")]
    assert "not a regular file" in lines[str(tmp_path / "now_fifo.py")]
    assert "symbolic links" in lines[str(tmp_path / "now_link_loop.py")]
    assert lines[str(tmp_path / "now_unreadable.py")]


# -- concurrency --------------------------------------------------------------------------

def _concurrent_tree(root: Path) -> None:
    for index in range(40):
        sub = root / f"pkg{index % 5}"
        sub.mkdir(exist_ok=True)
        (sub / f"m{index}.py").write_text(LOOP if index % 2 else LOOP.replace("z = y + 1.0\n", ""))
    (root / "pkg0" / "broken.py").write_text("import tensorflow as tf\nwith tf.GradientTape(:\n")


@pytest.mark.parametrize("extra", [[], ["--no-cache"], ["--jobs", "2"]], ids=["cache", "no-cache", "jobs"])
def test_two_runs_at_once_give_the_result_of_one(tmp_path, extra):
    _concurrent_tree(tmp_path)
    (tmp_path / "pyproject.toml").write_text("")  # the cache lives beside it, inside tmp_path
    command = [sys.executable, "-m", "tapecheck", "lint", *extra, "."]
    env = {**os.environ, "NO_COLOR": "1"}
    runs = []
    for _ in range(2):  # cold cache, then warm cache
        procs = [subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
                 for _ in range(2)]
        outs = [(p.communicate(timeout=HANG_GUARD), p.returncode) for p in procs]
        runs.extend(outs)
    single = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, env=env, timeout=HANG_GUARD,
                            check=False)
    assert single.returncode == 1 and single.stdout.count("TAP101") == 20, single.stdout
    assert "pkg0/broken.py: error: syntax error" in single.stdout
    for (stdout, stderr), code in runs:
        assert (stdout, code) == (single.stdout, single.returncode), stderr
        assert "Traceback" not in stderr
    if not extra or extra[0] != "--no-cache":
        assert (tmp_path / ".tapecheck_cache").is_dir()
    else:
        assert not (tmp_path / ".tapecheck_cache").exists()


def test_nesting_tokens_are_counted_per_line_as_the_pattern_finds_them():
    """nesting_tokens_per_line (keywords to one byte, then bytes.translate) against
    `_NESTING_TOKENS.findall` line by line: on the fixtures, rule examples, and lines made to
    trip it (keywords inside names, at line ends, operators in strings, CR LF, no final newline)."""
    from sources import SOURCES

    from tapecheck.lint.source import _NESTING_TOKENS, nesting_tokens_per_line

    tricky = [
        b"notable = android or iffy and elsewhere\n",
        b"x = a if b else c\nlambda: (yield)\r\nawait z",
        b"s = '-+~*/%@&|^<>.([{'  # and not or\n\n",
        b"",
    ]
    sources = [source for _, source in SOURCES] + tricky
    assert len(sources) > 50
    for source in sources:
        expected = [len(_NESTING_TOKENS.findall(line)) for line in source.split(b"\n")]
        assert list(nesting_tokens_per_line(source)) == expected

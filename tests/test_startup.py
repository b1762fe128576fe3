"""What one small `tapecheck lint` process pays for beyond importing libcst, kept out by design.

- fastcst reads the fields libcst's visit walks from libcst's source files, each file
  read once, instead of `inspect.getsource` per node type: the same text, checked here
  for every libcst node type;
- fastcst finds the trivia node types by `__mro__`, not issubclass on libcst's ABCs
  (whose caches would leave tens of thousands of weak references for every garbage
  collection and the interpreter's exit to walk): the same set, and no cache entries.

Speed itself is measured by benchmarks/lint_speed.py, never asserted here.
"""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import libcst as cst

from tapecheck.lint import fastcst

ROOT = Path(__file__).resolve().parents[1]


def _node_types() -> list[type]:
    """Every subclass of CSTNode libcst defines, abstract ones included when they define the walk."""
    found, stack = set(), [cst.CSTNode]
    while stack:
        for sub in stack.pop().__subclasses__():
            if sub not in found and sub.__module__.startswith("libcst."):
                found.add(sub)
                stack.append(sub)
    return sorted(
        (t for t in found if "_visit_and_replace_children" in vars(t) or not inspect.isabstract(t)),
        key=lambda t: (t.__module__, t.__qualname__),
    )


def test_child_fields_are_read_from_the_text_inspect_reads_for_every_node_type():
    node_types = _node_types()
    assert len(node_types) > 150 and cst.Call in node_types and cst.FormattedStringExpression in node_types
    for node_type in node_types:
        method = node_type._visit_and_replace_children
        old = inspect.getsource(method)
        assert fastcst._function_source(method) == old, node_type
        assert fastcst.child_fields(node_type) == tuple(dict.fromkeys(fastcst._CHILD.findall(old))), node_type
    # and the fields are the ones libcst walks, in its order
    assert fastcst.child_fields(cst.Call) == (
        "lpar", "func", "whitespace_after_func", "whitespace_before_args", "args", "rpar",
    )


def test_trivia_is_the_issubclass_set():
    expected = frozenset(
        c for c in vars(cst).values() if isinstance(c, type) and issubclass(c, fastcst._TRIVIA_BASES)
    )
    assert fastcst.TRIVIA == expected and cst.Comma in expected and cst.Name not in expected


def _run(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], check=False, cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_importing_the_walk_leaves_libcst_abc_caches_empty():
    code = (
        "import abc, libcst\n"
        "classes = [c for c in vars(libcst).values() if isinstance(c, abc.ABCMeta)]\n"
        "def cached():\n"
        "    return sum(len(abc._get_dump(c)[1]) + len(abc._get_dump(c)[2]) for c in classes)\n"
        "before = cached()\n"
        "import tapecheck.lint.extract\n"
        "print(len(classes), before, cached())\n"
    )
    count, before, after = map(int, _run(code).split())
    assert count > 50 and after == before


# -- what a run imports ----------------------------------------------------------------

CLEAN = """\
import tensorflow as tf

def step(model, x):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(model(x))
    return tape.gradient(loss, model.trainable_variables)
"""
FIXABLE = """\
import tensorflow as tf

def end_epoch(model):
    for metric in model.metrics:
        metric.reset_states()
"""
DEFERRED = {"tapecheck.lint.fixes", "difflib", "tempfile", "tomllib"}


def _modules_after(args: list[str], cwd: Path) -> tuple[set[str], str]:
    """The modules loaded once `tapecheck ARGS` has run in a fresh process, and its output."""
    code = (
        "import sys\n"
        "from tapecheck.cli import main\n"
        f"try:\n    main({args!r})\nexcept SystemExit:\n    pass\n"
        "print('MODULES', ' '.join(sorted(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], check=False, cwd=cwd, capture_output=True, text=True,
                         timeout=120)
    line = [x for x in out.stdout.splitlines() if x.startswith("MODULES")]
    assert line, out.stderr
    return set(line[0].split()[1:]), out.stdout


def test_a_clean_run_loads_neither_the_fixers_nor_a_toml_parser(tmp_path):
    (tmp_path / "train.py").write_text(CLEAN)
    loaded, output = _modules_after(["lint", "--no-cache", "train.py"], tmp_path)
    assert "0 findings in 1 file." in output
    assert "libcst" in loaded and "tapecheck.lint.extract" in loaded  # the file was parsed and walked
    assert not DEFERRED & loaded, DEFERRED & loaded
    # A pyproject.toml is read before linting (its selection decides which rules run); still no fixers.
    (tmp_path / "pyproject.toml").write_text("[tool.tapecheck]\nignore = ['TAP501']\n")
    loaded, output = _modules_after(["lint", "--no-cache", "train.py"], tmp_path)
    assert "0 findings in 1 file." in output
    assert DEFERRED & loaded == {"tomllib"}


def test_each_deferred_module_loads_when_its_work_comes(tmp_path):
    (tmp_path / "train.py").write_text(FIXABLE)
    loaded, output = _modules_after(["lint", "--no-cache", "train.py"], tmp_path)
    assert "TAP302" in output and "[*]" in output  # the fix was attached: the fixers ran
    assert "tapecheck.lint.fixes" in loaded and not {"difflib", "tempfile", "tomllib"} & loaded
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    loaded, _ = _modules_after(["lint", "--no-cache", "--diff", "train.py"], tmp_path)
    assert {"tapecheck.lint.fixes", "difflib", "tomllib"} <= loaded  # findings read the configuration
    loaded, _ = _modules_after(["lint", "--no-cache", "--fix", "train.py"], tmp_path)
    assert "tempfile" in loaded and "reset_state()" in (tmp_path / "train.py").read_text()


def test_a_warm_run_shows_cached_fixes_without_parsing_again(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'p'\n")  # the cache lives beside it
    (tmp_path / "train.py").write_text(FIXABLE)
    cold, cold_output = _modules_after(["lint", "train.py"], tmp_path)
    warm, warm_output = _modules_after(["lint", "train.py"], tmp_path)
    assert "tapecheck.lint.fixes" in cold and "libcst" in cold
    def report(output):
        return [line for line in output.splitlines() if not line.startswith("MODULES")]

    assert report(warm_output) == report(cold_output)
    assert "TAP302" in warm_output and "[*]" in warm_output  # the fix came back from the cache
    assert not {"libcst", "tapecheck.lint.fixes"} & warm, "a cached file is neither parsed nor re-fixed"


def _exit_freeze(args_list: list[list[str]], cwd: Path) -> list[str]:
    """Run tapecheck commands in one fresh process: whether anything is frozen after each,
    and at exit how many times gc.freeze ran and whether it froze anything."""
    code = (
        "import atexit, gc\n"
        "calls = []\n"
        "real_freeze = gc.freeze\n"
        "def counted():\n    calls.append(1)\n    real_freeze()\n"
        "gc.freeze = counted\n"
        "atexit.register(lambda: print('AT EXIT', len(calls), gc.get_freeze_count() > 0))  # first in: runs last\n"
        "from tapecheck.cli import main\n"
        "for args in " + repr(args_list) + ":\n"
        "    try:\n        main(args)\n    except SystemExit:\n        pass\n"
        "    print('DURING', gc.get_freeze_count())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], check=False, cwd=cwd, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    return [line for line in out.stdout.splitlines() if line.startswith(("DURING", "AT EXIT"))]


def test_lint_freezes_the_collector_at_exit_and_only_then(tmp_path):
    """`lint` leaves libcst's objects to the operating system at exit instead of letting the final
    collections walk and tear them down; before exit, the collector is untouched."""
    (tmp_path / "train.py").write_text(CLEAN)
    lint = ["lint", "--no-cache", "train.py"]
    assert _exit_freeze([lint, lint], tmp_path) == ["DURING 0", "DURING 0", "AT EXIT 1 True"]
    assert _exit_freeze([["--version"]], tmp_path) == ["DURING 0", "AT EXIT 0 False"]  # other commands: never

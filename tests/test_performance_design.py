"""The design choices that make `tapecheck lint` fast, each proven not to change results.

- the byte screen never drops a file a rule fires on;
- the cheap positions and copy-free walk (fastcst.py) give libcst's exact positions and
  the exact facts of the original `MetadataWrapper` + `PositionProvider` + `node.visit`;
- libcst and TensorFlow are not imported when nothing needs parsing;
- worker processes give the single-process results, in the same order;
- the cache serves identical results, keys on what changes them, survives corrupt,
  foreign and concurrent entries.

Speed itself is measured by benchmarks/lint_speed.py, never asserted here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider
from sources import ROOT, SOURCES, fixture_sources, rule_sources

from tapecheck.lint import parallel
from tapecheck.lint.cache import Cache, cache_root
from tapecheck.lint.engine import LintError, lint_python, may_fire, parse
from tapecheck.lint.parallel import lint_paths
from tapecheck.lint.extract import FactsBuilder, extract
from tapecheck.lint.fastcst import FastVisitor, Positions, parse_module
from tapecheck.rules import RULES


def test_the_corpus_is_real():
    assert len(list(fixture_sources())) >= 20 and len(list(rule_sources())) >= 3 * len(RULES)


# -- the screen ---------------------------------------------------------------------

def _outcome(source: bytes, path: str, rules, screen: bool):
    try:
        return lint_python(source, path, rules, screen=screen)
    except LintError as exc:
        return str(exc)


@pytest.mark.parametrize("path,source", SOURCES, ids=[p for p, _ in SOURCES])
def test_the_screen_drops_no_finding(path, source):
    """Screened results equal a full parse's: for all rules together, for the first rule alone
    that the screen admits (the screened call lints the selection it was given), and for the
    rules whose screens each turn the file away, together (a selection the screen turns away
    too: a finding of any one of them in the full parse fails it). Each rule alone, both ways,
    was 66 lints of every file; this is 5 and fails on the same broken screens."""
    admitted = [rule for rule in RULES if may_fire(source, (rule,))]
    turned_away = tuple(rule for rule in RULES if rule not in admitted)
    for rules in [RULES, tuple(admitted[:1]), turned_away]:
        if rules:
            assert _outcome(source, path, rules, True) == _outcome(source, path, rules, False), [r.code for r in rules]


def test_the_screen_skips_files_without_triggers():
    # Without the screen this file is parsed, and its syntax error reported.
    source = b"def broken(:\n    pass\n"
    assert lint_python(source, "x.py") == []
    with pytest.raises(LintError):
        lint_python(source, "x.py", screen=False)


# -- positions and facts --------------------------------------------------------------

def _parsed():
    for path, source in SOURCES:
        try:
            yield path, parse(source)
        except LintError:
            continue


PARSED = list(_parsed())


class ReferenceBuilder(FactsBuilder):
    """FactsBuilder as it was: libcst's PositionProvider and libcst's own traversal."""

    METADATA_DEPENDENCIES = (PositionProvider,)

    def _pos(self, node):
        return self.get_metadata(PositionProvider, node)

    def _start(self, node):
        return self.get_metadata(PositionProvider, node).start

    def _walk(self, node):
        node.visit(self)


@pytest.mark.parametrize("path,module", PARSED, ids=[p for p, _ in PARSED])
def test_positions_are_libcst_positions_for_every_node(path, module):
    from tapecheck.lint.fastcst import UNMARKED

    expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    positions = Positions(module)
    assert len(expected) > 0
    for node, want in expected.items():
        if node.__class__ in UNMARKED:
            continue  # no position is asked of these (asked anyway: libcst answers, tests/test_positions.py)
        got = positions[node]
        # its own answer, not libcst's: one fallback would make every later comparison libcst against libcst
        assert positions._fallback is None or "\r" in module.code or not module.body, (path, type(node).__name__)
        assert (got.start.line, got.start.column, got.end.line, got.end.column) == (
            want.start.line, want.start.column, want.end.line, want.end.column,
        ), (path, type(node).__name__)
        assert positions.start(node) == got.start


def test_parenthesized_shortcut_matches_libcst_source():
    """Positions takes the syntactic range of these types from their parentheses: valid only
    while their `_codegen_impl` is exactly `with self._parenthesize(state): ...`."""
    import ast
    import inspect
    import textwrap

    from libcst._nodes.expression import _BaseParenthesizedNode

    from tapecheck.lint.fastcst import PARENTHESIZED

    qualifying = set()
    for node_type in vars(cst).values():
        if isinstance(node_type, type) and issubclass(node_type, _BaseParenthesizedNode):
            if inspect.isabstract(node_type):
                continue
            function = ast.parse(textwrap.dedent(inspect.getsource(node_type._codegen_impl))).body[0]
            body = [s for s in function.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
            if (len(body) == 1 and isinstance(body[0], ast.With)
                    and ast.unparse(body[0].items[0].context_expr) == "self._parenthesize(state)"):
                qualifying.add(node_type)
    assert PARENTHESIZED == qualifying


@pytest.mark.parametrize("path,module", PARSED, ids=[p for p, _ in PARSED])
def test_facts_equal_the_libcst_traversal(path, module):
    reference = ReferenceBuilder(path)
    MetadataWrapper(module, unsafe_skip_copy=True).visit(reference)
    facts = extract(module, path)
    assert facts == reference.facts
    assert facts.blocks  # a module block at least: the comparison compared something


@pytest.mark.parametrize("path,source", SOURCES, ids=[p for p, _ in SOURCES])
def test_the_unvalidated_parse_builds_libcst_s_own_tree(path, source):
    try:
        theirs = cst.parse_module(source)
    except cst.ParserSyntaxError:
        with pytest.raises(cst.ParserSyntaxError):
            parse_module(source)
        return
    ours = parse_module(source)
    assert ours.deep_equals(theirs) and ours.code == theirs.code


def test_validation_is_back_after_the_parse_even_when_it_fails():
    from libcst._nodes.base import CSTNode

    # The parse swaps the one `__post_init__` of all nodes: no node type may define its own.
    assert [t for t in _all_subclasses(CSTNode) if "__post_init__" in vars(t)] == [CSTNode]
    parse_module("x = (1)\n")
    with pytest.raises(cst.CSTValidationError):
        cst.Name("")
    with pytest.raises(cst.ParserSyntaxError):
        parse_module("def broken(:\n")
    with pytest.raises(cst.CSTValidationError):
        cst.Name("x", lpar=[cst.LeftParen()])  # unbalanced parentheses


def _all_subclasses(cls):
    found = [cls]
    for sub in cls.__subclasses__():
        found += _all_subclasses(sub)
    return found


def test_the_walk_follows_libcst_order_and_prunes_only_trivia():
    module = cst.parse_module("y = (a if b else c)  # note\nf(x, *r, k=v)[i:j]\n")

    class Names(FastVisitor):
        def __init__(self):
            super().__init__()
            self.seen = []

        def visit_Name(self, node):
            self.seen.append(node.value)

        def visit_Comment(self, node):  # a trivia handler turns pruning off for this class
            self.seen.append(node.value)

    class NamesOnly(FastVisitor):
        def __init__(self):
            super().__init__()
            self.seen = []

        def visit_Name(self, node):
            self.seen.append(node.value)

    fast, slow = Names(), Names()
    fast._walk(module)
    module.visit(slow)
    names = ["y", "a", "b", "c", "f", "x", "r", "k", "v", "i", "j"]
    assert fast.seen == slow.seen == names[:4] + ["# note"] + names[4:]
    pruned = NamesOnly()
    pruned._walk(module)
    assert pruned.seen == names and NamesOnly._prune and not Names._prune


# -- the cyclic collector ----------------------------------------------------------------

def _alive(kinds) -> int:
    import gc

    return sum(isinstance(obj, kinds) for obj in gc.get_objects())


@pytest.mark.parametrize(
    "name", ["bad/gradient_path_cut.py", "model/bad/gan_trainer_kept_var_lists.py", "model/bad/trainer_lambda_loss.py"]
)
def test_a_linted_file_leaves_nothing_for_the_collector(name):
    """The lint runs with the collector paused (engine.no_cyclic_collection), so everything it
    builds must be freed by reference counting alone: a cycle keeps millions of objects alive
    until a collection walks them all. Two were there: positions' marks held their own token
    list (the whole tree), and the program model's functions and classes refer back to it
    (`ProgramModel.close` drops them)."""
    import gc

    from tapecheck.lint.facts import FileFacts
    from tapecheck.lint.fastcst import Positions
    from tapecheck.model import ProgramModel

    source = (ROOT / "fixtures" / name).read_bytes()
    lint_python(source, name)  # imports and module-level caches settle first
    gc.collect()
    gc.disable()
    try:
        before = _alive((cst.CSTNode, Positions, FileFacts, ProgramModel))
        assert lint_python(source, name), "the fixture must give findings: the rules and the model ran"
        assert _alive((cst.CSTNode, Positions, FileFacts, ProgramModel)) == before
        assert gc.collect() == 0  # no cycle of any kind was left
    finally:
        gc.enable()


def test_the_collector_resumes_and_a_caller_s_setting_is_kept():
    import gc

    from tapecheck.lint.engine import no_cyclic_collection

    with no_cyclic_collection():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with no_cyclic_collection():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


# -- lazy imports --------------------------------------------------------------------

def _modules_after(args: list[str], cwd: Path) -> set[str]:
    code = (
        "import sys\n"
        "from tapecheck.cli import main\n"
        f"try:\n    main({args!r})\nexcept SystemExit:\n    pass\n"
        "print('MODULES', ' '.join(sorted({m.split('.')[0] for m in sys.modules})))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], check=False, cwd=cwd, capture_output=True, text=True, timeout=120)
    line = [x for x in out.stdout.splitlines() if x.startswith("MODULES")]
    assert line, out.stderr
    return set(line[0].split()[1:])


def test_version_and_clean_runs_import_neither_libcst_nor_tensorflow(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    (tmp_path / "plain.py").write_text("import os\nprint(os.getcwd())\n")
    (tmp_path / "broken.py").write_text("def f(:\n")  # never parsed: no trigger
    assert not {"libcst", "tensorflow", "keras"} & _modules_after(["--version"], tmp_path)
    for flags in ([], ["--no-cache"], ["-j", "2"]):
        loaded = _modules_after(["lint", *flags, str(tmp_path)], tmp_path)
        assert "click" in loaded and not {"libcst", "tensorflow", "keras"} & loaded, flags
    # the same check fails as soon as a file needs parsing
    (tmp_path / "train.py").write_text("import tensorflow as tf\ntape = tf.GradientTape()\n")
    loaded = _modules_after(["lint", "--no-cache", str(tmp_path)], tmp_path)
    assert "libcst" in loaded and "tensorflow" not in loaded


# -- processes ---------------------------------------------------------------------

def _make_tree(root: Path, source: Path = ROOT / "fixtures") -> Path:
    shutil.copytree(source, root)
    (root / "syntax_error.py").write_text("import tensorflow as tf\ntape = tf.GradientTape(\n")
    (root / "binary.py").write_bytes(b"GradientTape\0\x01\x02")
    (root / "latin1.py").write_bytes(b"# GradientTape\nname = '\xe9'\n")
    for index in range(12):
        (root / f"plain_{index}.py").write_text(f"x = {index}\n")
    return root


@pytest.fixture
def tree(tmp_path):
    """The fixtures, plus files that cannot be linted and files no rule fires on."""
    return _make_tree(tmp_path / "tree")


@pytest.fixture(scope="module")
def shared_tree(tmp_path_factory):
    """The same tree, made once for the tests that only read it (their caches live elsewhere)."""
    return _make_tree(tmp_path_factory.mktemp("shared") / "tree")


@pytest.fixture(scope="module")
def single(shared_tree, tmp_path_factory):
    """The plain library call, one process, no cache, run once from an empty working folder:
    (its report, that folder)."""
    cwd = tmp_path_factory.mktemp("cwd")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(cwd)
        report = lint_paths([str(shared_tree)], jobs=1)
    return report, cwd


def test_processes_give_the_single_process_results_in_order(shared_tree, single):
    tree, (one, _) = shared_tree, single
    two = lint_paths([str(tree)], jobs=2)
    assert one.findings and len(one.errors) == 3
    assert (two.findings, two.errors, two.files_checked) == (one.findings, one.errors, one.files_checked)
    # and equal, file by file, to the plain per-file path
    pieces = parallel.lint_files(sorted(str(p) for p in tree.rglob("*.py")), RULES, jobs=3)
    assert sorted(pieces.findings) == one.findings and sorted(pieces.errors) == one.errors


def test_batches_follow_the_largest_first_order_and_cut_by_size():
    sizes = [300_000, 10, 200_000, 100_000, 10]
    pending = [(i, f"f{i}.py", b"x" * n, None) for i, n in enumerate(sizes)]
    order = sorted(range(len(pending)), key=lambda i: -len(pending[i][2]))
    # a file over BATCH_BYTES alone; then files until a batch reaches BATCH_BYTES
    assert parallel._batches(pending, order) == [[0], [2, 3], [1, 4]]


def test_results_come_back_in_order_across_many_batches(shared_tree, single, monkeypatch):
    tree, (one, _) = shared_tree, single
    monkeypatch.setattr(parallel, "BATCH_BYTES", 1)  # every file a batch of its own
    two = lint_paths([str(tree)], jobs=2)
    assert (two.findings, two.errors, two.files_checked) == (one.findings, one.errors, one.files_checked)


def test_small_runs_stay_in_one_process():
    assert parallel._choose_jobs(None, 3, 10_000, RULES) == 1
    assert parallel._choose_jobs(None, 400, 10_000_000, RULES) == max(1, min(parallel.available_cpus(), 100))
    assert parallel._choose_jobs(1, 400, 10_000_000, RULES) == 1
    assert parallel._choose_jobs(4, 2, 10_000, RULES) == 2  # never more workers than files


# -- the cache ---------------------------------------------------------------------

def _entries(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and p.parent.parent.name.startswith("v")]


def test_a_warm_run_serves_identical_results_from_the_cache(shared_tree, single, tmp_path):
    tree, (uncached, _) = shared_tree, single
    cold_cache = Cache(root=str(tmp_path / "cache"), rule_codes=[r.code for r in RULES])
    cold = lint_paths([str(tree)], jobs=1, cache=cold_cache)
    warm_cache = Cache(root=str(tmp_path / "cache"), rule_codes=[r.code for r in RULES])
    warm = lint_paths([str(tree)], jobs=1, cache=warm_cache)
    assert (warm.findings, warm.errors, warm.files_checked) == (cold.findings, cold.errors, cold.files_checked)
    assert (cold.findings, cold.errors) == (uncached.findings, uncached.errors)
    assert cold_cache.hits == 0 and warm_cache.misses == 0
    assert warm_cache.hits == cold_cache.misses == len(_entries(tmp_path / "cache")) > 20
    assert not list((tmp_path / "cache").rglob("*.tapecheck-tmp"))  # atomic writes leave nothing behind


def test_the_key_covers_content_path_rules_and_context(tmp_path):
    base = Cache(root=str(tmp_path), rule_codes=["TAP101", "TAP201"])
    key = base.key("a.py", b"x = 1\n")
    assert key == Cache(root=str(tmp_path), rule_codes=["TAP201", "TAP101"]).key("a.py", b"x = 1\n")
    assert key != base.key("a.py", b"x = 2\n")
    assert key != base.key("b.py", b"x = 1\n")
    assert key != base.key("a.ipynb", b"x = 1\n")
    assert key != Cache(root=str(tmp_path), rule_codes=["TAP101"]).key("a.py", b"x = 1\n")
    assert key != Cache(root=str(tmp_path), rule_codes=["TAP101", "TAP201"], context="index").key("a.py", b"x = 1\n")


def test_corrupt_and_foreign_entries_are_ignored_and_rewritten(shared_tree, tmp_path):
    tree = shared_tree
    codes = [r.code for r in RULES]
    first = Cache(root=str(tmp_path / "cache"), rule_codes=codes)
    expected = lint_paths([str(tree)], jobs=1, cache=first)
    entries = sorted(_entries(tmp_path / "cache"))
    donor = json.loads(entries[0].read_bytes())
    entries[1].write_bytes(b"\x00garbage{")  # corrupt
    entries[2].write_text(json.dumps(donor))  # another file's entry under this key
    entries[3].write_text(json.dumps({"key": entries[3].parent.name + entries[3].name, "findings": [{"bogus": 1}]}))
    again = Cache(root=str(tmp_path / "cache"), rule_codes=codes)
    result = lint_paths([str(tree)], jobs=1, cache=again)
    assert (result.findings, result.errors) == (expected.findings, expected.errors)
    assert again.misses == 3
    for entry in entries[1:4]:  # rewritten, valid, for their own key
        assert json.loads(entry.read_bytes())["key"] == entry.parent.name + entry.name


def test_two_runs_sharing_one_cache(tree, tmp_path):
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    command = [sys.executable, "-m", "tapecheck", "lint", "--exit-zero", "-j", "1", str(tree)]
    runs = [subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(3)]
    outputs = [run.communicate(timeout=300) for run in runs]
    reference = subprocess.run([*command[:4], "--no-cache", *command[4:]], check=False, cwd=tmp_path,
                               capture_output=True, text=True, timeout=300).stdout
    assert all(out == reference and not err for out, err in outputs), outputs[0][1]
    assert "finding" in reference
    cache = tmp_path / ".tapecheck_cache"
    assert (cache / "CACHEDIR.TAG").exists() and (cache / ".gitignore").read_text().strip().endswith("*")
    assert not list(cache.rglob("*.tapecheck-tmp"))
    for entry in _entries(cache):
        assert json.loads(entry.read_bytes())["key"] == entry.parent.name + entry.name
    warm = subprocess.run(command, check=False, cwd=tmp_path, capture_output=True, text=True, timeout=300).stdout
    assert warm == reference


def test_no_cache_writes_nothing_and_the_folder_follows_pyproject(tmp_path):
    # where the cache goes, per run: the bad fixtures and the odd files are enough to write one
    tree = _make_tree(tmp_path / "tree", ROOT / "fixtures" / "bad")
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    (tmp_path / "sub").mkdir()
    assert cache_root(str(tmp_path / "sub")) == str(tmp_path / ".tapecheck_cache")
    lone = tmp_path / "sub" / "lone"
    lone.mkdir()
    assert cache_root(str(lone)).endswith(".tapecheck_cache")
    subprocess.run([sys.executable, "-m", "tapecheck", "lint", "--no-cache", str(tree)], check=False, cwd=tmp_path / "sub",
                   capture_output=True, timeout=300)
    assert not (tmp_path / ".tapecheck_cache").exists()
    subprocess.run([sys.executable, "-m", "tapecheck", "lint", str(tree)], check=False, cwd=tmp_path / "sub",
                   capture_output=True, timeout=300)
    assert _entries(tmp_path / ".tapecheck_cache")
    assert not (tmp_path / "sub" / ".tapecheck_cache").exists()


def test_library_calls_do_not_cache_unless_asked(single):
    report, cwd = single  # lint_paths([tree], jobs=1), run in the empty folder `cwd`
    assert report.files_checked > 20 and report.findings
    assert not os.path.exists(cwd / ".tapecheck_cache") and not list(cwd.iterdir())


def test_a_worker_killed_mid_run_costs_nothing_but_time(tmp_path):
    """SIGKILL one worker process of a real `-j 2` run: the files it held are linted again."""
    import signal
    import time

    root = tmp_path / "many"
    for copy in range(10):  # 160 files: seconds of work, and a worker is seen within 0.02 s of its start
        shutil.copytree(ROOT / "fixtures" / "bad", root / f"copy{copy}")
    command = [sys.executable, "-m", "tapecheck", "lint", "--no-cache", str(root)]
    alone = subprocess.run([*command, "-j", "1"], capture_output=True, text=True, cwd=tmp_path)
    run = subprocess.Popen([*command, "-j", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    killed = None
    deadline = time.monotonic() + 60
    while killed is None and run.poll() is None and time.monotonic() < deadline:
        children = Path(f"/proc/{run.pid}/task/{run.pid}/children")
        pids = children.read_text().split() if children.exists() else []
        if pids:
            killed = int(pids[0])
            os.kill(killed, signal.SIGKILL)
        time.sleep(0.02)
    out, err = run.communicate(timeout=300)
    assert killed is not None, "the run ended before a worker could be killed"
    assert "Traceback" not in err, err
    assert (run.returncode, out) == (alone.returncode, alone.stdout)

"""The fixers on the language server's kept runs (`fixes._RunsTree`): a file linted in runs gets
exactly the fixes of the whole file's tree, without parsing the file again.

Every fixable source (fixtures, rule examples, the notebook of tests/data as a program) is cut
as small as the cut allows, or into runs of a few hundred characters, and its fixes compared,
edit by edit, with those of the whole-file path; what the runs cannot answer exactly goes to the
whole file's tree (`_Whole`), never to a different fix."""

from __future__ import annotations

import pytest
from sources import ROOT, SOURCES

from tapecheck.lint import fastcst, fixes, parts
from tapecheck.lint import source as lint_source_module
from tapecheck.lint.engine import LintError, lint_python


def _notebook_programs():
    from tapecheck.lint.notebooks import notebook_program

    for path in sorted((ROOT / "tests" / "data").glob("*.ipynb")):
        yield f"{path.name}.py", notebook_program(path.read_bytes()).source.encode()


def _fixable_sources():
    for name, source in [*SOURCES, *_notebook_programs()]:
        try:
            found = lint_python(source, name, screen=False)
        except LintError:
            continue
        if any(finding.fix for finding in found):
            yield name, source


FIXABLE = list(_fixable_sources())


def _fixes(found):
    return [(finding, finding.fix) for finding in found]


@pytest.fixture(params=[1, 300], ids=["every-cut", "300-chars"])
def cut(request, monkeypatch):
    monkeypatch.setattr(lint_source_module, "NESTING_SCREEN", -1)  # always run Python's parser, which gives the cuts
    monkeypatch.setattr(lint_source_module, "REUSED_PART_CHARS", request.param)
    return request.param


class Parses:
    """Counts the parses of whole files and runs (`fastcst.parse_module`, the fixers' and the runs')."""

    def __init__(self, monkeypatch):
        self.texts: list[str] = []
        real = fastcst.parse_module

        def counted(source):
            self.texts.append(source)
            return real(source)

        monkeypatch.setattr(fastcst, "parse_module", counted)


def test_the_corpus_has_fixes_of_every_fixable_rule_in_files_that_are_cut(monkeypatch):
    monkeypatch.setattr(lint_source_module, "NESTING_SCREEN", -1)
    monkeypatch.setattr(lint_source_module, "REUSED_PART_CHARS", 1)
    codes, cut = set(), 0
    for name, source in FIXABLE:
        runs = parts.Runs()
        codes |= {finding.code for finding in lint_python(source, name, trees=runs) if finding.fix}
        cut += bool(runs.spans)
    assert codes == {"TAP105", "TAP201", "TAP202", "TAP301", "TAP302"}
    assert len(FIXABLE) >= 35 and cut >= len(FIXABLE) - 2


def test_fixes_on_kept_runs_are_the_whole_files_and_parse_nothing_again(cut, monkeypatch):
    """The engine's path: a lint with the buffer's runs kept (`trees`), the second time with
    nothing changed, gives the fixes of a lint without runs, and parses nothing: no run (all are
    kept), and not the whole file for the fixers."""
    compared = 0
    for name, source in FIXABLE:
        whole = lint_python(source, name)
        runs = parts.Runs()
        first = lint_python(source, name, trees=runs)
        parses = Parses(monkeypatch)
        again = lint_python(source, name, trees=runs)
        monkeypatch.undo()
        monkeypatch.setattr(lint_source_module, "NESTING_SCREEN", -1)
        monkeypatch.setattr(lint_source_module, "REUSED_PART_CHARS", cut)
        assert _fixes(first) == _fixes(whole), name
        assert _fixes(again) == _fixes(whole), name
        if runs.spans:
            assert parses.texts == [], name
            # the kept positions still answer from their own marks (an argument's range asked of
            # them would have switched them to libcst's provider, kept with the runs)
            assert all(part.positions._fallback is None for part in runs.parts()), name
            compared += 1
    assert compared >= (30 if cut == 1 else 15)


def _trees(source: bytes, name: str):
    """(the runs tree, the whole file's tree, the facts, the findings) of a lint on kept runs."""
    runs = parts.Runs()
    facts = lint_source_module.facts_of(source, name, None, runs)
    found = lint_python(source, name, trees=runs)
    text = fixes.SourceText.from_bytes(source).text
    return fixes._RunsTree(text, runs, facts), fixes._Tree(text, name, None, facts), runs, found


def test_each_fixer_on_runs_answers_as_on_the_whole_file(cut):
    """Fixer by fixer, finding by finding (fixed or not): the same answer from the runs as from
    the whole file's tree, and no question the runs leave to the whole file in this corpus."""
    asked = 0
    for name, source in FIXABLE:
        on_runs, whole, runs, found = _trees(source, name)
        if not runs.spans:
            continue
        for finding in found:
            fixer = fixes.FIXERS.get(finding.code)
            if fixer is None:
                continue
            assert fixer(on_runs, finding) == fixer(whole, finding), (name, finding)
            asked += 1
    assert asked >= (45 if cut == 1 else 30)


def test_each_run_starts_where_its_span_does(cut):
    """A run that goes on with a class starts with a copy of its header: the runs tree places each
    run's own text after that copy (`Span.header`'s lines) and `Span.lines_before`, where the file
    has it (counted here from the span's start)."""
    continued = 0
    for name, source in FIXABLE:
        on_runs, _, runs, _ = _trees(source, name)
        text = runs.text or ""
        assert on_runs._firsts == [text.count("\n", 0, span.start) + 1 for span in runs.spans], name
        continued += sum(bool(span.header) for span in runs.spans)
    assert continued >= (15 if cut == 1 else 3)


# -- what only the whole file answers: the fix is the whole file's, from its tree -------------
TAPE_USED_BY_A_DECORATOR = """\
import tensorflow as tf

x = tf.Variable(1.0)
with tf.GradientTape(persistent=True) as tape:
    y = x * x
    z = x * y
dy = tape.gradient(y, x)


@register(tape.gradient(z, x))
class Report:
    first = 1
    second = 2


print(Report)
"""

TWICE_THE_SAME = """\
import tensorflow as tf

m = tf.keras.metrics.Mean()


def one(x):
    m.reset_states()


def one(x):
    m.reset_states()


print(one)
"""


@pytest.mark.parametrize("source,code", [
    # `del tape` goes after the class whose decorator uses it last: the next run ends that class
    (TAPE_USED_BY_A_DECORATOR, "TAP202"),
    (TWICE_THE_SAME, "TAP302"),  # two runs of the same text: one tree, placed twice
])
def test_what_runs_cannot_tell_is_asked_of_the_whole_file(monkeypatch, source, code):
    monkeypatch.setattr(lint_source_module, "NESTING_SCREEN", -1)
    monkeypatch.setattr(lint_source_module, "REUSED_PART_CHARS", 1)
    source = source.encode()
    on_runs, whole, runs, found = _trees(source, "edge.py")
    assert len(runs.spans) > 3
    findings = [finding for finding in found if finding.code == code]
    assert findings and all(finding.fix for finding in findings)
    whole_answers = [fixes.FIXERS[code](whole, finding) for finding in findings]
    asked_whole = 0
    for finding, answer in zip(findings, whole_answers):
        try:
            assert fixes.FIXERS[code](on_runs, finding) == answer
        except fixes._Whole:
            asked_whole += 1
    assert asked_whole
    assert _fixes(found) == _fixes(lint_python(source, "edge.py"))


# -- the language server ----------------------------------------------------------------------
def test_the_server_gives_the_fixes_of_a_fresh_lint_after_each_edit(monkeypatch, tmp_path):
    """`lint_snapshot` of a buffer with fixable findings, edit after edit, its runs kept: the
    diagnostics and their fixes (as the editor's edits) are those of a lint with nothing kept
    (the whole file parsed, the fixers on its tree)."""
    from test_parts import _edits

    from tapecheck.lint.config import Settings
    from tapecheck.server import linting

    monkeypatch.setattr(lint_source_module, "NESTING_SCREEN", -1)
    monkeypatch.setattr(lint_source_module, "REUSED_PART_CHARS", 400)
    monkeypatch.setattr(linting, "_trees", {})  # the module's store, left as it was found
    names = {name for name, _ in FIXABLE if name.startswith("fixtures/bad/")}
    text = "\n".join((ROOT / name).read_text() for name in sorted(names) if "\r" not in (ROOT / name).read_text())
    path = str(tmp_path / "train.py")
    uri = (tmp_path / "train.py").as_uri()
    settings = Settings()

    def lint(version, body, key=uri):
        snapshot = linting.Snapshot(key, path, version, (linting.Cell(key, body, True, version),))
        return linting.lint_snapshot(snapshot, settings)

    def shown(result):
        # the fixes as edits of the buffer (the fresh lint's have its own key for the document)
        return [(item.finding, item.line, item.col, [edit for _, edit in item.fix or ()]) for item in result.located], result.problem and result.problem.message

    with_fixes = 0
    for version, body in enumerate(_edits(text, 16, seed=7), 1):
        kept = lint(version, body)
        assert linting._trees.get(uri) is not None or kept.problem is not None
        with monkeypatch.context() as whole:  # nothing kept: the whole file parsed, its fixers on its tree
            whole.setattr(linting, "KEEP_TREES_CHARS", -1)
            fresh = lint(version, body, key=uri + "#fresh")
        assert uri + "#fresh" not in linting._trees
        assert shown(kept) == shown(fresh)
        with_fixes += sum(1 for item in kept.located if item.fix)
    assert with_fixes >= 16


def test_every_node_by_place_is_the_whole_files(cut):
    """`nodes_at` of every kind at every place the whole file's tree indexes, asked in file order
    of one runs tree (statements indexed one by one, classes and blocks above them linked as
    chains, then walked when asked about) and of a fresh one per place: the whole file's nodes,
    in its order, or a question left to the whole file (never a different answer)."""
    import libcst as cst

    asked = left = 0
    for name, source in FIXABLE[::4]:
        on_runs, whole, runs, _ = _trees(source, name)
        if not runs.spans:
            continue
        text = fixes.SourceText.from_bytes(source).text
        for (line, col), nodes in sorted(whole._by_start.items()):
            for kind in {node.__class__ for node in nodes} - {cst.Module}:
                expected = [whole.start(node) + whole.end(node) for node in whole.nodes_at(kind, line, col)]
                for tree in (on_runs, fixes._RunsTree(text, runs, on_runs.facts)):
                    try:
                        got = tree.nodes_at(kind, line, col)
                        answer = [tree.start(node) + tree.end(node) for node in got]
                    except fixes._Whole:
                        left += 1
                        continue
                    assert answer == expected, (name, kind, line, col)
                    asked += 1
    assert asked >= 2000 and left <= asked // 20, (asked, left)

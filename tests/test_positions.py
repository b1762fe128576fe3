"""fastcst.Positions gives libcst's PositionProvider ranges, strictly, for every node it marks.

Positions runs libcst's code generator with stand-ins for the `_codegen` of the
commonest node types (fastcst.py explains): they make the same tokens and drop the
marks of the node types no position is asked of (`UNMARKED`). Checked here:

- every node of every other type has libcst's range (start and end, line and column)
  on all fixtures, rule examples and doc blocks, the corners of positions, extra
  corners of statement ranges, and a sample of real files from site-packages (libcst's
  own sources, and tensorflow+keras files the screen admits when they are installed),
  without Positions ever falling back to libcst's provider;
- the extractor asks only about marked nodes, and every answer is libcst's;
- a node without marks gets libcst's answer (the fallback), never a wrong one;
- the stand-ins are in place only while Positions generates code, other code
  generation meanwhile is libcst's own, and each stand-in copies the libcst method it
  replaces.
"""

from __future__ import annotations

import inspect
import textwrap
import typing
from importlib.util import find_spec
from pathlib import Path

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider
from sources import SOURCES

from tapecheck.lint import extract, fastcst
from tapecheck.lint.engine import LintError, parse
from tapecheck.lint.fastcst import UNMARKED, Positions

# Statement forms whose ranges end at another node (`end_node`): one of each.
CORNERS = {
    "imports.py": "from a import (b,\n    c)\nfrom a import b as c, d\nfrom . import e\nimport a.b as c, d\n"
                  "from x import *\n",
    "loops.py": "for a, *b in c:\n    pass\nelse:\n    x = 1\nwhile d:\n    break\nelse:\n    continue\n"
                "async def f():\n    async for x in y: pass\n    async with a as b, c: pass\n",
    "tries.py": "try:\n    a\nfinally:\n    b\ntry:\n    pass\nexcept (E, F) as e:\n    pass\n"
                "except G:\n    pass\nelse:\n    pass\n",
    "if_elif.py": "if a:\n    pass\nelif b:\n    pass\nelif c: d\nelse:\n    e\n",
    "one_liners.py": "class A: pass\ndef f(): return 1; x = 2\nif x: y\nwith (a as b, c): pass\n",
    "footers.py": "def f():\n    x = 1\n    # trailing comment\n\n    # indented, after a blank\n# col 0\n"
                  "class C:\n    def g(self):\n        pass\n        # deep\n    # shallow\n",
    "exprs.py": "x = [a, *b]; y = {k: v, **d}; z = {s, t}\nf(a, *b, k=c, **d)[1:2, ::3, ...]\n"
                "g = lambda: (yield)\nh = (a for a in b if c)\nv = a if b else c\nw = not a and -b or ~c\n"
                "u = a < b <= c is not d not in e\nt = (a, b)\ns = ()\nr = f'{a!r:>{w}}' 'b' \"c\"\n"
                "q = a @ b // c ** d % e << f >> g & h | i ^ j\nx += 1; x -= y; x @= z\ndel a, b.c, d[0]\n"
                "assert x, 'm'\nglobal g\nraise E from F\nimport a; print(*a, sep='')\n",
    "type_params.py": "def f[T](x: T) -> T: return x\nclass B[T: int]: pass\ntype A[T] = list[T]\n",
}


def _site_packages_sample() -> list[tuple[str, bytes]]:
    """libcst's own sources, every 8th; with tensorflow+keras installed, every 25th file the screen admits."""
    sample = []
    libcst_root = Path(cst.__file__).parent
    for path in sorted(libcst_root.rglob("*.py"))[::8]:
        sample.append((f"libcst/{path.relative_to(libcst_root)}", path.read_bytes()))
    roots = [next(iter(spec.submodule_search_locations))
             for spec in map(find_spec, ("tensorflow", "keras")) if spec is not None and spec.submodule_search_locations]
    if roots:
        from tapecheck.lint.engine import may_fire
        from tapecheck.rules import RULES

        admitted = []
        for root in roots:
            for path in sorted(Path(root).rglob("*.py")):
                source = path.read_bytes()
                if len(source) < 200_000 and may_fire(source, RULES):
                    admitted.append((f"{path.parent.name}/{path.name}", source))
        sample.extend(admitted[::25])
    return sample


def _modules(sources):
    for name, source in sources:
        try:
            yield name, parse(source)
        except LintError:
            continue


ALL = [*SOURCES, *((k, v.encode()) for k, v in CORNERS.items()), *_site_packages_sample()]
MODULES = list(_modules(ALL))


def _libcst_ranges(module):
    return MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)


_RANGES: dict[int, typing.Mapping] = {}


def _corpus_ranges(module):
    """libcst's ranges of a corpus module, worked out once for the two tests that compare all of MODULES
    (the modules live as long as the test module, so their ids stay theirs)."""
    if id(module) not in _RANGES:
        _RANGES[id(module)] = _libcst_ranges(module)
    return _RANGES[id(module)]


def _flat(found):
    return (found.start.line, found.start.column, found.end.line, found.end.column)


def _expected_fallback(module) -> bool:
    """Positions asks libcst for every range of an empty module or one with a CR."""
    return not (module.body or module.header or module.footer) or "\r" in module.code


def test_the_corpus_covers_real_files():
    assert sum(name.startswith("libcst/") for name, _ in MODULES) >= 10
    assert len(MODULES) > len(SOURCES)


@pytest.mark.parametrize("name,module", MODULES, ids=[n for n, _ in MODULES])
def test_every_marked_node_has_libcst_s_range(name, module):
    expected = _corpus_ranges(module)
    positions = Positions(module)
    compared = 0
    for node, want in expected.items():
        if node.__class__ in UNMARKED:
            continue
        got = positions[node]
        assert _flat(got) == _flat(want), (name, type(node).__name__, got, want)
        assert positions.start(node) == got.start, (name, type(node).__name__)
        compared += 1
    assert compared > 0
    # Every answer came from the marks, none from libcst's provider.
    assert (positions._fallback is not None) == _expected_fallback(module), name


class Recording(Positions):
    """Positions that remember each node the extractor asks about."""

    asked: typing.ClassVar[list] = []

    def __getitem__(self, node):
        Recording.asked.append((self, node, "range"))
        return super().__getitem__(node)

    def start(self, node):
        Recording.asked.append((self, node, "start"))
        return super().start(node)


def test_the_extractor_asks_only_about_marked_nodes_and_gets_libcst_s_answers(monkeypatch):
    monkeypatch.setattr(extract, "Positions", Recording)
    asked_types = set()
    for name, module in MODULES:
        Recording.asked = []
        extract.extract(module, name)
        expected = _RANGES.pop(id(module), None) or _corpus_ranges(module)  # the last reader: freed as read
        asked, Recording.asked = Recording.asked, []
        for positions, node, kind in asked:
            assert node.__class__ not in UNMARKED, (name, type(node).__name__)
            want = expected[node]
            if kind == "range":
                assert _flat(Positions.__getitem__(positions, node)) == _flat(want), (name, type(node).__name__)
            else:
                assert tuple(Positions.start(positions, node)) == (want.start.line, want.start.column), (name, type(node).__name__)
            asked_types.add(node.__class__)
        if asked:
            assert (asked[0][0]._fallback is not None) == _expected_fallback(module), name
    # The comparison covered the kinds of nodes the extractor asks about.
    for node_type in (cst.Module, cst.Name, cst.Attribute, cst.Call, cst.Comparison, cst.FunctionDef, cst.ClassDef,
                      cst.Param, cst.Lambda, cst.Assign, cst.AugAssign, cst.AnnAssign, cst.Return, cst.IndentedBlock,
                      cst.SimpleStatementSuite, cst.Else, cst.If, cst.For, cst.While, cst.With, cst.WithItem,
                      cst.AsName, cst.Tuple, cst.Raise, cst.Break, cst.Continue, cst.Finally, cst.MatchCase):
        assert node_type in asked_types, node_type.__name__


def test_a_node_without_marks_gets_libcst_s_answer():
    module = parse(b"f(a, b=1)  # c\n")
    call = module.body[0].body[0].value
    arg, comma = call.args[0], call.args[0].comma
    expected = _libcst_ranges(module)
    for node in (arg, comma, call.args[1].equal, module.body[0].trailing_whitespace):
        positions = Positions(module)
        assert node.__class__ in UNMARKED
        assert _flat(positions[node]) == _flat(expected[node])
        assert positions._fallback is not None  # it asked libcst
        assert _flat(positions[call]) == _flat(expected[call])
        positions = Positions(module)
        assert tuple(positions.start(node)) == (expected[node].start.line, expected[node].start.column)


def test_no_unmarked_type_is_asked_about_or_bounds_another():
    # Node types whose ranges other ranges are read from stay marked: statements and
    # blocks (`start_node`/`end_node` in libcst), an ImportFrom's last alias, parentheses.
    for node_type in (cst.ImportAlias, cst.LeftParen, cst.RightParen, cst.SimpleStatementLine, cst.IndentedBlock,
                      cst.ExceptHandler, cst.Else, cst.Finally, cst.MatchCase, cst.Name, cst.Integer):
        assert node_type not in UNMARKED
    assert UNMARKED <= fastcst.TRIVIA | {
        cst.Arg, cst.Element, cst.DictElement, cst.StarredDictElement, cst.AssignTarget, cst.Parameters,
        cst.ComparisonTarget, cst.SubscriptElement, cst.Index, cst.Annotation, cst.Decorator,
    }


def test_the_stand_ins_are_in_place_only_while_positions_run():
    module = parse(b"x = (a, b)  # c\n\ndef f(y=1):\n    return y.z\n")
    Positions(module)
    for node_type in fastcst._BARE:
        assert "_codegen" not in vars(node_type), node_type
    from libcst._nodes.expression import _BaseParenthesizedNode

    assert _BaseParenthesizedNode._parenthesize is fastcst._PARENTHESIZE
    # While they are in place, code generation with any other state is libcst's own.
    code, expected = module.code, _libcst_ranges(module)
    with fastcst._FastCodegen():
        assert _BaseParenthesizedNode._parenthesize is fastcst._fast_parenthesize
        assert module.code == code
        inside = _libcst_ranges(module)
    assert {id(n): _flat(r) for n, r in inside.items()} == {id(n): _flat(r) for n, r in expected.items()}


def test_no_node_type_overrides_what_the_stand_ins_replace():
    from libcst._nodes.expression import _BaseParenthesizedNode

    for node_type in fastcst._NODE_TYPES:
        assert "_codegen" not in vars(node_type) or node_type is cst.CSTNode, node_type
        if _BaseParenthesizedNode in node_type.__mro__:
            assert "_parenthesize" not in vars(node_type) or node_type is _BaseParenthesizedNode, node_type


# The `_codegen_impl` each stand-in copies, as libcst 1.x writes it. A libcst release that
# changes one fails here (Name-like leaves and one-token operators are matched in
# fastcst itself: the stand-in is used only for types that still share the method).
COPIED = {
    cst.Newline: """
        def _codegen_impl(self, state: CodegenState) -> None:
            value = self.value
            state.add_token(state.default_newline if value is None else value)
    """,
    cst.TrailingWhitespace: """
        def _codegen_impl(self, state: CodegenState) -> None:
            self.whitespace._codegen(state)
            comment = self.comment
            if comment is not None:
                comment._codegen(state)
            self.newline._codegen(state)
    """,
    cst.EmptyLine: """
        def _codegen_impl(self, state: CodegenState) -> None:
            if self.indent:
                state.add_indent_tokens()
            self.whitespace._codegen(state)
            comment = self.comment
            if comment is not None:
                comment._codegen(state)
            self.newline._codegen(state)
    """,
    cst.Name: """
        def _codegen_impl(self, state: CodegenState) -> None:
            with self._parenthesize(state):
                state.add_token(self.value)
    """,
}


def _code(function) -> str:
    return "\n".join(line.rstrip() for line in textwrap.dedent(inspect.getsource(function)).strip().splitlines())


@pytest.mark.parametrize("node_type", list(COPIED), ids=lambda t: t.__name__)
def test_each_stand_in_copies_libcst_s_method(node_type):
    assert _code(node_type._codegen_impl) == textwrap.dedent(COPIED[node_type]).strip()


def test_the_stand_ins_cover_the_common_types():
    from libcst._nodes.base import BaseValueToken
    from libcst._nodes.expression import _BaseParenthesizedNode
    from libcst._nodes.op import _BaseOneTokenOp

    assert _code(BaseValueToken._codegen_impl).endswith("state.add_token(self.value)")
    assert "with state.record_syntactic_position(self):" in _code(_BaseOneTokenOp._codegen_impl)
    assert _code(_BaseParenthesizedNode._parenthesize).splitlines()[1:] == [
        "def _parenthesize(self, state: CodegenState) -> Generator[None, None, None]:",
        "    for lpar in self.lpar:",
        "        lpar._codegen(state)",
        "    with state.record_syntactic_position(self):",
        "        yield",
        "    for rpar in self.rpar:",
        "        rpar._codegen(state)",
    ]
    for node_type in (cst.SimpleWhitespace, cst.Comment, cst.Newline, cst.TrailingWhitespace, cst.EmptyLine,
                      cst.Comma, cst.Dot, cst.AssignEqual, cst.Colon, cst.Add, cst.Equal, cst.Name,
                      cst.Integer, cst.SimpleString, cst.Arg, cst.Element):
        assert node_type in fastcst._BARE, node_type

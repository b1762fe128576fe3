"""A cheaper parse, cheap positions and a cheap traversal for libcst trees, with libcst's exact results.

Measured on the installed tensorflow+keras tree (the 353 files the screen lets
through), libcst's `PositionProvider` cost about twice the parse and
`CSTNode.visit` about half of it: the provider builds two frozen dataclasses per
node through a Python-level code generator, and `visit` rebuilds (and
re-validates) every node of the tree even for a read-only visitor.

- `Positions(module)` runs libcst's own code generator once with C-level hooks
  (`list.append` records tokens and node boundaries in one list) and turns
  offsets into lines and columns only for the nodes asked about. While it runs,
  stand-ins replace the `_codegen` of the commonest node types (whitespace,
  punctuation, names, the `_parenthesize` of every expression): the same tokens
  with fewer Python frames, and no marks for the types no position is asked of
  (`UNMARKED`), which leaves less to index: 0.26x the parse, was 0.66x. Ranges are
  libcst's `PositionProvider` ranges, start and end, line and column, for every
  other node (tests/test_positions.py compares them on the fixtures, rule examples
  and real files, and every node the extractor asks about); a node without marks
  is answered by libcst's provider itself.
- `parse_module(source)` is `libcst.parse_module` without re-validating each node the
  parser builds (15-20% of the parse of a large file).
- `FastVisitor._walk(node)` calls the same `visit_<Type>`/`leave_<Type>`
  methods in the same order as `node.visit(visitor)`, children in the order of
  libcst's own `_visit_and_replace_children` (read from its source file, each
  file read once), without rebuilding nodes, and skips whitespace, comments,
  brackets, commas and operator tokens when the visitor has no handler for them.
"""

from __future__ import annotations

import re
import typing
from _thread import RLock
from bisect import bisect_right
from itertools import accumulate, compress
from operator import length_hint, not_
from typing import NamedTuple

import libcst as cst
from libcst._nodes.base import BaseValueToken, CSTNode
from libcst._nodes.expression import _BaseParenthesizedNode
from libcst._nodes.internal import CodegenState
from libcst._nodes.op import _BaseOneTokenOp

NEWLINE_RE = re.compile(r"\r\n?|\n")  # libcst's own line-break rule


class Point(NamedTuple):
    line: int  # 1-based
    column: int  # 0-based, in characters (libcst's CodePosition)


class Range(NamedTuple):
    start: Point
    end: Point


_new_tuple = tuple.__new__


# -- parse ------------------------------------------------------------------------

_VALIDATE_ON_INIT = CSTNode.__dict__["__post_init__"]  # `self._validate()`; no node type overrides it


def _trust_the_parser(self) -> None:
    pass


def parse_module(source: str | bytes) -> cst.Module:
    """`libcst.parse_module`, with the same tree, minus the validation of every node.

    Each node's `__post_init__` runs `_validate()`: checks for trees built by hand (a `Name`
    must not be empty, parentheses must pair...). The parser's own nodes come from source
    its grammar accepted, and libcst's comment on `__post_init__` says the work is wasted
    when parsing. Nodes built while this runs, in any thread, skip the checks too;
    everything built after it (fixes, `with_changes`) is validated as usual. A test checks
    the trees against `libcst.parse_module` and that validation is back afterwards.
    """
    CSTNode.__post_init__ = _trust_the_parser
    try:
        return cst.parse_module(source)
    finally:
        CSTNode.__post_init__ = _VALIDATE_ON_INIT


class _Syntactic:
    """A `record_syntactic_position` block: marks its start and end in the token list."""

    __slots__ = ("append", "end_node", "start_node")

    def __enter__(self):
        self.append(self)

    def __exit__(self, *exc):
        self.append(self)
        return False


# Expressions whose `_codegen_impl` is exactly `with self._parenthesize(state): ...`:
# their syntactic range runs from the end of their last `(` to the start of their
# first `)` (or their whole range without parentheses), which the marks of the
# parentheses give, so no mark of their own is needed. A test checks this list
# against libcst's source.
PARENTHESIZED = frozenset(
    getattr(cst, name)
    for name in (
        "Attribute", "Await", "BinaryOperation", "BooleanOperation", "Call", "Comparison",
        "ConcatenatedString", "Dict", "DictComp", "Ellipsis", "Float", "FormattedString",
        "GeneratorExp", "IfExp", "Imaginary", "Integer", "Lambda", "List", "ListComp", "MatchAs",
        "MatchClass", "MatchList", "MatchMapping", "MatchOr",
        "MatchTuple", "Name", "NamedExpr", "Set", "SetComp", "SimpleString", "StarredDictComp", "Subscript",
        "TemplatedString", "Tuple", "UnaryOperation", "Yield",
    )
    if hasattr(cst, name)
)


class _MarkingState(CodegenState):
    """Code generation that appends tokens *and* node boundaries to one list, in C."""

    __slots__ = ("_plain", "add_token", "after_codegen", "before_codegen", "syntactic")

    def __init__(self, module: cst.Module):
        CodegenState.__init__(self, module.default_indent, module.default_newline)
        # Bound `list.append`: no Python frame per token or per node boundary.
        self.add_token = self.before_codegen = self.after_codegen = self.tokens.append
        self.syntactic: dict[int, _Syntactic] = {}
        self._plain = RLock()  # a re-entrant context manager whose enter/exit are C

    def pop_trailing_newline(self) -> None:
        # libcst's position state keeps its line/column when the module drops its
        # trailing newline; keeping the token keeps the offsets the same.
        pass

    def record_syntactic_position(self, node, *, start_node=None, end_node=None):
        if node.__class__ in _NO_SYNTACTIC_MARK:
            return self._plain
        mark = _Syntactic()
        mark.start_node = start_node
        mark.end_node = end_node
        mark.append = self.tokens.append
        self.syntactic[id(node)] = mark  # the last one wins, as in libcst
        return mark


# -- cheaper code generation for positions ------------------------------------------
#
# libcst's code generator spends most of its time in Python frames that make no token:
# each node's `_codegen` -> `_codegen_impl`, and, for every expression, the
# `@contextmanager` `_parenthesize` (a generator and four more frames) even when the
# expression has no parentheses. While `Positions` runs the generator, the methods below
# stand in for libcst's on the node types that make most of a tree. Each makes exactly
# the tokens libcst's makes, in the same order, and drops the marks no position needs:
# whitespace, comments, newlines and one-token operators are never asked about, nor used
# as the start or end of another node's range (`LeftParen`/`RightParen` keep theirs: the
# range of a parenthesized expression is read from them). Each checks the state: any
# other code generation running meanwhile (another thread, `module.code`) goes through
# libcst's own method, unchanged. A test compares every position asked about with
# libcst's PositionProvider.

_CODEGEN = CSTNode._codegen
_PARENTHESIZE = cst.Name._parenthesize  # `_BaseParenthesizedNode._parenthesize`, a contextmanager


def _bare_value(self, state, **kwargs):  # SimpleWhitespace, Comment: `add_token(value)`, no marks
    if state.__class__ is _MarkingState:
        value = self.value
        if value:  # an empty token moves no offset
            state.add_token(value)
    else:
        _CODEGEN(self, state, **kwargs)


def _bare_newline(self, state, **kwargs):
    if state.__class__ is _MarkingState:
        value = self.value
        state.add_token(state.default_newline if value is None else value)
    else:
        _CODEGEN(self, state, **kwargs)


def _whitespace(node, state) -> None:
    if node.__class__ is cst.SimpleWhitespace:
        value = node.value
        if value:
            state.add_token(value)
    else:
        node._codegen(state)


def _line_end(self, state) -> None:
    """The whitespace, comment and newline of a `TrailingWhitespace` or `EmptyLine`."""
    _whitespace(self.whitespace, state)
    comment = self.comment
    if comment is not None:
        comment._codegen(state)
    newline = self.newline
    if newline.__class__ is cst.Newline:
        value = newline.value
        state.add_token(state.default_newline if value is None else value)
    else:
        newline._codegen(state)


def _bare_trailing_whitespace(self, state, **kwargs):
    if state.__class__ is _MarkingState:
        _line_end(self, state)
    else:
        _CODEGEN(self, state, **kwargs)


def _bare_empty_line(self, state, **kwargs):
    if state.__class__ is _MarkingState:
        if self.indent:
            state.add_indent_tokens()
        _line_end(self, state)
    else:
        _CODEGEN(self, state, **kwargs)


def _bare_one_token_op(self, state, **kwargs):  # `,` `.` `=` `:` `+` `and` `<` ...: libcst's impl, no marks
    if state.__class__ is _MarkingState:
        _whitespace(self.whitespace_before, state)
        state.add_token(self._get_token())
        _whitespace(self.whitespace_after, state)
    else:
        _CODEGEN(self, state, **kwargs)


def _fast_name(self, state, **kwargs):
    if state.__class__ is _MarkingState and not self.lpar:
        add = state.add_token  # also `before_codegen` and `after_codegen`: the node's marks
        add(self)
        add(self.value)
        add(self)
    else:
        _CODEGEN(self, state, **kwargs)


def _fast_parenthesize(self, state):
    if state.__class__ is _MarkingState and not self.lpar and self.__class__ in PARENTHESIZED:
        return state._plain  # no parentheses to write, no mark to make (see PARENTHESIZED)
    return _PARENTHESIZE(self, state)


def _unmarked(self, state, **kwargs):  # libcst's `_codegen` without the node's marks
    if state.__class__ is _MarkingState:
        self._codegen_impl(state, **kwargs)
    else:
        _CODEGEN(self, state, **kwargs)


def _impl_is(node_type: type, owner: type) -> bool:
    return node_type._codegen_impl is owner.__dict__["_codegen_impl"] and "_codegen" not in node_type.__dict__


_NODE_TYPES = [c for c in vars(cst).values() if isinstance(c, type) and CSTNode in c.__mro__]
_BARE = {
    # node type -> its `_codegen` while positions are computed. Only types whose
    # `_codegen_impl` is the one each stand-in copies (a test reads libcst's source).
    **{t: _bare_value for t in (cst.SimpleWhitespace, cst.Comment) if _impl_is(t, BaseValueToken)},
    **{t: _bare_newline for t in (cst.Newline,) if "_codegen_impl" in t.__dict__},
    cst.TrailingWhitespace: _bare_trailing_whitespace,
    cst.EmptyLine: _bare_empty_line,
    **{t: _bare_one_token_op for t in _NODE_TYPES if _BaseOneTokenOp in t.__mro__ and _impl_is(t, _BaseOneTokenOp)},
    **{t: _fast_name for t in (cst.Name, cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString)
       if t._codegen_impl.__code__.co_code == cst.Name._codegen_impl.__code__.co_code},
}
# Types no position is asked of, nor read from (as another node's start or end, or as
# parentheses): generated without marks, nor a syntactic mark of their own.
UNMARKED = frozenset(
    {*(t for t, method in _BARE.items() if method is not _fast_name), *(
        getattr(cst, name) for name in (
            "Arg", "Element", "DictElement", "StarredDictElement", "AssignTarget", "Parameters",
            "ComparisonTarget", "SubscriptElement", "Index", "Annotation", "Decorator",
            "LeftSquareBracket", "RightSquareBracket", "LeftCurlyBrace", "RightCurlyBrace",
            "ParenthesizedWhitespace",
        )
    )}
)
_BARE.update({t: _unmarked for t in UNMARKED if t not in _BARE})
_BARE = {t: method for t, method in _BARE.items() if "_codegen" not in t.__dict__}  # only CSTNode's is replaced


_NO_SYNTACTIC_MARK = PARENTHESIZED | UNMARKED


class _FastCodegen:
    """While in use, libcst's code generator runs with the stand-ins above (see there)."""

    def __enter__(self):
        for node_type, method in _BARE.items():
            node_type._codegen = method
        _BaseParenthesizedNode._parenthesize = _fast_parenthesize

    def __exit__(self, *exc):
        for node_type in _BARE:
            try:
                del node_type._codegen  # back to CSTNode's
            except AttributeError:  # another thread's Positions put it back already
                pass
        _BaseParenthesizedNode._parenthesize = _PARENTHESIZE
        return False


class Positions:
    """libcst `PositionProvider` ranges of the nodes of one module, computed on demand.

    Every node but those `UNMARKED` (punctuation, whitespace, and the parts of a call, a
    display or a signature that hold no code of their own) has libcst's range. Asked about
    a node it has no mark for, it answers with libcst's PositionProvider instead (slow,
    never wrong); a test checks that the extractor never makes it do so."""

    def __init__(self, module: cst.Module):
        self._fallback = None
        self._module = module
        if not (module.body or module.header or module.footer):
            # An empty module: libcst decides its trailing newline from an empty
            # token list, which the marks would hide.
            self._use_libcst()
            return
        state = _MarkingState(module)
        with _FastCodegen():
            module._codegen(state)
        items = state.tokens
        for mark in state.syntactic.values():
            # Each mark held `items.append`, and `items` holds the mark: a cycle that kept every
            # token and node of the tree alive until a garbage collection walked them all.
            mark.append = None
        # Tokens are strings, marks are nodes (and `_Syntactic`s), which have no length:
        # `length_hint` gives 0 for them. All below runs in C, no Python frame per item.
        lengths = list(map(length_hint, items))
        text = "".join(compress(items, lengths))
        if "\r" in text:
            # libcst counts lines token by token; a CR LF split over two tokens
            # would count twice there. Rare (old Windows files): use libcst itself.
            self._use_libcst()
            return
        lines = text.split("\n")  # the only line break here (no CR: see above)
        lines.pop()
        self._line_starts = list(accumulate(map((1).__add__, map(len, lines))))  # after each line break
        # Keep only the marks (`not length` is true for them), with the offset before each.
        is_mark = list(map(not_, lengths))
        offsets = list(compress(accumulate(lengths, initial=0), is_mark))
        ids = list(map(id, compress(items, is_mark)))
        # The offsets of the first and last appearance of each mark: before and after its code.
        self._last = dict(zip(ids, offsets))
        ids.reverse()
        offsets.reverse()
        self._first = dict(zip(ids, offsets))
        # Ids stay unique while the nodes live (held here) and the syntactic marks live
        # (held here too).
        self._syntactic = state.syntactic

    def _use_libcst(self) -> None:
        from libcst.metadata import MetadataWrapper, PositionProvider

        self._fallback = MetadataWrapper(self._module, unsafe_skip_copy=True).resolve(PositionProvider)

    def _span(self, node) -> tuple[int, int]:
        if node.__class__ in PARENTHESIZED:
            lpar, rpar = node.lpar, node.rpar
            start = self._last[id(lpar[-1])] if lpar else self._first[id(node)]
            end = self._first[id(rpar[0])] if rpar else self._last[id(node)]
            return start, end
        mark = self._syntactic.get(id(node))
        if mark is None:
            return self._first[id(node)], self._last[id(node)]
        start = self._first[id(mark)] if mark.start_node is None else self._span(mark.start_node)[0]
        end = self._last[id(mark)] if mark.end_node is None else self._span(mark.end_node)[1]
        return start, end

    def _start(self, node) -> int:
        if node.__class__ in PARENTHESIZED:
            lpar = node.lpar
            return self._last[id(lpar[-1])] if lpar else self._first[id(node)]
        mark = self._syntactic.get(id(node))
        if mark is None:
            return self._first[id(node)]
        return self._first[id(mark)] if mark.start_node is None else self._start(mark.start_node)

    def _point(self, offset: int) -> Point:
        starts = self._line_starts
        index = bisect_right(starts, offset)
        # `tuple.__new__`, not `Point(...)`: the same Point without the Python frame of a NamedTuple's `__new__`
        return _new_tuple(Point, (index + 1, offset - starts[index - 1] if index else offset))

    def __getitem__(self, node: cst.CSTNode) -> Range:
        if self._fallback is None:
            try:
                start, end = self._span(node)
            except KeyError:  # a node without marks (UNMARKED): libcst answers
                self._use_libcst()
            else:
                return _new_tuple(Range, (self._point(start), self._point(end)))
        found = self._fallback[node]
        return Range(Point(found.start.line, found.start.column), Point(found.end.line, found.end.column))

    def start(self, node: cst.CSTNode) -> Point:
        """`self[node].start`, without working out the end."""
        if self._fallback is None:
            try:
                return self._point(self._start(node))
            except KeyError:
                pass
        return self[node].start


# -- traversal ------------------------------------------------------------------

_TRIVIA_BASES = (
    cst.BaseParenthesizableWhitespace, cst.TrailingWhitespace, cst.EmptyLine, cst.Newline, cst.Comment,
    cst.LeftParen, cst.RightParen, cst.LeftSquareBracket, cst.RightSquareBracket,
    cst.LeftCurlyBrace, cst.RightCurlyBrace, cst.Comma, cst.Dot, cst.Colon, cst.Semicolon,
    cst.AssignEqual, cst.BaseBinaryOp, cst.BaseBooleanOp, cst.BaseCompOp, cst.BaseUnaryOp,
    cst.BaseAugOp, cst.Asynchronous,
)
# Node types that hold only whitespace, comments and punctuation. `__mro__` membership,
# not issubclass: libcst's bases are ABCs, and each issubclass answer is cached as weak
# references (about 40,000 objects for this set) that every later garbage collection,
# and the interpreter's exit, walk through. A test checks this equals issubclass.
TRIVIA = frozenset(
    c for c in vars(cst).values()
    if isinstance(c, type) and any(base in c.__mro__ for base in _TRIVIA_BASES)
)
_CHILD = re.compile(r"\bvisit_\w+\(\s*self,\s*\"(\w+)\"")
_ATTRIBUTE_HANDLER = re.compile(r"^(visit|leave)_[A-Z]\w*_\w+$")
_SOURCE_LINES: dict[str, list[str]] = {}  # file name -> its lines, each libcst file read once


def _function_source(function) -> str:
    """The text of a plain (undecorated) method, as `inspect.getsource` gives it: from its
    `def` line through its last line of code, then any lines indented deeper than the
    `def` (the rest of a statement, comments). A test compares the fields read from this
    with those read through inspect for every libcst node type; inspect tokenizes each
    block, ~1 ms a type."""
    code = function.__code__
    lines = _SOURCE_LINES.get(code.co_filename)
    if lines is None:
        with open(code.co_filename, encoding="utf-8") as handle:
            lines = _SOURCE_LINES[code.co_filename] = handle.readlines()  # numbered as linecache numbers them
    first = code.co_firstlineno - 1
    indent = len(lines[first]) - len(lines[first].lstrip())
    # The last line that has bytecode is in the body, past a signature split over lines.
    end = max(line for _, _, line in code.co_lines() if line is not None)
    while end < len(lines):
        stripped = lines[end].lstrip()
        if stripped and len(lines[end]) - len(stripped) <= indent:
            break
        end += 1
    while end > first + 1 and not lines[end - 1].strip():  # trailing blank lines are not the method's
        end -= 1
    return "".join(lines[first:end])


def child_fields(node_type: type) -> tuple[str, ...]:
    """The fields libcst's visit walks, in its order (from `_visit_and_replace_children`)."""
    # once each: `ImportFrom` names `names` on two branches (`*` or a list)
    return tuple(dict.fromkeys(_CHILD.findall(_function_source(node_type._visit_and_replace_children))))


def _only_trivia(annotation) -> bool:
    """Whether a field annotation admits only trivia nodes (or no node at all)."""
    found = False
    stack = [annotation]
    while stack:
        current = stack.pop()
        args = typing.get_args(current)
        if args:
            stack.extend(args)
            continue
        # `__mro__` membership, not issubclass: libcst's bases are ABCs, slow to ask.
        if isinstance(current, type) and cst.CSTNode in current.__mro__:
            if current not in TRIVIA and not any(base in current.__mro__ for base in _TRIVIA_BASES):
                return False
            found = True
    return found


_is_node: dict[type, bool] = {}  # class -> is a CSTNode (isinstance on libcst's ABCs is slow)


def _learn(kind: type) -> bool:
    _is_node[kind] = answer = cst.CSTNode in kind.__mro__
    return answer


class FastVisitor(cst.CSTVisitor):
    """A read-only visitor whose `_walk(node)` equals `node.visit(self)`, minus the copying."""

    _plans: typing.ClassVar[dict] = {}

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls._plans = {}
        # libcst's own visitor classes define empty `visit_<Type>[_<field>]` stubs for
        # every node type: only handlers written below them count.
        own = [klass for klass in cls.__mro__ if not klass.__module__.startswith("libcst")]
        names = {name for klass in own for name in vars(klass)}
        cls._handlers = names
        cls._attribute_handlers = any(_ATTRIBUTE_HANDLER.match(n) for n in names)
        cls._prune = not any(
            f"{prefix}_{t.__name__}" in names for t in TRIVIA for prefix in ("visit", "leave")
        )

    @classmethod
    def _plan(cls, node_type: type):
        name = node_type.__name__
        fields = child_fields(node_type)
        if cls._prune:
            hints = typing.get_type_hints(node_type)
            fields = tuple(f for f in fields if not _only_trivia(hints.get(f)))
        visit, leave = (
            getattr(cls, handler) if handler in cls._handlers else None
            for handler in (f"visit_{name}", f"leave_{name}")
        )
        plan = (visit, leave, fields)
        cls._plans[node_type] = plan
        return plan

    def _walk(self, node: cst.CSTNode) -> None:
        if self._attribute_handlers:  # visit_<Type>_<field> handlers: let libcst drive
            node.visit(self)
            return
        plan = self._plans.get(node.__class__) or self._plan(node.__class__)
        visit, leave, fields = plan
        if visit is None or visit(self, node) is not False:
            walk = self._walk
            for field in fields:
                child = getattr(node, field)
                kind = child.__class__
                if kind is tuple or kind is list:
                    for item in child:
                        walk(item)
                elif _is_node.get(kind) or (kind not in _is_node and _learn(kind)):
                    walk(child)
        if leave is not None:
            leave(self, node)

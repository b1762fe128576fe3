"""`--fix` and `--diff`: mechanical edits for the findings that have one.

A fixer turns a finding into a `Fix` (plain text edits) by looking at the
file's syntax tree again; the rules themselves stay pure functions of facts.
Files are rewritten atomically (temp file, then rename), with their encoding,
BOM and line endings kept. Applying them, one at a time and re-linting after
each, is `fixing.py`'s loop, which sits above the engine.

The engine imports this module only when a fixable rule fires (it attaches the
fixes in the linting pass, so they are cached with the findings); nothing here
imports the engine.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import os
import re
import tokenize
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

from tapecheck.findings import Edit, Finding, Fix
from tapecheck.lint.facts import GRADIENT_METHODS

MAX_PASSES = 50  # fixes applied per file; each pass lints the file twice
_NEWLINE = re.compile(r"\r\n|\r|\n")


class FixError(Exception):
    """A fixed file that could not be written; the message names the problem."""


# -- source text ------------------------------------------------------------------
@dataclass
class SourceText:
    """A file's text as the fixer sees it: decoded, with how to encode it back."""

    text: str
    encoding: str  # "utf-8-sig" when the file has a BOM
    newline: str

    @classmethod
    def from_bytes(cls, data: bytes) -> "SourceText":
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        text = data.decode(encoding)  # the engine parsed it, so it decodes
        match = _NEWLINE.search(text)
        return cls(text, encoding, match.group(0) if match else "\n")

    def encode(self, text: str | None = None) -> bytes:
        return (self.text if text is None else text).encode(self.encoding)


def _line_starts(text: str) -> list[int]:
    return [0] + [match.end() for match in _NEWLINE.finditer(text)]


def _offset(starts: list[int], text: str, line: int, col: int) -> int:
    if line == len(starts) + 1 and col == 1:
        return len(text)  # just past the last line
    if not 1 <= line <= len(starts):
        raise ValueError(f"edit at line {line} is outside the file")
    offset = starts[line - 1] + col - 1
    end = starts[line] if line < len(starts) else len(text)
    if offset > end:
        raise ValueError(f"edit at {line}:{col} is past the end of its line")
    return offset


def edit_spans(text: str, edits: Iterable[Edit]) -> list[tuple[int, int, str]]:
    """(start, end, replacement) offsets of edits, sorted; ValueError if they overlap."""
    starts = _line_starts(text)
    spans = sorted(
        (_offset(starts, text, e.line, e.col), _offset(starts, text, e.end_line, e.end_col), e.text)
        for e in dict.fromkeys(edits)
    )
    for (start, end, _), (next_start, _, _) in zip(spans, spans[1:]):
        if next_start < end or (next_start == start == end):
            raise ValueError("edits overlap")
    if any(end < start for start, end, _ in spans):
        raise ValueError("edit ends before it starts")
    return spans


def apply_edits(text: str, edits: Iterable[Edit], newline: str = "\n") -> str:
    """The text with the edits made (their "\\n" written as `newline`)."""
    out = text
    for start, end, replacement in reversed(edit_spans(text, edits)):
        out = out[:start] + replacement.replace("\n", newline) + out[end:]
    return out


# -- finding the nodes ----------------------------------------------------------------
_FIELDS: dict[type, tuple[str, ...]] = {}


def _children(node) -> list:
    """`node.children` (the nodes libcst's visit walks, in its order), without libcst's visit."""
    from tapecheck.lint.fastcst import _is_node, _learn, child_fields

    kind = node.__class__
    fields = _FIELDS.get(kind)
    if fields is None:
        fields = _FIELDS[kind] = tuple(dict.fromkeys(child_fields(kind)))  # ImportFrom names `names` twice
    out = []
    # `_is_node` (a class -> is-a-CSTNode table), not isinstance on libcst's ABC: no Python frame per child
    for field in fields:
        child = getattr(node, field)
        if child.__class__ is tuple or child.__class__ is list:
            for item in child:
                if _is_node.get(item.__class__) or (item.__class__ not in _is_node and _learn(item.__class__)):
                    out.append(item)
        elif _is_node.get(child.__class__) or (child.__class__ not in _is_node and _learn(child.__class__)):
            out.append(child)
    return out


class _Tree:
    """A parsed file with positions, parents and the facts, for the fixers."""

    def __init__(self, text: str, path: str, parsed=None, facts=None):
        import libcst as cst

        from tapecheck.lint.extract import extract
        from tapecheck.lint.fastcst import Positions, parse_module

        self.cst = cst
        self.text = text
        starts = _line_starts(text)  # the parser's line breaks, not str.splitlines' (form feeds...)
        self.lines = [text[a:b] for a, b in zip(starts, starts[1:] + [len(text)]) if a < b]
        # The lint's own parse and positions (libcst's tree and libcst's ranges, tests/test_positions.py),
        # not libcst's validating parse and PositionProvider: those took most of a fixable file's lint.
        if parsed is None:
            self.module = parse_module(text)
            self.positions = Positions(self.module)
        else:  # the lint's own (module, positions, facts) of this text
            self.module, self.positions, facts = parsed
        self._calls_at: dict | None = None  # `fact_call`'s table, made on first use
        self._parents: dict | None = None  # built on first use (`_index`): a fixer that gives up early never walks the tree
        self._starts: dict[tuple[int, int], list] | None = None
        if parsed is None:
            self.facts = facts if facts is not None else extract(self.module, path)
        else:
            self.facts = facts

    def _index(self) -> None:
        from tapecheck.lint.fastcst import UNMARKED

        parents: dict = {}
        by_start: dict[tuple[int, int], list] = {}
        # Every node, children before their parent (PositionProvider's order: of the nodes that
        # start at one place, the innermost first), indexed by start unless no position is asked of its type.
        pending = [(self.module, False)]
        while pending:
            node, done = pending.pop()
            if done:
                if node.__class__ not in UNMARKED:
                    where = self.positions.start(node)
                    by_start.setdefault((where.line, where.column + 1), []).append(node)
                continue
            pending.append((node, True))
            children = _children(node)
            for child in children:
                parents[child] = node
            pending.extend((child, False) for child in reversed(children))
        self._parents, self._starts = parents, by_start

    @property
    def parents(self) -> dict:
        if self._parents is None:
            self._index()
        return self._parents

    @property
    def _by_start(self) -> dict[tuple[int, int], list]:
        if self._starts is None:
            self._index()
        return self._starts

    def start(self, node) -> tuple[int, int]:
        position = self.positions[node].start
        return position.line, position.column + 1

    def end(self, node) -> tuple[int, int]:
        position = self.positions[node].end
        return position.line, position.column + 1

    def nodes_at(self, kind, line: int, col: int) -> list:
        return [node for node in self._by_start.get((line, col), ()) if isinstance(node, kind)]

    def ancestors(self, node):
        while node in self.parents:
            node = self.parents[node]
            yield node

    def indent_of(self, line: int) -> str:
        text = self.lines[line - 1]
        return text[: len(text) - len(text.lstrip(" \t"))]

    def fact_call(self, finding: Finding):
        """The first call of the facts at the finding's place (calls by place: made once per file)."""
        calls = self._calls_at
        if calls is None:
            calls = self._calls_at = {}
            for call in self.facts.calls:
                calls.setdefault((call.site.line, call.site.col), call)
        return calls.get((finding.line, finding.col))

    def member_of(self, node, suite):
        """`node` or its ancestor whose parent is `suite` (a block, or the module), or None."""
        return next((n for n in (node, *self.ancestors(node)) if self.parents.get(n) is suite), None)


class _Whole(Exception):
    """A fixer working on kept runs met what only the whole file's tree answers exactly."""


class _RunsTree(_Tree):
    """The fixers' view of a file the lint parsed in runs (the language server's kept
    `parts.Runs`): each node is a node of the run that holds it, placed in the file by the run's
    `lines_before`, and only the statements a fixer looks at are indexed (tests/test_fix_runs.py).

    A run is whole statements, so a statement's tree and its positions relative to its first
    line are those of the whole file's tree, and so is everything a fixer reads below it. What
    differs is above and across statements, and there it raises `_Whole` (the caller then asks
    the whole file's tree) rather than answer differently:
    - a run that goes on with a class starts with a copy of the class header (`class A(B):`, and
      the copy's block): not the file's nodes; their positions are asked of no fixer;
    - a class that goes on in the next run ends there in this run's tree, not in the file;
    - the module, and a class cut over runs, are one suite in the file, several here (`member_of`);
    - runs with the same text share one tree (`parts.Runs` keys trees by text): where such a
      tree sits in the file is ambiguous.
    Indexed is the innermost statement of a block that holds the place asked about (a method, a
    statement in a loop); the classes, functions, compound statements and blocks above it are
    linked to their parents but indexed by place only when asked about, and a module never is
    (no fixer asks for one by place).
    """

    def __init__(self, text: str, runs, facts):
        import libcst as cst

        self.cst = cst
        self.text = text
        self.facts = facts
        self._calls_at = None
        self._parts = list(runs.parts())  # each with its positions, worked out when it was parsed
        seen: dict[int, int] = {}
        for part in self._parts:
            seen[id(part.module)] = seen.get(id(part.module), 0) + 1
        self._shared = {key for key, count in seen.items() if count > 1}
        self._positions = [part.positions for part in self._parts]
        # how many lines of each run's tree are the class header it copies (0 for most runs), and the
        # file line where each run's own text starts
        self._header = [span.header.count("\n") for span in runs.spans]
        self._firsts = [part.lines_before + header + 1 for part, header in zip(self._parts, self._header)]
        self._parents: dict = {}
        self._run_of: dict = {}  # node -> the index of its run, for the runs indexed
        self._starts_of: dict[int, dict] = {}  # run index -> its indexed nodes by start, in the run's lines
        self._units_of: dict[int, tuple] = {}  # run index -> `_units`
        self._walked: set = set()  # the nodes indexed (a class's chain is not, until it is walked)
        self._chains_of: dict[int, dict] = {}  # run index -> the chains' nodes by start (and "seen")
        self._cut: set = set()  # nodes of a class that goes on in the next run, and its block: they end early
        self._libcst_ranges: dict[int, object] = {}  # run index -> `_provider`
        from tapecheck.lint.fastcst import UNMARKED

        self._unmarked = UNMARKED

    @functools.cached_property
    def lines(self) -> list[str]:  # the file's lines, as `_Tree`'s (asked by few fixers)
        starts = _line_starts(self.text)
        return [self.text[a:b] for a, b in zip(starts, starts[1:] + [len(self.text)]) if a < b]

    def _run(self, line: int) -> int:
        """The index of the run whose own text holds file line `line`."""
        from bisect import bisect_right

        index = bisect_right(self._firsts, line) - 1
        if index < 0 or id(self._parts[index].module) in self._shared:
            raise _Whole
        return index

    def _units(self, index: int) -> tuple[list, list]:
        """Run `index`'s statements as the file has them (a class that goes on: its members),
        each with its parents up to the run's module, and where each ends (in the run's lines)."""
        units = self._units_of.get(index)
        if units is None:
            part = self._parts[index]
            module = part.module
            statements = [(statement, (module,)) for statement in module.body]
            if part.continues_class:
                copy = module.body[0]
                statements[:1] = [(member, (copy.body, copy, module)) for member in copy.body.body]
            if index + 1 < len(self._parts) and self._parts[index + 1].continues_class:
                self._cut.update((module.body[-1], module.body[-1].body))  # a class that goes on ends early here
            positions = self._positions[index]
            units = self._units_of[index] = (statements, [positions[statement].end for statement, _ in statements])
        return units

    def _index_at(self, index: int, line: int, col: int) -> None:
        """Index the statement of run `index` that holds (run line, col): the member of a class
        that holds it, the statement, or the whole run when none does."""
        from tapecheck.lint.fastcst import Point

        self._index_among(index, *self._units(index), Point(line, col - 1))

    def _index_among(self, index: int, statements: list, ends: list, point) -> None:
        """Index those of `statements` (with their chains and ends) that may hold `point`."""
        from bisect import bisect_left

        at = bisect_left(ends, point)  # the first statement that ends at or after it
        if at == len(statements):  # past the last statement (its comments): all of them
            for statement, chain in statements:
                self._index(index, statement, chain)
            return
        cst, positions = self.cst, self._positions[index]
        # a node starting where a statement ends belongs to the next (never so, but cheap to allow)
        for statement, chain in statements[at:at + 2] if ends[at] == point else statements[at:at + 1]:
            block = getattr(statement, "body", None)
            members = block.body if isinstance(block, cst.IndentedBlock) and isinstance(statement, cst.BaseCompoundStatement) else ()
            member_ends = [positions[member].end for member in members]
            inside = bisect_left(member_ends, point)
            # In a statement of its block: past the statement before it, or at or past the first's
            # own start (its comment lines and decorators come before: the header may hold those).
            if statement not in self._walked and inside < len(members) and (inside or point >= positions[members[0]].start):
                chain = (block, statement, *chain)
                self._link(index, chain)
                for member in members:  # a fixer may read a statement of the block (TAP301: the first)
                    self._parents[member] = block
                    self._run_of[member] = index
                self._index_among(index, [(member, chain) for member in members], member_ends, point)
            else:
                self._index(index, statement, chain)

    def _link(self, index: int, chain: tuple) -> None:
        """Parents up a chain (nodes of run `index`, each the parent of the one before, the last a
        statement of the run's module or the module). Its nodes are not indexed by start; those of
        the file are kept by start apart, for `nodes_at` to leave a question about one to the whole file."""
        parents, run_of = self._parents, self._run_of
        positions, header = self._positions[index], self._header[index]
        aside = self._chains_of.setdefault(index, {"seen": set()})
        seen = aside["seen"]
        for below, above in zip(chain, chain[1:]):
            parents[below] = above
        for node in chain:
            run_of[node] = index
            if node in seen or node.__class__ is self.cst.Module:
                continue
            seen.add(node)
            where = positions[node].start
            if where.line > header:  # not the copied class header
                aside.setdefault((where.line, where.column + 1), []).append(node)

    def _index(self, index: int, top, chain: tuple) -> None:
        """`_Tree._index` of `top`, a statement of run `index`, in the run's lines; `chain`: its
        parents up to the run's module (not indexed by start: the module, a class around `top`)."""
        walked = self._walked
        if top in walked:
            return
        from tapecheck.lint.fastcst import UNMARKED

        positions = self._positions[index]
        parents, run_of = self._parents, self._run_of
        by_start = self._starts_of.setdefault(index, {})
        aside = self._chains_of.setdefault(index, {"seen": set()})
        if chain:
            parents[top] = chain[0]
            self._link(index, chain)
        pending = [(top, False)]
        while pending:
            node, done = pending.pop()
            if done:
                if node.__class__ not in UNMARKED:
                    where = positions.start(node)
                    by_start.setdefault((where.line, where.column + 1), []).append(node)
                    if node in aside["seen"] and node in aside.get((where.line, where.column + 1), ()):
                        aside[(where.line, where.column + 1)].remove(node)  # a chain's node, now indexed by start
                continue
            walked.add(node)
            run_of[node] = index
            pending.append((node, True))
            children = _children(node)
            for child in children:
                parents[child] = node
            pending.extend((child, False) for child in reversed(children) if child not in walked)  # a member indexed before

    @property
    def parents(self) -> dict:
        return self._parents

    def nodes_at(self, kind, line: int, col: int) -> list:
        index = self._run(line)
        line -= self._parts[index].lines_before
        self._index_at(index, line, col)
        if any(isinstance(node, kind) for node in self._chains_of.get(index, {}).get((line, col), ())):
            raise _Whole  # a class, function or compound statement around what was indexed, not indexed by start
        return [node for node in self._starts_of[index].get((line, col), ()) if isinstance(node, kind)]

    def _range(self, node):
        index = self._run_of.get(node)
        if index is None:
            raise _Whole  # not a node of an indexed run
        if node.__class__ in self._unmarked:  # an argument, say: libcst's provider, not the store's positions
            where = self._provider(index)[node]
        else:
            where = self._positions[index][node]
        if where.start.line <= self._header[index]:
            raise _Whole  # the copied class header
        return self._parts[index].lines_before, where

    def _provider(self, index: int):
        """libcst's ranges of run `index`'s nodes, for those `fastcst.Positions` has no marks for:
        asked of the kept positions, they would switch to libcst's for good (and keep its ranges)."""
        ranges = self._libcst_ranges.get(index)
        if ranges is None:
            from libcst.metadata import MetadataWrapper, PositionProvider

            module = self._parts[index].module
            ranges = self._libcst_ranges[index] = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
        return ranges

    def start(self, node) -> tuple[int, int]:
        before, where = self._range(node)
        return where.start.line + before, where.start.column + 1

    def end(self, node) -> tuple[int, int]:
        if node in self._cut:
            raise _Whole
        before, where = self._range(node)
        return where.end.line + before, where.end.column + 1

    def member_of(self, node, suite):
        index, home = self._run_of.get(node), self._run_of.get(suite)
        if index is None or home is None or index < home:
            raise _Whole
        if index == home:
            return super().member_of(node, suite)
        # a suite cut over runs: the file's module, or a top-level class that goes on
        module, there = self._parts[home].module, self._parts[index]
        if suite is module:
            statement = super().member_of(node, there.module)
            if there.continues_class and statement is there.module.body[0]:
                raise _Whole  # the copied header of a class that began in an earlier run
            return statement
        if isinstance(module.body[-1], self.cst.ClassDef) and suite is module.body[-1].body and all(part.continues_class for part in self._parts[home + 1:index + 1]):
            return super().member_of(node, there.module.body[0].body)  # the same class, going on
        raise _Whole


def _replace(tree: _Tree, node, text: str) -> Edit:
    (line, col), (end_line, end_col) = tree.start(node), tree.end(node)
    return Edit(line, col, end_line, end_col, text)


def _insert(line: int, col: int, text: str) -> Edit:
    return Edit(line, col, line, col, text)


def _insert_line_after(tree: _Tree, statement, text: str) -> Edit:
    """Insert `text` as a line of its own after the line where `statement` ends."""
    end_line = tree.end(statement)[0]
    if end_line < len(tree.lines) or tree.lines[-1].endswith(("\n", "\r")):
        return _insert(end_line + 1, 1, text + "\n")
    return _insert(end_line, len(tree.lines[-1].rstrip("\r\n")) + 1, "\n" + text)


# -- TAP302 ---------------------------------------------------------------------------
def _fix_tap302(tree: _Tree, finding: Finding) -> Fix | None:
    cst = tree.cst
    call = tree.fact_call(finding)
    if call is None or ".optimizers.legacy." in tree.facts.resolve(call.func.text) + ".":
        return None
    for node in tree.nodes_at(cst.Call, finding.line, finding.col):
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value == "reset_states":
            return Fix("Call `reset_state()`", (_replace(tree, func.attr, "reset_state"),))
        keywords = {arg.keyword.value: arg for arg in node.args if arg.keyword is not None}
        if "lr" in keywords and "learning_rate" not in keywords:
            return Fix("Pass `learning_rate=`", (_replace(tree, keywords["lr"].keyword, "learning_rate"),))
    return None


# -- tapes: TAP201, TAP202 -------------------------------------------------------------------
def _tape_call(tree: _Tree, tape):
    """The `tf.GradientTape(...)` call node that made a tape (facts: `tape.site`)."""
    cst = tree.cst
    for item in tree.nodes_at(cst.WithItem, tape.site.line, tape.site.col):
        if isinstance(item.item, cst.Call):
            return item.item
    for kind in (cst.Assign, cst.AnnAssign):
        for statement in tree.nodes_at(kind, tape.site.line, tape.site.col):
            if isinstance(statement.value, cst.Call):
                return statement.value
    for statement in tree.nodes_at(cst.SimpleStatementLine, tape.site.line, tape.site.col):
        for small in statement.body:
            if isinstance(small, (cst.Assign, cst.AnnAssign)) and isinstance(small.value, cst.Call):
                return small.value
    return None


def _persistent_arg(call):
    """The argument that sets `persistent` (keyword, or the first positional), or None."""
    for index, arg in enumerate(call.args):
        if arg.keyword is not None and arg.keyword.value == "persistent":
            return arg
        if index == 0 and arg.keyword is None and not arg.star:
            return arg
    return None


def _del_after_last_use(tree: _Tree, tape, maker_call) -> Edit | None:
    """`del tape` after the statement that holds the tape's last use, when that is simple.

    Simple: that statement sits in the suite that made the tape (so it runs
    whenever the tape was made; a loop or an `if` around the use is fine) and
    is not itself a `return`, `raise`, `break` or `continue`; and the name is
    read nowhere else: not before the tape is made (a loop's next pass would
    find it deleted), not in a nested function (it may run later).
    """
    cst = tree.cst
    facts = tree.facts
    scope = facts.scope_of(tape.site)
    named = [
        u for u in facts.uses
        if (u.name == tape.name or u.name.startswith(tape.name + ".")) and scope in facts.chain(u.site.block)
    ]  # in this scope or a function nested in it
    if any(facts.scope_of(u.site) != scope or u.site.order < tape.site.order for u in named):
        return None
    uses = named
    if not uses or any(d.target == tape.name and facts.scope_of(d.site) == scope for d in facts.deletes):
        return None
    last = max(uses, key=lambda u: u.site.order)
    maker = next((a for a in tree.ancestors(maker_call) if isinstance(a, (cst.With, cst.SimpleStatementLine))), None)
    suite = tree.parents.get(maker) if maker is not None else None
    used = tree.nodes_at((cst.Name, cst.Attribute), last.site.line, last.site.col)
    if suite is None or not used:
        return None
    statement = tree.member_of(used[0], suite)
    if statement is None:
        return None
    if isinstance(statement, cst.SimpleStatementLine) and any(
        isinstance(small, (cst.Return, cst.Raise, cst.Break, cst.Continue)) for small in statement.body
    ):
        return None  # `return tape.gradient(...)`: nothing runs after it
    return _insert_line_after(tree, statement, f"{tree.indent_of(tree.start(statement)[0])}del {tape.name}")


def _fix_tap201(tree: _Tree, finding: Finding) -> Fix | None:
    call = tree.fact_call(finding)
    if call is None:
        return None
    tape = tree.facts.tape_for(call.receiver, call.site) if call.receiver else None
    for arg in (*call.args, *call.keywords.values()) if tape is None else ():
        # the tape handed to a helper that asks it for gradients
        tape = tree.facts.tape_for(arg.text, call.site) if arg.kind == "name" else None
        if tape is not None:
            break
    node = _tape_call(tree, tape) if tape is not None else None
    if node is None or any(arg.star for arg in node.args):
        return None
    existing = _persistent_arg(node)
    if existing is not None:
        edit = _replace(tree, existing.value, "True")
    elif node.args:
        line, col = tree.end(node.args[-1])
        edit = _insert(line, col, ", persistent=True")
    else:
        line, col = tree.end(node)
        edit = _insert(line, col - 1, "persistent=True")  # just before the `)`
    edits = [edit]
    release = _del_after_last_use(tree, tape, node)
    if release is not None:
        edits.append(release)
    title = f"Make `{tape.name}` persistent" + (f" and `del {tape.name}` after its last use" if release else "")
    return Fix(title, tuple(edits))


def _asked_once(facts, tape) -> bool:
    """The tape makes one gradient call, once, that needs no persistence (TAP202's first case)."""
    calls = facts.tape_calls(tape, GRADIENT_METHODS)
    if len(calls) != 1 or calls[0].site.in_comprehension or facts.loops_between(tape.site, calls[0].site):
        return False
    call = calls[0]
    pfor = call.keywords.get("experimental_use_pfor")
    if call.method != "gradient" and pfor is not None and pfor.value is not True:
        return False  # the while-loop jacobian asks the tape many times
    return not facts.records(tape, call.site)  # asked mid-recording so that recording goes on


def _fix_tap202(tree: _Tree, finding: Finding) -> Fix | None:
    facts = tree.facts
    tape = next((t for t in facts.tapes if (t.site.line, t.site.col) == (finding.line, finding.col)), None)
    node = _tape_call(tree, tape) if tape is not None else None
    if node is None:
        return None
    if not _asked_once(facts, tape):  # the other case: a module-level tape never released
        release = _del_after_last_use(tree, tape, node)
        return Fix(f"`del {tape.name}` after its last use", (release,)) if release else None
    arg = _persistent_arg(node)
    if arg is None or any(a.star for a in node.args):
        return None
    index = node.args.index(arg)
    if arg.keyword is None and len(node.args) > 1:
        return None  # positional: the next argument would shift into its place
    if index + 1 < len(node.args):  # drop "persistent=True, "
        (line, col), (end_line, end_col) = tree.start(arg), tree.start(node.args[index + 1])
    elif index > 0:  # drop ", persistent=True"
        (line, col), (end_line, end_col) = tree.end(node.args[index - 1]), tree.end(arg)
    else:  # the only argument: drop everything inside the parentheses
        (line, col) = tree.start(arg)
        end_line, end_col = tree.end(node)
        end_col -= 1
    return Fix("Drop `persistent=True`", (Edit(line, col, end_line, end_col, ""),))


# -- TAP301 ----------------------------------------------------------------------------------
def _epoch_loop(facts, read, name: str) -> int | None:
    """The loop block to reset `name` in: the read's loop that holds a deeper update loop,
    else (updated in another function) the outermost loop around the read."""
    loops = facts.loops_between(None, read.site)
    if not loops:
        return None
    updates = [c for c in facts.calls if (c.receiver == name and c.method == "update_state") or c.func.text == name]
    for loop in reversed(loops):
        for update in updates:
            inner = facts.loops_between(None, update.site)
            if facts.scope_of(update.site) == facts.scope_of(read.site) and loop in inner and inner.index(loop) < len(inner) - 1:
                return loop
    return loops[0]


def _fix_tap301(tree: _Tree, finding: Finding) -> Fix | None:
    cst = tree.cst
    read = tree.fact_call(finding)
    if read is None or read.method != "result" or not read.receiver:
        return None
    name = read.receiver
    loop_block = _epoch_loop(tree.facts, read, name)
    if loop_block is None:
        return None
    # the matching For/While node: loops around the read call, outer to inner, in its scope
    call_node = next(iter(tree.nodes_at(cst.Call, finding.line, finding.col)), None)
    if call_node is None:
        return None
    loop_nodes = []
    for ancestor in tree.ancestors(call_node):
        if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            break
        if isinstance(ancestor, (cst.For, cst.While)):
            loop_nodes.append(ancestor)
    loop_nodes.reverse()
    loops = tree.facts.loops_between(None, read.site)
    if len(loop_nodes) != len(loops):
        return None  # the tree and the facts disagree (a `for ... else`): leave it alone
    body = loop_nodes[loops.index(loop_block)].body
    if not isinstance(body, cst.IndentedBlock) or not body.body:
        return None
    line, col = tree.start(body.body[0])
    indent = tree.indent_of(line)
    return Fix(f"Call `{name}.reset_state()` at the start of each epoch", (_insert(line, col, f"{name}.reset_state()\n{indent}"),), safe=False)


def _fix_tap105(tree: _Tree, finding: Finding) -> Fix | None:
    from tapecheck.rules.tap105_regularization_losses_dropped import fix

    return fix(tree, finding)


FIXERS: dict[str, Callable[[_Tree, Finding], Fix | None]] = {
    "TAP105": _fix_tap105,
    "TAP201": _fix_tap201,
    "TAP202": _fix_tap202,
    "TAP301": _fix_tap301,
    "TAP302": _fix_tap302,
}


def attach_fixes(source: bytes, path: str, findings: Sequence[Finding], parsed=None, facts=None, runs=None) -> list[Finding]:
    """The findings, each with its fix when one applies (notebooks: none). `parsed`: the lint's
    own `(module, positions, facts)` of `source`, parsed whole, to reuse instead of parsing again.
    `facts`: the lint's facts of a file it parsed in parts (`lint/parts.py`: the same facts as the
    whole tree's), so that only the tree is parsed again, not walked. `runs`: with those facts,
    the language server's `parts.Runs` as this lint of `source` left them (its runs, parsed and
    positioned): the fixers look at the runs that hold the findings, and parse the whole file
    only for a fix that needs more than a run can tell (`_RunsTree`): the same fixes either way."""
    if path.endswith(".ipynb") or not any(f.code in FIXERS for f in findings):
        return list(findings)
    try:
        text = SourceText.from_bytes(source).text
    except Exception:  # noqa: BLE001 - a fix is optional: a file we cannot re-read gets none
        return list(findings)
    on_runs = tree = None
    # the runs of this text only: a store whose last lint that parsed was of another text
    # (this one was parsed whole, e.g. after a cut libcst refused) has nothing to say here
    if runs is not None and runs.text == text and facts is not None and parsed is None:
        try:
            on_runs = _RunsTree(text, runs, facts)
        except Exception:  # noqa: BLE001 - the runs cannot say: the whole file's tree, as below
            on_runs = None
    if on_runs is None:
        try:
            tree = _Tree(text, path, parsed, facts)
        except Exception:  # noqa: BLE001 - a fix is optional: a file we cannot parse again gets none
            return list(findings)
    out = []
    for finding in findings:
        fixer = FIXERS.get(finding.code)
        fix = None
        if fixer is not None and finding.cell is None:
            try:
                if on_runs is None:
                    raise _Whole
                fix = fixer(on_runs, finding)
            except Exception:  # noqa: BLE001 - what the runs cannot answer exactly (`_Whole`), or any
                # error there: the whole file's tree says, as if the runs had never been asked
                if tree is None:
                    try:
                        tree = _Tree(text, path, parsed, facts)
                    except Exception:  # noqa: BLE001 - as above: the whole file's path gives no fixes at all
                        return list(findings)
                try:
                    fix = fixer(tree, finding)
                except (ValueError, KeyError, IndexError, AttributeError):
                    fix = None
        out.append(dataclasses.replace(finding, fix=fix) if fix else finding)
    return out


def atomic_write(path: str, data: bytes) -> None:
    """Replace a file's contents all at once: a crash leaves the old file or the new, never half."""
    from tapecheck.lint.atomic import replace_file

    try:
        os.stat(path)
    except OSError as exc:
        raise FixError(f"cannot write the fixed file: {exc.strerror or exc}") from None
    try:
        replace_file(path, data, durable=True)
    except OSError as exc:
        raise FixError(f"cannot write the fixed file: {exc.strerror or exc}; the original is unchanged") from None

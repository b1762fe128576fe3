"""Parse a large file as several small libcst trees, one alive at a time.

libcst's tree costs about 350 bytes of memory per byte of source (its tree of
TensorFlow's generated `gen_math_ops.py`, 590 KB, is ~190 MB) and fastcst's
positions half as much again. A file larger than PART_CHARS is cut into runs of
whole statements of at most PART_CHARS each (or one larger statement), parsed
and walked one after the other, so peak memory follows the largest run, not the
file. The facts are the same as from the whole tree (a test compares them).

Cuts fall only where Python's own parser (`ast`, already run by the nesting
check) says a statement starts a line:
- between top-level statements: each run is then a valid module by itself;
- between the statements of a top-level class body (test classes of 100+ KB are
  common). The run that goes on with the class starts with a copy of the class
  header (`class Name(Base):`), which makes it a valid module; the walker
  re-enters the class's block instead of opening a second one.
A run libcst still refuses makes the caller parse the file whole.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import NamedTuple

PART_CHARS = 16 * 1024


class Unparsable(Exception):
    """A run libcst cannot parse alone: parse the whole file instead."""


class Span(NamedTuple):
    lines_before: int  # lines of the file before `start`, less those of `header`
    start: int  # character offsets in the decoded source
    end: int
    header: str  # "" or the class header this run goes on with


class Part(NamedTuple):
    lines_before: int  # add to the tree's line numbers to get the file's
    module: object  # libcst.Module
    continues_class: bool  # its first statement is the rest of the class the last run ended in
    positions: object = None  # its `fastcst.Positions` when already worked out (None: the walker does)
    key: str | None = None  # its text with the header it repeats, when the facts of its walk are kept (`Runs.facts`)


def split(text: str, tree, limit: int | None = None) -> list[Span] | None:
    """Spans of the file's decoded `text` of at most about `limit` characters (PART_CHARS when
    None), or None when the file is small or cannot be cut safely. `tree`: Python's `ast` of it
    (None: not parsed)."""
    limit = PART_CHARS if limit is None else limit
    if tree is None or len(text) <= limit:
        return None
    if "\r" in text:
        return None  # Python and libcst count lines alike on \n only: old Mac/Windows files parse whole
    if _BACKSLASH_LINE.search(text):
        return None  # after a line of only a backslash libcst counts one line fewer than Python: whole
    line_starts = [0]
    line_starts.extend(m.end() for m in re.finditer("\n", text))

    def first_line_of(statement) -> int:
        decorators = getattr(statement, "decorator_list", None)
        return decorators[0].lineno if decorators else statement.lineno

    def starts_line(statement, indent: int) -> int | None:
        """The line where `statement` (its first decorator) starts, if nothing but `indent` precedes it."""
        decorators = getattr(statement, "decorator_list", None)
        line = first_line_of(statement)
        begin = line_starts[line - 1]
        if text[begin:begin + indent].strip(" \t") or text[begin + indent] in " \t":
            return None
        if decorators and text[begin + indent] != "@":
            return None  # `@` on an earlier line than the decorator's expression
        if not decorators and statement.col_offset != indent:
            return None  # after a `;`
        return line

    cuts: list[tuple[int, str]] = []  # (line a run may start at, class header to repeat there)
    for index, statement in enumerate(tree.body):
        line = starts_line(statement, 0)
        if index and line is not None:
            cuts.append((line, ""))
        body = statement.body if type(statement).__name__ == "ClassDef" else ()
        if line is None or len(body) < 2:
            continue  # not a class, or a one-line one: cut around it, never inside
        first_line = first_line_of(body[0])
        if first_line == statement.lineno:
            continue  # `class A: x = 1`
        indent = body[0].col_offset
        header = text[line_starts[statement.lineno - 1]:line_starts[first_line - 1]]
        for member in body[1:]:
            member_line = starts_line(member, indent)
            if member_line is not None:
                cuts.append((member_line, header))
    spans: list[Span] = []
    start_line, start, header = 1, 0, ""
    offsets = [line_starts[line - 1] for line, _ in cuts] + [len(text)]
    for index, (line, cut_header) in enumerate(cuts):
        # Cut before this statement when the run would outgrow PART_CHARS with it.
        if offsets[index] > start and offsets[index + 1] - start > limit:
            spans.append(Span(start_line - 1 - header.count("\n"), start, offsets[index], header))
            start_line, start, header = line, offsets[index], cut_header
    if not spans:
        return None
    spans.append(Span(start_line - 1 - header.count("\n"), start, len(text), header))
    return spans


class Runs:
    """One editor buffer's parsed runs, kept by the language server from one lint of it to the next
    (`parse_each(runs=)`): a run whose text is unchanged is not parsed again, and, when the walk
    enters it in the state it entered it last time, not walked again (`extract(runs=)`).

    A tree and its positions are functions of the run's text alone (where the run sits in the file
    is the walker's `lines_before`), and the walk only reads them, so a reused run gives the facts a
    fresh parse gives (tests/test_parts.py). A run's facts also depend on what precedes it (the
    numbering, the imports, the class it goes on with...): `lint/runfacts.py` says what is checked
    and renumbered."""

    __slots__ = ("trees", "text", "spans", "facts", "walked")

    def __init__(self) -> None:
        self.trees: dict[str, tuple] = {}  # a run's text (the class header it repeats included) -> (module, positions)
        self.text: str | None = None  # the decoded text the last lint cut into `spans` (None: no lint kept)
        self.spans: list[Span] = []  # the last lint's runs, in file order
        self.facts: dict = {}  # a run's text -> what walking it added (`runfacts.RunFacts`), of the last lint
        self.walked = 0  # how many runs the last lint walked (the others' facts were reused)

    def __len__(self) -> int:
        return len(self.trees)

    def parts(self) -> Iterator[Part]:
        """The last lint's runs, in file order, with their positions."""
        for span in self.spans:
            module, positions = self.trees[span.header + self.text[span.start:span.end]]
            yield Part(span.lines_before, module, bool(span.header), positions)


def parse_each(text: str, spans: list[Span], runs: Runs | None = None) -> Iterator[Part]:
    """The runs' trees, one at a time.

    `runs` (the language server's, for one buffer): the runs of its last lint; those whose text
    is unchanged are taken from there instead of parsed. Once every run is parsed it holds this
    lint's runs only; a run libcst refuses leaves it as it was (the last text that parsed), so a
    syntax error while typing does not cost the next lint every run's parse. Its `facts` are the
    walk's (`extract(runs=)`): each part then carries its `key`."""
    import libcst as cst

    from tapecheck.lint.fastcst import Positions, parse_module

    previous = runs.trees if runs is not None else None
    kept: dict[str, tuple] = {}
    for span in spans:
        key = span.header + text[span.start:span.end]
        reused = previous.get(key) if previous is not None else None
        if reused is None:
            reused = kept.get(key) if runs is not None else None  # the same text twice in the file
        if reused is not None:
            kept[key] = reused
            yield Part(span.lines_before, reused[0], bool(span.header), reused[1], key)
            continue
        try:
            module = parse_module(key)
        except Exception:  # noqa: BLE001 - any failure: the whole file decides (and reports) instead
            raise Unparsable from None
        if span.header and not (module.body and isinstance(module.body[0], cst.ClassDef)):
            raise Unparsable
        if runs is not None:
            positions = Positions(module)
            kept[key] = (module, positions)
            yield Part(span.lines_before, module, bool(span.header), positions, key)
            continue
        yield Part(span.lines_before, module, bool(span.header))
        del module  # not alive while the next one is parsed
    if runs is not None:
        runs.trees, runs.text, runs.spans = kept, text, list(spans)


def respan(runs: Runs, text: str, check, limit: int) -> list[Span] | None:
    """The runs of `text`, an edit of the text `runs` was last cut from, found without parsing
    all of it: the runs before and after the edited region are kept (those after move by the
    edit's length and lines), the region's runs are checked and cut again. None when that cannot
    be done safely: the caller then checks and cuts the whole file (`split`).

    `limit`: the size of the runs the region is cut into (`split`). `check(run_text)`: Python's `ast` of a run's text, None when it is not valid Python alone or is
    nested too deeply (the whole file's check then says why). The facts of a file do not depend on
    where it is cut (tests/test_parts.py), only on each run being whole statements placed at the
    right line; the runs kept parsed and were placed when their text was last cut, so what must
    hold is that the edited region is whole statements that join its neighbours as before:
    - at its start, a run that went on with a class (`header`) still goes on with it: its first
      statement is indented exactly as the run's was (the class body's indentation);
    - at its end, when the run after it goes on with a class, the region still ends inside a
      class (its last statement), whose body is indented as that run's first line is.
    Which class that is, and what its header says, does not matter: a run that goes on with a
    class walks only the body of the header it repeats, into the last class block of the file
    (`extract.FactsBuilder.walk_parts`), and its `lines_before` counts that header's lines. A
    region that ends before a run starting at column 0 needs nothing more: a statement at
    column 0 ends whatever was open."""
    old, spans = runs.text, runs.spans
    if old is None or not spans or "\r" in text:
        return None
    if old == text:
        return list(spans)
    prefix = _common_prefix(old, text)
    suffix = _common_suffix(old, text, min(len(old), len(text)) - prefix)
    changed_end = len(old) - suffix  # the edited region of the old text is [prefix, changed_end)
    first = next((k for k, span in enumerate(spans) if span.end > prefix), len(spans) - 1)
    # the runs the edit touches; a run that starts where the edit ends is one (what was inserted
    # before its first character, indentation say, must be checked with it), so the region always
    # ends at an unchanged line break or at the end of the text
    last = max(first, max((k for k, span in enumerate(spans) if span.start <= changed_end), default=first))
    grown = len(text) - len(old)
    start, end = spans[first].start, spans[last].end + grown
    header = spans[first].header
    region = header + text[start:end]
    if not text[start:end].strip() or _BACKSLASH_LINE.search(region):
        return None  # nothing left; or a line of only a backslash, where libcst counts lines unlike Python
    tree = check(region)
    if tree is None or not tree.body:
        return None
    lines = _Lines(region)
    if header:  # the region starts with the header: its first statement is that class
        member = _first_line(tree.body[0].body[0])
        if (member <= header.count("\n") or lines.continued(member)
                or lines.indent(member) != _statement_indent(old, spans[first].start)):
            return None
    if last + 1 < len(spans) and spans[last + 1].header:
        klass = tree.body[-1]
        if type(klass).__name__ != "ClassDef" or not klass.body:
            return None
        member = _first_line(klass.body[0])
        if (member == klass.lineno or lines.continued(member)  # `class A: \` then the body: one logical line
                or lines.indent(member) != _statement_indent(old, spans[last + 1].start)):
            return None
    cut = split(region, tree, limit)
    base = spans[first].lines_before
    if cut is None:
        middle = [Span(base, start, end, header)]
    else:
        shift = start - len(header)
        middle = [Span(base, start, cut[0].end + shift, header)]
        middle += [Span(base + span.lines_before, span.start + shift, span.end + shift, span.header) for span in cut[1:]]
    moved = text.count("\n", start, end) - old.count("\n", start, spans[last].end)
    after = [Span(span.lines_before + moved, span.start + grown, span.end + grown, span.header) for span in spans[last + 1:]]
    return spans[:first] + middle + after


def _first_line(statement) -> int:
    decorators = getattr(statement, "decorator_list", None)
    return decorators[0].lineno if decorators else statement.lineno


def _indent(text: str, offset: int) -> str:
    """The spaces and tabs that start the line at `offset`."""
    end = offset
    while end < len(text) and text[end] in " \t":
        end += 1
    return text[offset:end]


def _statement_indent(text: str, offset: int) -> str:
    """The indentation of the first statement of the run at `offset`: of its first line that is
    neither blank nor only a comment (a run cut again by `respan` may start with such lines)."""
    while offset < len(text):
        end = text.find("\n", offset)
        end = len(text) if end < 0 else end
        line = text[offset:end]
        if line.strip() and not line.lstrip().startswith("#"):
            return _indent(text, offset)
        offset = end + 1
    return ""


class _Lines:
    """Line starts of a text, for `respan`'s checks."""

    def __init__(self, text: str):
        self.text = text
        self.starts = [0]
        self.starts.extend(m.end() for m in re.finditer("\n", text))

    def indent(self, line: int) -> str:
        return _indent(self.text, self.starts[line - 1])

    def continued(self, line: int) -> bool:
        """Whether the line before `line` ends with a backslash (`line` goes on its logical line)."""
        return line > 1 and self.text[self.starts[line - 1] - 2:self.starts[line - 1] - 1] == "\\"


_BACKSLASH_LINE = re.compile(r"^[ \t]*\\\n", re.M)
_CHUNK = 4096


def _common_prefix(a: str, b: str) -> int:
    """How many characters `a` and `b` start with alike (compared a chunk at a time, in C)."""
    n = min(len(a), len(b))
    at = 0
    while at < n and a[at:at + _CHUNK] == b[at:at + _CHUNK]:
        at += _CHUNK
    at = min(at, n)
    while at < n and a[at] == b[at]:
        at += 1
    return at


def _common_suffix(a: str, b: str, most: int) -> int:
    """How many characters `a` and `b` end with alike, at most `most`."""
    la, lb, at = len(a), len(b), 0
    while at + _CHUNK <= most and a[la - at - _CHUNK:la - at] == b[lb - at - _CHUNK:lb - at]:
        at += _CHUNK
    while at < most and a[la - at - 1] == b[lb - at - 1]:
        at += 1
    return at

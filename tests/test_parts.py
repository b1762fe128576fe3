"""A large file is parsed in parts (tapecheck/lint/parts.py): the facts and findings must be
exactly those of the whole tree. PART_CHARS is set tiny here so that every file is cut at
every place the splitter allows. The language server keeps a buffer's runs, their trees and
the facts of their walk (`parts.Runs`, `lint/runfacts.py`): after each edit the facts of a lint
that reused them must be exactly those of a fresh lint."""

from __future__ import annotations

from importlib.util import find_spec
from pathlib import Path

import pytest
from sources import ROOT, SOURCES

from tapecheck.lint import parts
from tapecheck.lint import source as lint_source_module
from tapecheck.lint.engine import LintError, lint_python
from tapecheck.lint.extract import extract

TRICKY = {
    "decorated_class.py": (
        "import tensorflow as tf\n\n@register\n@other(1,\n       2)\nclass Model(tf.keras.Model,\n"
        "            metaclass=M):  # header comment\n    '''Doc.'''\n\n    # lead comment\n"
        "    @tf.function\n    @staticmethod\n    def step(x):\n        with tf.GradientTape() as tape:\n"
        "            y = x * x\n        return tape.gradient(y, x)\n\n    size = 3; other = 4\n\n"
        "    @ property\n    def p(self):\n        return self.size\n\n"
        "    class Inner:\n        def f(self):\n            pass\n\n    def g(self):\n        pass\n"
        "x = Model(); y = 2\nprint(x.step(y))\n"
    ),
    "one_line_class.py": "class A: x = 1; y = 2\nclass B:\n    z = 3\ndef f():\n    return A.x\n",
    "tabs.py": "class A:\n\tdef f(self):\n\t\treturn 1\n\tdef g(self):\n\t\treturn 2\nprint(A)\n",
    "continued_blank_line.py": "x = 1\n\\\ny = 2\nclass A:\n    a = 1\n    b = 2\n",
    "latin1.py": "# -*- coding: latin-1 -*-\ns = 'caf\xe9'\nclass A:\n    t = 'd\xe9j\xe0'\n    def f(self):\n        return s\n",
    "crlf_big.py": "class A:\r\n    a = 1\r\n    b = 2\r\nz = 3\r\n",
    "nested_functions.py": (
        "def outer():\n    def inner():\n        return 1\n    return inner\n"
        "if True:\n    class C:\n        a = 1\n        b = 2\nelse:\n    pass\n"
    ),
}


def _encoded(path: str, text: str) -> bytes:
    return text.encode("latin-1" if path == "latin1.py" else "utf-8")


ALL = list(SOURCES) + [(k, _encoded(k, v)) for k, v in TRICKY.items()]


@pytest.fixture
def tiny_parts(monkeypatch):
    monkeypatch.setattr(parts, "PART_CHARS", 1)  # cut wherever a cut is allowed
    monkeypatch.setattr(lint_source_module, "NESTING_SCREEN", -1)  # always run Python's parser, which gives the cuts


def _spans(source: bytes):
    text, tree = lint_source_module._checked(source)
    return text, parts.split(text, tree)


@pytest.mark.parametrize("path,source", ALL, ids=[p for p, _ in ALL])
def test_facts_in_parts_equal_the_whole_tree(tiny_parts, path, source):
    try:
        text, spans = _spans(source)
    except LintError:
        pytest.skip("not lintable: nothing to compare")
    if spans is None:
        return  # one statement, CR line ends or a syntax error: parsed whole, nothing to compare
    whole = extract(lint_source_module._libcst_parse(source), path)
    try:
        cut = extract(parts.parse_each(text, spans), path)
    except parts.Unparsable:
        assert path == "continued_blank_line.py", "only that file has a cut libcst refuses"
        return
    assert cut == whole


def test_the_comparison_cuts_most_files_and_classes(tiny_parts):
    cut = continued = 0
    for _, source in ALL:
        try:
            _, spans = _spans(source)
        except LintError:
            continue
        if spans:
            cut += 1
            continued += sum(1 for span in spans if span.header)
    assert cut >= 0.8 * len(ALL) and continued >= 20


def test_spans_cover_the_file_in_order(tiny_parts):
    source = TRICKY["decorated_class.py"].encode()
    text, spans = _spans(source)
    assert spans[0].start == 0 and spans[-1].end == len(text)
    assert all(a.end == b.start for a, b in zip(spans, spans[1:]))
    starts = [text[span.start:span.end].splitlines()[0] for span in spans]
    assert starts == [
        "import tensorflow as tf", "@register", "    @tf.function",
        "    size = 3; other = 4", "    @ property", "    class Inner:", "    def g(self):",
        "x = Model(); y = 2", "print(x.step(y))",
    ]
    class_header = "class Model(tf.keras.Model,\n            metaclass=M):  # header comment\n"
    assert {span.header for span in spans} == {"", class_header}


def test_no_cut_for_cr_line_ends_or_small_files(monkeypatch):
    monkeypatch.setattr(lint_source_module, "NESTING_SCREEN", -1)
    assert _spans(TRICKY["crlf_big.py"].encode())[1] is None  # tiny part size not set: small file
    monkeypatch.setattr(parts, "PART_CHARS", 1)
    assert _spans(TRICKY["crlf_big.py"].encode())[1] is None  # CR: Python and libcst count lines differently


def test_runs_stay_under_the_part_size_unless_one_statement_is_larger(monkeypatch):
    monkeypatch.setattr(parts, "PART_CHARS", 2000)
    functions = "".join(f"def f{i}(x):\n    return x * {i}\n\n" for i in range(300))
    methods = "".join(f"    def m{i}(self):\n        return {i}\n\n" for i in range(300))
    big_function = "def big():\n" + "".join(f"    y{i} = {i}\n" for i in range(400))
    source = (functions + "class Big:\n" + methods + big_function + functions).encode()
    text, spans = _spans(source)
    sizes = [span.end - span.start for span in spans]
    assert len(spans) > 10
    assert [size for size in sizes if size > 2000] == [len(big_function)]
    whole = extract(lint_source_module._libcst_parse(source), "big.py")
    assert extract(parts.parse_each(text, spans), "big.py") == whole


def test_findings_of_the_bad_fixtures_are_the_same_in_parts(tiny_parts):
    compared = 0
    for path in sorted((ROOT / "fixtures" / "bad").glob("*.py")):
        source = path.read_bytes()
        assert _spans(source)[1] is not None
        in_parts = lint_python(source, str(path))
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(parts, "PART_CHARS", 10**9)
            whole = lint_python(source, str(path))
        assert in_parts == whole and whole
        compared += 1
    assert compared >= 10


def test_a_cut_libcst_refuses_falls_back_to_the_whole_file(tiny_parts, monkeypatch):
    """A file with a line of only a backslash is not cut (libcst counts the lines after it one
    fewer than Python, so runs placed by Python's count would disagree with the whole tree); cut
    anyway, libcst refuses the run that starts after it, and the whole file decides."""
    import re

    source = TRICKY["continued_blank_line.py"].encode()
    assert _spans(source)[1] is None
    whole = extract(lint_source_module._libcst_parse(source), "continued.py")
    assert lint_source_module.facts_of(source, "continued.py") == whole
    monkeypatch.setattr(parts, "_BACKSLASH_LINE", re.compile("(?!)"))  # the cut the check prevents
    text, spans = _spans(source)
    with pytest.raises(parts.Unparsable):
        list(parts.parse_each(text, spans))
    assert lint_source_module.facts_of(source, "continued.py") == whole  # falls back: no error


def _edits(text: str, count: int, seed: int):
    """`count` successive edits of `text` as an editor makes them: lines inserted, deleted and
    duplicated, a character typed inside a method, an import edited or added, a class's
    header changed, a new function. An edit that breaks the syntax is undone after its lint."""
    import ast
    import random

    chance = random.Random(seed)
    lines = text.split("\n")
    for step in range(count):
        before = list(lines)
        kind = step % 8
        n = chance.randrange(1, len(lines))
        if kind == 0:  # a blank or comment line inserted
            lines.insert(n, chance.choice(["", "# note", "    # indented note"]))
        elif kind == 1:  # a line deleted (often a syntax error: the lint says so and goes on)
            del lines[n]
        elif kind == 2:  # a character typed inside a method's line
            body = [i for i, line in enumerate(lines) if line.startswith("        ") and line.strip()]
            i = chance.choice(body)
            lines[i] = lines[i] + chance.choice(["  # x", " + 0", ""])
        elif kind == 3:  # an import edited: names resolve differently below it
            imports = [i for i, line in enumerate(lines) if line.startswith(("import ", "from "))]
            i = chance.choice(imports)
            lines[i] = chance.choice([lines[i] + " as tf2", "import tensorflow as tf", "import keras"])
        elif kind == 4:  # an import added half way down
            lines.insert(n, "from tensorflow import GradientTape")
        elif kind == 5:  # a line duplicated (events, blocks and tapes renumbered below it)
            lines.insert(n, lines[n])
        elif kind == 6:  # a class header changed
            heads = [i for i, line in enumerate(lines) if line.startswith("class ")]
            if heads:
                i = chance.choice(heads)
                lines[i] = lines[i].replace("(", "(Base, ", 1) if "(" in lines[i] else lines[i]
        else:  # a new top-level function with a tape
            lines.insert(n, "def extra(x):\n    with tf.GradientTape() as t:\n        y = x * x\n    return t.gradient(y, x)\n")
            lines = "\n".join(lines).split("\n")
        yield "\n".join(lines)
        try:
            ast.parse("\n".join(lines))
        except SyntaxError:
            lines = before


def _checked_facts(source: bytes, path: str, trees: parts.Runs):
    """`facts_of` with the buffer's store, then the program model and every rule run on the facts,
    as the engine runs them: what the model or a rule might change in facts reused from the last
    lint would show in the next lint's."""
    from tapecheck.rules import RULES

    facts = lint_source_module.facts_of(source, path, None, trees)
    try:
        for rule in RULES:
            if rule.check is not None:
                list(rule.check(facts))
    finally:
        if facts.model is not None:
            facts.model.close()
            facts.model = None
    return facts


def test_parsed_runs_reused_across_edits_give_the_facts_of_a_fresh_lint(monkeypatch):
    """The language server keeps the parsed runs of a buffer (`trees`) and re-parses only the
    runs whose text an edit changed, and walks only those runs too (or those whose entry state
    changed: imports edited above them): after each of many edits, the facts and findings must
    be those of a fresh lint of the same text, and most runs must have been reused."""
    monkeypatch.setattr(lint_source_module, "NESTING_SCREEN", -1)
    monkeypatch.setattr(lint_source_module, "REUSED_PART_CHARS", 300)
    fixture = (ROOT / "fixtures" / "bad").glob("*.py")
    text = "\n".join(path.read_text() for path in sorted(fixture)[:40] if "\r" not in path.read_text())
    trees = parts.Runs()
    reused = parsed = compared = walked = runs = 0
    for step, edited in enumerate(_edits(text, 24, seed=25)):
        source = edited.encode()
        before = {id(value[0]) for value in trees.trees.values()}
        try:
            kept = _checked_facts(source, "buffer.py", trees)
        except LintError:
            with pytest.raises(LintError):
                lint_source_module.facts_of(source, "buffer.py")
            continue
        fresh = lint_source_module.facts_of(source, "buffer.py")
        assert kept == fresh
        walked += trees.walked
        runs += len(trees.spans)
        if step % 4 == 0:
            assert lint_python(source, "buffer.py", trees=trees) == lint_python(source, "buffer.py")
        now = {id(value[0]) for value in trees.trees.values()}
        if trees.text is not None:  # the runs it keeps are this lint's, in order, placed in the file
            assert extract(trees.parts(), "buffer.py") == fresh
        reused += len(now & before)
        parsed += len(now - before)
        compared += 1
    assert compared >= 15
    assert reused > 5 * parsed, (reused, parsed)  # an edit re-parses a few runs (where the cuts move), not the file
    assert runs > 4 * walked, (runs, walked)  # and walks a few: the facts of the others are reused



REUSE_SCENARIOS = {  # successive texts of a buffer, each run a statement (or a class member)
    # an `if` whose test's span starts at order 0 (the file's first event), then a run added above it
    "if_first_then_moved_down": ["if 0:\n    pass\ny = 1\n", "w = 0\nif 0:\n    pass\ny = 1\n"],
    # runs moved up to the top (their spans start at order 0), then back down
    "moved_up_then_down": ["w = v\nx = 1\ny = 2\n", "x = 1\ny = 2\n", "w = v\nx = 1\ny = 2\n"],
    # a relative import's run reused: what it binds is replayed into the next lint's facts
    "relative_import_reused": ["from .a import b\nx = 1\n", "from .a import b\nx = 2\n"],
    # a tape made in one run, recorded by a module-level `with` in a later one: that run reads the
    # earlier run's facts and extends its tape, so it is walked at every lint
    "module_with_of_an_earlier_tape": [
        "import tensorflow as tf\ntape = tf.GradientTape(persistent=True)\nx = 1\nwith tape:\n    y = x * x\n"
        "with tape.stop_recording():\n    z = y\ng = tape.gradient(y, x)\n",
        "import tensorflow as tf\ntape = tf.GradientTape(persistent=True)\nx = 1\nwith tape:\n    y = x * x\n"
        "with tape.stop_recording():\n    z = y\ng = tape.gradient(y, x)\nq = 2\n",
        "import tensorflow as tf\n\ntape = tf.GradientTape(persistent=True)\nx = 1\nwith tape:\n    y = x * x\n"
        "with tape.stop_recording():\n    z = y\ng = tape.gradient(y, x)\nq = 2\n",
        "import tensorflow as tf\n\ntape = tf.GradientTape(persistent=True)\nx = f(1)\nwith tape:\n    y = x * x\n"
        "with tape.stop_recording():\n    z = y\ng = tape.gradient(y, x)\nq = 2\n",
    ],
    # a class cut into runs (each member its own): a line added in its first method renumbers
    # the runs that go on with it; a class added above changes its block id; its last members
    # dedented end it earlier while its first run's text stays the same
    "class_in_several_runs": [
        "import tensorflow as tf\nclass M(tf.keras.Model):\n    def a(self, x):\n        return x\n"
        "    def step(self, x):\n        with tf.GradientTape() as t:\n            y = self(x)\n"
        "        return t.gradient(y, x)\n    rate = 0.1\n    def c(self):\n        return [v for v in self.w]\n"
        "print(M)\n",
        "import tensorflow as tf\nclass M(tf.keras.Model):\n    def a(self, x):\n\n        return x\n"
        "    def step(self, x):\n        with tf.GradientTape() as t:\n            y = self(x)\n"
        "        return t.gradient(y, x)\n    rate = 0.1\n    def c(self):\n        return [v for v in self.w]\n"
        "print(M)\n",
        "import tensorflow as tf\nclass N:\n    k = 1\n    def b(self):\n        pass\n"
        "class M(tf.keras.Model):\n    def a(self, x):\n\n        return x\n"
        "    def step(self, x):\n        with tf.GradientTape() as t:\n            y = self(x)\n"
        "        return t.gradient(y, x)\n    rate = 0.1\n    def c(self):\n        return [v for v in self.w]\n"
        "print(M)\n",
        "import tensorflow as tf\nclass N:\n    k = 1\n    def b(self):\n        pass\n"
        "class M(tf.keras.Model):\n    def a(self, x):\n\n        return x\n"
        "def step(self, x):\n    with tf.GradientTape() as t:\n        y = self(x)\n"
        "    return t.gradient(y, x)\nrate = 0.1\ndef c(self):\n    return [v for v in self.w]\n"
        "print(M)\n",
    ],
    # a lambda's summary holds its line: renumbered when a line is added above it
    "lambda_below_an_added_line": [
        "import tensorflow as tf\nx = 1\nf = lambda a: a + 1\ng = h(key=lambda b: b, other=[lambda: 0])\n",
        "import tensorflow as tf\n\nx = 1\nf = lambda a: a + 1\ng = h(key=lambda b: b, other=[lambda: 0])\n",
        "import tensorflow as tf\n\nx = 1 + y\nf = lambda a: a + 1\ng = h(key=lambda b: b, other=[lambda: 0])\n",
    ],
    # the first run's events start at order 0: its (0, 0) spans are not defaults, it moves down
    "first_run_moved_down": [
        "x = 1\nif 0:\n    pass\ny = lambda: 0\n",
        "w = 0\nx = 1\nif 0:\n    pass\ny = lambda: 0\n",
        "x = 1\nif 0:\n    pass\ny = lambda: 0\n",
    ],
    # the imports above a run change what its names resolve to: it is walked again
    "imports_edited_above": [
        "import tensorflow as tf\ndef f(x):\n    with tf.GradientTape() as t:\n        y = x * x\n    return t.gradient(y, x)\n",
        "import keras as tf\ndef f(x):\n    with tf.GradientTape() as t:\n        y = x * x\n    return t.gradient(y, x)\n",
        "import keras as tf\nfrom tensorflow import *\nfrom .common import tf\n"
        "def f(x):\n    with tf.GradientTape() as t:\n        y = x * x\n    return t.gradient(y, x)\n",
    ],
    # the same text twice: one run's facts, renumbered for each place
    "the_same_run_twice": [
        "def f(x):\n    return x\ndef f(x):\n    return x\n",
        "a = 1\ndef f(x):\n    return x\n\ndef f(x):\n    return x\ndef f(x):\n    return x\n",
    ],
}

# how many runs each lint after the first walks: the changed runs, and those whose entry state
# changed (imports edited above) or that read earlier runs' facts (a module-level `with tape:`)
WALKED = {
    "if_first_then_moved_down": [3],  # `w = 0`; the `if`, whose (0, 0) span is no default; `y = 1` after it
    "moved_up_then_down": [0, 2],  # then `w = v`, and `x = 1`, whose (0, 0) spans are no defaults
    "relative_import_reused": [1],
    "module_with_of_an_earlier_tape": [3, 3, 3],  # the two `with` runs at every lint, and the changed one
    "class_in_several_runs": [1, 2, 3],  # the method's run; class N's two runs; the three dedented members
    "lambda_below_an_added_line": [1, 1],
    "first_run_moved_down": [2, 0],  # `w = 0`, and `x = 1`, whose span (0, 0) is no default; back on top: none
    "imports_edited_above": [2, 3],  # the import and the function below it; the two imports and the function
    "the_same_run_twice": [2],  # `a = 1` and the function followed by a blank line (other text)
}


@pytest.mark.parametrize("name", sorted(REUSE_SCENARIOS))
def test_the_facts_of_runs_are_reused_renumbered_where_their_walk_cannot_have_changed(monkeypatch, name):
    """Each lint's facts with the store equal a fresh lint's, the program model and the rules run on
    them in between, and only the runs whose walk may have changed are walked."""
    monkeypatch.setattr(lint_source_module, "NESTING_SCREEN", -1)
    monkeypatch.setattr(lint_source_module, "REUSED_PART_CHARS", 1)  # each statement a run
    trees = parts.Runs()
    walked = []
    for text in REUSE_SCENARIOS[name]:
        source = text.encode()
        assert _checked_facts(source, "buffer.py", trees) == lint_source_module.facts_of(source, "buffer.py")
        walked.append(trees.walked)
    assert walked[1:] == WALKED[name]


def _real_files() -> list[tuple[str, str]]:
    """A few files of the installed tensorflow and keras with tapes and classes (each cut into runs),
    and the good fixtures."""
    found = [(str(path), path.read_text()) for path in sorted((ROOT / "fixtures" / "good").glob("*.py"))[:6]]
    roots = [next(iter(spec.submodule_search_locations))
             for spec in map(find_spec, ("tensorflow", "keras")) if spec is not None and spec.submodule_search_locations]
    for root in roots:
        admitted = [path for path in sorted(Path(root).rglob("*.py"))
                    if 8_000 < path.stat().st_size < 40_000 and "GradientTape" in path.read_text(errors="replace")]
        found += [(str(path), path.read_text()) for path in admitted[::max(1, len(admitted) // 4)][:4]]
    return [(path, text) for path, text in found if "\r" not in text]


def _typing(text: str, count: int, seed: int):
    """Edits as an editor makes them, over any Python file: characters typed inside lines, lines
    added, removed and duplicated, imports added at the top and half way down, a module-level
    `with tape:` (the tape of an earlier run), statements added inside a class body or a function,
    lambdas. An edit that breaks the syntax is undone after its lint."""
    import ast
    import random

    chance = random.Random(seed)
    lines = text.split("\n")
    for step in range(count):
        before = list(lines)
        kind = step % 7
        n = chance.randrange(1, len(lines))
        if kind == 0:  # a character typed inside a line
            i = chance.randrange(len(lines))
            at = chance.randrange(len(lines[i]) + 1)
            lines[i] = lines[i][:at] + chance.choice(["x", " ", "1", " + y", "#", "("]) + lines[i][at:]
        elif kind == 1:
            del lines[n]
        elif kind == 2:
            lines.insert(n, chance.choice(["", "# note", lines[n]]))
        elif kind == 3:
            lines.insert(chance.choice([0, n]), chance.choice(
                ["import tensorflow as tf", "from keras import layers", "import tensorflow.compat.v1 as tf"]))
        elif kind == 4:  # at module level: a tape, then a `with` of it further down
            lines[n:n] = ["tape = tf.GradientTape()"]
            at = chance.randrange(n + 1, len(lines))
            lines[at:at] = ["with tape:", "    y = f(x)", "with tape.stop_recording():", "    z = y"]
        elif kind == 5:  # a statement inside whatever body line `n` is in
            indent = len(lines[n]) - len(lines[n].lstrip())
            lines.insert(n, " " * indent + chance.choice(["v = lambda: 0", "t = tf.GradientTape()", "pass", "import numpy as np"]))
        else:
            lines.insert(n, "\n\n")
            lines = "\n".join(lines).split("\n")
        yield "\n".join(lines)
        try:
            ast.parse("\n".join(lines))
        except SyntaxError:
            lines = before


def test_facts_reused_across_edits_of_real_files_are_a_fresh_lints(monkeypatch):
    """Random edits of real code (tensorflow, keras, the fixtures): after each, the facts of a lint
    with the store equal a fresh lint's (the rules run on each lint's facts in between), and most
    runs' facts are reused."""
    monkeypatch.setattr(lint_source_module, "NESTING_SCREEN", -1)
    monkeypatch.setattr(lint_source_module, "REUSED_PART_CHARS", 600)
    compared = walked = parsed = runs = continued = 0
    for index, (path, text) in enumerate(_real_files()):
        trees = parts.Runs()
        for edited in _typing(text, 14, seed=index):
            source = edited.encode()
            before = {id(value[0]) for value in trees.trees.values()}
            try:
                kept = _checked_facts(source, path, trees)
            except LintError:
                continue
            assert kept == lint_source_module.facts_of(source, path), (path, edited)
            compared += 1
            runs += len(trees.spans)
            continued += sum(1 for span in trees.spans if span.header)
            walked += trees.walked
            parsed += len({id(value[0]) for value in trees.trees.values()} - before)
    assert compared >= 60 and continued >= 100
    # a run is walked when its text changed (parsed again: the edited run, and here often the next
    # ones, where the cuts moved) or what precedes it did (imports edited, a `with tape:` at module
    # level): of the runs whose text is unchanged, most are not walked, their facts are reused
    unchanged = runs - parsed
    assert unchanged > runs / 3 and walked - parsed < unchanged / 3, (runs, walked, parsed)


def test_runfacts_renumbers_every_field_of_the_facts():
    """A field added to a fact may hold a line, an order, a block or a tape id: runfacts.py must
    renumber it (this lists the fields it knows)."""
    from dataclasses import fields

    from tapecheck.lint import facts, runfacts

    known = {
        facts.Block: "id kind parent scope line end_line name decorators bases tapes paused test_span positional kwargs",
        facts.Tape: "id name site persistent watch_accessed_variables with_blocks",
        facts.Site: "line col order block in_comprehension",
        facts.Assign: "target site value kind span annotation default",
        facts.Call: "site func args keywords end_line end_order arg_spans spread method receiver",
        facts.Use: "name site context",
        facts.Exit: "site kind span items",
        facts.Compare: "site operator end_order left right",
        facts.Comprehension: "span fors",
        facts.Expr: "kind text callee method receiver elements tensor_slice keywords value func_text operands",
    }
    for kind, names in known.items():
        assert [field.name for field in fields(kind)] == names.split(), kind
    compared = [field.name for field in fields(facts.FileFacts) if field.compare]
    assert compared == ["path", *runfacts.LISTS, "imports", "relative_imports", "model"]


def _class_edits(text: str, count: int, seed: int):
    """Edits where the cuts inside class bodies matter: members dedented or re-indented (often a
    syntax error, sometimes a new top-level function), a class header edited, a comment put before
    a run's first member, a line joined to the one before, a whole member indented differently
    (a syntax error in the file, though the member alone parses), a member's first line indented
    with the line above it edited (the edit then ends where that member's run starts). An edit that breaks the code is
    undone before the next edit, or stays under it (an edit above a line indented by mistake)."""
    import ast
    import random

    chance = random.Random(seed)
    lines = text.split("\n")
    good, broken = list(lines), False
    for step in range(count):
        if broken and chance.random() < 0.5:
            lines = list(good)  # else the next edit is made on top of the broken text
        kind = step % 9
        members = [i for i, line in enumerate(lines) if line.startswith("    def ")]
        i = chance.choice(members) if members else chance.randrange(len(lines))
        if kind == 0:
            lines[i] = lines[i][4:]  # `def` at column 0: the class ends above it
        elif kind == 1:
            lines[i] = "\t" + lines[i].lstrip(" ")  # a tab where the class uses spaces
        elif kind == 2:
            heads = [k for k, line in enumerate(lines) if line.startswith("class ")]
            k = chance.choice(heads)
            lines[k] = lines[k].replace("(", "(Base, ", 1) if "(" in lines[k] else lines[k].replace(":", "(Base):", 1)
        elif kind == 3:
            lines.insert(i, chance.choice(["    # before a member", "", "# at column 0"]))
        elif kind == 4:
            lines[i] = "    " + lines[i].lstrip(" \t")  # mended back to the class's indentation
        elif kind == 5 and i + 1 < len(lines):
            lines[i] = lines[i] + " " + lines.pop(i + 1).strip()  # two lines joined
        elif kind == 8 and i > 0:  # a member's first line indented by mistake, and the line above it edited
            lines[i - 1] += " "
            lines[i] = "    " + lines[i]
        elif kind == 7:  # a whole member indented further (by 2 spaces, or with a tab), or less
            i = chance.choice([k for k, line in enumerate(lines) if line[:4] == "    " and line[4:5].strip()])
            end = next((k for k in range(i + 1, len(lines)) if not lines[k].startswith("     ")), len(lines))
            shift = chance.choice(["  ", "\t", "-"])
            lines[i:end] = [line[2:] if shift == "-" else shift + line for line in lines[i:end]]
        else:
            lines.insert(i, "    @staticmethod\n    def added(x):\n        return x")
            lines = "\n".join(lines).split("\n")
        yield kind, "\n".join(lines)
        try:
            ast.parse("\n".join(lines))
            good, broken = list(lines), False
        except SyntaxError:
            broken = True


CLASS_IN_RUNS = "class A:\n    z = 1\n\n    def f(self):\n        return 1\n\n    def g(self):\n        return 2\nprint(A)\n"
MOVED_MEMBERS = {
    # the run that starts the class: its member indented further, the next run goes on with the class
    "class_start": CLASS_IN_RUNS.replace("    z = 1", "      z = 1"),
    # a run that goes on with the class: its member (all of it) indented further
    "continuation": CLASS_IN_RUNS.replace("    def f(self):\n        return 1", "      def f(self):\n          return 1"),
    # the class's last run (the run after it starts at column 0): only its start can tell
    "last_member": CLASS_IN_RUNS.replace("    def g(self):\n        return 2", "      def g(self):\n          return 2"),
    # the header's line ends with a backslash: the class's first member goes on its logical line
    "backslash_header": CLASS_IN_RUNS.replace("class A:\n", "class A: \\\n"),
    # a run's last line joined to the next run's first line (its line break deleted)
    "joined": CLASS_IN_RUNS.replace("        return 2\nprint(A)", "        return 2print(A)"),
    # the same, with a comment line at column 0 before the member (a run may start with one)
    "after_a_comment": CLASS_IN_RUNS.replace("    def f(self):\n        return 1",
                                             "# note\n      def f(self):\n          return 1"),
}


@pytest.mark.parametrize("name", sorted(MOVED_MEMBERS))
def test_a_region_that_parses_alone_but_not_between_its_neighbours_is_refused(monkeypatch, name):
    """A class cut a run per member; an edit indents one run's members consistently, so the run parses
    alone but the file does not (its neighbours go on with the class at the old indentation): the
    incremental cut must refuse it, and the lint must say what a fresh lint says."""
    monkeypatch.setattr(lint_source_module, "REUSED_PART_CHARS", 1)
    monkeypatch.setattr(lint_source_module, "NESTING_SCREEN", -1)
    runs = parts.Runs()
    lint_source_module.facts_of(CLASS_IN_RUNS.encode(), "buffer.py", None, runs)
    assert len(runs.spans) == 4
    edited = MOVED_MEMBERS[name]
    assert parts.respan(runs, edited, lint_source_module._run_tree, 1) is None
    with pytest.raises(LintError) as fresh:
        lint_source_module.facts_of(edited.encode(), "buffer.py")
    with pytest.raises(LintError) as kept:
        lint_source_module.facts_of(edited.encode(), "buffer.py", None, runs)
    assert str(kept.value) == str(fresh.value)
    # mended: cut incrementally again, against the last text that parsed
    assert parts.respan(runs, CLASS_IN_RUNS.replace("z = 1", "z = 2"), lint_source_module._run_tree, 1) is not None


LEFT_WHOLE = {
    # a lone CR ends a line for Python and libcst, not for the cuts (which count on \n)
    "lone_cr": CLASS_IN_RUNS.replace("    z = 1\n", "    z = 1\r    y = 2\n"),
    # a line of only a backslash: libcst counts the lines after it one short of Python
    "backslash_line": CLASS_IN_RUNS.replace("        return 1\n", "        x = 1\n\\\n        return 1\n"),
}


@pytest.mark.parametrize("name", sorted(LEFT_WHOLE))
def test_texts_the_incremental_cut_leaves_to_the_whole_file(monkeypatch, name):
    monkeypatch.setattr(lint_source_module, "REUSED_PART_CHARS", 1)
    monkeypatch.setattr(lint_source_module, "NESTING_SCREEN", -1)
    runs = parts.Runs()
    lint_source_module.facts_of(CLASS_IN_RUNS.encode(), "buffer.py", None, runs)
    edited = LEFT_WHOLE[name]
    assert parts.respan(runs, edited, lint_source_module._run_tree, 1) is None
    assert lint_source_module.facts_of(edited.encode(), "buffer.py", None, runs) == lint_source_module.facts_of(
        edited.encode(), "buffer.py")


@pytest.mark.parametrize("seed", [7, 11, 12])
def test_an_edit_is_checked_and_cut_again_only_where_it_changed(monkeypatch, seed):
    """After an edit the server checks and cuts only the runs the edit touched (`parts.respan`),
    keeping the others; the runs after it move by the edit's lines. Over many edits of code with
    large classes cut into several runs (members dedented, re-indented with tabs, headers changed,
    syntax errors left in and mended later), every lint must give a fresh lint's facts, or the
    same error, and most edits must have been cut incrementally. The store keeps the last text
    that parsed through a syntax error."""
    monkeypatch.setattr(lint_source_module, "REUSED_PART_CHARS", 100)  # a run per member
    monkeypatch.setattr(lint_source_module, "NESTING_SCREEN", -1)
    methods = "".join(
        f"    def m{k}(self, x):\n        with tf.GradientTape() as tape:\n            y = self.w * x + {k}\n"
        f"        return tape.gradient(y, self.w)\n\n" for k in range(40)
    )
    text = ('import tensorflow as tf\n\n\nclass Big(tf.keras.Model):\n    """Doc."""\n\n' + methods
            + "\nclass Other:\n    z = 1\n\n" + methods + "\n" + TRICKY["decorated_class.py"])
    runs = parts.Runs()
    incremental = errors = compared = 0
    for kind, edited in [(None, text), *_class_edits(text, 72, seed=seed)]:
        source = edited.encode()
        held = runs.text
        if held is not None:
            spans = parts.respan(runs, edited, lint_source_module._run_tree, 100)
            if spans is not None:
                incremental += 1
                assert spans[0].start == 0 and spans[-1].end == len(edited)
                assert all(a.end == b.start for a, b in zip(spans, spans[1:]))
            else:  # only an edit that does not parse is refused
                with pytest.raises(SyntaxError):
                    compile(edited, "buffer.py", "exec")
        try:
            kept = lint_source_module.facts_of(source, "buffer.py", None, runs)
        except LintError as kept_error:
            with pytest.raises(LintError) as fresh_error:
                lint_source_module.facts_of(source, "buffer.py")
            assert str(kept_error) == str(fresh_error.value)
            assert runs.text == held, "a syntax error leaves the store as it was"
            errors += 1
            continue
        assert kept == lint_source_module.facts_of(source, "buffer.py")
        compared += 1
    assert compared >= 15 and errors >= 20 and incremental >= 12, (compared, errors, incremental)


def test_the_server_keeps_a_buffers_runs_and_lints_an_edit_as_a_fresh_lint(monkeypatch, tmp_path):
    """`lint_snapshot` (the server's lint thread) with the buffer's runs (trees and facts) kept from
    its last lint: the same diagnostics as a lint with nothing kept, and the `# noqa` quick fix, placed only
    when asked for, is the one a lint with nothing kept places (None on a line ending in a string)."""
    import ast

    from tapecheck.lint.config import Settings
    from tapecheck.server import linting

    monkeypatch.setattr(lint_source_module, "NESTING_SCREEN", -1)
    monkeypatch.setattr(linting, "_trees", {})  # the module's store, left as it was found
    fixture = sorted((ROOT / "fixtures" / "bad").glob("*.py"))
    text = "\n".join(path.read_text() for path in fixture if "\r" not in path.read_text())
    path = str(tmp_path / "train.py")
    uri = (tmp_path / "train.py").as_uri()
    settings = Settings()

    def lint(version, body):
        return linting.lint_snapshot(linting.Snapshot(uri, path, version, (linting.Cell(uri, body, True, version),)), settings)

    def seen(result):
        return [(item.finding, item.uri, item.line, item.col, item.fix, item.suppress) for item in result.located]

    # a finding's line made to end inside a string over two lines: no comment fits there
    lines, multiline = text.split("\n"), None
    for item in lint(0, text).located:
        candidate = list(lines)
        candidate[item.line - 1] = candidate[item.line - 1].split("  #")[0] + "; _s = '''a"
        candidate.insert(item.line, "b'''")
        try:
            ast.parse("\n".join(candidate))
        except SyntaxError:
            continue
        multiline = "\n".join(candidate)
        break
    texts = [text, text.replace("\n\n", "\n\n# edited\n", 3), multiline, multiline.replace("\n\n", "\n\n\n", 5)]
    for version, body in enumerate(texts, 1):
        held = list(linting._trees[uri].trees.values()) if uri in linting._trees else []  # the last lint's runs
        kept = lint(version, body)
        assert linting._trees.get(uri), "the runs are kept between lints"
        if version > 1:  # and reused: an edit leaves most runs as they were
            assert any(run is old for run in linting._trees[uri].trees.values() for old in held), "no run was reused"
            store = linting._trees[uri]  # and walks few of them: the others' facts are the last lint's
            assert store.walked <= len(store.spans) // 2, (store.walked, len(store.spans))
        linting.forget(uri)
        fresh = lint(version, body)
        assert seen(kept) == seen(fresh) and kept.located
    assert any(item.suppress is None for item in kept.located)
    assert any(item.suppress is not None for item in kept.located)

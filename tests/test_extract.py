"""Unit checks of the fact extractor's shortcuts against libcst's own answers."""

from __future__ import annotations

import libcst as cst
from sources import SOURCES

from tapecheck.lint.extract import literal

TRICKY_STRINGS = [
    "'plain'", '"double"', "u'unicode'", "r'raw\\d+'", "R'raw\\'quote'", "'esc\\n'", "b'bytes'",
    "f'{x}'", "'''multi\nline'''", "rb'\\x00'", "'\\\\'", "'caf\\u00e9'", "''", "'''\\\n'''",
]


def test_string_literals_equal_libcst_evaluated_values():
    compared = 0
    sources = [text.encode() for text in TRICKY_STRINGS] + [source for _, source in SOURCES]
    for source in sources:
        try:
            module = cst.parse_module(source)
        except cst.ParserSyntaxError:
            continue
        strings = []

        class Collect(cst.CSTVisitor):
            def visit_SimpleString(self, node):
                strings.append(node)

        module.visit(Collect())
        for node in strings:
            assert literal(node) == node.evaluated_value, node.value
            compared += 1
    assert compared > 200


def test_the_fast_walk_visits_each_child_field_once():
    import libcst as cst

    from tapecheck.lint.fastcst import child_fields

    fields = child_fields(cst.ImportFrom)
    assert fields.count("names") == 1 and "module" in fields


def test_node_types_compared_by_class_have_no_subclasses():
    """extract.py asks `node.__class__ is cst.Name` (not isinstance, slow on libcst's ABCs) for
    these types: the same answer only while no subclass or registered class exists."""
    import abc
    import ast
    import inspect

    import libcst as cst

    from tapecheck.lint import extract

    named = set()
    for node in ast.walk(ast.parse(inspect.getsource(extract))):
        if isinstance(node, ast.Compare) and isinstance(node.ops[0], (ast.Is, ast.IsNot)):
            right = node.comparators[0]
            if isinstance(right, ast.Attribute) and isinstance(right.value, ast.Name) and right.value.id == "cst":
                named.add(right.attr)
    assert {"Name", "Attribute", "Call", "List", "Tuple", "Subscript"} <= named
    for name in named:
        kind = getattr(cst, name)
        assert kind.__subclasses__() == [], name
        assert abc._get_dump(kind)[0] == set(), name  # no class registered as a virtual subclass

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

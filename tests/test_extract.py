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


TRICKY_FLOATS = ["0.9", "1e-3", "1E+2", "1_0.5", "1.", ".5", "0.0", "3.14_15", "1_000.0e-1_0"]


def test_float_literals_equal_their_python_values():
    """A float keeps its value (`SGD(momentum=0.9)`: TAP409 reads whether it is 0)."""
    for text in TRICKY_FLOATS:
        node = cst.parse_expression(text)
        assert node.__class__ is cst.Float
        value = literal(node)
        assert type(value) is float and value == node.evaluated_value == float(eval(text)), text


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


def test_an_attribute_of_an_item_is_recorded_by_its_container_without_an_order_of_its_own():
    """`opts[1].lr` has no dotted name: the facts keep it as (container, attribute, site, stored),
    its site taking the order of the item's last event (no event of its own is added)."""
    from tapecheck.lint.source import facts_of

    source = b"opts = [a, b]\nopts[0].lr = 0.1\nx = self.optimizer[1].lr.numpy()\ny = f()[0].lr\n"
    facts = facts_of(source, "items.py")
    found = [(container, attribute, site.line, stored) for container, attribute, site, stored in facts.item_attributes]
    assert found == [("opts", "lr", 2, True), ("self.optimizer", "lr", 3, False)]
    # the read comes after the binding it reads (its order is that of the item's last event)
    binding = next(a for a in facts.assigns if a.target == "opts")
    assert all(site.order > binding.site.order for _, _, site, _ in facts.item_attributes)
    orders = sorted([u.site.order for u in facts.uses] + [a.site.order for a in facts.assigns]
                    + [c.site.order for c in facts.calls])
    assert orders == list(range(1, len(orders) + 1))  # every event still has its own order, none skipped

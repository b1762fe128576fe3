"""Every rule's VALID/INVALID examples and documentation, run as tests."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from expectations import expected, found
from tapecheck.lint import lint_source
from tapecheck.rules import RULES

ROOT = Path(__file__).resolve().parents[1]
CODE_BLOCK = re.compile(r"## (Example|Use instead)\n```python\n(.*?)```", re.S)


def _examples(kind):
    for rule in RULES:
        for index, source in enumerate(getattr(rule, kind)):
            yield pytest.param(rule, source, id=f"{rule.code}-{index}")


@pytest.mark.parametrize("rule,source", list(_examples("invalid")))
def test_invalid_examples_give_exactly_the_expected_findings(rule, source):
    expectations = expected(source)
    assert any(code == rule.code for _, code in expectations), "an INVALID example must expect its rule"
    assert found(lint_source(source, "example.py")) == expectations


@pytest.mark.parametrize("rule,source", list(_examples("valid")))
def test_valid_examples_are_clean(rule, source):
    assert lint_source(source, "example.py") == []


def _doc_blocks(rule):
    blocks = dict((kind, code) for kind, code in CODE_BLOCK.findall(rule.doc))
    assert set(blocks) == {"Example", "Use instead"}, f"{rule.code} doc needs an Example and a Use instead"
    return blocks


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.code)
def test_doc_example_triggers_the_rule(rule):
    findings = lint_source(_doc_blocks(rule)["Example"], "example.py")
    assert rule.code in {f.code for f in findings}


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.code)
def test_doc_use_instead_is_clean(rule):
    assert lint_source(_doc_blocks(rule)["Use instead"], "example.py") == []


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.code)
def test_doc_follows_the_ruff_layout(rule):
    doc = rule.doc
    assert doc.startswith(f"# {rule.code} {rule.name}\n")
    positions = [doc.find(h) for h in ("## What it does", "## Why is this bad?", "## Example", "## Use instead")]
    assert -1 not in positions and positions == sorted(positions)


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.code)
def test_rules_folder_page_matches_the_code(rule):
    page = ROOT / "rules" / f"{rule.code}.md"
    assert page.read_text(encoding="utf-8") == rule.doc, (
        f"rules/{rule.code}.md is out of date: run `python -m tapecheck.rules` to regenerate"
    )


def test_codes_and_names_are_unique_and_well_formed():
    assert len({r.code for r in RULES}) == len(RULES)
    assert len({r.name for r in RULES}) == len(RULES)
    for rule in RULES:
        assert re.fullmatch(r"TAP\d{3}", rule.code)
        assert re.fullmatch(r"[a-z]+(-[a-z]+)*", rule.name)


def _inside(source: str, manager: str) -> str:
    """The example as the body of a test function's `with MANAGER:` block."""
    import textwrap

    return f"import pytest\n\n\ndef test_it():\n    with {manager}:\n" + textwrap.indent(textwrap.dedent(source), " " * 8)


@pytest.mark.parametrize("rule,source", [p for p in _examples("invalid") if getattr(p.values[0].module, "RAISES", False)])
def test_a_raising_rule_is_silent_where_a_test_expects_its_error(rule, source):
    """`RAISES = True`: the same example inside `with open(...)` keeps its findings (so nesting
    is not what silences it), and inside `with pytest.raises(...)` it has none."""
    codes = lambda text: [f.code for f in lint_source(text, "test_example.py") if f.code == rule.code]  # noqa: E731
    assert codes(_inside(source, 'open("log.txt")')) == codes(source) != []
    assert codes(_inside(source, "pytest.raises(Exception)")) == []


@pytest.mark.parametrize("rule,source", [*_examples("invalid"), *_examples("valid")])
def test_every_example_lints_inside_a_block_that_expects_an_error(rule, source):
    """Inside `with pytest.raises(...)` each rule still runs to the end (TAP702 once compared a
    call's site with the block's lines: an internal error on keras's own nn_test.py); a rule
    that does not raise keeps its findings there."""
    inside = [f.code for f in lint_source(_inside(source, "pytest.raises(Exception)"), "test_example.py")]
    if not getattr(rule.module, "RAISES", False) and rule.code != "TAP702":
        assert inside.count(rule.code) == [f.code for f in lint_source(_inside(source, 'open("log.txt")'), "test_example.py")].count(rule.code)


def test_only_raising_rules_are_silenced_by_pytest_raises():
    """A rule whose mistake is silent (TAP301: a metric never reset) still reports inside one."""
    rule = next(r for r in RULES if r.code == "TAP301")
    assert not getattr(rule.module, "RAISES", False)
    source = rule.invalid[0]
    assert [f.code for f in lint_source(_inside(source, "pytest.raises(Exception)"), "t.py") if f.code == "TAP301"]

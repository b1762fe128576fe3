"""The rule catalog: one module per rule, found by name (`tapNNN_*.py`).

A rule module holds its documentation (the module docstring, in the ruff
layout), its code and name, VALID/INVALID examples that double as tests, a
byte screen (`TRIGGERS`, any of which must occur in a file, or a
`screen(source)` function when substrings cannot say it exactly), and a
`check(facts)` function. `RAISES = True` marks a rule whose mistake raises an
exception: its findings inside `pytest.raises`/`assertRaises` blocks are left out.
Importing this package never imports libcst: rules read the plain facts that `tapecheck.lint.extract` pulls out of the syntax tree.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from dataclasses import dataclass
from types import ModuleType


@dataclass(frozen=True)
class Rule:
    code: str
    name: str
    summary: str
    module: ModuleType

    @property
    def doc(self) -> str:
        return (self.module.__doc__ or "").strip() + "\n"

    @functools.cached_property
    def check(self):
        """The module's `check(facts)`; for a rule whose mistake raises an exception (`RAISES`),
        less its findings inside a test that makes it raise on purpose (`pytest.raises`,
        `assertRaises`): that code is meant to fail."""
        check = getattr(self.module, "check", None)
        if check is None or not getattr(self.module, "RAISES", False):
            return check
        from tapecheck.rules._common import unless_error_expected

        return lambda facts: unless_error_expected(facts, check(facts))

    @property
    def in_probe(self) -> bool:
        return getattr(self.module, "PROBE", False)

    @property
    def fixable(self) -> bool:
        return getattr(self.module, "FIXABLE", False)

    @property
    def valid(self) -> tuple[str, ...]:
        return tuple(getattr(self.module, "VALID", ()))

    @property
    def invalid(self) -> tuple[str, ...]:
        return tuple(getattr(self.module, "INVALID", ()))


def _load() -> tuple[Rule, ...]:
    rules = []
    for info in pkgutil.iter_modules(__path__):
        if not info.name.startswith("tap"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        rules.append(Rule(module.CODE, module.NAME, module.SUMMARY, module))
    return tuple(sorted(rules, key=lambda r: r.code))


RULES: tuple[Rule, ...] = _load()
RULES_BY_CODE: dict[str, Rule] = {r.code: r for r in RULES}
RULES_BY_NAME: dict[str, Rule] = {r.name: r for r in RULES}


def rule_name(code: str) -> str:
    """The rule's name (`tape-reused` for TAP201); "" for a code no rule has."""
    rule = RULES_BY_CODE.get(code)
    return rule.name if rule else ""


def get_rule(code_or_name: str) -> Rule | None:
    key = code_or_name.strip()
    return RULES_BY_CODE.get(key.upper()) or RULES_BY_NAME.get(key.lower())


_SUBSUMES = {rule.code: frozenset(rule.module.SUBSUMES) for rule in RULES if getattr(rule.module, "SUBSUMES", ())}


def one_cause_one_finding(found: list, codes=None) -> list:
    """Drop a finding that a rule's `SUBSUMES` says another one at the same place already explains
    (TAP101's target computed outside the tape is also why TAP102's source is unseen). Lint and
    the probe both apply it, so they agree. `codes`: the rules that ran (default: all)."""
    subsumes = {code: covered for code, covered in _SUBSUMES.items() if codes is None or code in codes}
    if not subsumes:
        return found
    covered = {(f.path, f.line, code) for f in found for code in subsumes.get(f.code, ())}
    return [f for f in found if (f.path, f.line, f.code) not in covered] if covered else found

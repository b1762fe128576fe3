"""Small helpers shared by rule modules (kept here so each rule stays short)."""

from __future__ import annotations

import re

from tapecheck.findings import Finding
from tapecheck.model import is_keras_class, keras_member, model_of  # noqa: F401 (shared with the rules)

def report(facts, site, code: str, message: str, hint: str = "", details: dict | None = None) -> Finding:
    """A finding at `site`; `details`: what tools read without parsing the message (JSON, the probe)."""
    return Finding(facts.path, site.line, site.col, code, message, hint, details=dict(details or {}))


def unless_error_expected(facts, findings):
    """The findings of a rule whose mistake raises an exception, less those inside a test that
    makes it raise on purpose (`with pytest.raises(RuntimeError):`, `self.assertRaises(...)`,
    `assertRaisesRegex`): that code is meant to fail. The file's model is asked only once a
    finding comes."""
    model = None
    for finding in findings:
        if model is None:
            model = model_of(facts)
        if not model.expects_error(finding.line):
            yield finding


def flatten(expr):
    """The expressions of a list/tuple literal, or the expression itself."""
    if expr is None:
        return []
    if expr.kind in ("list", "tuple"):
        return list(expr.elements)
    return [expr]


def metric_bindings(facts) -> dict[str, list]:
    """Names (`train_loss`, `self.acc`) bound to a Keras metric object, with their bindings."""
    local_classes = {
        block.name for block in facts.blocks
        if block.kind == "class" and any(is_keras_class(base, "metrics") for base in block.bases)
    }
    found: dict[str, list] = {}
    model = model_of(facts)
    for assign in facts.assigns:
        value = assign.value
        if assign.kind == "assign" and value is not None and value.kind == "call":
            callee = value.callee
            if value.func_text and not is_keras_class(callee, "metrics"):
                callee = model.resolved(value.func_text, assign.site)  # `metrics.Mean()`, `metrics = tf.keras.metrics`
            if is_keras_class(callee, "metrics") or value.callee in local_classes:
                found.setdefault(assign.target, []).append(assign)
    return found


# `loss=` given something not a string (a string names a Keras loss: nothing to read), or a
# second positional argument of `compile` that is a name.
# Searched without its leading `\\b` (a pattern that starts with a literal is found at memchr
# speed; `\\b` first made `re` try every byte: 0.30 s on tensorflow+keras, now 0.03 s), then
# each match's preceding byte is checked.
LOSS_VALUE = re.compile(rb"loss[ \t]*=[ \t\\\n]*[^\s\"'#]")
POSITIONAL_LOSS = re.compile(rb"\.[\s\\]*compile[\s\\]*\([^,()]*,[\s\\]*[A-Za-z_]")
COMPILE_CALL = re.compile(rb"\.[\s\\]*compile[\s\\]*\(")


CALL_METHOD = re.compile(rb"def[ \t\\]+(?:call|__call__)[ \t\\]*\(")


def defines_call(source: bytes) -> bool:
    """A screen for rules that read a layer's `call` (or `__call__`): TAP104, TAP106."""
    return CALL_METHOD.search(source) is not None


def compiles_a_loss(source: bytes) -> bool:
    """A screen for rules that read losses given to `compile` (TAP104, TAP402)."""
    if b"compile" not in source or COMPILE_CALL.search(source) is None:
        return False
    return _loss_keyword(source) or POSITIONAL_LOSS.search(source) is not None


def _loss_keyword(source: bytes) -> bool:
    """`\\bloss[ \\t]*=...`: a LOSS_VALUE match not preceded by a word character."""
    for match in LOSS_VALUE.finditer(source):
        before = source[match.start() - 1:match.start()]
        if not (before.isalnum() or before == b"_"):
            return True
    return False

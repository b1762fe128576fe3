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
    """Names (`train_loss`, `self.acc`) bound to a Keras metric object, with their bindings.
    Worked out once per file (the model's memo): TAP301 and TAP302 both ask."""
    model = model_of(facts)
    found = model.memo.get("metric bindings")
    if found is None:
        found = model.memo["metric bindings"] = _metric_bindings(facts, model)
    return dict(found)


def _metric_bindings(facts, model) -> dict[str, list]:
    local_classes = {
        block.name for block in facts.blocks
        if block.kind == "class" and any(is_keras_class(base, "metrics") for base in block.bases)
    }
    found: dict[str, list] = {}
    for assign in facts.assigns:
        value = assign.value
        if assign.kind == "assign" and value is not None and value.kind == "call":
            callee = value.callee
            if value.func_text and not is_keras_class(callee, "metrics"):
                callee = model.resolved(value.func_text, assign.site)  # `metrics.Mean()`, `metrics = tf.keras.metrics`
            if is_keras_class(callee, "metrics") or value.callee in local_classes:
                found.setdefault(assign.target, []).append(assign)
    return found


# `loss=` given something not a string (a string names a Keras loss: nothing to read).
# Searched without its leading `\\b` (a pattern that starts with a literal is found at memchr
# speed; `\\b` first made `re` try every byte: 0.30 s on tensorflow+keras, now 0.03 s), then
# each match's preceding byte is checked.
LOSS_VALUE = re.compile(rb"loss[ \t]*=[ \t\\\n]*[^\s\"'#]")


# What may lie between two tokens, for the screens: spaces, tabs, form feeds, line breaks,
# backslash continuations and comments (a comment ends at `\r` or `\n`: Python and libcst take a
# lone `\r` for a line break). `token_gap(b")")` also lets brackets close (`(ds.map)(f)`). A comment
# starts with `#`, which no other branch takes, so a run of gap is read one way only: no
# backtracking blow-up on a line of `#`s. `\v` is left out: Python rejects it between tokens.
def token_gap(brackets: bytes = b"") -> bytes:
    """The pattern of a run of token gap (see above), with `brackets` (`(`, `)`) allowed in it."""
    return rb"(?:[ \t\f\r\n\\" + brackets + rb"]|#[^\r\n]*[\r\n])*"


_GAP = token_gap()

# `.map(` of a `tf.data` dataset (the method `dataset_map` asks for): gap between the tokens, and
# brackets closing before the call (`(ds.map)(f)`).
MAP_CALL = re.compile(rb"\." + _GAP + rb"map" + token_gap(rb")") + rb"\(")
# `.compile(` (token gap between the tokens); its second positional argument is the loss.
COMPILE_CALL = re.compile(rb"\." + _GAP + rb"compile" + token_gap(rb")") + rb"\(")
_COMPILE_SCAN = 4096  # bytes of a `.compile(` call read for a second argument: beyond, assume one


def calls_map_method(source: bytes) -> bool:
    """A screen: some `.map(...)` method call is here."""
    return b"map" in source and MAP_CALL.search(source) is not None


CALL_METHOD = re.compile(rb"def[ \t\\]+(?:call|__call__)[ \t\\]*\(")


def defines_call(source: bytes) -> bool:
    """A screen for rules that read a layer's `call` (or `__call__`): TAP104, TAP106."""
    return CALL_METHOD.search(source) is not None


def compiles_a_loss(source: bytes) -> bool:
    """A screen for rules that read losses given to `compile` (TAP104, TAP402)."""
    if b"compile" not in source or COMPILE_CALL.search(source) is None:
        return False
    return _loss_keyword(source) or any(_second_argument(source, match.end()) for match in COMPILE_CALL.finditer(source))


def _second_argument(source: bytes, start: int) -> bool:
    """Whether the call whose arguments start at `start` (after its `(`) may have a second
    positional argument: a comma outside brackets before the call's `)`. Brackets are counted
    byte by byte; a string or comment on the way (which may hold brackets or commas), or a call
    longer than _COMPILE_SCAN, answers True: the screen may say yes too often, never no wrongly."""
    depth = 0
    for byte in source[start:start + _COMPILE_SCAN]:
        if byte in b"([{":
            depth += 1
        elif byte in b")]}":
            if depth == 0:
                return False  # the call ends with one argument or none
            depth -= 1
        elif byte == 0x2C and depth == 0:  # `,`
            return True
        elif byte in b"\"'#":
            return True
    return True


def _loss_keyword(source: bytes) -> bool:
    """`\\bloss[ \\t]*=...`: a LOSS_VALUE match not preceded by a word character."""
    for match in LOSS_VALUE.finditer(source):
        before = source[match.start() - 1:match.start()]
        if not (before.isalnum() or before == b"_"):
            return True
    return False


# -- tf.function as the facts resolve it -----------------------------------------------------
# The facts resolve a dotted name by its head alone, through the file's imports (`tf.X` ->
# `tensorflow.X`), and TF_FUNCTIONS are `tensorflow.function` and `tensorflow.compat.v1/v2.function`.
# So a name reaches them only spelled `H.function` (H bound to tensorflow or tensorflow.compat.vN),
# `H.vN.function` (H: tensorflow.compat), `H.compat.vN.function` (H: tensorflow), or `H` alone bound
# to one of them (`from tensorflow import function as tff`). Only three things bind such an H: the
# name `tensorflow` itself (also unimported), an import statement that names tensorflow (`from
# tensorflow import compat`, `import os, tensorflow.compat.v2 as tf2`), and, for `tf`, a star import
# or a `from project import tf` (the facts take either `tf` for TensorFlow). Every search starts
# with a literal.
DOT_FUNCTION = re.compile(rb"\." + _GAP + rb"function(?![\w\x80-\xff])")
IMPORT_STATEMENT = re.compile(rb"import[ \t\f\\]*(\([^)]*\)|(?:[^\n\\]|\\\r?\n)*)")
TF_FUNCTION_TAILS = frozenset({(), (b"v1",), (b"v2",), (b"compat", b"v1"), (b"compat", b"v2")})
NAME_BYTES = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_" + bytes(range(0x80, 0x100)))
NAME = re.compile(rb"[\w\x80-\xff]+")
TF_MODULE_NAME = rb"tensorflow(?:" + _GAP + rb"\." + _GAP + rb"compat(?:" + _GAP + rb"\." + _GAP + rb"v[12])?)?"
FROM_TF_MODULE = re.compile(rb"from" + _GAP + TF_MODULE_NAME + _GAP + rb"\Z")
TF_MODULE_AS = re.compile(TF_MODULE_NAME + rb"(?:" + _GAP + rb"\." + _GAP + rb"function)?" + _GAP + rb"as[ \t\f\r\n\\]+([\w\x80-\xff]+)")


def _tensorflow_import_names(source: bytes) -> set[bytes]:
    """A superset of the names import statements bind to tensorflow, tensorflow.compat(.vN) or
    their `function`: every word imported `from` one of those modules, each `as` name of an
    `import tensorflow[.compat[.vN]] as H`, and `tf` after a star import or a `from ... import tf`.
    (`tensorflow` itself needs no import to resolve.)"""
    names: set[bytes] = set()
    for match in IMPORT_STATEMENT.finditer(source):
        start = source.rfind(b"\n", 0, match.start()) + 1
        while start > 1:  # the logical line: back over backslash continuations
            previous = source.rfind(b"\n", 0, start - 1) + 1
            if not source[previous:start - 1].rstrip(b"\r").endswith(b"\\"):
                break
            start = previous
        imported = match.group(1)
        if imported.startswith(b"*") or b"tf" in imported and b"tf" in NAME.findall(imported):
            names.add(b"tf")  # a star import, `from project import tf`: the facts' TensorFlow
        if b"tensorflow" in imported:
            names.update(TF_MODULE_AS.findall(imported))
        if b"tensorflow" in source[start:match.start()] and FROM_TF_MODULE.search(source, start, match.start()):
            names.update(NAME.findall(imported))
    return names


def _dotted_before(source: bytes, end: int):
    """(parts of the dotted name that ends right before the `.` at `end`, head first; the index
    before its head), (() , 0) when no plain dotted name ends there (`f().function`), or None when a
    line break between its parts (in brackets, after a backslash: maybe a comment) makes it unsure."""
    parts = []
    while True:
        j = end
        while j > 0 and source[j - 1] in b" \t\f":
            j -= 1
        if j > 0 and source[j - 1] in b"\n\r\\":
            return None
        k = j
        while k > 0 and source[k - 1] in NAME_BYTES:
            k -= 1
        if k == j:
            return (), 0
        parts.append(source[k:j])
        before = k
        while before > 0 and source[before - 1] in b" \t\f":
            before -= 1
        if before > 0 and source[before - 1] == 0x2E:  # "."
            end = before - 1
            continue
        return tuple(reversed(parts)), k


def _decorates(source: bytes, head: int) -> bool:
    """Whether the name starting at `head` is a decorator's: `@` before it, across spaces, line
    breaks, backslashes and `(` (True when a line crossed holds a `#`: maybe a comment between)."""
    index = head
    while index > 0:
        byte = source[index - 1]
        if byte == 0x40:  # "@"
            return True
        if byte in b"\n\r":  # a line break: `@(` on a line above; a comment there would hide the `@`
            start = max(source.rfind(b"\n", 0, index - 1), source.rfind(b"\r", 0, index - 1)) + 1
            if b"#" in source[start:index - 1]:
                return True
        elif byte not in b" \t\f\\(":
            return False
        index -= 1
    return False


def names_tf_function(source: bytes, decorator: bool = False) -> bool:
    """A screen: some name here may resolve to `tf.function` (TF_FUNCTIONS) through this file's
    imports; with `decorator`, as a decorator (`@tf.function`, `@compat.v2.function(...)`).
    False only when none can (see the note above)."""
    if b"function" not in source:
        return False
    imported = None
    for match in DOT_FUNCTION.finditer(source):
        found = _dotted_before(source, match.start())
        if found is None:
            return True  # unsure
        parts, head = found
        if not parts or parts[1:] not in TF_FUNCTION_TAILS:
            continue
        if parts[0] != b"tensorflow":
            if imported is None:
                imported = _tensorflow_import_names(source)
            if parts[0] not in imported:
                continue
        if not decorator or _decorates(source, head):
            return True
    if imported is None:
        imported = _tensorflow_import_names(source)
    return b"function" in imported  # `from tensorflow import function (as tff)`


# A call of the builtin `zip`, `map` or `filter` by its bare name (`zip(a, b)`, `(map)  (f, xs)`):
# the name, then brackets closing, spaces, continuations or comments, then `(`. Searched from the
# literal name; the byte before it is checked (no name character, no `.`).
BUILTIN_CALLS = {
    name: re.compile(name + token_gap(rb")") + rb"\(") for name in (b"zip", b"map", b"filter")
}


def calls_builtin(source: bytes, name: bytes) -> bool:
    """A screen: `name` (zip, map or filter) may be called here by its bare name."""
    if name not in source:
        return False
    for match in BUILTIN_CALLS[name].finditer(source):
        start = match.start()
        if start == 0 or source[start - 1] not in NAME_BYTES and source[start - 1] != 0x2E:
            return True
    return False

"""The linter over generated programs: never an internal error, findings stable under formatting.

Two sources of programs:
- hypothesmith: arbitrary programs from Python's grammar (weird, deep, rarely about tapes);
- `loops()` below: GradientTape training code built from parts (imports and aliases, tapes
  persistent or not, bound in a `with` or before it, nested tapes, helpers, `if`/`for`
  blocks, loss top-ups after the block, repeated gradient calls, `watch`, `del`, Keras
  metrics updated/read/reset, epoch loops, decorators, classes with `self.` state).

Formatting changes that keep the code the same (comment lines, blank lines, trailing
comments, parentheses around a right-hand side) must give the same rule codes, each at
its original line shifted by the lines inserted above it.

The default run is small (well under a minute). `TAPECHECK_PROPERTY_PROFILE=large` runs
thousands of programs of each kind.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tapecheck.lint.engine import LintError, lint_source

LARGE = os.environ.get("TAPECHECK_PROPERTY_PROFILE") == "large"
LOOPS = 3000 if LARGE else 60
GRAMMAR = 2000 if LARGE else 80
COMMON = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large]}

# every rule's byte screen passes, so each program is parsed and extracted
SCREEN_WORDS = "# GradientTape metrics Metric reset_states optimizers get_gradients\n"


def lint(source: str, path: str = "generated.py"):
    """Findings, or None for a file the linter refuses with a LintError (a clean refusal)."""
    try:
        return lint_source(source, path)
    except LintError:
        return None


# -- programs from parts -------------------------------------------------------------------

IMPORTS = [
    ["import tensorflow as tf"],
    ["import tensorflow as tf", "from tensorflow import keras"],
    ["import tensorflow as tf", "import keras"],
    ["import tensorflow", "tf = tensorflow"],
    ["from tensorflow import GradientTape", "import tensorflow as tf"],
]
TAPE_NAMES = ["tape", "t2", "gen_tape"]
VALUES = ["loss", "pred", "x", "reg", "total"]


def tape_ctor(draw, imports) -> str:
    ctor = "GradientTape" if imports[0].startswith("from tensorflow import GradientTape") and draw(st.booleans()) else "tf.GradientTape"
    args = draw(st.sampled_from(["", "persistent=True", "persistent=False", "watch_accessed_variables=False",
                                 "True", "persistent=flag"]))
    return f"{ctor}({args})"


@st.composite
def statements(draw, depth: int, imports, tapes: list[str], receiver: str = "") -> list[tuple[int, str]]:
    """Lines (indent level, text) of a suite; at least one line."""
    me = receiver
    simple = [
        f"pred = {me}model(x, training=True)",
        "loss = loss_fn(y, pred)",
        f"loss = compute_loss({me}model, x, y)",
        "loss = loss + reg",
        "loss += 1e-4 * tf.add_n([tf.nn.l2_loss(v) for v in model.trainable_variables])",
        "total = loss * 2.0",
        "x = tf.constant(1.0)",
        "x = tf.cast(x, tf.float32)",
        "label = tf.argmax(pred, axis=1)",
        "train_loss.update_state(loss)",
        f"{me}acc.update_state(y, pred)",
        "print(train_loss.result())",
        "train_loss.reset_state()",
        "train_loss.reset_states()",
        f"optimizer.apply_gradients(zip(grads, {me}model.trainable_variables))",
        "grads = [g for g in grads if g is not None]",
        "pass",
        "value = helper(lambda: loss)",
        "pred = w * x + b",
        "out = b * 3.0",
        "optimizer = tf.keras.optimizers.Adam(1e-3)",
        "train_loss = tf.keras.metrics.Mean()",
        "w = tf.Variable(1.0)",
        f"pred = {me}model(x)",
        "x = tf.convert_to_tensor(x.numpy())",
        "loss = cls_loss + tf.constant(np.mean(pred.numpy()))",
        "fast = [tf.Variable(v.numpy()) for v in model.trainable_variables]",
        "pred = scale(pred)",
        "loss = lambda_loss(y, pred)",
        "loss = recursive_loss(model, x, y, 3)",
    ]
    if tapes:
        tape = draw(st.sampled_from(tapes))
        simple += [
            f"grads = {tape}.gradient(loss, {me}model.trainable_variables)",
            f"grads = {tape}.gradient(total, [w, b])",
            f"grads = {tape}.gradient(loss + reg, [w])",
            f"jac = {tape}.jacobian(pred, x)",
            f"{tape}.watch(x)",
            f"del {tape}",
            f"use_tape({tape})",
            f"grads = apply_grads({tape}, loss, {me}model)",
            f"apply_grads({tape}, total, {me}model)",
        ]
    lines: list[tuple[int, str]] = []
    for _ in range(draw(st.integers(1, 5))):
        kind = draw(st.sampled_from(["simple", "simple", "simple", "tape", "tape", "if", "for", "stop"] if depth < 3 else ["simple"]))
        if kind == "simple":
            lines.append((0, draw(st.sampled_from(simple))))
        elif kind == "tape":
            name = draw(st.sampled_from(TAPE_NAMES))
            ctor = tape_ctor(draw, imports)
            style = draw(st.sampled_from(["with-as", "bound-before", "two-in-one", "anonymous"]))
            if style == "bound-before":
                lines.append((0, f"{name} = {ctor}"))
                lines.append((0, f"with {name}:"))
            elif style == "two-in-one":
                lines.append((0, f"with {ctor} as {name}, tf.GradientTape() as inner:"))
            elif style == "anonymous":
                lines.append((0, f"with {ctor}:"))
            else:
                lines.append((0, f"with {ctor} as {name}:"))
            inner = tapes + [name] + (["inner"] if style == "two-in-one" else [])
            lines += [(i + 1, t) for i, t in draw(statements(depth + 1, imports, inner, receiver))]
        elif kind == "stop" and tapes:
            lines.append((0, f"with {draw(st.sampled_from(tapes))}.stop_recording():"))
            lines += [(i + 1, t) for i, t in draw(statements(depth + 1, imports, tapes, receiver))]
        elif kind == "if":
            lines.append((0, draw(st.sampled_from(["if step % 2 == 0:", "if training:", "while not done:"]))))
            lines += [(i + 1, t) for i, t in draw(statements(depth + 1, imports, tapes, receiver))]
            if draw(st.booleans()):
                lines.append((0, "else:"))
                lines += [(i + 1, t) for i, t in draw(statements(depth + 1, imports, tapes, receiver))]
        else:
            lines.append((0, draw(st.sampled_from(["for x, y in dataset:", "for epoch in range(3):", "for i in range(n):"]))))
            lines += [(i + 1, t) for i, t in draw(statements(depth + 1, imports, tapes, receiver))]
    return lines


@st.composite
def loops(draw) -> list[tuple[int, str]]:
    """A whole training script as (indent level, text) lines, one statement per line."""
    imports = draw(st.sampled_from(IMPORTS))
    lines = [(0, text) for text in imports]
    metric = draw(st.sampled_from(["tf.keras.metrics.Mean()", "keras.metrics.Mean(name='loss')",
                                   "tf.keras.metrics.SparseCategoricalAccuracy()", "make_metric()"]))
    lines.append((0, f"train_loss = {metric}"))
    if draw(st.booleans()):
        lines.append((0, "optimizer = tf.keras.optimizers.legacy.Adam(lr=0.1)"))
    if draw(st.booleans()):
        lines += [(0, "def compute_loss(model, x, y):"), (1, "return loss_fn(y, model(x, training=True))")]
    if draw(st.booleans()):  # helpers the program model follows: a tape handed in, recursion, closures, lambdas
        lines += [
            (0, "def apply_grads(tape, loss, model):"),
            (1, "grads = tape.gradient(loss, model.trainable_variables)"),
            (1, "return apply_grads(tape, loss, model) if grads is None else grads"),
            (0, "def recursive_loss(model, x, y, depth):"),
            (1, "return recursive_loss(model, x, y, depth - 1) if depth else loss_fn(y, model(x))"),
            (0, "b = tf.Variable(0.0)"),
            (0, "scale = lambda t: t * b + tf.round(t)"),
            (0, draw(st.sampled_from(["lambda_loss = lambda y, p: tf.reduce_mean(np.abs(y - p))",
                                      "lambda_loss = lambda y, p: lambda_loss(p, y)"]))),
        ]
    if draw(st.booleans()):  # a local layer whose call goes through super()
        lines += [
            (0, "class Base(tf.keras.layers.Layer):"),
            (1, "def call(self, x):"),
            (2, "return tf.argmax(x, axis=-1)"),
            (0, "class Head(Base):"),
            (1, "def call(self, x):"),
            (2, "return tf.cast(super().call(x), tf.float32) + super().missing(x)"),
            (0, "model = Head()"),
        ]
    layout = draw(st.sampled_from(["function", "module", "class", "nested-function"]))
    decorator = draw(st.sampled_from([None, "@tf.function", "@tf.function(jit_compile=True)", "@functools.wraps(f)"]))
    if layout == "module":
        lines += draw(statements(0, imports, []))
    elif layout == "class":
        lines.append((0, "class Trainer(tf.keras.Model):"))
        lines.append((1, "def __init__(self):"))
        lines.append((2, "self.acc = tf.keras.metrics.Mean()"))
        if decorator:
            lines.append((1, decorator))
        lines.append((1, "def train_step(self, x, y):"))
        lines += [(i + 2, t) for i, t in draw(statements(0, imports, [], receiver="self."))]
        lines.append((2, "return loss"))
    else:
        base = 0
        if layout == "nested-function":
            lines.append((0, "def make_step(model, optimizer):"))
            base = 1
        if decorator:
            lines.append((base, decorator))
        lines.append((base, "def train_step(x, y):" if base else "def train_step(model, optimizer, x, y):"))
        lines += [(i + base + 1, t) for i, t in draw(statements(0, imports, []))]
        lines.append((base + 1, "return loss"))
    if draw(st.booleans()):
        lines += [
            (0, "for epoch in range(epochs):"),
            (1, "for x, y in dataset:"),
            (2, "train_step(model, optimizer, x, y)"),
            (1, "print(epoch, train_loss.result())"),
        ]
        if draw(st.booleans()):
            lines.append((1, "train_loss.reset_state()"))
    return lines


def render(lines, indent: str = "    ") -> str:
    return "".join(f"{indent * level}{text}\n" for level, text in lines)


# -- formatting changes that keep the code ----------------------------------------------------

@st.composite
def reformat(draw, lines):
    """(new source, map old line -> new line) for comment/blank/parenthesis/trailing-comment edits."""
    indent = draw(st.sampled_from(["    ", "  ", "\t"]))
    out: list[str] = []
    mapping: dict[int, int] = {}
    edits = draw(st.lists(st.sampled_from(["comment", "blank", "trailing", "parens", "none", "none"]),
                          min_size=len(lines), max_size=len(lines)))
    for number, ((level, text), edit) in enumerate(zip(lines, edits), start=1):
        if edit == "comment":
            out.append(f"{indent * draw(st.integers(0, level))}# a comment about {text[:10]!r}\n")
        elif edit == "blank":
            out.append(draw(st.sampled_from(["\n", "   \n", "\t\n"])))
        elif edit == "parens" and " = " in text and not text.startswith(("for ", "with ", "if ", "def ", "class ")):
            target, _, value = text.partition(" = ")
            text = f"{target} = ({value})"
        elif edit == "trailing":
            text = f"{text}  # noted"  # never a suppression comment: those change findings
        out.append(f"{indent * level}{text}\n")
        mapping[number] = len(out)
    return "".join(out), mapping


def codes_at_lines(findings, mapping=None):
    return sorted((mapping[f.line] if mapping else f.line, f.code) for f in findings)


@settings(max_examples=LOOPS, **COMMON)
@given(st.data())
def test_generated_loops_lint_without_error_and_survive_formatting(data):
    lines = data.draw(loops())
    source = render(lines)
    findings = lint_source(source, "loop.py")  # valid Python: no LintError either
    for finding in findings:
        assert 1 <= finding.line <= len(lines) and finding.col >= 1
    changed, mapping = data.draw(reformat(lines))
    again = lint_source(changed, "loop.py")
    assert codes_at_lines(again) == codes_at_lines(findings, mapping), changed


@settings(max_examples=LOOPS, **COMMON)
@given(loops())
def test_generated_loops_give_the_same_findings_with_crlf_and_a_bom(lines):
    source = render(lines)
    findings = codes_at_lines(lint_source(source, "loop.py"))
    assert codes_at_lines(lint_source(source.replace("\n", "\r\n"), "loop.py")) == findings
    assert codes_at_lines(lint_source(b"\xef\xbb\xbf" + source.encode(), "loop.py")) == findings


@settings(max_examples=LOOPS // 2, **COMMON)
@given(loops(), st.integers(0, 10_000))
def test_truncated_programs_never_raise_anything_but_a_lint_error(lines, cut):
    source = render(lines)
    lint(source[: cut % (len(source) + 1)])  # most cuts are syntax errors: LintError is fine


@settings(max_examples=LOOPS // 3, **COMMON)
@given(loops(), loops(), st.sampled_from(["from helpers import *", "from helpers import apply_grads, compute_loss",
                                          "import helpers", "from . import helpers"]))
def test_generated_two_module_projects_lint_without_internal_errors(tmp_path_factory, helpers, train, import_line):
    """Two generated files, one importing the other (and `helpers.py` importing `train.py` back):
    the model reads across them, cycles included, and never fails."""
    from tapecheck.lint import lint_paths

    folder = tmp_path_factory.mktemp("project")
    (folder / "helpers.py").write_text(render(helpers) + "from train import train_step\n", encoding="utf-8")
    (folder / "train.py").write_text(import_line + "\n" + render(train), encoding="utf-8")
    report = lint_paths([str(folder)], jobs=1)
    assert [e for e in report.errors if "internal error" in e.message] == []
    for finding in report.findings:
        assert finding.line >= 1 and finding.col >= 1


# -- arbitrary programs from the grammar -------------------------------------------------------

import hypothesmith  # part of the test dependencies

PROGRAMS = hypothesmith.from_grammar()  # built once: building the grammar strategy takes seconds


@settings(max_examples=GRAMMAR, **COMMON)
@given(PROGRAMS, st.integers(1, 5))
def test_programs_from_the_grammar_never_raise_and_keep_findings_under_comment_lines(program, header):
    source = SCREEN_WORDS + program
    findings = lint(source)
    if findings is None:
        return
    lines = source.count("\n") + (not source.endswith("\n"))
    for finding in findings:
        assert 1 <= finding.line <= max(lines, 1), finding
    # comment lines added on top shift every finding down; the code below is unchanged
    shifted = lint(SCREEN_WORDS + "# header\n" * header + program)
    assert shifted is not None
    assert sorted((f.line - header, f.code) for f in shifted) == codes_at_lines(findings)


@settings(max_examples=GRAMMAR, **COMMON)
@given(PROGRAMS)
def test_programs_from_the_grammar_as_bytes_never_raise(program):
    for encoded in (program.encode("utf-8"), program.encode("utf-16"), b"\xef\xbb\xbf" + program.encode(),
                    program.encode().replace(b"\n", b"\r\n"), program.encode().replace(b"\n", b"\r")):
        lint(SCREEN_WORDS.encode() + encoded)

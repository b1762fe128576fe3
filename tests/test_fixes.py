"""`--fix` / `--diff`: each fix is checked on every fixture and every INVALID example
(it parses, the finding goes, a second run changes nothing, nothing outside the fixed
spans moves), files keep encoding and line endings, and an interrupted write loses nothing."""

from __future__ import annotations

import os
import re
import resource
import signal
import stat
import subprocess
import sys
from pathlib import Path

import libcst
import pytest
from click.testing import CliRunner

from tapecheck.cli import main
from tapecheck.lint import lint_source
from tapecheck.lint.fixes import SourceText, apply_edits, attach_fixes, edit_spans
from tapecheck.lint.fixing import fix_source
from tapecheck.rules import RULES

ROOT = Path(__file__).resolve().parents[1]
FIXABLE = [rule for rule in RULES if rule.fixable]
CODE_BLOCK = re.compile(r"## (Example|Use instead)\n```python\n(.*?)```", re.S)
TAPECHECK = str(Path(sys.executable).with_name("tapecheck"))


def corpus():
    """(name, source) of every fixture and every fixable rule's INVALID examples."""
    for path in sorted((ROOT / "fixtures").glob("*/*.py")):
        yield path.relative_to(ROOT).as_posix(), path.read_bytes()
    for rule in FIXABLE:
        for index, source in enumerate(rule.invalid):
            yield f"{rule.code}-invalid-{index}", source.encode()
        yield f"{rule.code}-doc-example", dict(CODE_BLOCK.findall(rule.doc))["Example"].encode()


CORPUS = list(corpus())


def _changes_within(original: str, fixed: str, spans: list[tuple[int, int]]) -> bool:
    """Every character of `original` outside the spans is in `fixed`, in order and unchanged:
    the text before the first span and after the last is identical, the gaps between spans
    appear in order in between."""
    position, previous_end = 0, 0
    for start, end in sorted(spans):
        if start < previous_end:  # the same edit proposed by two findings
            previous_end = max(previous_end, end)
            continue
        gap = original[previous_end:start]
        if previous_end == 0:
            if not fixed.startswith(gap):
                return False
            found = 0
        else:
            found = fixed.find(gap, position)
            if found < 0:
                return False
        position, previous_end = found + len(gap), end
    tail = original[previous_end:]
    return fixed.endswith(tail) and len(fixed) - len(tail) >= position


def _fixable(source: bytes, name: str):
    return [f for f in attach_fixes(source, name, lint_source(source, name)) if f.fix is not None]


def test_the_corpus_exercises_every_fixable_rule():
    fixed_codes = {f.code for name, source in CORPUS for f in _fixable(source, name)}
    assert fixed_codes == {rule.code for rule in FIXABLE}
    assert {rule.code for rule in FIXABLE} == {"TAP105", "TAP201", "TAP202", "TAP301", "TAP302"}


@pytest.mark.parametrize("name,source", CORPUS, ids=[name for name, _ in CORPUS])
def test_each_fix_alone_parses_removes_its_finding_and_touches_only_its_spans(name, source):
    text = SourceText.from_bytes(source).text
    before = lint_source(source, name)
    for finding in _fixable(source, name):
        spans = [(start, end) for start, end, _ in edit_spans(text, finding.fix.edits)]
        fixed = apply_edits(text, finding.fix.edits)
        libcst.parse_module(fixed)
        after = lint_source(fixed, name)
        assert sum(f.code == finding.code for f in after) < sum(f.code == finding.code for f in before), finding
        assert _changes_within(text, fixed, spans), finding


@pytest.mark.parametrize("name,source", CORPUS, ids=[name for name, _ in CORPUS])
def test_fixing_a_whole_file_is_safe_and_idempotent(name, source):
    findings = lint_source(source, name)
    original_fixes = _fixable(source, name)
    result = fix_source(source, name, unsafe=True)
    libcst.parse_module(result.fixed)
    after = lint_source(result.fixed, name)
    assert len(after) == len(findings) - result.fixed_count
    for code in {f.code for f in original_fixes}:
        assert sum(f.code == code for f in after) < sum(f.code == code for f in findings)
    text = SourceText.from_bytes(source).text
    spans = [(s, e) for f in original_fixes for s, e, _ in edit_spans(text, f.fix.edits)]
    assert _changes_within(text, SourceText.from_bytes(result.fixed).text, spans)
    again = fix_source(result.fixed, name, unsafe=True)
    assert again.fixed == result.fixed and again.fixed_count == 0


@pytest.mark.parametrize("rule", FIXABLE, ids=lambda r: r.code)
def test_the_doc_example_fixed_is_the_use_instead(rule):
    blocks = dict(CODE_BLOCK.findall(rule.doc))
    example = blocks["Example"].replace("  # RuntimeError", "")
    result = fix_source(example.encode(), "example.py", unsafe=True)
    assert result.fixed.decode() == blocks["Use instead"]


def test_safe_fixes_leave_unsafe_ones_alone():
    example = dict(CODE_BLOCK.findall(next(r for r in RULES if r.code == "TAP301").doc))["Example"]
    assert fix_source(example.encode(), "e.py").fixed == example.encode()
    assert fix_source(example.encode(), "e.py", unsafe=True).fixed != example.encode()


TAPE_LOOP = """\
import tensorflow as tf


def two_heads(model, x):
    with tf.GradientTape(watch_accessed_variables=True) as tape:
        a, b = model(x)
    ga = tape.gradient(a, model.trainable_variables)
    gb = tape.gradient(b, model.trainable_variables)  # second call
    return ga, gb


def once(model, x):
    with tf.GradientTape(
        persistent=True,
        watch_accessed_variables=False,
    ) as tape:
        tape.watch(x)
        y = model(x)
    return tape.gradient(y, x)
"""
TAPE_LOOP_FIXED = TAPE_LOOP.replace(
    "GradientTape(watch_accessed_variables=True)", "GradientTape(watch_accessed_variables=True, persistent=True)"
).replace(
    "# second call\n", "# second call\n    del tape\n"
).replace("        persistent=True,\n        watch", "        watch")


@pytest.mark.parametrize(
    "source",
    [
        # a use before the tape is made runs again on the next pass of the loop
        "import tensorflow as tf\nfor step in range(3):\n    if step:\n        print(tape)\n"
        "    with tf.GradientTape() as tape:\n        y = m(x)\n    a = tape.gradient(y, v)\n    b = tape.gradient(y, w)\n",
        # a nested function may run after the last use we can see
        "import tensorflow as tf\ndef f(m, x, v, w):\n    with tf.GradientTape() as tape:\n        y = m(x)\n"
        "    def later():\n        return tape\n    a = tape.gradient(y, v)\n    b = tape.gradient(y, w)\n    return later\n",
        # the last use is the return itself
        "import tensorflow as tf\ndef f(m, x, v, w):\n    with tf.GradientTape() as tape:\n        y = m(x)\n"
        "    a = tape.gradient(y, v)\n    return a, tape.gradient(y, w)\n",
    ],
    ids=["loop-carried", "closure", "return"],
)
def test_no_del_where_it_is_not_simple(source):
    result = fix_source(source.encode(), "t.py")
    fixed = result.fixed.decode()
    assert "GradientTape(persistent=True)" in fixed and "del tape" not in fixed


def test_a_tape_handed_to_a_helper_twice_is_made_persistent_and_released():
    from tapecheck.rules import get_rule

    source = get_rule("TAP201").invalid[0]
    assert "apply_grads(tape, loss_b" in source
    result = fix_source(source.encode(), "t.py")
    fixed = result.fixed.decode()
    assert result.fixed_count == 1
    assert "GradientTape(persistent=True) as tape" in fixed
    assert fixed.rstrip().endswith("apply_grads(tape, loss_b, head_b, opt_b)  # expect: TAP201\n    del tape")
    assert not [f for f in lint_source(fixed, "t.py") if f.code == "TAP201"]


def run(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_fix_in_place_and_report(tmp_path):
    path = tmp_path / "loop.py"
    path.write_text(TAPE_LOOP)
    result = run("lint", "--fix", str(path))
    assert path.read_text() == TAPE_LOOP_FIXED
    assert result.exit_code == 0 and result.output == "0 findings in 1 file (2 fixed).\n"
    assert run("lint", "--fix", str(path)).output == "0 findings in 1 file.\n"


def test_diff_writes_nothing(tmp_path):
    path = tmp_path / "loop.py"
    path.write_text(TAPE_LOOP)
    before = os.stat(path)
    result = run("lint", "--diff", str(path))
    assert result.exit_code == 1
    assert path.read_text() == TAPE_LOOP and os.stat(path).st_mtime_ns == before.st_mtime_ns
    assert result.stdout.startswith(f"--- a/{path}\n+++ b/{path}\n")
    assert "+    del tape\n" in result.stdout and "-        persistent=True,\n" in result.stdout
    assert "Would fix 1 file." in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["loop.py"]


@pytest.mark.parametrize(
    "encode",
    [
        pytest.param(lambda text: text.replace("\n", "\r\n").encode(), id="crlf"),
        pytest.param(lambda text: b"\xef\xbb\xbf" + text.encode(), id="bom"),
        pytest.param(lambda text: ("# -*- coding: latin-1 -*-\n# caf\xe9\n" + text).encode("latin-1"), id="latin-1"),
        pytest.param(lambda text: text.replace("    ", "\t").encode(), id="tabs"),
        pytest.param(lambda text: text.rstrip("\n").encode(), id="no-final-newline"),
    ],
)
def test_files_keep_encoding_and_line_endings(tmp_path, encode):
    path = tmp_path / "loop.py"
    path.write_bytes(encode(TAPE_LOOP))
    run("lint", "--fix", str(path))
    expected = encode(TAPE_LOOP_FIXED)
    assert path.read_bytes() == expected


def test_only_enabled_unsuppressed_findings_are_fixed(tmp_path):
    path = tmp_path / "loop.py"
    source = TAPE_LOOP.replace("# second call", "# noqa: TAP201")
    path.write_text(source)
    run("lint", "--fix", "--ignore", "TAP202", str(path))
    assert path.read_text() == source


def test_mode_and_symlinks_are_kept(tmp_path):
    real = tmp_path / "real.py"
    real.write_text(TAPE_LOOP)
    os.chmod(real, 0o640)
    link = tmp_path / "link.py"
    link.symlink_to(real)
    if os.getuid() == 0:  # root fixes someone else's file: it stays theirs
        os.chown(real, 4321, 4321)
    run("lint", "--fix", str(link))
    assert link.is_symlink() and real.read_text() == TAPE_LOOP_FIXED
    assert stat.S_IMODE(os.stat(real).st_mode) == 0o640
    if os.getuid() == 0:
        assert (os.stat(real).st_uid, os.stat(real).st_gid) == (4321, 4321)


def test_notebooks_and_stdin_are_not_rewritten(tmp_path):
    notebook = tmp_path / "nb.ipynb"
    notebook.write_bytes((ROOT / "tests" / "data" / "regression_loop.ipynb").read_bytes())
    before = notebook.read_bytes()
    result = run("lint", "--fix", "--unsafe-fixes", str(notebook))
    assert notebook.read_bytes() == before and "TAP301" in result.output
    # standard input is never written anywhere but back to standard output (tests/test_cli_ruff.py)
    result = CliRunner().invoke(main, ["lint", "--fix", "-", "--stdin-filename", "nb.ipynb"],
                                input=before.decode())
    assert result.stdout_bytes == before and "TAP301" in result.stderr


def _limit_file_size(limit: int):
    def apply():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


def test_an_interrupted_write_leaves_the_original_intact(tmp_path):
    path = tmp_path / "loop.py"
    path.write_text(TAPE_LOOP)
    # the fixed file is longer than the original: the OS stops the write half-way
    result = subprocess.run(
        [TAPECHECK, "lint", "--fix", str(path)], capture_output=True, text=True,
        preexec_fn=_limit_file_size(len(TAPE_LOOP.encode())), timeout=120,
    )
    assert path.read_text() == TAPE_LOOP
    assert sorted(p.name for p in tmp_path.iterdir()) == ["loop.py"]  # no temp file left behind
    assert result.returncode == 1 and "Traceback" not in result.stderr + result.stdout
    assert f"{path}: error: cannot write the fixed file: File too large; the original is unchanged" in result.stdout
    # and without the limit the same command fixes it
    subprocess.run([TAPECHECK, "lint", "--fix", str(path)], capture_output=True, timeout=120)
    assert path.read_text() == TAPE_LOOP_FIXED


def test_rules_table_says_which_rules_fix():
    header, *rows = run("rules").output.splitlines()
    start, end = header.index("CHECKED BY"), header.index("FLAGS")
    checked_by = {row.split()[0]: [w.strip() for w in row[start:end].split(",")] for row in rows}
    assert {code for code, where in checked_by.items() if "fix" in where} == {rule.code for rule in FIXABLE}


# -- generated programs ---------------------------------------------------------------------
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_TAPE_ARGS = ["", "persistent=False", "persistent=True", "False", "True", "watch_accessed_variables=False",
              "watch_accessed_variables=False, persistent=True", "\n        persistent=True,\n    "]
_CALLS = [
    "    a = {t}.gradient(y, v)\n",
    "    a = {t}.gradient(y, v)\n    b = {t}.gradient(y * 2.0, w)\n",
    "    out = [{t}.gradient(y, u) for u in (v, w)]\n",
    "    for u in (v, w):\n        print({t}.gradient(y, u))\n",
    "    if flag:\n        a = {t}.gradient(y, v)\n    c = {t}.gradient(y, w)\n    print(c)\n",
]
_EXTRAS = [
    "",
    "opt = tf.keras.optimizers.Adam(lr=0.1)\n",
    "acc = tf.keras.metrics.Mean()\nfor epoch in range(2):\n    for x in data:\n        acc.update_state(x)\n    print(acc.result())\n",
    "acc = tf.keras.metrics.Mean()\nfor epoch in range(2):\n    acc.reset_states()\n    for x in data:\n        acc(x)\n    print(acc.result())\n",
]


@st.composite
def programs(draw):
    tape = draw(st.sampled_from(["tape", "t"]))
    made = draw(st.sampled_from(["with", "assign", "module"]))
    args = draw(st.sampled_from(_TAPE_ARGS))
    calls = draw(st.sampled_from(_CALLS)).format(t=tape)
    extra = draw(st.sampled_from(_EXTRAS))
    if made == "with":
        body = f"def f(m, x, v, w, flag):\n    with tf.GradientTape({args}) as {tape}:\n        y = m(x)\n{calls}"
    elif made == "assign":
        body = f"def f(m, x, v, w, flag):\n    {tape} = tf.GradientTape({args})\n    with {tape}:\n        y = m(x)\n{calls}"
    else:  # module level, as in a notebook
        body = f"with tf.GradientTape({args}) as {tape}:\n    y = m(x)\n" + "".join(
            line[4:] + "\n" for line in calls.splitlines()
        )
    source = "import tensorflow as tf\n\n" + draw(st.sampled_from([body + extra, extra + body]))
    if draw(st.booleans()):
        source = source.replace("    ", "\t")
    if draw(st.booleans()):
        source = source.replace("\n", "\r\n")
    return source.encode()


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_fixes_on_generated_programs(source):
    findings = lint_source(source, "gen.py")
    original_fixes = _fixable(source, "gen.py")
    result = fix_source(source, "gen.py", unsafe=True)
    libcst.parse_module(result.fixed)
    after = lint_source(result.fixed, "gen.py")
    assert len(after) == len(findings) - result.fixed_count
    for code in {f.code for f in original_fixes}:
        assert sum(f.code == code for f in after) < sum(f.code == code for f in findings)
    text = SourceText.from_bytes(source).text
    spans = [(s, e) for f in original_fixes for s, e, _ in edit_spans(text, f.fix.edits)]
    assert _changes_within(text, SourceText.from_bytes(result.fixed).text, spans)
    newline = "\r\n" if b"\r\n" in source else "\n"
    assert SourceText.from_bytes(result.fixed).text.count("\n") == SourceText.from_bytes(result.fixed).text.count(newline)
    assert fix_source(result.fixed, "gen.py", unsafe=True).fixed == result.fixed

"""What a ruff user reaches for, through the real `tapecheck` command: `check`, no path, `-q`,
`--output-file`, `--show-fixes`, `--add-noqa`, `extend-select`, `--fix` on standard input,
the `full` and `concise` text formats, ruff's default excludes and every unparseable file
reported (issue 14)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tapecheck.cli import main

BAD = """\
import tensorflow as tf

def step(model, x):
    with tf.GradientTape() as tape:
        out = model(x)
    loss = tf.reduce_mean(out)
    grads = tape.gradient(loss, model.trainable_variables)
    opt = tf.keras.optimizers.SGD(lr=0.1)
    return grads, opt
"""
LATE = "train.py:7:13: TAP101 `loss` is computed at line 6"
LR = "train.py:8:11: TAP302 [*] Keras 3 optimizers reject `lr=`"


def run(*args, input=None):
    return CliRunner().invoke(main, list(args), input=input, catch_exceptions=False)


@pytest.fixture
def project(tmp_path, monkeypatch):
    (tmp_path / "train.py").write_text(BAD)
    monkeypatch.chdir(tmp_path)
    return tmp_path


# -- ruff habits -----------------------------------------------------------------------------

def test_no_path_lints_the_working_folder_and_check_is_lint(project):
    (project / "sub").mkdir()
    (project / "sub" / "more.py").write_text(BAD)
    result = run("lint")
    assert result.exit_code == 1
    assert LATE in result.output and "sub/more.py:8:11: TAP302" in result.output
    assert result.output.endswith("4 findings in 2 files.\n")
    assert run("check").output == result.output
    assert run("check", "--output-format", "concise", "sub").output.splitlines()[0].startswith("sub/more.py:7:13: TAP101")


def test_quiet_prints_the_findings_only(project):
    result = run("lint", "-q", "--output-format", "concise")
    assert result.exit_code == 1
    assert result.output.splitlines() == [
        line for line in run("lint", "--output-format", "concise").output.splitlines() if line.startswith(("train.py", "sub/"))
    ]
    assert len(result.output.splitlines()) == 2
    (project / "train.py").write_text("x = 1\n")
    quiet = run("lint", "--quiet")
    assert quiet.exit_code == 0 and quiet.output == ""


def test_output_file_gets_the_report_and_replaces_the_old_one(project):
    report = project / "report.json"
    report.write_text("old report")
    os.chmod(report, 0o640)
    result = run("lint", "--no-cache", "--output-format", "json", "--output-file", "report.json")
    assert result.exit_code == 1 and result.output == ""
    document = json.loads(report.read_text())
    assert {f["code"] for f in document["findings"]} == {"TAP101", "TAP302"}
    assert stat.S_IMODE(report.stat().st_mode) == 0o640
    assert sorted(p.name for p in project.iterdir()) == ["report.json", "train.py"]  # no temporary left
    text = run("lint", "-o", "report.txt")
    assert text.output == "" and LR in (project / "report.txt").read_text()
    assert "\x1b[" not in (project / "report.txt").read_text()


def test_output_file_that_cannot_be_written_is_a_one_line_error(project):
    (project / "missing").write_text("a file where the report's folder should be\n")
    result = CliRunner().invoke(main, ["lint", "--output-file", "missing/dir/report.txt"])
    assert result.exit_code == 2  # an input/output error, never the findings' 1
    assert "missing/dir/report.txt" in result.output and len(result.output.strip().splitlines()) == 1
    assert "Traceback" not in result.output


def test_show_fixes_previews_each_fix_and_lists_what_fix_fixed(project):
    shown = run("lint", "--show-fixes").output
    assert "  i Safe fix: Pass `learning_rate=`" in shown
    assert "   8    |-    opt = tf.keras.optimizers.SGD(lr=0.1)" in shown
    assert "      8 |+    opt = tf.keras.optimizers.SGD(learning_rate=0.1)" in shown
    assert (project / "train.py").read_text() == BAD  # a preview writes nothing
    fixed = run("lint", "--fix", "--show-fixes")
    assert "Fixed 1 finding:\n- train.py:\n    1 \u00d7 TAP302 (removed-keras-api)\n" in fixed.output
    assert fixed.output.endswith("1 finding in 1 file (1 fixed).\n")
    assert "learning_rate=0.1" in (project / "train.py").read_text()


def test_fix_on_stdin_writes_the_fixed_source_to_stdout(project):
    crlf = BAD.replace("\n", "\r\n").encode()
    result = CliRunner().invoke(main, ["lint", "--fix", "-", "--stdin-filename", "train.py"], input=crlf)
    assert result.exit_code == 1  # TAP101 has no fix and remains
    assert result.stdout_bytes == crlf.replace(b"lr=0.1", b"learning_rate=0.1")  # line endings kept
    assert "train.py:7:13: TAP101" in result.stderr and "1 finding in 1 file (1 fixed)." in result.stderr
    clean = CliRunner().invoke(main, ["lint", "--fix", "-"], input="x = 1\n")
    assert clean.exit_code == 0 and clean.stdout == "x = 1\n"
    assert (project / "train.py").read_text() == BAD  # nothing on disk changed
    diff = CliRunner().invoke(main, ["lint", "--diff", "-", "--stdin-filename", "t.py"], input=BAD)
    assert "-    opt = tf.keras.optimizers.SGD(lr=0.1)" in diff.stdout and diff.exit_code == 1


def test_extend_select_in_configuration_and_on_the_command_line(project):
    def codes(result):
        return sorted({line.split()[1] for line in result.output.splitlines() if line.startswith("train.py:")})

    (project / "pyproject.toml").write_text('[tool.tapecheck]\nselect = ["TAP101"]\nextend-select = ["TAP302"]\n')
    assert codes(run("lint", "--output-format", "concise")) == ["TAP101", "TAP302"]
    (project / "pyproject.toml").write_text('[tool.tapecheck]\nselect = ["TAP101"]\n')
    assert codes(run("lint", "--output-format", "concise")) == ["TAP101"]
    assert codes(run("lint", "--output-format", "concise", "--extend-select", "TAP3")) == ["TAP101", "TAP302"]
    # --select replaces the configured selection; --extend-select still adds to it
    assert codes(run("lint", "--output-format", "concise", "--select", "TAP302")) == ["TAP302"]
    (project / "pyproject.toml").write_text('[tool.tapecheck]\nextend-select = ["TAP302"]\nignore = ["TAP302"]\n')
    assert codes(run("lint", "--output-format", "concise")) == ["TAP101"]  # ignore wins
    (project / "pyproject.toml").write_text('[tool.tapecheck]\nextend-select = ["TAP999"]\n')
    bad = run("lint")
    assert bad.exit_code == 2 and "extend-select: unknown rule code 'TAP999'" in bad.output


# -- --add-noqa ----------------------------------------------------------------------------------

NOQA_SOURCE = """\
import tensorflow as tf

def step(model, x):
    with tf.GradientTape() as tape:
        out = model(x)
    loss = tf.reduce_mean(out)
    grads = tape.gradient(loss, model.trainable_variables)  # noqa: E501
    opt = tf.keras.optimizers.SGD(lr=0.1)  # type: ignore
    return grads, opt

m = tf.keras.metrics.Mean()
m.reset_states(\\
)
"""


def test_add_noqa_adds_merges_and_leaves_a_file_clean(project):
    path = project / "train.py"
    path.write_bytes(NOQA_SOURCE.replace("\n", "\r\n").encode())
    os.chmod(path, 0o600)
    result = run("lint", "--add-noqa")
    assert result.exit_code == 0
    assert "Added 2 noqa directives." in result.output
    text = path.read_bytes().decode()
    assert "grads = tape.gradient(loss, model.trainable_variables)  # noqa: E501, TAP101\r\n" in text
    assert "opt = tf.keras.optimizers.SGD(lr=0.1)  # type: ignore  # noqa: TAP302\r\n" in text
    assert "\n" not in text.replace("\r\n", "")  # the file's line endings are kept
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    # a comment after a line continuation would be a syntax error: that line is named, not changed
    assert "train.py:12: no noqa added: the line ends with a backslash continuation" in result.output
    assert "m.reset_states(\\\r\n" in text
    after = run("lint", "--output-format", "concise")
    assert [line.split()[1] for line in after.output.splitlines() if line.startswith("train.py")] == ["TAP302"]
    again = run("lint", "--add-noqa", "--select", "TAP101")
    assert "Added 0 noqa directives." in again.output and path.read_bytes().decode() == text


def test_add_noqa_never_breaks_a_string_and_leaves_notebooks_alone(project, tmp_path):
    path = project / "train.py"
    path.write_text(
        'import tensorflow as tf\nm = tf.keras.metrics.Mean()\nm.reset_states(); doc = """\ntext\n"""\n'
    )
    result = run("lint", "--add-noqa")
    assert "train.py:3: no noqa added: the line ends inside a string" in result.output
    assert path.read_text().count("noqa") == 0
    notebook = project / "nb.ipynb"
    notebook.write_bytes((Path(__file__).parent / "data" / "regression_loop.ipynb").read_bytes())
    before = notebook.read_bytes()
    result = run("lint", "--add-noqa", "nb.ipynb")
    assert notebook.read_bytes() == before and "--add-noqa leaves notebooks alone" in result.output
    assert result.exit_code == 0  # a note: the run did all it can (ruff exits 0 too)
    assert run("lint", "--add-noqa", "--fix").exit_code == 2


# -- text formats ----------------------------------------------------------------------------------

def test_full_format_shows_a_code_frame_the_caret_and_the_hint(project):
    result = run("lint", "train.py")
    blocks = result.output.split("\n\n")
    assert blocks[0].splitlines() == [
        "train.py:7:13: TAP101 `loss` is computed at line 6, after the `with` block of `tape` (line 4): "
        "the tape never recorded it, so every gradient is None",
        "  |",
        "5 |         out = model(x)",
        "6 |     loss = tf.reduce_mean(out)",
        "7 |     grads = tape.gradient(loss, model.trainable_variables)",
        "  |             ^^^^^^^^^^^^^",
        "8 |     opt = tf.keras.optimizers.SGD(lr=0.1)",
        "9 |     return grads, opt",
        "  |",
        "  = help: Compute `loss` inside the `with` block of `tape`.",
    ]
    assert blocks[1].splitlines()[0] == "train.py:8:11: TAP302 [*] Keras 3 optimizers reject `lr=`: ValueError: Argument(s) not recognized"
    assert "  |           ^^^^^^^^^^^^^^^^^^^^^^^" in blocks[1].splitlines()
    assert "  = help: Pass `learning_rate=` instead." in blocks[1]
    assert blocks[2] == "[*] 1 fixable with the `--fix` option.\n2 findings in 1 file.\n"
    assert run("lint", "--output-format", "text", "train.py").output == result.output  # the old name
    concise = run("lint", "--output-format", "concise", "train.py").output.splitlines()
    assert len(concise) == 4 and concise[1].startswith("train.py:8:11: TAP302 [*]")


def test_the_caret_stays_under_the_column_with_tabs_wide_characters_and_short_files(project):
    (project / "t.py").write_text(
        "import tensorflow as tf\nm = tf.keras.metrics.Mean()\nif 1:\n\t_ = '\u6f22\u5b57'; m.reset_states()\n"
    )
    lines = run("lint", "t.py").output.splitlines()
    assert lines[1:7] == [
        "  |",
        "2 | m = tf.keras.metrics.Mean()",
        "3 | if 1:",
        "4 |     _ = '\u6f22\u5b57'; m.reset_states()",
        "  | " + " " * 16 + "^" * 14,  # under `m.reset_states`: tab as 4, each wide character as 2
        "  |",
    ]


def test_notebook_frames_show_the_lines_of_the_cell(tmp_path):
    notebook = Path(__file__).parent / "data" / "regression_loop.ipynb"
    cells = json.loads(notebook.read_text())["cells"]
    cell_source = "".join(cells[5]["source"]).splitlines()  # cell 6
    lines = run("lint", str(notebook)).output.splitlines()
    start = lines.index(next(line for line in lines if ":cell 6:6:13: TAP101" in line))
    frame = lines[start + 1:start + 8]
    assert frame[0] == "  |" and frame[3] == f"6 | {cell_source[5]}".rstrip()
    assert frame[1] == f"4 | {cell_source[3]}".rstrip()


# -- what is walked, what is reported -----------------------------------------------------------------

RUFF_DEFAULT_EXCLUDES = (
    ".bzr", ".direnv", ".eggs", ".git", ".git-rewrite", ".hg", ".mypy_cache", ".nox", ".pants.d", ".pytype",
    ".ruff_cache", ".svn", ".tox", ".venv", "__pypackages__", "_build", "buck-out", "dist", "node_modules",
    "site-packages", "venv", "build",
)


def test_ruffs_default_excludes_are_skipped_unless_named(project):
    for name in RUFF_DEFAULT_EXCLUDES:
        (project / "lib" / name).mkdir(parents=True)
        (project / "lib" / name / "loop.py").write_text(BAD)
    (project / "lib" / "kept").mkdir()
    (project / "lib" / "kept" / "loop.py").write_text(BAD)
    result = run("lint", "--output-format", "concise", "lib")
    flagged = {line.split(":")[0] for line in result.output.splitlines() if ": TAP" in line}
    assert flagged == {"lib/kept/loop.py"}
    assert result.output.endswith("2 findings in 1 file.\n")
    for name in ("site-packages", "_build", "buck-out", "__pypackages__"):
        named_folder = run("lint", "--output-format", "concise", f"lib/{name}")
        assert f"lib/{name}/loop.py:7:13: TAP101" in named_folder.output  # a folder named is walked
        assert run("lint", f"lib/{name}/loop.py").exit_code == 1  # a file named is linted
        # pre-commit names files one by one: with --force-exclude their folders still exclude them
        forced = run("lint", "--force-exclude", f"lib/{name}/loop.py")
        assert forced.exit_code == 0 and forced.output == "warning: No Python files found under the given path(s)\n"


def test_every_unparseable_python_file_is_reported_even_when_screened_out(project):
    (project / "train.py").unlink()
    (project / "syntax.py").write_text("def f(:\n    return 1\n")
    (project / "blob.py").write_bytes(b"\x7fELF\x02\x01\x00\x00binary")
    (project / "latin.py").write_bytes(b"x = '\xe9t\xe9'\n")
    (project / "stub.pyi").write_text("def f(x: int) -> int: ...\n")
    (project / "ok.py").write_text("print('fine')\n")
    result = run("lint")
    assert result.exit_code == 1
    assert result.output.splitlines() == [
        "blob.py: error: binary file (contains NUL bytes), not Python source",
        "latin.py: error: not valid utf-8 (byte 5, line 1); declare the file's encoding with a coding cookie",
        "syntax.py: error: syntax error at line 1, column 7: invalid syntax",
        "0 findings in 5 files; 3 files could not be linted.",
    ]
    stdin = run("lint", "-", "--stdin-filename", "piped.py", input="x = (\n")
    assert stdin.exit_code == 1 and stdin.output.startswith("piped.py: error: syntax error at line 1")


def _notebook(path: Path, source: str, metadata: dict) -> Path:
    path.write_text(json.dumps({
        "cells": [
            {"cell_type": "markdown", "metadata": {}, "source": ["# title\n"]},
            {"cell_type": "code", "metadata": {}, "source": source, "outputs": [], "execution_count": None},
        ],
        "metadata": metadata, "nbformat": 4, "nbformat_minor": 5,
    }, indent=1))
    return path


def test_non_python_notebooks_are_skipped_and_broken_python_cells_reported(project):
    (project / "train.py").unlink()
    _notebook(project / "r.ipynb", "library(ggplot2)\nx <- c(1, 2)\n", {"kernelspec": {"language": "R", "name": "ir"}})
    _notebook(project / "julia.ipynb", "x = [1 2; 3 4]\n", {"language_info": {"name": "julia"}})
    result = run("lint")
    assert result.exit_code == 0 and result.output.endswith("0 findings in 2 files.\n")
    _notebook(project / "py.ipynb", "x = 1\ndef f(:\n", {"language_info": {"name": "python"}})
    broken = run("lint")
    assert broken.exit_code == 1
    assert "py.ipynb: error: syntax error at cell 2, line 2, column 7: invalid syntax" in broken.output


def test_the_linter_path_still_never_imports_tensorflow(project):
    code = (
        "import sys\nfrom tapecheck.cli import main\n"
        "for args in (['check', '-q'], ['lint', '--show-fixes', '--output-file', 'r.txt'], ['lint', '--add-noqa']):\n"
        "    try:\n        main(args)\n    except SystemExit:\n        pass\n"
        "print('HEAVY', sorted(m for m in ('tensorflow', 'keras', 'numpy') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=project, capture_output=True, text=True, timeout=120)
    assert "HEAVY []" in out.stdout, out.stdout + out.stderr
    assert "# noqa: TAP101" in (project / "train.py").read_text()


# -- notebook positions in SARIF and GitHub annotations ------------------------------------------------

LOOP_CELL = (
    "import tensorflow as tf\n"
    "with tf.GradientTape() as tape:\n"
    "    out = model(x)\n"
    "loss = tf.reduce_mean(out)  # caf\u00e9\n"
    "grads = tape.gradient(loss, model.trainable_variables)\n"
)


def _loop_notebook(path: Path, indent, as_list: bool) -> Path:
    cells = [
        {"cell_type": "markdown", "metadata": {}, "source": ["# A \"loop\"\n", "\u00e9t\u00e9\n"]},
        {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
         "source": LOOP_CELL.splitlines(keepends=True) if as_list else LOOP_CELL},
    ]
    document = {"cells": cells, "metadata": {"language_info": {"name": "python"}}, "nbformat": 4, "nbformat_minor": 5}
    path.write_text(json.dumps(document, indent=indent, ensure_ascii=True))  # escapes: \u00e9, \", \n
    return path


@pytest.mark.parametrize("indent, as_list", [(1, True), (None, True), (2, False)], ids=["nbformat", "one-line", "string"])
def test_sarif_and_github_place_notebook_findings_in_the_ipynb_text(project, indent, as_list):
    (project / "train.py").unlink()
    notebook = _loop_notebook(project / "nb.ipynb", indent, as_list)
    raw_lines = notebook.read_text().splitlines()
    sarif = json.loads(run("lint", "--output-format", "sarif", "nb.ipynb").output)
    (result,) = sarif["runs"][0]["results"]
    assert result["message"]["text"].startswith("cell 2, line 5: `loss` is computed")
    region = result["locations"][0]["physicalLocation"]["region"]
    # the finding is at `tape.gradient` (cell 2, line 5, column 9): that is what the file shows there
    assert raw_lines[region["startLine"] - 1][region["startColumn"] - 1:].startswith("tape.gradient(loss")
    if indent == 1:
        assert region["startLine"] > 10  # not the cell's own line number
    (annotation,) = run("lint", "--output-format", "github", "nb.ipynb").output.splitlines()
    assert f",line={region['startLine']},col={region['startColumn']},endLine={region['startLine']}," in annotation
    end = int(annotation.split("endColumn=")[1].split("::")[0])  # after `tape.gradient`, as ruff's end
    assert raw_lines[region["startLine"] - 1][region["startColumn"] - 1:end - 1] == "tape.gradient"
    assert "::cell 2, line 5: " in annotation


def test_notebook_position_of_an_unused_suppression(project):
    (project / "train.py").unlink()
    notebook = _loop_notebook(project / "nb.ipynb", 1, True)
    text = notebook.read_text().replace("out = model(x)", "out = model(x)  # noqa: TAP201")
    notebook.write_text(text)
    sarif = json.loads(run("lint", "--output-format", "sarif", "--report-unused-suppressions", "nb.ipynb").output)
    unused = next(r for r in sarif["runs"][0]["results"] if r["ruleId"] == "unused-suppression")
    region = unused["locations"][0]["physicalLocation"]["region"]
    assert text.splitlines()[region["startLine"] - 1][region["startColumn"] - 1:].startswith("# noqa: TAP201")
    assert unused["message"]["text"].startswith("cell 2, line 3: ")


# -- keras-version --------------------------------------------------------------------------------------

KERAS2_LOOP = """\
import tensorflow as tf

train_acc = tf.keras.metrics.SparseCategoricalAccuracy()
optimizer = tf.keras.optimizers.Adam(lr=1e-3)
old = tf.keras.optimizers.legacy.Adam(lr=1e-3)
for epoch in range(5):
    train_acc.reset_states()
g = old.get_gradients(1, 2)
h = optimizer.get_gradients(1, 2)
"""


def _tap302(result) -> list[tuple[int, str]]:
    return [(int(line.split(":")[1]), line.split(": ", 1)[1]) for line in result.output.splitlines()
            if ": TAP302 " in line]


def test_keras_3_by_default_and_the_legacy_message_says_importerror(project):
    (project / "train.py").write_text(KERAS2_LOOP)
    found = dict(_tap302(run("lint", "--output-format", "concise")))
    assert sorted(found) == [4, 5, 7, 8, 9]
    assert "building one raises ImportError" in found[5]
    assert 'a `hasattr(tf.keras.optimizers, "legacy")` guard does not help' in found[5]


def test_keras_version_2_is_silent_about_what_keras_2_has(project):
    (project / "train.py").write_text(KERAS2_LOOP)
    (project / "pyproject.toml").write_text('[tool.tapecheck]\nkeras-version = "2"\n')
    found = _tap302(run("lint", "--output-format", "concise"))
    # reset_states(), the legacy optimizer and its get_gradients exist in Keras 2; the new
    # optimizers of TF 2.11+ ignore `lr=` (the default learning rate is used) and have no get_gradients
    assert [line for line, _ in found] == [4, 9]
    assert "ignore `lr=`: only a warning is logged and training runs with the default learning rate" in found[0][1]
    assert "have no `get_gradients()`: AttributeError" in found[1][1]
    run("lint", "--fix", "--unsafe-fixes")
    fixed = (project / "train.py").read_text()
    assert "Adam(learning_rate=1e-3)" in fixed and "train_acc.reset_states()" in fixed  # Keras 2's call kept
    assert "legacy.Adam(lr=1e-3)" in fixed
    (project / "pyproject.toml").write_text("[tool.tapecheck]\nkeras-version = 2\n")  # a TOML number works too
    assert [line for line, _ in _tap302(run("lint", "--output-format", "concise"))] == [9]
    (project / "pyproject.toml").write_text('[tool.tapecheck]\nkeras-version = "2.15"\n')
    bad = run("lint")
    assert bad.exit_code == 2 and 'keras-version: expected "2" (tf_keras) or "3"' in bad.output


def test_keras_version_is_decided_per_file_unless_set(project):
    # Issue 25: another file's tf_keras or TF_USE_LEGACY_KERAS (a helper module, a setup
    # notebook) no longer makes every file of the run Keras 2: `lint .` and `lint FILE` agree.
    (project / "pkg").mkdir()
    (project / "pkg" / "train.py").write_text(KERAS2_LOOP)
    (project / "train.py").unlink()
    assert len(_tap302(run("lint", "--output-format", "concise"))) == 5
    (project / "pkg" / "compat.py").write_text("import tf_keras as keras\n")
    assert len(_tap302(run("lint", "--output-format", "concise"))) == 5
    (project / "pkg" / "compat.py").unlink()
    _notebook(project / "setup.ipynb", 'import os\nos.environ["TF_USE_LEGACY_KERAS"] = "1"\n', {})
    assert len(_tap302(run("lint", "--output-format", "concise"))) == 5
    # the file's own switch makes it Keras 2
    (project / "pkg" / "train.py").write_text('import os\nos.environ["TF_USE_LEGACY_KERAS"] = "1"\n' + KERAS2_LOOP)
    assert [line for line, _ in _tap302(run("lint", "--output-format", "concise"))] == [6, 11]
    # a configured version wins over what the files say
    (project / "pyproject.toml").write_text('[tool.tapecheck]\nkeras-version = "3"\n')
    assert len(_tap302(run("lint", "--output-format", "concise"))) == 5
    (project / "pyproject.toml").unlink()
    stdin = run("lint", "--output-format", "concise", "-", input="import tf_keras\n" + KERAS2_LOOP)
    assert [line for line, _ in _tap302(stdin)] == [5, 10]

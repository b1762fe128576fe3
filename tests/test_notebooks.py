"""Jupyter notebooks: real .ipynb files linted through the real CLI."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from tapecheck.cli import main
from tapecheck.lint import lint_file
from tapecheck.lint.notebooks import NotebookError, cell_to_python, notebook_program

DATA = Path(__file__).parent / "data"
NOTEBOOK = DATA / "regression_loop.ipynb"


def run(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def write_notebook(path: Path, *cells: tuple[str, str]) -> Path:
    document = {
        "cells": [
            {"cell_type": kind, "metadata": {}, "source": source.splitlines(keepends=True),
             **({"outputs": [], "execution_count": None} if kind == "code" else {})}
            for kind, source in cells
        ],
        "metadata": {}, "nbformat": 4, "nbformat_minor": 5,
    }
    path.write_text(json.dumps(document, indent=1))
    return path


def test_findings_name_the_cell_and_the_line_in_it():
    result = run("lint", "--output-format", "concise", str(NOTEBOOK))
    assert result.exit_code == 1
    lines = result.output.splitlines()
    # cell 6 is the 4th code cell: markdown cells count, as the notebook shows them
    assert lines[0].startswith(f"{NOTEBOOK}:cell 6:6:13: TAP101 `loss` is computed at line 5, after the `with` block")
    assert lines[1].startswith(f"{NOTEBOOK}:cell 8:4:24: TAP301 `train_loss` (made at cell 5, line 4) is read every epoch")
    assert lines[-1] == "2 findings in 1 file."


def test_json_output_carries_cell_and_line():
    document = json.loads(run("lint", "--output-format", "json", str(NOTEBOOK)).output)
    assert [(f["code"], f["cell"], f["line"], f["col"]) for f in document["findings"]] == [
        ("TAP101", 6, 6, 13), ("TAP301", 8, 4, 24),
    ]


def test_magics_and_shell_lines_are_commented_out_in_place():
    cell = "%matplotlib inline\n!pip install x\nfiles = !ls\nmodel?\n  %time f()\nx = 1\n"
    lines = cell_to_python(cell)
    assert lines == ["#matplotlib inline\n", "#pip install x\n", "#iles = !ls\n", "#odel?\n", "  pass# f()\n", "x = 1\n"]
    assert [len(a) for a in lines] == [len(b) + 1 for b in cell.splitlines()]  # nothing shifts


def test_a_magic_that_is_a_blocks_whole_body_leaves_a_block(tmp_path):
    # the Colab install cell of many published notebooks: a comment alone would leave `if` empty
    path = write_notebook(
        tmp_path / "colab.ipynb",
        ("code", "import sys\nif 'google.colab' in sys.modules:\n  %pip install -q tensorflow\n"),
        ("code", "import tensorflow as tf\nx = tf.constant(3.0)\nwith tf.GradientTape() as tape:\n"
                 "    tape.watch(x)\ny = x * x\ngrad = tape.gradient(y, x)\n"),
    )
    result = run("lint", "--output-format", "concise", str(path))
    assert "error" not in result.output
    assert f"{path}:cell 2:6:8: TAP101" in result.output  # the next cell is still linted
    assert cell_to_python("if x:\n    !ls\n") == ["if x:\n", "    pass\n"]


def test_continuation_lines_are_python_not_magics():
    cell = 'label = ("%d items"\n         % n)\ndoc = """\n%s\n"""\ny = a \\\n    % b\n%time f()\n'
    assert cell_to_python(cell) == [line + "\n" for line in cell.splitlines()[:-1]] + ["#time f()\n"]


def test_only_real_line_breaks_count():
    assert cell_to_python("a = 1\x0c\r\nb = 2\rc = 3") == ["a = 1\x0c\n", "b = 2\n", "c = 3\n"]


def test_cell_magics_keep_python_bodies_and_drop_others():
    assert cell_to_python("%%time\ny = f(x)\n") == ["#%time\n", "y = f(x)\n"]
    assert cell_to_python("%%bash\nif ((\n") == ["#%bash\n", "#f ((\n"]


def test_positions_after_magics_are_exact(tmp_path):
    body = "with tf.GradientTape() as tape:\n    out = model(x)\nloss = tf.reduce_mean(out)\ng = tape.gradient(loss, model.trainable_variables)\n"
    plain = write_notebook(tmp_path / "plain.ipynb", ("code", "import tensorflow as tf"), ("code", body))
    magic = write_notebook(tmp_path / "magic.ipynb", ("code", "import tensorflow as tf\n%load_ext tensorboard"), ("code", body))
    found = [[(f.cell, f.line, f.col, f.code) for f in lint_file(str(p)).findings] for p in (plain, magic)]
    assert found[0] == found[1] == [(2, 4, 5, "TAP101")]


def test_line_numbers_in_messages_point_into_cells(tmp_path):
    path = write_notebook(
        tmp_path / "two.ipynb",
        ("code", "import tensorflow as tf\nwith tf.GradientTape() as tape:\n    out = model(x)"),
        ("markdown", "then"),
        ("code", "loss = tf.reduce_mean(out)\ng = tape.gradient(loss, model.trainable_variables)"),
    )
    (finding,) = lint_file(str(path)).findings
    assert (finding.cell, finding.line) == (3, 2)
    assert "computed at line 1," in finding.message and "(cell 1, line" in finding.message


@pytest.mark.parametrize(
    "content,message",
    [
        ('{"cells": [', "not a valid notebook: bad JSON at line 1"),
        ('{"metadata": {}}', "not a valid notebook: no 'cells' list"),
        ('{"worksheets": [], "nbformat": 3}', "nbformat 3"),
        ('[1, 2]', "the top level is not a JSON object"),
        ('{"cells": ["x"]}', "cell 1 is not a JSON object"),
        ('{"cells": [{"source": "x"}]}', "cell 1 has no 'cell_type'"),
        ('{"cells": [{"cell_type": "code", "source": 3}]}', "cell 1 has no 'source'"),
    ],
)
def test_broken_notebooks_are_one_line_errors_and_the_rest_goes_on(tmp_path, content, message):
    (tmp_path / "broken.ipynb").write_text(content)
    shutil.copy(NOTEBOOK, tmp_path / "good.ipynb")
    result = run("lint", str(tmp_path))
    assert result.exit_code == 1 and "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if ": error: " in line]
    assert len(errors) == 1 and errors[0].startswith(f"{tmp_path / 'broken.ipynb'}: error: ")
    assert message in errors[0]
    assert f"{tmp_path / 'good.ipynb'}:cell 6:6:13: TAP101" in result.output


def test_syntax_error_in_a_cell_names_the_cell(tmp_path):
    path = write_notebook(tmp_path / "bad.ipynb", ("code", "import tensorflow as tf"), ("code", "tf.GradientTape(\ndef f(:"))
    (error,) = lint_file(str(path)).errors
    assert "cell 2, line" in error.message


def test_folders_yield_notebooks_but_not_checkpoints(tmp_path):
    (tmp_path / "nbs" / ".ipynb_checkpoints").mkdir(parents=True)
    shutil.copy(NOTEBOOK, tmp_path / "nbs" / "train.ipynb")
    shutil.copy(NOTEBOOK, tmp_path / "nbs" / ".ipynb_checkpoints" / "train-checkpoint.ipynb")
    result = run("lint", str(tmp_path))
    paths = {line.split(":cell")[0] for line in result.output.splitlines() if ":cell" in line}
    assert paths == {str(tmp_path / "nbs" / "train.ipynb")}


def test_suppressions_in_cells(tmp_path):
    source = json.loads(NOTEBOOK.read_text())
    source["cells"][5]["source"][5] = source["cells"][5]["source"][5].rstrip("\n") + "  # tapecheck: ignore[TAP101]\n"
    (tmp_path / "nb.ipynb").write_text(json.dumps(source))
    result = run("lint", str(tmp_path / "nb.ipynb"))
    assert "TAP101" not in result.output and "TAP301" in result.output


def test_program_keeps_a_line_map():
    program = notebook_program(NOTEBOOK.read_bytes())
    assert program.cell_line(1) == (2, 1)
    assert program.program_line(6, 6) is not None
    with pytest.raises(NotebookError):
        notebook_program(b"\xff\xfe\x00")

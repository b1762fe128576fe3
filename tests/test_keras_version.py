"""Keras 2 vs 3 is decided per file, from what that file's code does, or by `keras-version`.

Before issue 25 a mention of `TF_USE_LEGACY_KERAS` anywhere in the run (a comment in an
unrelated script) turned TAP302/TAP404 off for every file, so `lint .` and `lint file.py`
disagreed. Real files, the real CLI (click's runner, in this process: stdout and stderr
apart); no TensorFlow.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tapecheck.cli import main
from tapecheck.lint.parallel import keras2_reason

# Five TAP302 findings in Keras 3 (lr=, legacy's lr=, reset_states, two get_gradients); in Keras 2
# the Keras 2 messages of lines 4 and 9 remain (as tests/test_cli_ruff.py measures).
LOOP = """\
import tensorflow as tf

train_acc = tf.keras.metrics.SparseCategoricalAccuracy()
optimizer = tf.keras.optimizers.Adam(lr=1e-3)
old = tf.keras.optimizers.legacy.Adam(lr=1e-3)
for epoch in range(5):
    train_acc.reset_states()
g = old.get_gradients(1, 2)
h = optimizer.get_gradients(1, 2)
"""
KERAS3_LINES = [4, 5, 7, 8, 9]
KERAS2_LINES = [4, 9]

LEGACY = 'import os\n\nos.environ["TF_USE_LEGACY_KERAS"] = "1"\n'


def _lint(*args, cwd):
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(cwd)
        return CliRunner().invoke(main, ["lint", "--no-cache", *args], catch_exceptions=False)


def _tap302(result, name: str) -> list[int]:
    lines = []
    for line in result.stdout.splitlines():
        if " TAP302 " in line and line.split(":")[0].endswith(name):
            lines.append(int(line.split(":")[1]))
    return lines


@pytest.fixture()
def project(tmp_path):
    (tmp_path / "train.py").write_text(LOOP)
    (tmp_path / "notes.py").write_text("# run with TF_USE_LEGACY_KERAS=1 and tf_keras installed\nimport tf_keras_extras\n")
    return tmp_path


def test_a_mention_in_another_file_or_a_comment_changes_nothing(project):
    alone = _lint("--output-format", "concise", "train.py", cwd=project)
    everything = _lint("--output-format", "concise", ".", cwd=project)
    assert _tap302(alone, "train.py") == KERAS3_LINES, alone.stdout + alone.stderr
    assert _tap302(everything, "train.py") == KERAS3_LINES, everything.stdout
    assert "Keras 2" not in everything.stderr


def test_lint_dot_and_lint_file_agree_when_another_file_switches_to_keras2(project):
    (project / "legacy_setup.py").write_text(LEGACY)  # another script of the project: not train.py's code
    alone = _lint("--output-format", "concise", "train.py", cwd=project)
    everything = _lint("--output-format", "concise", ".", cwd=project)
    assert _tap302(alone, "train.py") == _tap302(everything, "train.py") == KERAS3_LINES
    assert "legacy_setup.py: note: read as Keras 2" in everything.stderr


def test_a_file_that_sets_the_switch_itself_is_keras2_and_says_why(project):
    (project / "train.py").write_text(LEGACY + LOOP)
    shift = LEGACY.count("\n")
    for args in (("train.py",), (".",)):
        result = _lint("--output-format", "concise", *args, cwd=project)
        assert _tap302(result, "train.py") == [line + shift for line in KERAS2_LINES], result.stdout
        assert ('train.py: note: read as Keras 2 (tf_keras), its findings as Keras 2 has them: '
                'line 3: `os.environ["TF_USE_LEGACY_KERAS"] = "1"`') in result.stderr
    document = json.loads(_lint("--output-format", "json", ".", cwd=project).stdout)
    assert document["keras2"] == [{"path": "train.py", "reason": 'line 3: `os.environ["TF_USE_LEGACY_KERAS"] = "1"`'}]


def test_the_configured_version_wins_and_json_says_so(project):
    (project / "pyproject.toml").write_text('[tool.tapecheck]\nkeras-version = "2"\n')
    result = _lint("--output-format", "json", "train.py", cwd=project)
    document = json.loads(result.stdout)
    assert sorted(f["line"] for f in document["findings"] if f["code"] == "TAP302") == KERAS2_LINES
    assert document["keras2"] == [{"path": "train.py", "reason": f'keras-version = "2" in {project / "pyproject.toml"}'}]
    (project / "train.py").write_text(LEGACY + LOOP)
    (project / "pyproject.toml").write_text('[tool.tapecheck]\nkeras-version = "3"\n')
    result = _lint("--output-format", "concise", "train.py", cwd=project)
    assert len(_tap302(result, "train.py")) == len(KERAS3_LINES)  # the configuration over the file
    assert "Keras 2" not in result.stderr


@pytest.mark.parametrize("source, why", [
    ("import tf_keras as keras\n", "line 1: `import tf_keras as keras`"),
    ("import os\nfrom tf_keras.layers import Dense\n", "line 2: `from tf_keras.layers import Dense`"),
    ("import os\nos.environ.setdefault('TF_USE_LEGACY_KERAS', '1')\n", "line 2: `os.environ.setdefault('TF_USE_LEGACY_KERAS', '1')`"),
    ("import os\nos.environ.update(TF_USE_LEGACY_KERAS='True')\n", "line 2: `os.environ.update(TF_USE_LEGACY_KERAS='True')`"),
    ("import os\nos.putenv('TF_USE_LEGACY_KERAS', '1')\n", "line 2: `os.putenv('TF_USE_LEGACY_KERAS', '1')`"),
    ("def test(monkeypatch):\n    monkeypatch.setenv('TF_USE_LEGACY_KERAS', '1')\n",
     "line 2: `monkeypatch.setenv('TF_USE_LEGACY_KERAS', '1')`"),
    ("import os\nos.environ['TF_USE_LEGACY_KERAS'] = flag\n", "line 2: `os.environ['TF_USE_LEGACY_KERAS'] = flag`"),
    # what does not make a file Keras 2
    ("# TF_USE_LEGACY_KERAS=1, import tf_keras\nimport tensorflow as tf\n", None),
    ('"""Set TF_USE_LEGACY_KERAS=1 to run on Keras 2."""\n', None),
    ("import os\nos.environ['TF_USE_LEGACY_KERAS'] = '0'\n", None),
    ("import os\nlegacy = os.environ.get('TF_USE_LEGACY_KERAS')\n", None),
    ("import tf_keras_extras\nfrom .tf_keras import x\n", None),
    ("import tf_keras\ndef f(:\n", None),  # not Python: nothing is decided (the file's error says so)
])
def test_what_a_file_does_decides(source, why):
    assert keras2_reason(source.encode(), "f.py") == why


def test_a_notebook_decides_from_its_cells():
    def notebook(*cells):
        return json.dumps({"cells": [{"cell_type": "code", "source": c, "metadata": {}, "outputs": []} for c in cells],
                           "metadata": {}, "nbformat": 4, "nbformat_minor": 5}).encode()

    assert keras2_reason(notebook("x = 1\n", "%env TF_USE_LEGACY_KERAS=1\n"), "n.ipynb") == \
        "cell 2, line 1: `%env TF_USE_LEGACY_KERAS=1`"
    assert keras2_reason(notebook("import os\n", "os.environ['TF_USE_LEGACY_KERAS'] = '1'\n"), "n.ipynb") == \
        "cell 2, line 1: `os.environ['TF_USE_LEGACY_KERAS'] = '1'`"
    assert keras2_reason(notebook("# needs TF_USE_LEGACY_KERAS\n", "x = 'import tf_keras'\n"), "n.ipynb") is None
    assert keras2_reason(notebook("%env TF_USE_LEGACY_KERAS=0\n"), "n.ipynb") is None

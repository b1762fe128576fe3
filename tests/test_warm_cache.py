"""Warm runs stat files first and read only what changed (issue 14): the real `tapecheck lint`
in fresh processes, with Python's audit hook counting which linted files it opens."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tapecheck.lint.cache import RACY_NS

LATE = """\
import tensorflow as tf
from models import Net

def step(model, x):
    with tf.GradientTape() as tape:
        out = model(x)
    loss = tf.reduce_mean(out)
    return tape.gradient(loss, model.trainable_variables)

net = Net()
with tf.GradientTape() as tape:
    y = net(x)
    loss = tf.reduce_mean(y)
grads = tape.gradient(loss, net.trainable_variables)
"""
MODELS = """\
import tensorflow as tf

class Net(tf.keras.Model):
    def __init__(self):
        super().__init__()
        self.drop = tf.keras.layers.Dropout(0.5)
"""

RUN = """\
import os, sys
root = os.path.abspath(sys.argv[1])
opened = []
def hook(event, args):
    if event == "open" and isinstance(args[0], str) and args[0].endswith((".py", ".ipynb")):
        path = os.path.abspath(args[0])
        if path.startswith(root + os.sep) and "{sep}.tapecheck_cache{sep}" not in path:
            opened.append(os.path.relpath(path, root))
sys.addaudithook(hook)
from tapecheck.cli import main
try:
    main(["lint", "--output-format", "concise", *sys.argv[2:]])
except SystemExit:
    pass
print("OPENED", " ".join(sorted(set(opened))))
""".replace("{sep}", os.sep.replace("\\", "\\\\"))


def lint(tree: Path, *args: str) -> tuple[list[str], set[str]]:
    """The report's lines and the linted files the process opened."""
    out = subprocess.run([sys.executable, "-c", RUN, str(tree), *args], cwd=tree, capture_output=True, text=True,
                         timeout=300)
    lines = out.stdout.splitlines()
    opened = [line for line in lines if line.startswith("OPENED")]
    assert opened, out.stdout + out.stderr
    return [line for line in lines if not line.startswith("OPENED")], set(opened[0].split()[1:])


def settle() -> None:
    """Let the files' timestamps age past the window in which an entry is not trusted."""
    time.sleep(RACY_NS / 1e9 + 0.1)


def make_tree(root: Path) -> Path:
    root.mkdir()
    (root / "pyproject.toml").write_text("[project]\nname = 'p'\n")  # the cache lives beside it
    (root / "train.py").write_text(LATE)
    (root / "models.py").write_text(MODELS)
    (root / "broken.py").write_text("def f(:\n")  # screened out, and not Python
    (root / "compat.py").write_text("import tf_keras\n")  # Keras 2 itself; the other files stay Keras 3
    (root / "metrics.py").write_text(
        "import tensorflow as tf\nm = tf.keras.metrics.Mean()\nm.reset_states()\nimport tf_keras\n"
    )
    for number in range(20):
        (root / f"plain{number}.py").write_text(f"x = {number}\n")
    return root


@pytest.fixture(scope="module")
def aged_trees(tmp_path_factory):
    """One fresh, untouched tree per test, all made first and aged by a single wait."""
    folder = tmp_path_factory.mktemp("trees")
    trees = [make_tree(folder / f"tree{n}") for n in range(8)]
    settle()
    return trees


@pytest.fixture
def tree(aged_trees, tmp_path):
    if aged_trees:
        return aged_trees.pop()
    root = make_tree(tmp_path / "tree")  # more tests than trees made: this one ages alone
    settle()
    return root


def test_a_warm_run_reads_no_unchanged_file_and_reports_the_same(tree):
    uncached, _ = lint(tree, "--no-cache")
    assert "broken.py: error: syntax error at line 1, column 7: invalid syntax" in uncached
    assert any("train.py:" in line and "TAP403" in line for line in uncached)  # Net's Dropout, from models.py
    assert not any("TAP302" in line for line in uncached)  # metrics.py imports tf_keras: Keras 2 has reset_states
    cold, cold_opened = lint(tree)
    assert cold == uncached and {"train.py", "models.py", "broken.py", "plain7.py"} <= cold_opened
    warm, warm_opened = lint(tree)
    assert warm == uncached
    # stat'ed, never opened; only a file with findings is read, for its suppression comments
    assert warm_opened == {"train.py"}, warm_opened


def test_a_changed_file_is_read_again_and_its_effects_follow(tree):
    lint(tree)
    (tree / "metrics.py").write_text(  # no longer Keras 2
        "import tensorflow as tf\nm = tf.keras.metrics.Mean()\nm.reset_states()\nimport os\n"
    )
    (tree / "models.py").write_text(MODELS.replace("tf.keras.layers.Dropout(0.5)", "tf.keras.layers.Dense(2)"))
    report, opened = lint(tree)
    assert {"metrics.py", "models.py"} <= opened and "plain3.py" not in opened
    assert any("metrics.py:3:1: TAP302" in line for line in report)
    assert not any("TAP403" in line for line in report)  # the model read models.py again
    assert report == lint(tree, "--no-cache")[0]


def test_an_edit_that_keeps_size_and_modification_time_is_still_seen(tree):
    lint(tree)
    path = tree / "plain5.py"
    before = path.stat()
    path.write_text("x = (\n")  # same size as "x = 5\n"
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))  # `cp -p`, an archive, a careful editor
    assert path.stat().st_size == before.st_size and path.stat().st_mtime_ns == before.st_mtime_ns
    report, opened = lint(tree)
    assert "plain5.py" in opened  # its change time moved: read again
    assert "plain5.py: error: syntax error at line 1, column 5: '(' was never closed" in report


def test_a_file_read_just_after_an_edit_is_read_again_next_time(tree):
    lint(tree)
    edited = tree / "plain1.py"
    edited.write_text("x = 11\n")  # edited, then linted within the timestamp window:
    soon = time.time() + 5  # its time a little ahead, so that a slow machine's lints stay within it
    os.utime(edited, (soon, soon))
    _, opened = lint(tree)
    assert "plain1.py" in opened
    _, opened = lint(tree)
    assert "plain1.py" in opened  # its entry was made too soon after the edit to be trusted
    aged = time.time() - 10  # as if edited long ago (another stat: read once more, then trusted)
    os.utime(edited, (aged, aged))
    settle()  # the change time the utime set ages too
    lint(tree)
    _, opened = lint(tree)
    assert opened == {"train.py"}  # the file with findings, for its suppression comments


def test_a_corrupt_stat_index_is_ignored_and_rewritten(tree):
    first, _ = lint(tree)
    indexes = list((tree / ".tapecheck_cache").rglob("stat-*.json"))
    assert len(indexes) == 1
    indexes[0].write_text("{not json")
    again, opened = lint(tree)
    assert again == first and {"models.py", "plain3.py"} <= opened
    _, opened = lint(tree)
    assert opened == {"train.py"}


def test_an_entry_without_the_imports_it_needs_is_refreshed_once(tree):
    import json

    lint(tree)
    (index,) = (tree / ".tapecheck_cache").rglob("stat-*.json")
    document = json.loads(index.read_text())
    for entry in document["entries"].values():
        entry[-1].pop("deps", None)  # as written before the imports were recorded
    index.write_text(json.dumps(document))
    _, opened = lint(tree)
    assert {"train.py", "models.py", "plain2.py"} <= opened
    _, opened = lint(tree)
    assert opened == {"train.py"}  # refreshed, not missed forever

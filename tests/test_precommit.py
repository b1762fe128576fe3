"""The pre-commit hook, for real: this project's hook installed by the `pre-commit` tool
into a temporary git repository refuses a commit with a bad loop and lets a good one in."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pre_commit", reason="pre-commit is not installed")

ROOT = Path(__file__).resolve().parents[1]
PRE_COMMIT = str(Path(sys.executable).with_name("pre-commit"))
BAD = """\
import tensorflow as tf

def step(model, x):
    with tf.GradientTape() as tape:
        out = model(x)
    loss = tf.reduce_mean(out)
    return tape.gradient(loss, model.trainable_variables)
"""
GOOD = BAD.replace("        out = model(x)\n    loss", "        out = model(x)\n        loss")


def git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=check, timeout=600)


def _hook_repository(tmp_path: Path) -> tuple[Path, str]:
    """This working tree's package and hook definition, committed to a fresh repository
    (pre-commit clones hook repositories at a revision)."""
    repo = tmp_path / "hook-repo"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "tapecheck", repo / "tapecheck", ignore=ignore)
    for name in ("pyproject.toml", "README.md", ".pre-commit-hooks.yaml"):
        shutil.copy(ROOT / name, repo / name)
    git(repo.parent, "init", "-q", str(repo))
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "hook")
    return repo, git(repo, "rev-parse", "HEAD").stdout.strip()


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("precommit")
    hook_repo, revision = _hook_repository(tmp_path)
    project = tmp_path / "project"
    git(tmp_path, "init", "-q", str(project))
    (project / ".pre-commit-config.yaml").write_text(
        f"repos:\n  - repo: {hook_repo}\n    rev: {revision}\n    hooks:\n      - id: tapecheck\n"
    )
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "cache"), "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    env.pop("NO_COLOR", None)
    subprocess.run([PRE_COMMIT, "install"], cwd=project, env=env, check=True, capture_output=True, timeout=120)
    # build the hook's environment once (pip installs tapecheck and its three dependencies)
    built = subprocess.run([PRE_COMMIT, "install-hooks"], cwd=project, env=env, capture_output=True, text=True, timeout=900)
    assert built.returncode == 0, built.stdout + built.stderr
    return project, env


def commit(project: Path, env: dict, name: str, content: str) -> subprocess.CompletedProcess:
    (project / name).write_text(content)
    subprocess.run(["git", "add", name, ".pre-commit-config.yaml"], cwd=project, env=env, check=True, timeout=60)
    return subprocess.run(["git", "commit", "-m", f"add {name}"], cwd=project, env=env, capture_output=True, text=True, timeout=600)


def test_a_commit_with_a_bad_loop_is_refused(project):
    path, env = project
    result = commit(path, env, "train_bad.py", BAD)
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "tapecheck" in output and "Failed" in output
    assert "train_bad.py:7:12: TAP101" in output
    assert git(path, "log", "--oneline", check=False).stdout.strip() == ""  # nothing was committed
    subprocess.run(["git", "rm", "-q", "--cached", "train_bad.py"], cwd=path, env=env, check=True)
    (path / "train_bad.py").unlink()


def test_a_commit_with_a_good_loop_passes(project):
    path, env = project
    result = commit(path, env, "train_good.py", GOOD)
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"tapecheck\.+Passed", result.stdout + result.stderr)
    assert "add train_good.py" in git(path, "log", "--oneline").stdout


def test_notebooks_are_checked_too(project):
    path, env = project
    notebook = (ROOT / "tests" / "data" / "regression_loop.ipynb").read_text()
    result = commit(path, env, "explore.ipynb", notebook)
    assert result.returncode != 0
    assert "explore.ipynb:cell 6:6:13: TAP101" in result.stdout + result.stderr

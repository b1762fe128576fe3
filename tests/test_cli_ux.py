"""What a new user brings from ruff to `tapecheck lint` (issue 27), through the real command on
real files: paths as ruff prints them, `--diff` that `git apply` takes, repeated selections,
`-o` into new folders, exit 2 for input/output errors, an empty folder's warning, and
`--show-fixes` as hunks. No TensorFlow is imported here."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tapecheck.cli import main

ROOT = Path(__file__).resolve().parents[1]
GAN = (ROOT / "fixtures" / "bad" / "gan_one_tape.py").read_text()  # TAP201, a safe fix in two places
METRIC = (ROOT / "fixtures" / "bad" / "metric_reset_wrong_level.py").read_text()  # TAP301, an unsafe fix
LR = """\
import tensorflow as tf

def step(model, x):
    with tf.GradientTape() as tape:
        out = model(x)
    loss = tf.reduce_mean(out)
    grads = tape.gradient(loss, model.trainable_variables)
    opt = tf.keras.optimizers.SGD(lr=0.1)
    return grads, opt
"""  # TAP101 (no fix) and TAP302 (a safe fix)


def run(*args):
    return CliRunner().invoke(main, ["lint", "--no-cache", *args], catch_exceptions=False)


def tapecheck(*args, cwd):
    """The installed command as a user runs it, in its own process."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "tapecheck", "lint", "--no-cache", *args], cwd=cwd,
                          capture_output=True, text=True, env=env, timeout=120)


@pytest.fixture
def project(tmp_path, monkeypatch):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "gan.py").write_text(GAN)
    (tmp_path / "train.py").write_text(METRIC)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def codes(output: str) -> list[tuple[str, str]]:
    return [(line.split(":")[0], line.split()[1]) for line in output.splitlines() if ": TAP" in line]


def test_paths_are_printed_as_ruff_prints_them(project):
    expected = [("sub/gan.py", "TAP201"), ("train.py", "TAP301")]
    for named in ((), (".",), ("./",), ("./sub", "./train.py")):
        assert codes(run("--output-format", "concise", *named).output) == expected, named
    github = run("--output-format", "github", ".").output
    assert ",file=sub/gan.py," in github and ",file=train.py," in github and "./" not in github
    # an absolute path under the working folder: annotations need it relative to the checkout
    github = run("--output-format", "github", str(project)).output
    assert ",file=sub/gan.py," in github and str(project) not in github


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
@pytest.mark.parametrize("how", ["dot", "nothing", "absolute", "subfolder"])
def test_diff_applies_with_git_apply_from_the_folder_it_ran_in(project, how):
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run(git + ["init", "-q"], cwd=project, check=True)
    subprocess.run(git + ["add", "."], cwd=project, check=True)
    subprocess.run(git + ["commit", "-qm", "start"], cwd=project, check=True)
    cwd = project / "sub" if how == "subfolder" else project
    args = {"dot": ["."], "nothing": [], "absolute": [str(project)], "subfolder": ["."]}[how]
    diff = tapecheck("--diff", "--unsafe-fixes", *args, cwd=cwd)
    assert diff.returncode == 1 and diff.stdout.startswith("--- a/")
    assert "a/./" not in diff.stdout and "a//" not in diff.stdout
    check = subprocess.run(["git", "apply", "--check", "-"], input=diff.stdout, cwd=cwd,
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    subprocess.run(["git", "apply", "-"], input=diff.stdout, cwd=cwd, check=True, text=True)
    assert "persistent=True" in (project / "sub" / "gan.py").read_text()
    if how != "subfolder":
        assert "    train_loss.reset_state()\n    for xb" in (project / "train.py").read_text()
    assert tapecheck("--diff", "--unsafe-fixes", *args, cwd=cwd).stdout == ""  # nothing left to fix


def test_repeated_select_ignore_and_extend_select_add_up(project):
    (project / "lr.py").write_text(LR)

    def found(*args):
        return sorted({code for _, code in codes(run("--output-format", "concise", *args).output)})

    assert found() == ["TAP101", "TAP201", "TAP301", "TAP302"]
    assert found("--select", "TAP201", "--select", "TAP301") == ["TAP201", "TAP301"]
    assert found("--select", "TAP201,TAP302", "--select", "TAP301") == ["TAP201", "TAP301", "TAP302"]
    assert found("--ignore", "TAP201", "--ignore", "TAP301,TAP101") == ["TAP302"]
    assert found("--select", "TAP1", "--extend-select", "TAP201", "--extend-select", "TAP3") == [
        "TAP101", "TAP201", "TAP301", "TAP302"]
    assert run("--select", "TAP201", "--select", "NOPE1").exit_code == 2  # each one is checked


def test_output_file_makes_its_folders_and_io_errors_exit_2(project):
    result = run("-o", "reports/lint/today.txt", ".")
    assert result.exit_code == 1  # the findings' code: the report was written
    written = (project / "reports" / "lint" / "today.txt").read_text()
    assert "sub/gan.py:30:18: TAP201" in written and written.endswith("2 findings in 2 files.\n")
    (project / "blocked").write_text("a file, not a folder\n")
    blocked = run("-o", "blocked/report.txt", ".")
    assert blocked.exit_code == 2 and "blocked/report.txt" in blocked.output and "Traceback" not in blocked.output
    assert (project / "blocked").read_text() == "a file, not a folder\n"  # nothing of the user's is lost
    assert run("-o", "sub", ".").exit_code == 2  # a folder


def test_an_empty_folder_warns_like_ruff(project):
    (project / "empty").mkdir()
    result = tapecheck("empty", cwd=project)
    assert result.returncode == 0 and result.stdout == ""
    assert result.stderr == "warning: No Python files found under the given path(s)\n"
    as_json = tapecheck("--output-format", "json", "empty", cwd=project)
    assert '"files_checked": 0' in as_json.stdout  # a tool reading the report still gets one


def test_statistics_end_with_ruffs_closing_lines(project):
    lines = run("--statistics", ".").output.splitlines()
    assert lines == [
        "1  TAP201  [*] tape-reused",
        "1  TAP301      metric-never-reset",
        "[*] 1 fixable with the `--fix` option (1 hidden fix can be enabled with the `--unsafe-fixes` option).",
        "2 findings in 2 files.",
    ]


def test_show_fixes_shows_the_changed_lines_with_context_only(project):
    shown = run("--show-fixes", "sub/gan.py").output
    preview = shown[shown.index("i Safe fix"):].split("\n\n")[0].splitlines()
    assert preview[1:] == [
        "  19 19 | def train_step(real):",
        "  20 20 |     noise = tf.random.normal([real.shape[0], LATENT])",
        "  21    |-    with tf.GradientTape() as tape:",
        "     21 |+    with tf.GradientTape(persistent=True) as tape:",
        "  22 22 |         fake = generator(noise, training=True)",
        "  23 23 |         real_logits = discriminator(real, training=True)",
        "        | ...",  # lines 24-28 are unchanged: not shown
        "  29 29 |     gen_grads = tape.gradient(gen_loss, generator.trainable_variables)",
        "  30 30 |     disc_grads = tape.gradient(disc_loss, discriminator.trainable_variables)  # expect: TAP201",
        "     31 |+    del tape",
        "  31 32 |     gen_opt.apply_gradients(zip(gen_grads, generator.trainable_variables))",
        "  32 33 |     disc_opt.apply_gradients(zip(disc_grads, discriminator.trainable_variables))",
    ]
    assert (project / "sub" / "gan.py").read_text() == GAN  # a preview writes nothing


def test_add_noqa_with_a_notebook_present_exits_0_when_it_did_its_work(project):
    (project / "nb.ipynb").write_bytes((ROOT / "tests" / "data" / "regression_loop.ipynb").read_bytes())
    before = (project / "nb.ipynb").read_bytes()
    result = tapecheck("--add-noqa", ".", cwd=project)
    assert result.returncode == 0, result.stderr
    assert "nb.ipynb: warning: --add-noqa leaves notebooks alone" in result.stderr
    assert "Added 2 noqa directives." in result.stderr
    assert (project / "nb.ipynb").read_bytes() == before
    assert "# noqa: TAP201" in (project / "sub" / "gan.py").read_text()
    assert tapecheck("sub/gan.py", "train.py", cwd=project).returncode == 0  # each finding now has its noqa

"""`tapecheck lint` end to end: output format, exit status, stdin, discovery, bad input."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tapecheck import __version__
from tapecheck.cli import main

ROOT = Path(__file__).resolve().parents[1]
LATE_TARGET = """\
import tensorflow as tf

def step(model, x):
    with tf.GradientTape() as tape:
        out = model(x)
    loss = tf.reduce_mean(out)
    return tape.gradient(loss, model.trainable_variables)
"""
CLEAN = """\
import tensorflow as tf

def step(model, x):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(model(x))
    return tape.gradient(loss, model.trainable_variables)
"""


def run(*args, input=None):
    return CliRunner().invoke(main, list(args), input=input, catch_exceptions=False)


def test_version():
    result = run("--version")
    assert result.exit_code == 0 and __version__ in result.output


def test_clean_file_exits_zero(tmp_path):
    (tmp_path / "ok.py").write_text(CLEAN)
    result = run("lint", str(tmp_path / "ok.py"))
    assert result.exit_code == 0
    assert result.output == "0 findings in 1 file.\n"


def test_finding_line_format_and_exit_one(tmp_path):
    path = tmp_path / "bad.py"
    path.write_text(LATE_TARGET)
    result = run("lint", "--output-format", "concise", str(path))
    assert result.exit_code == 1
    first, summary = result.output.splitlines()
    assert first.startswith(f"{path}:7:12: TAP101 `loss` is computed at line 6, after")
    assert summary == "1 finding in 1 file."


def test_findings_sorted_by_path_then_position(tmp_path):
    (tmp_path / "b.py").write_text(LATE_TARGET)
    (tmp_path / "a.py").write_text(LATE_TARGET + "\n" + LATE_TARGET.replace("def step", "def step2").split("\n", 2)[2])
    result = run("lint", str(tmp_path))
    lines = [line for line in result.output.splitlines() if ": TAP" in line]
    assert [Path(line.split(":")[0]).name for line in lines] == ["a.py", "a.py", "b.py"]
    a_lines = [int(line.split(":")[1]) for line in lines[:2]]
    assert a_lines == sorted(a_lines) and a_lines[0] < a_lines[1]


def test_usage_errors_exit_two():
    assert run("lint", "--no-such-flag", "x.py").exit_code == 2
    assert run("lint", "--output-format", "nonsense", "x.py").exit_code == 2


def test_stdin_with_filename():
    result = run("lint", "-", "--stdin-filename", "train.py", input=LATE_TARGET)
    assert result.exit_code == 1
    assert result.output.startswith("train.py:7:12: TAP101")


def test_bad_files_are_reported_and_the_rest_is_linted(tmp_path):
    (tmp_path / "broken.py").write_text("import tensorflow as tf\nwith tf.GradientTape() as t:\n  def f(:\n    pass\n")
    (tmp_path / "latin.py").write_bytes(b"# GradientTape\nx = '\xe9t\xe9'\n")
    (tmp_path / "blob.py").write_bytes(b"\x00\x01GradientTape\x00")
    (tmp_path / "real.py").write_text(LATE_TARGET)
    result = run("lint", str(tmp_path), str(tmp_path / "missing.py"))
    assert result.exit_code == 1
    out = result.output
    assert "Traceback" not in out
    assert f"{tmp_path / 'broken.py'}: error: syntax error at line 3" in out
    assert f"{tmp_path / 'latin.py'}: error: not valid utf-8 (byte 20, line 2)" in out
    assert f"{tmp_path / 'blob.py'}: error: binary file" in out
    assert f"{tmp_path / 'missing.py'}: error: no such file or directory" in out
    assert f"{tmp_path / 'real.py'}:7:12: TAP101" in out
    assert out.rstrip().endswith("1 finding in 4 files; 4 files could not be linted.")


def test_files_no_rule_looks_at_are_still_checked_by_pythons_parser(tmp_path):
    # the byte screen skips libcst for a file that mentions nothing the rules need; Python's
    # own parser still runs, so a broken file is reported rather than silently clean
    (tmp_path / "unrelated.py").write_text("def f(:\n")
    (tmp_path / "fine.py").write_text("def f():\n    return 1\n")
    result = run("lint", str(tmp_path))
    assert result.exit_code == 1
    assert result.output == (
        f"{tmp_path / 'unrelated.py'}: error: syntax error at line 1, column 7: invalid syntax\n"
        "0 findings in 2 files; 1 file could not be linted.\n"
    )


def test_discovery_skips_vcs_venvs_build_and_gitignored(tmp_path):
    for folder in (".git", "venv", "build", "__pycache__", "ignored", "kept"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "loop.py").write_text(LATE_TARGET)
    (tmp_path / "env").mkdir()
    (tmp_path / "env" / "pyvenv.cfg").write_text("home = /usr\n")
    (tmp_path / "env" / "loop.py").write_text(LATE_TARGET)
    (tmp_path / ".gitignore").write_text("ignored/\n*_generated.py\n")
    (tmp_path / "kept" / "x_generated.py").write_text(LATE_TARGET)
    result = run("lint", str(tmp_path))
    flagged = {Path(line.split(":")[0]).relative_to(tmp_path).as_posix() for line in result.output.splitlines() if ": TAP" in line}
    assert flagged == {"kept/loop.py"}


def test_a_file_named_explicitly_is_linted_even_if_ignored(tmp_path):
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "loop.py").write_text(LATE_TARGET)
    assert run("lint", str(tmp_path / "build" / "loop.py")).exit_code == 1


def test_rule_and_rules_commands():
    page = run("rule", "TAP101")
    assert page.exit_code == 0 and page.output.startswith("# TAP101 target-outside-tape")
    assert run("rule", "target-outside-tape").output == page.output
    assert run("rule", "TAP999").exit_code == 2
    listing = run("rules").output
    assert "TAP201  tape-reused" in listing


def test_the_linter_never_imports_tensorflow_numpy_or_the_linted_code(tmp_path):
    marker = tmp_path / "imported"
    (tmp_path / "user_code.py").write_text(f"open({str(marker)!r}, 'w').close()\n" + LATE_TARGET)
    code = (
        "import sys\n"
        "from tapecheck.cli import main\n"
        "try:\n"
        f"    main(['lint', {str(ROOT / 'fixtures')!r}, {str(tmp_path)!r}])\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = sorted(m for m in ('tensorflow', 'keras', 'numpy', 'user_code') if m in sys.modules)\n"
        "print('HEAVY', heavy)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert "HEAVY []" in result.stdout, result.stdout + result.stderr
    assert "TAP101" in result.stdout  # it did lint
    assert not marker.exists()


def test_python_dash_m_and_console_script_agree(tmp_path):
    path = tmp_path / "bad.py"
    path.write_text(LATE_TARGET)
    module = subprocess.run([sys.executable, "-m", "tapecheck", "lint", str(path)], capture_output=True, text=True)
    script = Path(sys.executable).with_name("tapecheck")
    if not script.exists():
        pytest.skip("console script not installed next to this interpreter")
    console = subprocess.run([str(script), "lint", str(path)], capture_output=True, text=True)
    assert module.returncode == console.returncode == 1
    assert module.stdout == console.stdout


def test_help_lists_every_command_without_importing_tensorflow_or_libcst():
    code = (
        "import sys\n"
        "from tapecheck.cli import main\n"
        "try:\n"
        "    main(['--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print('HEAVY', sorted(m for m in ('tensorflow', 'libcst', 'numpy') if m in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert "HEAVY []" in result.stdout, result.stdout + result.stderr
    for name in ("lint", "rules", "rule", "probe", "reference", "align"):
        assert f"\n  {name} " in result.stdout

"""`[tool.tapecheck]` in real pyproject.toml files, through the real CLI."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tapecheck.cli import main

# TAP101 at line 7 and TAP302 (`lr=`) at line 8
TWO_FINDINGS = """\
import tensorflow as tf

def step(model, x):
    with tf.GradientTape() as tape:
        out = model(x)
    loss = tf.reduce_mean(out)
    grads = tape.gradient(loss, model.trainable_variables)
    opt = tf.keras.optimizers.SGD(lr=0.1)
    return grads, opt
"""


def run(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def codes(output: str, root: Path) -> set[tuple[str, str]]:
    found = set()
    for line in output.splitlines():
        match = re.match(r"(.+?):\d+:\d+: (TAP\d{3})", line)
        if match:
            found.add((Path(match.group(1)).relative_to(root).as_posix(), match.group(2)))
    return found


def project(tmp_path: Path, config: str, files=("train.py",)) -> Path:
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'demo'\n\n[tool.tapecheck]\n" + config)
    for name in files:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(TWO_FINDINGS)
    return tmp_path


def test_no_configuration_runs_every_rule(tmp_path):
    (tmp_path / "train.py").write_text(TWO_FINDINGS)
    assert codes(run("lint", str(tmp_path)).output, tmp_path) == {("train.py", "TAP101"), ("train.py", "TAP302")}


def test_select_and_ignore(tmp_path):
    project(tmp_path, 'select = ["TAP1", "TAP302"]\nignore = ["TAP101"]\n')
    assert codes(run("lint", str(tmp_path)).output, tmp_path) == {("train.py", "TAP302")}


def test_select_all_and_prefixes(tmp_path):
    project(tmp_path, 'select = ["ALL"]\nignore = ["TAP3"]\n')
    assert codes(run("lint", str(tmp_path)).output, tmp_path) == {("train.py", "TAP101")}


def test_deselected_rules_do_not_run_so_their_screens_parse_nothing(tmp_path):
    # Only TAP302's screen admits this file (`reset_states`), and it does not parse: a file
    # tapecheck parses is reported broken, one no selected rule looks at is not opened by libcst
    # (Python's own parser still reports it broken: every unparseable file is reported).
    (tmp_path / "broken.py").write_text("metric.reset_states()\ndef broken(:\n")
    everything = run("lint", "--no-cache", str(tmp_path))
    assert "syntax error" in everything.output
    project(tmp_path, 'ignore = ["TAP302"]\n', files=())
    code = (
        "import sys\nfrom tapecheck.cli import main\n"
        "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
        "print('LIBCST', 'libcst' in sys.modules)\n"
    )
    for args in (["lint", "--no-cache", "."], ["lint", "--no-cache", "--select", "TAP101", "broken.py"]):
        out = subprocess.run([sys.executable, "-c", code, *args], cwd=tmp_path, capture_output=True, text=True,
                             timeout=120).stdout
        assert "broken.py: error: syntax error at line 2" in out and "LIBCST False" in out, out


def test_config_is_found_walking_up_from_the_linted_path(tmp_path):
    project(tmp_path, 'ignore = ["TAP302"]\n', files=("src/pkg/train.py",))
    result = run("lint", str(tmp_path / "src" / "pkg" / "train.py"))
    assert codes(result.output, tmp_path) == {("src/pkg/train.py", "TAP101")}


def test_nearest_configuration_wins_and_others_are_skipped(tmp_path):
    project(tmp_path, 'ignore = ["TAP302"]\n', files=("top.py", "sub/inner.py", "plain/other.py"))
    (tmp_path / "sub" / "pyproject.toml").write_text("[tool.tapecheck]\nignore = ['TAP101']\n")
    (tmp_path / "plain" / "pyproject.toml").write_text("[project]\nname = 'no-tapecheck-table'\n")
    assert codes(run("lint", str(tmp_path)).output, tmp_path) == {
        ("top.py", "TAP101"), ("sub/inner.py", "TAP302"), ("plain/other.py", "TAP101"),
    }


def test_per_file_ignores(tmp_path):
    project(tmp_path, '[tool.tapecheck.per-file-ignores]\n"legacy/*" = ["TAP302"]\n"*_test.py" = ["TAP1"]\n',
            files=("legacy/old.py", "new.py", "pkg/step_test.py"))
    assert codes(run("lint", str(tmp_path)).output, tmp_path) == {
        ("legacy/old.py", "TAP101"), ("new.py", "TAP101"), ("new.py", "TAP302"), ("pkg/step_test.py", "TAP302"),
    }


def test_extend_exclude_adds_to_the_default_skips(tmp_path):
    project(tmp_path, 'extend-exclude = ["generated/", "scratch_*.py"]\n',
            files=("generated/a.py", "scratch_1.py", "kept.py", "build/b.py"))
    assert {path for path, _ in codes(run("lint", str(tmp_path)).output, tmp_path)} == {"kept.py"}


def test_exclude_replaces_the_default_skips(tmp_path):
    project(tmp_path, 'exclude = ["experiments/"]\n', files=("experiments/a.py", "build/b.py", "kept.py"))
    assert {path for path, _ in codes(run("lint", str(tmp_path)).output, tmp_path)} == {"build/b.py", "kept.py"}


def test_named_files_are_linted_unless_force_exclude(tmp_path):
    project(tmp_path, 'extend-exclude = ["generated/"]\n', files=("generated/a.py",))
    target = str(tmp_path / "generated" / "a.py")
    assert codes(run("lint", target).output, tmp_path)
    result = run("lint", "--force-exclude", target)
    assert result.exit_code == 0 and result.output == "warning: No Python files found under the given path(s)\n"


def test_command_line_overrides(tmp_path):
    project(tmp_path, 'select = ["TAP302"]\n')
    assert codes(run("lint", "--select", "TAP101", str(tmp_path)).output, tmp_path) == {("train.py", "TAP101")}
    assert codes(run("lint", "--ignore", "TAP302", str(tmp_path)).output, tmp_path) == set()


def test_explicit_config_file_replaces_the_search(tmp_path):
    project(tmp_path, 'select = ["TAP302"]\n')
    other = tmp_path / "ci" / "pyproject.toml"
    other.parent.mkdir()
    other.write_text("[tool.tapecheck]\nselect = ['TAP101']\n")
    assert codes(run("lint", "--config", str(other), str(tmp_path)).output, tmp_path) == {("train.py", "TAP101")}


@pytest.mark.parametrize(
    "config,message",
    [
        ('selct = ["TAP101"]\n', "[tool.tapecheck] unknown key 'selct' (known: select, extend-select, ignore, per-file-ignores, exclude, extend-exclude, keras-version, file-time-budget)"),
        ('select = ["TAP999"]\n', "[tool.tapecheck] select: unknown rule code 'TAP999'"),
        ('ignore = "TAP101"\nselect = 3\n', "[tool.tapecheck] select: expected a list of rule codes"),
        ('[tool.tapecheck.per-file-ignores]\n"a.py" = ["E501"]\n', "unknown rule code 'E501'"),
        ('exclude = "build"\n', "exclude: expected a list of path patterns"),
        ("select = [\n", "invalid TOML"),
        ('extend-exclude = ["!"]\n', "extend-exclude: Invalid git pattern: '!'"),
    ],
)
def test_bad_configuration_is_a_one_line_error_naming_the_file(tmp_path, config, message):
    project(tmp_path, config)
    result = CliRunner().invoke(main, ["lint", str(tmp_path)])
    assert result.exit_code == 2
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert result.output.count("\n") == 1
    assert result.output.startswith(f"tapecheck: error: {tmp_path / 'pyproject.toml'}: ")
    assert message in result.output


def test_bad_flags_and_missing_config_file_are_errors(tmp_path):
    (tmp_path / "train.py").write_text(TWO_FINDINGS)
    result = run("lint", "--select", "TAP1O1", str(tmp_path))
    assert result.exit_code == 2 and "--select: unknown rule code 'TAP1O1'" in result.output
    result = run("lint", "--config", str(tmp_path / "nope.toml"), str(tmp_path))
    assert result.exit_code == 2 and "no such configuration file" in result.output
    (tmp_path / "empty.toml").write_text("[tool.other]\n")
    result = run("lint", "--config", str(tmp_path / "empty.toml"), str(tmp_path))
    assert result.exit_code == 2 and "has no [tool.tapecheck] table" in result.output


def test_relative_paths_from_the_project_folder(tmp_path, monkeypatch):
    project(tmp_path, '[tool.tapecheck.per-file-ignores]\n"train.py" = ["TAP101"]\n')
    monkeypatch.chdir(tmp_path)
    output = "".join(f"{tmp_path}{os.sep}{line}\n" for line in run("lint", ".").output.splitlines())
    assert codes(output, tmp_path) == {("train.py", "TAP302")}

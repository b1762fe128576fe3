"""Output formats: text (colors only on a terminal), json (its schema), sarif (the official
SARIF 2.1.0 schema), github annotations, --statistics and --exit-zero."""

from __future__ import annotations

import json
import re
import os
import pty
import select
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

from tapecheck.cli import main
from tapecheck.lint.report_schema import SCHEMA

DATA = Path(__file__).parent / "data"
SARIF_SCHEMA = json.loads((DATA / "sarif-schema-2.1.0.json").read_text())
TAPECHECK = str(Path(sys.executable).with_name("tapecheck"))
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


@pytest.fixture
def tree(tmp_path, monkeypatch):
    """A project with a bad script, a notebook, a broken file and an unused suppression."""
    (tmp_path / "train.py").write_text(BAD)
    shutil.copy(DATA / "regression_loop.ipynb", tmp_path / "nb.ipynb")
    (tmp_path / "broken.py").write_text("import tensorflow as tf\ntf.GradientTape(\n")
    (tmp_path / "quiet.py").write_text("x = 1  # tapecheck: ignore[TAP101]\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_text_is_plain_when_not_a_terminal(tree):
    result = run("lint", ".")
    assert "\x1b[" not in result.output
    assert "train.py:7:13: TAP101 " in result.output
    assert "train.py:8:11: TAP302 [*] Keras 3 optimizers reject `lr=`" in result.output
    assert "[*] 1 fixable with the `--fix` option." in result.output
    assert "nb.ipynb:cell 8:4:24: TAP301 `train_loss`" in result.output  # notebooks: no fixes


def test_unsafe_fixes_are_counted_apart(tree):
    (tree / "epochs.py").write_text(
        "import tensorflow as tf\nacc = tf.keras.metrics.Mean()\nfor epoch in range(3):\n"
        "    for x in data:\n        acc.update_state(x)\n    print(acc.result())\n"
    )
    assert (
        "[*] 1 fixable with the `--fix` option (1 hidden fix can be enabled with the `--unsafe-fixes` option)."
        in run("lint", "train.py", "epochs.py").output
    )
    only_hidden = run("lint", "epochs.py").output.splitlines()
    assert only_hidden[-2:] == [
        "No fixes available (1 hidden fix can be enabled with the `--unsafe-fixes` option).", "1 finding in 1 file.",
    ]
    shown = run("lint", "--unsafe-fixes", "train.py", "epochs.py").output
    assert "epochs.py:6:11: TAP301 [*] `acc`" in shown and "[*] 2 fixable with the `--fix` option." in shown
    assert "hidden" not in shown and "fixable" not in run("lint", "nb.ipynb").output  # no "0 fixable" line


def _run_in_terminal(args, env) -> str:
    leader, follower = pty.openpty()
    process = subprocess.Popen([TAPECHECK, *args], stdout=follower, stderr=follower, env=env, cwd=os.getcwd())
    os.close(follower)
    chunks = []
    while True:
        ready, _, _ = select.select([leader], [], [], 30)
        if not ready:
            break
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal closed: the process is done
            break
        if not chunk:
            break
        chunks.append(chunk)
    process.wait(timeout=60)
    os.close(leader)
    return b"".join(chunks).decode()


def test_colors_on_a_terminal_and_no_color_honoured(tree):
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    colored = _run_in_terminal(["lint", "train.py"], env)
    assert "\x1b[" in colored and "TAP101" in colored
    plain = _run_in_terminal(["lint", "train.py"], {**env, "NO_COLOR": "1"})
    assert "\x1b[" not in plain and "train.py:7:13: TAP101" in plain


def test_json_follows_its_schema(tree):
    result = run("lint", "--output-format", "json", "--report-unused-suppressions", ".")
    assert result.exit_code == 1
    document = json.loads(result.output)
    jsonschema.validate(document, SCHEMA)
    by_code = {(f["path"], f["code"]): f for f in document["findings"]}
    lr = by_code[("train.py", "TAP302")]
    assert (lr["line"], lr["col"], lr["cell"], lr["name"], lr["origin"]) == (8, 11, None, "removed-keras-api", "lint")
    assert lr["fix"] == {
        "title": "Pass `learning_rate=`", "applicability": "safe",
        "edits": [{"line": 8, "col": 35, "end_line": 8, "end_col": 37, "text": "learning_rate"}],
    }
    # what the message says, for tools: the API, and what a Keras 2 project is told instead
    assert lr["details"]["api"] == "lr" and "Keras 2 optimizers" in lr["details"]["keras2"]
    assert by_code[("nb.ipynb", "TAP101")]["cell"] == 6
    assert document["errors"] == [{"path": "broken.py", "message": document["errors"][0]["message"]}]
    assert document["unused_suppressions"][0]["path"] == "quiet.py"
    assert document["summary"] == {"files_checked": 4, "findings": 4, "fixed": 0, "errors": 1, "unused_suppressions": 1}


def test_json_schema_rejects_what_it_should():
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"version": 1, "findings": []}, SCHEMA)


def test_sarif_is_valid_against_the_official_schema(tree):
    result = run("lint", "--output-format", "sarif", "--report-unused-suppressions", ".")
    document = json.loads(result.output)
    jsonschema.Draft4Validator(SARIF_SCHEMA).validate(document)
    (sarif_run,) = document["runs"]
    rules = sarif_run["tool"]["driver"]["rules"]
    results = sarif_run["results"]
    for found in results:
        assert rules[found["ruleIndex"]]["id"] == found["ruleId"]
    tap302 = next(r for r in results if r["ruleId"] == "TAP302")
    location = tap302["locations"][0]["physicalLocation"]
    assert location["artifactLocation"] == {"uri": "train.py", "uriBaseId": "%SRCROOT%"}
    assert location["region"] == {"startLine": 8, "startColumn": 11}
    notebook = next(r for r in results if r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "nb.ipynb")
    assert notebook["properties"]["cell"] in (6, 8) and notebook["message"]["text"].startswith("cell ")
    assert any(r["ruleId"] == "unused-suppression" and r["level"] == "warning" for r in results)
    (invocation,) = sarif_run["invocations"]
    assert invocation["executionSuccessful"] is False
    assert "broken.py" in invocation["toolExecutionNotifications"][0]["message"]["text"]


def test_sarif_files_outside_the_working_folder_get_absolute_uris(tree, tmp_path_factory):
    elsewhere = tmp_path_factory.mktemp("elsewhere") / "far.py"
    elsewhere.write_text(BAD)
    document = json.loads(run("lint", "--output-format", "sarif", str(elsewhere)).output)
    jsonschema.Draft4Validator(SARIF_SCHEMA).validate(document)
    artifact = document["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]
    assert artifact == {"uri": elsewhere.as_uri()}


def test_sarif_schema_catches_a_broken_document(tree):
    document = json.loads(run("lint", "--output-format", "sarif", ".").output)
    document["runs"][0]["results"][0]["level"] = "fatal"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft4Validator(SARIF_SCHEMA).validate(document)


def test_github_annotations(tree):
    (tree / "odd, name.py").write_text(BAD.replace("model(x)", "model(x)  # 100%"))
    lines = run("lint", "--output-format", "github", ".").output.splitlines()
    # as ruff: no `./`, the end of the flagged word, the hint under the message
    assert any(line.startswith("::error title=tapecheck (TAP302 removed-keras-api),file=train.py,line=8,col=11,endLine=8,endColumn=34::Keras 3 optimizers reject `lr=`: ValueError: Argument(s) not recognized") and line.endswith("%0Ahelp: Pass `learning_rate=` instead.") for line in lines)
    assert any(line.startswith("::error title=tapecheck (TAP101 target-outside-tape),file=odd%2C name.py,line=7,col=13,endLine=7,endColumn=26::") for line in lines)
    # a syntax error: at its line and column, not on the file as a whole
    assert any(re.match(r"::error title=tapecheck error,file=broken.py,line=\d+,col=\d+,endLine=\d+,endColumn=\d+::syntax error", line) for line in lines)
    notebook = [line for line in lines if "nb.ipynb" in line]
    # at the line of the .ipynb file (tests/test_cli_ruff.py checks where), the cell named in the message
    assert notebook and all("line=" in line.split("::")[1] and "::cell " in line for line in notebook)


def test_statistics(tree):
    result = run("lint", "--statistics", ".")
    assert "broken.py: error: syntax error" in result.stderr
    assert result.stdout.splitlines() == [
        "2  TAP101      target-outside-tape",
        "1  TAP301      metric-never-reset",
        "1  TAP302  [*] removed-keras-api",
        "[*] 1 fixable with the `--fix` option.",  # ruff's closing lines follow the table
        "4 findings in 4 files; 1 file could not be linted.",
    ]
    assert run("lint", "--statistics", "-q", ".").stdout.splitlines() == result.stdout.splitlines()[:3]
    assert result.exit_code == 1
    table = json.loads(run("lint", "--statistics", "--output-format", "json", ".").stdout)
    assert table[0] == {"code": "TAP101", "name": "target-outside-tape", "count": 2, "fixable": 0}


def test_exit_zero(tree):
    assert run("lint", ".").exit_code == 1
    result = run("lint", "--exit-zero", ".")
    assert result.exit_code == 0 and "TAP101" in result.output

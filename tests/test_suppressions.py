"""`# tapecheck: ignore[...]` and `# noqa: ...` on lint and probe findings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tapecheck.cli import main
from tapecheck.findings import Finding
from tapecheck.lint import lint_file
from tapecheck.lint.suppressions import apply_suppressions, parse_comment, split

LOOP = """\
import tensorflow as tf

def step(model, x):
    with tf.GradientTape() as tape:
        out = model(x)
    loss = tf.reduce_mean(out)
    grads = tape.gradient(loss, model.trainable_variables){comment}
    opt = tf.keras.optimizers.SGD(lr=0.1){comment2}
    return grads, opt
"""


def run(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def codes_for(tmp_path: Path, comment: str = "", comment2: str = "", *flags) -> tuple[list[str], object]:
    path = tmp_path / "train.py"
    path.write_text(LOOP.format(comment=comment, comment2=comment2))
    result = run("lint", *flags, str(path))
    return [line.split(": ")[1].split()[0] for line in result.output.splitlines() if ":7:" in line or ":8:" in line], result


@pytest.mark.parametrize(
    "comment,left",
    [
        ("", ["TAP101", "TAP302"]),
        ("  # noqa: TAP101", ["TAP302"]),
        ("  # noqa:TAP101,TAP201", ["TAP302"]),
        ("  # NOQA: tap101", ["TAP302"]),
        ("  # noqa", ["TAP302"]),
        ("  # noqa: E501", ["TAP101", "TAP302"]),
        ("  # noqa: TAP302", ["TAP101", "TAP302"]),
        ("  # tapecheck: ignore[TAP101]", ["TAP302"]),
        ("  # tapecheck: ignore[TAP201, TAP101]", ["TAP302"]),
        ("  # tapecheck: ignore", ["TAP302"]),
        ("  # tapecheck: ignore[TAP102]", ["TAP101", "TAP302"]),
        ("  # why: the loss is finished later  # tapecheck: ignore[TAP101]", ["TAP302"]),
    ],
)
def test_suppression_forms(tmp_path, comment, left):
    found, _ = codes_for(tmp_path, comment)
    assert found == left


def test_text_inside_a_string_is_not_a_suppression(tmp_path):
    path = tmp_path / "s.py"
    path.write_text(LOOP.format(comment="; note = '# noqa: TAP101'", comment2=""))
    assert [f.code for f in lint_file(str(path)).findings] == ["TAP101", "TAP302"]
    assert [f.code for f in apply_suppressions(lint_file(str(path)).findings)] == ["TAP101", "TAP302"]


def test_probe_findings_are_suppressed_from_their_source_file(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("x = 1\ny = f(x)  # tapecheck: ignore[TAP101]\nz = g(y)  # noqa: TAP103\n")
    probe = [
        Finding(str(script), 2, 1, "TAP101", "None gradient", origin="probe", count=3),
        Finding(str(script), 3, 1, "TAP101", "None gradient", origin="probe"),
        Finding(str(script), 3, 1, "TAP103", "unwatched", origin="probe"),
        Finding("<string>", 2, 1, "TAP101", "from exec()", origin="probe"),
    ]
    kept = apply_suppressions(probe)
    assert [(f.line, f.code, f.path) for f in kept] == [(3, "TAP101", str(script)), (2, "TAP101", "<string>")]


def test_unused_suppressions_only_on_request(tmp_path):
    comment = "  # tapecheck: ignore[TAP101, TAP201]"
    comment2 = "  # noqa: TAP302"
    found, plain = codes_for(tmp_path, comment, comment2)
    assert found == [] and plain.exit_code == 0 and "unused" not in plain.output
    extra = tmp_path / "extra.py"
    extra.write_text("x = 1  # tapecheck: ignore\ny = 2  # noqa\nz = 3  # noqa: E501, TAP101\n")
    result = run("lint", "--report-unused-suppressions", str(tmp_path))
    assert result.exit_code == 1
    unused = [line for line in result.output.splitlines() if "unused suppression" in line and line.startswith(str(tmp_path))]
    assert unused == [
        f"{extra}:1:8: unused suppression `# tapecheck: ignore`: no finding of any code on this line",
        f"{extra}:3:8: unused suppression `# noqa: E501, TAP101`: no finding of TAP101 on this line",
        f"{tmp_path / 'train.py'}:7:61: unused suppression `# tapecheck: ignore[TAP101, TAP201]`: no finding of TAP201 on this line",
    ]
    document = json.loads(run("lint", "--report-unused-suppressions", "--output-format", "json", str(tmp_path)).output)
    assert len(document["unused_suppressions"]) == 3 and document["summary"]["unused_suppressions"] == 3


def test_unused_ignores_codes_the_configuration_turns_off(tmp_path):
    found, result = codes_for(tmp_path, "", "  # noqa: TAP302", "--report-unused-suppressions", "--ignore", "TAP302")
    assert "unused suppression" not in result.output


def test_parse_comment():
    assert parse_comment("# noqa") == [("noqa", None, "# noqa", 0)]
    assert parse_comment("# tapecheck: ignore[TAP101,TAP3]")[0][:2] == ("tapecheck", ("TAP101", "TAP3"))
    assert parse_comment("# a normal comment") == []


def test_split_with_sources_in_hand():
    source = b"a = 1  # noqa: TAP101\n"
    finding = Finding("<stdin>", 1, 1, "TAP101", "m")
    result = split([finding], {"<stdin>": source})
    assert result.kept == [] and result.suppressed == [finding]


def test_stdin_honours_suppressions():
    result = CliRunner().invoke(main, ["lint", "-", "--stdin-filename", "t.py"], input=LOOP.format(comment="  # noqa", comment2=""))
    assert "TAP101" not in result.output and "TAP302" in result.output

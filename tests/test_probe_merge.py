"""`tapecheck probe --merge`: one report from the reports of a real MultiWorker run.

Two local processes train `fixtures/probe/multiworker/mwms_sign.py` under
`tapecheck probe --format json` as one MultiWorkerMirroredStrategy cluster
(TF_CONFIG with two localhost ports). Both workers see the zero gradient
(TAP104); worker 0 alone also asks a tape for a variable it never read
(TAP102). The merge itself needs no TensorFlow: it runs in this process.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from tapecheck.probe.report_schema import SCHEMA

if importlib.util.find_spec("tensorflow") is None:  # the workers need it; this process never imports it
    pytest.skip("TensorFlow is not installed", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "fixtures" / "probe" / "multiworker" / "mwms_sign.py"


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("localhost", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def expected_lines() -> dict[str, int]:
    lines = FIXTURE.read_text(encoding="utf-8").splitlines()
    return {m.group(1): n for n, text in enumerate(lines, start=1) if (m := re.search(r"probe-expect: (TAP\d+)", text))}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """The two workers' JSON reports (a real two-process MultiWorker run) and the folder they are in."""
    folder = tmp_path_factory.mktemp("cluster")
    shutil.copy(FIXTURE, folder / FIXTURE.name)
    workers = [f"localhost:{port}" for port in free_ports(2)]
    processes = []
    for index in range(2):
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONWARNINGS": "ignore",
               "TF_CONFIG": json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}})}
        processes.append(subprocess.Popen(
            [sys.executable, "-m", "tapecheck", "probe", "--format", "json", "--output", f"worker{index}.json",
             FIXTURE.name],
            cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        ))
    outputs = []
    for process in processes:
        try:
            outputs.append(process.communicate(timeout=240)[0])
        except subprocess.TimeoutExpired:
            for other in processes:
                other.kill()
            raise
    for process, output in zip(processes, outputs):
        assert process.returncode == 0, output[-3000:]
        assert "loss" in output  # each worker trained
    return folder, [folder / "worker0.json", folder / "worker1.json"]


def merge(args, cwd, monkeypatch):
    from click.testing import CliRunner

    from tapecheck.cli import main

    monkeypatch.chdir(cwd)
    return CliRunner().invoke(main, ["probe", "--merge", *args], catch_exceptions=False)


def test_each_worker_records_its_task_and_its_own_findings(cluster):
    _, reports = cluster
    lines = expected_lines()
    seen = []
    for index, path in enumerate(reports):
        document = json.loads(path.read_text(encoding="utf-8"))
        jsonschema.validate(document, SCHEMA)
        assert document["version"] == 1 and document["tool"]["command"] == "probe"
        assert document["task"] == {"type": "worker", "index": index, "cluster_size": 2}
        seen.append(sorted((f["code"], f["line"]) for f in document["findings"]))
    assert seen == [sorted([("TAP104", lines["TAP104"]), ("TAP102", lines["TAP102"])]),
                    [("TAP104", lines["TAP104"])]]


def test_the_merged_report_has_each_finding_once_with_the_workers_that_saw_it(cluster, monkeypatch):
    folder, reports = cluster
    result = merge(["--format", "json", *map(str, reports)], folder, monkeypatch)
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    jsonschema.validate(document, SCHEMA)
    assert document["version"] == 1 and "task" not in document
    assert [m["task"]["index"] for m in document["merged"]] == [0, 1]
    assert document["summary"]["findings"] == 2 and document["summary"]["reports"] == 2
    by_code = {f["code"]: f for f in document["findings"]}
    assert sorted(by_code) == ["TAP102", "TAP104"]
    assert [(w["type"], w["index"]) for w in by_code["TAP104"]["workers"]] == [("worker", 0), ("worker", 1)]
    assert [(w["type"], w["index"]) for w in by_code["TAP102"]["workers"]] == [("worker", 0)]
    assert by_code["TAP104"]["count"] == 1  # once per worker: the largest worker's count, not a sum
    assert by_code["TAP104"]["details"]["cause"] == "zero-gradient" and "workers" not in by_code["TAP104"]["details"]
    assert by_code["TAP104"]["line"] == expected_lines()["TAP104"]

    text = merge([*map(str, reports)], folder, monkeypatch).output
    assert "seen by workers 0, 1" in text and "seen by worker 0\n" in text
    assert text.count("TAP104") == 1
    assert text.rstrip().endswith("tapecheck probe: 2 findings (merged from 2 reports: worker 0, worker 1).")


def test_a_merged_report_merges_again_and_fails_on_findings_when_asked(cluster, monkeypatch):
    folder, reports = cluster
    result = merge(["--format", "json", "--output", "merged.json", *map(str, reports)], folder, monkeypatch)
    assert result.exit_code == 0 and result.output == ""
    again = merge(["--format", "json", "merged.json", str(reports[1])], folder, monkeypatch)
    document = json.loads(again.output)
    workers = {f["code"]: [w["index"] for w in f["workers"]] for f in document["findings"]}
    assert workers == {"TAP102": [0], "TAP104": [0, 1]}  # worker 1 twice is still worker 1
    assert merge(["--fail-on-findings", *map(str, reports)], folder, monkeypatch).exit_code == 1


def test_what_is_not_a_probe_report_is_refused(cluster, monkeypatch, tmp_path):
    _, reports = cluster
    from click.testing import CliRunner

    from tapecheck.cli import main

    (tmp_path / "notes.txt").write_text("not json\n", encoding="utf-8")
    (tmp_path / "train.py").write_text("import tensorflow as tf\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    lint = CliRunner().invoke(main, ["lint", "--output-format", "json", "train.py"], catch_exceptions=False)
    (tmp_path / "lint.json").write_text(lint.output, encoding="utf-8")
    newer = json.loads(reports[0].read_text(encoding="utf-8"))
    newer["version"] = 2
    (tmp_path / "newer.json").write_text(json.dumps(newer), encoding="utf-8")
    for name, says in [("notes.txt", "not JSON"), ("lint.json", "not a `tapecheck probe --output-format json` report"),
                       ("newer.json", "report version 2"), ("missing.json", "missing.json")]:
        result = merge([str(reports[0]), name], tmp_path, monkeypatch)
        assert result.exit_code == 2 and says in result.output, (name, result.output)
    assert merge([], tmp_path, monkeypatch).exit_code == 2


def test_merging_needs_no_tensorflow(cluster, tmp_path):
    _, reports = cluster
    code = ("import sys; from tapecheck.cli import main; sys.argv = ['tapecheck', 'probe', '--merge', *sys.argv[1:]]\n"
            "try:\n    main()\nexcept SystemExit:\n    print('tensorflow' in sys.modules, 'keras' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code, *map(str, reports)], capture_output=True, text=True,
                            cwd=tmp_path, timeout=120, check=False)
    assert result.stdout.rstrip().endswith("False False"), result.stdout + result.stderr
    assert "seen by workers 0, 1" in result.stdout


def test_a_single_process_report_names_its_task_from_tf_config(monkeypatch):
    from tapecheck.probe.report import current_task, render

    monkeypatch.delenv("TF_CONFIG", raising=False)
    assert current_task() is None
    assert "task" not in json.loads(render([], "json", task=current_task()))
    cluster = {"chief": ["localhost:1"], "worker": ["localhost:2", "localhost:3"], "evaluator": ["localhost:4"]}
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": cluster, "task": {"type": "chief", "index": 0}}))
    assert current_task() == {"type": "chief", "index": 0, "cluster_size": 3}
    assert render([], "text", task=current_task()) == "tapecheck probe: 0 findings (chief 0 of 3).\n"
    monkeypatch.setenv("TF_CONFIG", "{not json")
    assert current_task() is None

"""`tapecheck probe --merge REPORT...`: one report from the JSON reports of a cluster's workers.

Each MultiWorkerMirroredStrategy worker runs its own probe and writes its own
report (`--format json`), which records the worker's TF_CONFIG task. Merging
keeps each finding once, at its place (path, cell, line, code, cause and what
keeps two apart: a metric's or a model's name), with the workers that saw it;
the count is the largest worker's, list details are joined, other details are the first worker's.
No TensorFlow needed.
"""

from __future__ import annotations

import json
import os

from tapecheck.findings import Finding
from tapecheck.probe.report import JSON_VERSION


class MergeError(ValueError):
    """A report that cannot be merged: unreadable, not JSON, not a probe report, a newer version."""


def load(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as handle:
            document = json.load(handle)
    except OSError as exc:
        raise MergeError(f"{path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise MergeError(f"{path}: not JSON ({exc})") from None
    if not isinstance(document, dict) or not isinstance(document.get("findings"), list):
        raise MergeError(f"{path}: not a tapecheck probe report (no `findings` list)")
    tool = document.get("tool") or {}
    if tool.get("name") != "tapecheck" or tool.get("command") != "probe":
        if tool.get("name") == "tapecheck":  # lint's JSON report names no command
            what = f"a `tapecheck {tool.get('command') or 'lint'}` report"
        else:
            what = f"written by {tool.get('name')!r}" if tool.get("name") else "written by no named tool"
        raise MergeError(f"{path}: {what}, not a `tapecheck probe --output-format json` report")
    version = document.get("version")
    if not isinstance(version, int) or version > JSON_VERSION:
        raise MergeError(f"{path}: report version {version!r}; this tapecheck reads version {JSON_VERSION} and older")
    return document


def _worker(document: dict, path: str) -> dict:
    task = document.get("task") or {}
    worker = {"type": task.get("type"), "index": task.get("index"), "report": os.path.basename(path)}
    return worker


def merge(paths: list[str]) -> tuple[list[Finding], list[dict]]:
    """The merged findings (each with `details["workers"]`) and the reports read (`merged`)."""
    records: dict[tuple, dict] = {}
    merged = []
    for path in paths:
        document = load(path)
        own = _worker(document, path)
        merged.append({"report": path, "task": document.get("task")})
        for item in document["findings"]:
            # a report that is itself a merge keeps its workers
            for worker in item.get("workers") or [own]:
                _add(records, item, worker)
    findings = []
    for record in records.values():
        item, workers = record["item"], record["workers"]
        workers.sort(key=lambda w: (w.get("type") or "", w.get("index") if w.get("index") is not None else -1,
                                    w.get("report") or ""))
        details = {**record["details"], "workers": workers}
        findings.append(Finding(
            item["path"], item["line"], item.get("col", 1), item["code"], item.get("message", ""),
            item.get("hint", ""), origin=item.get("origin", "probe"), count=record["count"],
            cell=item.get("cell"), details=details,
        ))
    return sorted(findings), merged


def _key(item: dict) -> tuple:
    details = item.get("details") or {}
    return (item.get("path"), item.get("cell"), item.get("line"), item.get("code"), details.get("cause"),
            json.dumps(details.get("subject"), sort_keys=True))


def _add(records, item, worker):
    key = _key(item)
    record = records.get(key)
    details = dict(item.get("details") or {})
    if record is None:
        records[key] = {"item": item, "workers": [worker], "count": int(item.get("count", 1)), "details": details}
        return
    if worker not in record["workers"]:
        record["workers"].append(worker)
    record["count"] = max(record["count"], int(item.get("count", 1)))  # workers run one program
    for field, value in details.items():
        if isinstance(value, list):
            joined = record["details"].setdefault(field, [])
            if isinstance(joined, list):
                joined.extend(v for v in value if v not in joined)
        else:
            record["details"].setdefault(field, value)

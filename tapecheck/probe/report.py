"""Fold what the probe saw into `Finding`s, and print them.

One finding per (site, code, cause); repeats raise its count and add source
names. Records hold strings and ints only, never a tensor or a tape.
"""

from __future__ import annotations

import json
import threading

from tapecheck.findings import Finding
from tapecheck.probe.sites import display_path


class Collector:
    def __init__(self):
        self._lock = threading.Lock()
        self._records: dict[tuple, dict] = {}
        self.children: list[Collector] = []  # nested probes' collectors: told every observation too

    def add(self, site, code: str, cause: str, message: str, hint: str = "",
            names=(), count: int = 1, locate=None, drop_unlocated=False, subject=None, **details) -> None:
        """Record one observation; `message` may hold `{names}`, filled at report time. Returns its key.

        `subject` (a metric's name) keeps apart two findings of one cause at one line.
        """
        if site is None:
            return None
        for child in list(self.children):
            child.add(site, code, cause, message, hint, names, count, locate, drop_unlocated, subject, **details)
        return self._add_here(site, code, cause, message, hint, names, count, locate, drop_unlocated, subject,
                              **details)

    def _add_here(self, site, code, cause, message, hint="", names=(), count=1, locate=None,
                  drop_unlocated=False, subject=None, **details):
        key = (site.path, site.line, code, cause) + ((subject,) if subject is not None else ())
        with self._lock:
            record = self._records.get(key)
            if record is None:
                record = self._records[key] = {
                    "site": site, "code": code, "cause": cause, "message": message,
                    "hint": hint, "names": [], "count": 0, "details": {}, "locate": locate,
                    "drop_unlocated": drop_unlocated,
                }
            record["count"] += count
            if subject is not None:
                record["details"].setdefault("subject", subject)  # what keeps it apart (a metric, a model)
            for name in names:
                if name not in record["names"]:
                    record["names"].append(name)
            for field, value in details.items():
                if isinstance(value, list):
                    merged = record["details"].setdefault(field, [])
                    merged.extend(v for v in value if v not in merged)
                else:
                    record["details"].setdefault(field, value)
        return key

    def mark(self, key, explains: str) -> bool:
        """Say that the finding at `key` explains an exception (kept even where unlocated); False if none."""
        for child in list(self.children):
            child.mark(key, explains)
        with self._lock:
            record = self._records.get(key) if key is not None else None
            if record is None:
                return False
            record["details"].setdefault("explains", explains)
            record["drop_unlocated"] = False
            return True

    def move(self, old_site, new_site, code: str, cause: str, message: str) -> None:
        """Fold the record at `old_site` into the one at `new_site` (made if needed)."""
        for child in list(self.children):
            child.move(old_site, new_site, code, cause, message)
        with self._lock:
            old = self._records.pop((old_site.path, old_site.line, code, cause), None)
        if old is None:
            return
        self._add_here(new_site, code, cause, message, old["hint"], names=old["names"], count=old["count"],
                       **{k: v for k, v in old["details"].items() if isinstance(v, list)})

    def __len__(self):
        return len(self._records)

    def findings(self) -> list[Finding]:
        with self._lock:
            records = list(self._records.values())
        out = []
        for r in records:
            site = r["site"]
            if r["locate"] is not None:
                site, r = _static_location(site, r)
                if r is None:
                    continue
            names = ", ".join(f"`{n}`" for n in r["names"][:6])
            if len(r["names"]) > 6:
                names += f" and {len(r['names']) - 6} more"
            details = {"cause": r["cause"], **r["details"]}
            if r["names"]:
                details["sources"] = list(r["names"])
            out.append(Finding(
                display_path(site.path), site.line, site.col, r["code"],
                r["message"].format(names=names or "the sources"), r["hint"],
                origin="probe", count=r["count"], details=details,
            ))
        return sorted(out)


_internal_errors: set[str] = set()


def report_internal_error(exc: BaseException) -> None:
    """The probe failed to diagnose something: say so once on stderr; training goes on."""
    import sys

    text = f"{type(exc).__name__}: {exc}"
    if text not in _internal_errors:
        _internal_errors.add(text)
        sys.stderr.write(f"tapecheck probe: internal error, one diagnosis skipped ({text})\n")


JSON_VERSION = 1  # fields are only added; one that changes meaning or goes away bumps it


def current_task() -> dict | None:
    """This process's task in a TensorFlow cluster (TF_CONFIG's `task`), or None.

    Read when the report is written: a script may set TF_CONFIG itself before
    making its MultiWorkerMirroredStrategy.
    """
    import os

    try:
        config = json.loads(os.environ.get("TF_CONFIG") or "{}")
        task = config.get("task") or {}
        kind, index = task.get("type"), task.get("index")
        if not isinstance(kind, str) or not isinstance(index, int):
            return None
        cluster = config.get("cluster") or {}
        size = sum(len(v) for k, v in cluster.items() if isinstance(v, list) and k != "evaluator")
    except (ValueError, AttributeError, TypeError):
        return None
    return {"type": kind, "index": index, "cluster_size": size}


def worker_label(worker: dict) -> str:
    """`worker 1`, `chief 0`, or the report's file name when it named no task."""
    if worker.get("type") is not None and worker.get("index") is not None:
        return f"{worker['type']} {worker['index']}"
    return str(worker.get("report", "?"))


def seen_by(workers) -> str:
    """"workers 0, 1" (one task type), "chief 0, worker 1", or report names."""
    kinds = {w.get("type") for w in workers}
    if len(kinds) == 1 and None not in kinds:
        kind = kinds.pop()
        indexes = ", ".join(str(w["index"]) for w in workers)
        return f"{kind}{'s' if len(workers) > 1 else ''} {indexes}"
    return ", ".join(worker_label(w) for w in workers)


def render(findings, fmt: str = "text", task: dict | None = None, merged: list | None = None) -> str:
    """The report. `task`: this worker's TF_CONFIG task; `merged`: the reports a `--merge` read.

    A finding of a merged report carries `details["workers"]`: a `workers` field
    in JSON, "seen by workers 0, 1" in text.
    """
    if fmt == "json":
        from tapecheck._version import __version__
        from tapecheck.rules import rule_name

        codes: dict[str, int] = {}
        for f in findings:
            codes[f.code] = codes.get(f.code, 0) + 1
        items = []
        for f in findings:
            item = f.to_dict()
            item["name"] = rule_name(f.code)
            workers = item["details"].pop("workers", None)
            if workers is not None:
                item["workers"] = workers
            items.append(item)
        document = {
            "version": JSON_VERSION,
            "tool": {"name": "tapecheck", "version": __version__, "command": "probe"},
        }
        if task is not None:
            document["task"] = task
        if merged is not None:
            document["merged"] = merged
        document["findings"] = items
        document["summary"] = {"findings": len(findings), "by_code": dict(sorted(codes.items())),
                               "explained_errors": sum(1 for f in findings if f.details.get("explains"))}
        if merged is not None:
            document["summary"]["reports"] = len(merged)
        return json.dumps(document, indent=2) + "\n"
    lines = []
    for f in findings:
        lines.append(f.format())
        if f.hint:
            lines.append(f"    hint: {f.hint}")
        if f.details.get("explains"):
            lines.append(f"    explains: {f.details['explains']}")
        if f.details.get("workers"):
            lines.append(f"    seen by {seen_by(f.details['workers'])}")
    count = len(findings)
    where = ""
    if task is not None:
        where = f" ({worker_label(task)} of {task.get('cluster_size') or '?'})"
    elif merged is not None:
        where = f" (merged from {len(merged)} report{'' if len(merged) == 1 else 's'}: " \
                f"{', '.join(worker_label(m['task'] or m) for m in merged)})"
    lines.append(f"tapecheck probe: {count} finding{'' if count == 1 else 's'}{where}.")
    return "\n".join(lines) + "\n"


def _static_location(site, record):
    """An eager cut path: the probe knows the path was cut, not by which line.

    Eager tensors keep no producer, so the op cannot be found at run time. The
    static pass can: when it flags TAP104 inside this tape's lines, report at
    that line and keep the gradient call in the details.
    """
    from tapecheck.probe.locate import static_lines

    first, last = record["locate"]
    lines = static_lines(site.path, record["code"], first, last)
    if not lines:
        return site, (None if record["drop_unlocated"] else record)
    moved = dict(record)
    moved["details"] = {**record["details"], "gradient_call": site.short(), "located_by": "static pass"}
    return site._replace(line=lines[0], col=1), moved

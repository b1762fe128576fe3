"""The JSON Schema of `tapecheck probe --format json` (version 1), merged reports included.

Stable as lint's (`tapecheck/lint/report_schema.py`): fields are only ever
added; a field that changes meaning or goes away bumps `version`. Added in
version 1 without a bump: `task` (the worker's TF_CONFIG task), `merged`,
`summary.reports` and each finding's `workers` (a `--merge` report).
tests/test_probe_merge.py validates real output against it.
"""

_POSITION = {"type": "integer", "minimum": 1}
_TASK = {
    "type": "object",
    "required": ["type", "index"],
    "properties": {
        "type": {"type": "string", "description": "TF_CONFIG task type: worker, chief, ..."},
        "index": {"type": "integer", "minimum": 0},
        "cluster_size": {"type": "integer", "minimum": 0, "description": "the cluster's tasks, evaluators not counted"},
    },
}
_WORKER = {
    "type": "object",
    "required": ["type", "index", "report"],
    "properties": {
        "type": {"type": ["string", "null"]},
        "index": {"type": ["integer", "null"]},
        "report": {"type": "string", "description": "the file name of the report it came from"},
    },
}
_FINDING = {
    "type": "object",
    "required": ["path", "cell", "line", "col", "code", "name", "message", "hint", "origin", "count", "details"],
    "properties": {
        "path": {"type": "string"},
        "cell": {"type": ["integer", "null"], "minimum": 1},
        "line": _POSITION,
        "col": _POSITION,
        "code": {"type": "string", "pattern": "^TAP[0-9]{3}$"},
        "name": {"type": "string"},
        "message": {"type": "string"},
        "hint": {"type": "string"},
        "origin": {"const": "probe"},
        "count": {"type": "integer", "minimum": 0},
        "details": {
            "type": "object",
            "required": ["cause"],
            "properties": {"cause": {"type": "string"}, "explains": {"type": "string"}},
        },
        "workers": {"type": "array", "items": _WORKER, "minItems": 1, "description": "merged reports only"},
    },
}
_COUNT = {"type": "integer", "minimum": 0}

SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "tapecheck probe report",
    "type": "object",
    "required": ["version", "tool", "findings", "summary"],
    "properties": {
        "version": {"const": 1},
        "tool": {
            "type": "object",
            "required": ["name", "version", "command"],
            "properties": {"name": {"const": "tapecheck"}, "version": {"type": "string"}, "command": {"const": "probe"}},
        },
        "task": _TASK,
        "merged": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["report", "task"],
                "properties": {"report": {"type": "string"}, "task": {"oneOf": [_TASK, {"type": "null"}]}},
            },
        },
        "findings": {"type": "array", "items": _FINDING},
        "summary": {
            "type": "object",
            "required": ["findings", "by_code", "explained_errors"],
            "properties": {
                "findings": _COUNT,
                "by_code": {"type": "object", "additionalProperties": _COUNT},
                "explained_errors": _COUNT,
                "reports": _COUNT,
            },
        },
    },
}

if __name__ == "__main__":  # `python -m tapecheck.probe.report_schema > tapecheck-probe-report.schema.json`
    import json

    print(json.dumps(SCHEMA, indent=2))

"""The JSON Schema of `tapecheck lint --output-format json` (version 1).

Stable: fields are only ever added; a field that changes meaning or goes away
bumps `version`. tests/test_output.py validates real output against it.
"""

_POSITION = {"type": "integer", "minimum": 1}
_EDIT = {
    "type": "object",
    "required": ["line", "col", "end_line", "end_col", "text"],
    "properties": {
        "line": _POSITION, "col": _POSITION, "end_line": _POSITION, "end_col": _POSITION,
        "text": {"type": "string", "description": "replacement text, \\n newlines"},
    },
}
_FIX = {
    "type": ["object", "null"],
    "required": ["title", "applicability", "edits"],
    "properties": {
        "title": {"type": "string"},
        "applicability": {"enum": ["safe", "unsafe"]},
        "edits": {"type": "array", "items": _EDIT},
    },
}
_FINDING = {
    "type": "object",
    "required": ["path", "cell", "line", "col", "code", "name", "message", "hint", "origin", "count", "details", "fix"],
    "properties": {
        "path": {"type": "string"},
        "cell": {"type": ["integer", "null"], "minimum": 1, "description": "notebook cell (1-based, all cells counted); null for .py"},
        "line": {**_POSITION, "description": "1-based; within the cell for notebooks"},
        "col": {**_POSITION, "description": "1-based, in characters"},
        "code": {"type": "string", "pattern": "^TAP[0-9]{3}$"},
        "name": {"type": "string"},
        "message": {"type": "string"},
        "hint": {"type": "string"},
        "origin": {"enum": ["lint", "probe"]},
        "count": {"type": "integer", "minimum": 1},
        "details": {
            "type": "object",
            "description": "what the message says, for tools (by rule: e.g. TAP104's op and call_path, TAP302's api); {} when none",
        },
        "fix": _FIX,
    },
}
_UNUSED = {
    "type": "object",
    "required": ["path", "line", "col", "cell", "text", "codes"],
    "properties": {
        "path": {"type": "string"}, "line": _POSITION, "col": _POSITION,
        "cell": {"type": ["integer", "null"]}, "text": {"type": "string"},
        "codes": {"type": "array", "items": {"type": "string"}},
    },
}
_COUNT = {"type": "integer", "minimum": 0}

SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "tapecheck lint report",
    "type": "object",
    "required": ["version", "tool", "findings", "errors", "unused_suppressions", "summary"],
    "properties": {
        "version": {"const": 1},
        "tool": {
            "type": "object",
            "required": ["name", "version"],
            "properties": {"name": {"const": "tapecheck"}, "version": {"type": "string"}},
        },
        "findings": {"type": "array", "items": _FINDING},
        "errors": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["path", "message"],
                "properties": {"path": {"type": "string"}, "message": {"type": "string"}},
            },
        },
        "unused_suppressions": {"type": "array", "items": _UNUSED},
        "keras2": {  # the files read as Keras 2 (tf_keras), and why (the file's code or keras-version)
            "type": "array",
            "items": {
                "type": "object",
                "required": ["path", "reason"],
                "properties": {"path": {"type": "string"}, "reason": {"type": "string"}},
            },
        },
        "summary": {
            "type": "object",
            "required": ["files_checked", "findings", "fixed", "errors", "unused_suppressions"],
            "properties": {k: _COUNT for k in ("files_checked", "findings", "fixed", "errors", "unused_suppressions")},
        },
    },
}

if __name__ == "__main__":  # `python -m tapecheck.lint.report_schema > tapecheck-report.schema.json`
    import json

    print(json.dumps(SCHEMA, indent=2))

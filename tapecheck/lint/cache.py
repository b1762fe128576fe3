"""A content-addressed cache of per-file lint results (like ruff's `.ruff_cache`).

An entry's key is a hash of everything that decides a file's results: the
file's bytes and path (findings carry the path; `.ipynb` is read differently),
tapecheck's version and a fingerprint of its own modules (so an edited rule in
a development install never serves stale results), libcst's version, the
Python version, and the codes of the rules that ran. Entries live in
`.tapecheck_cache/` next to the nearest `pyproject.toml` above the working
folder, else in the working folder.

Safe when several runs share it: each entry is written to a temporary file and
renamed into place (atomic on POSIX and Windows), and an entry that cannot be
read, does not parse, or was written for another key is ignored (and
rewritten). Nothing here imports libcst.

Before any file is read, a `StatIndex` (one JSON file per set of rules, like
ruff's cache) is consulted: for a file whose modification time, change time, size
and inode are those recorded, it gives what was learnt from its bytes (their
digest, the byte screen's verdict, whether it marks a Keras 2 project, the project
files it imports), so a warm run stats files and reads none that did not
change. An entry is trusted only if the file was read at least RACY_NS after its
modification time, so an edit within the file system's timestamp resolution of
the previous one is never missed.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from collections.abc import Sequence

from tapecheck._version import __version__
from tapecheck.lint.atomic import replace_file
from tapecheck.findings import Edit, FileError, Finding, Fix

CACHE_DIR_NAME = ".tapecheck_cache"
FORMAT = "2"  # bump when the entry layout changes (2: keys from the content's digest; stat index)
RACY_NS = 2_000_000_000  # a file read sooner than this after its modification is read again next time


def content_digest(source: bytes) -> str:
    """The digest of a file's bytes that cache keys are made from."""
    return hashlib.blake2b(source, digest_size=20).hexdigest()


def cache_root(start: str | None = None) -> str:
    """`.tapecheck_cache` beside the nearest pyproject.toml above `start` (default: cwd), else in it."""
    start = os.path.abspath(start or os.getcwd())
    current = start
    while True:
        if os.path.isfile(os.path.join(current, "pyproject.toml")):
            return os.path.join(current, CACHE_DIR_NAME)
        parent = os.path.dirname(current)
        if parent == current:
            return os.path.join(start, CACHE_DIR_NAME)
        current = parent


def _code_fingerprint() -> str:
    """Sizes and modification times of tapecheck's own modules and of libcst's version file."""
    parts = [__version__, sys.version, FORMAT]
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tapecheck/
    for folder, dirs, files in os.walk(package):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith(".py"):
                stat = os.stat(os.path.join(folder, name))
                parts.append(f"{os.path.relpath(os.path.join(folder, name), package)}:{stat.st_size}:{stat.st_mtime_ns}")
    try:
        from importlib.util import find_spec

        spec = find_spec("libcst")
        if spec is not None and spec.origin:
            version_file = os.path.join(os.path.dirname(spec.origin), "_version.py")
            with open(version_file, "rb") as handle:
                parts.append(handle.read().decode("utf-8", "replace"))
    except (ImportError, OSError, ValueError):
        parts.append("libcst:unknown")
    return hashlib.blake2b("\n".join(parts).encode(), digest_size=16).hexdigest()


class Cache:
    """Per-file results keyed by content; `get` and `put` never raise on a bad cache."""

    def __init__(self, root: str | None = None, rule_codes: Sequence[str] = (), context: str = ""):
        self.root = os.path.join(root or cache_root(), f"v{FORMAT}")
        self._fingerprint = _code_fingerprint()
        self._codes = ",".join(sorted(rule_codes))
        self._context = context
        self._salt = "\0".join((self._fingerprint, self._codes, self._context)).encode()
        self.hits = self.misses = 0

    def key(self, path: str, source: bytes) -> str:
        return self.key_for(path, content_digest(source))

    def key_for(self, path: str, digest: str) -> str:
        """The key of a file's results from the digest of its bytes (`content_digest`)."""
        hashed = hashlib.blake2b(self._salt, digest_size=20)
        hashed.update(b"\0" + path.encode("utf-8", "surrogateescape") + b"\0" + digest.encode())
        return hashed.hexdigest()

    def stat_index(self) -> "StatIndex":
        """The stat index of these rules and this tapecheck (the screen's verdicts depend on both)."""
        name = hashlib.blake2b(f"{self._fingerprint}\0{self._codes}".encode(), digest_size=12).hexdigest()
        return StatIndex(os.path.join(self.root, f"stat-{name}.json"), self)

    def _file(self, key: str) -> str:
        return os.path.join(self.root, key[:2], key[2:])

    def get(self, key: str, path: str) -> tuple[list[Finding], list[FileError]] | None:
        try:
            with open(self._file(key), "rb") as handle:
                entry = json.loads(handle.read())
            if entry.get("key") != key:
                raise ValueError("foreign entry")
            findings = [_finding(path, fields) for fields in entry["findings"]]
            errors = [FileError(path, message) for message in entry["errors"]]
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            self.misses += 1
            return None
        self.hits += 1
        return findings, errors

    def put(self, key: str, path: str, findings: Sequence[Finding], errors: Sequence[FileError]) -> None:
        try:
            entry = {
                "key": key,
                "findings": [_finding_fields(f) for f in findings if f.path == path],
                "errors": [e.message for e in errors if e.path == path],
            }
            if len(entry["findings"]) != len(findings) or len(entry["errors"]) != len(errors):
                return  # results about other files: not this file's to cache
            data = json.dumps(entry, separators=(",", ":")).encode()
            folder = os.path.dirname(self._file(key))
            os.makedirs(folder, exist_ok=True)
            self._tag(os.path.dirname(self.root))
            replace_file(self._file(key), data, private=True)
        except (OSError, TypeError, ValueError):
            pass  # a read-only or full disk, or results JSON cannot hold: run uncached

    _tagged = False

    def _tag(self, folder: str) -> None:
        """Mark the folder as a cache: ignored by git and by backup tools."""
        if self._tagged:
            return
        self._tagged = True
        for name, text in (
            (".gitignore", "# Automatically created by tapecheck.\n*\n"),
            ("CACHEDIR.TAG", "Signature: 8a477f597d28d172789f06886806bc55\n# tapecheck's cache\n"),
        ):
            target = os.path.join(folder, name)
            if not os.path.exists(target):
                try:
                    with open(target, "x") as out:
                        out.write(text)
                except OSError:
                    pass


def _signature(status: os.stat_result) -> list[int]:
    return [status.st_mtime_ns, status.st_ctime_ns, status.st_size, status.st_ino]


class StatIndex:
    """What was learnt from each file's bytes, by absolute path and stat signature.

    A record is a dict: `digest` (content_digest of the bytes), `screen` (None when
    some rule's screen admitted the file, else the messages of the reasons it is not
    Python, [] when it is fine), `keras2` (it marks a Keras 2 project), `deps`
    (the project files it imports, which the program model reads). Never raises on a bad file.
    """

    def __init__(self, file: str, cache: Cache | None = None):
        self.file = file
        self._cache = cache
        self._entries: dict[str, list] = {}
        self._dirty = False
        self.hits = self.misses = 0
        try:
            with open(file, "rb") as handle:
                document = json.loads(handle.read())
            if document.get("format") == FORMAT and isinstance(document.get("entries"), dict):
                self._entries = document["entries"]
        except (OSError, ValueError, AttributeError):
            pass

    def lookup(self, path: str, status: os.stat_result | None) -> dict | None:
        """The record of a file whose stat signature is unchanged since it was read, else None."""
        if status is None:
            return None
        entry = self._entries.get(os.path.abspath(path))
        try:
            signature, seen_ns, record = entry[:4], entry[4], entry[5]
            if (signature == _signature(status) and seen_ns - status.st_mtime_ns >= RACY_NS
                    and seen_ns - status.st_ctime_ns >= RACY_NS and isinstance(record, dict)
                    and isinstance(record.get("digest"), str)):
                self.hits += 1
                return record
        except (TypeError, IndexError, KeyError):
            pass
        self.misses += 1
        return None

    def store(self, path: str, status: os.stat_result | None, record: dict) -> None:
        """Record what was learnt from bytes read after `status` was taken."""
        if status is None:
            return
        self._entries[os.path.abspath(path)] = _signature(status) + [time.time_ns(), record]
        self._dirty = True

    def save(self) -> None:
        """Write the index atomically if it changed; a read-only or full disk runs uncached."""
        if not self._dirty:
            return
        try:
            folder = os.path.dirname(self.file)
            os.makedirs(folder, exist_ok=True)
            if self._cache is not None:
                self._cache._tag(os.path.dirname(self._cache.root))
            data = json.dumps({"format": FORMAT, "entries": self._entries}, separators=(",", ":")).encode()
            replace_file(self.file, data, private=True)
            self._dirty = False
        except (OSError, TypeError, ValueError):
            pass


def _finding_fields(finding: Finding) -> dict:
    fix = finding.fix
    return {
        "line": finding.line, "col": finding.col, "code": finding.code, "message": finding.message,
        "hint": finding.hint, "origin": finding.origin, "count": finding.count, "cell": finding.cell,
        "details": finding.details,
        "fix": None if fix is None else {
            "title": fix.title, "safe": fix.safe,
            "edits": [[e.line, e.col, e.end_line, e.end_col, e.text] for e in fix.edits],
        },
    }


def _finding(path: str, fields: dict) -> Finding:
    fix = fields.pop("fix", None)
    if fix is not None:
        edits = tuple(Edit(*edit) for edit in fix["edits"])
        fix = Fix(fix["title"], edits, fix["safe"])
    return Finding(path, **fields, fix=fix)

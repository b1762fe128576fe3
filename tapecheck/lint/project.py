"""What one lint run knows across its files: which models have train/inference modes.

TAP403 asks "does the model class `Net`, imported from `models.py`, contain Dropout
or BatchNormalization?". The engine lints files one at a time, so before the run it
builds this index with a plain text scan of the files that mention such a layer (no
parse: a tiny fraction of the run's time), and the rule reads it through
`facts.project`. Linting a single source (`lint_source`) has no index: the rule
then sees only that file's own definitions.
"""

from __future__ import annotations

import os
import re
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterable, Iterator

# Keras layers that behave differently in training and in inference.
MODE_LAYERS = frozenset(
    {
        "Dropout", "SpatialDropout1D", "SpatialDropout2D", "SpatialDropout3D", "AlphaDropout",
        "GaussianDropout", "GaussianNoise", "BatchNormalization", "SyncBatchNormalization",
    }
)
SCREEN = (b"Dropout", b"BatchNormalization", b"GaussianNoise")
_MODE_CALL = re.compile(r"\b(?:%s)\s*\(" % "|".join(sorted(MODE_LAYERS)))
_MODEL_CALL = re.compile(r"\b(?:Model|Sequential)\s*\(")
# A top-level statement that starts a definition: `class Net(...)`, `def build(...)`, `model = ...`.
_TOP = re.compile(r"^(?:class\s+(\w+)|(?:async\s+)?def\s+(\w+)|(\w+)\s*(?::[^=]*)?=[^=])")


def module_name(path: str) -> str:
    """`pkg.models` for `src/pkg/models.py` (every folder kept: matched by suffix)."""
    stem, _ = os.path.splitext(os.path.normpath(path))
    parts = [p for p in stem.split(os.sep) if p not in ("", ".", "..")]
    if parts and parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def mode_definitions(text: str) -> set[str]:
    """Top-level names whose definition builds a mode-dependent layer.

    Classes count when their body constructs such a layer; functions and
    assignments only when they also build a model (`Model(`/`Sequential(`), so
    a helper that stacks layers onto a tensor is not mistaken for a model.
    """
    found: set[str] = set()
    current, kind, has_mode, has_model = "", "", False, False

    def close():
        if current and has_mode and (kind == "class" or has_model):
            found.add(current)

    for line in text.splitlines():
        body = 0  # where the code after a definition's own name starts (`class Dropout(Layer)` is no call)
        if line[:1].strip() and not line.startswith(("#", ")", "]", "}", "@")):
            match = _TOP.match(line)
            close()
            current, kind, has_mode, has_model = "", "", False, False
            if match:
                current = match.group(1) or match.group(2) or match.group(3)
                kind = "class" if match.group(1) else "other"
                body = match.end() if kind == "class" or match.group(2) else 0
        code = line[body:].split("#", 1)[0]
        has_mode = has_mode or bool(_MODE_CALL.search(code))
        has_model = has_model or bool(_MODEL_CALL.search(code))
    close()
    return found


class ProjectIndex:
    """Mode-dependent model definitions of the files in one lint run, by module."""

    def __init__(self) -> None:
        self.by_name: dict[str, list[str]] = {}  # name -> module names defining it

    def add(self, path: str, text: str) -> None:
        module = module_name(path)
        for name in mode_definitions(text):
            self.by_name.setdefault(name, []).append(module)

    @classmethod
    def build(cls, paths: Iterable[str]) -> "ProjectIndex":
        index = cls()
        for path in paths:
            if not path.endswith(".py"):
                continue
            try:
                with open(path, "rb") as handle:
                    data = handle.read()
            except OSError:
                continue  # the engine reports unreadable files itself
            if any(word in data for word in SCREEN):
                index.add(path, data.decode("utf-8", "replace"))
        return index

    def defines(self, origin: str, importer: str = "") -> bool:
        """Whether `origin` (`pkg.models.Net`, or `models.Net` from a relative import) is indexed.

        The module part is matched as a dotted suffix of the defining file's module;
        a bare name (`from . import Net`) matches a file in the importer's folder.
        """
        module, _, name = origin.rpartition(".")
        for defining in self.by_name.get(name, ()):
            if module and (defining == module or defining.endswith("." + module)):
                return True
            if not module and importer and defining.rpartition(".")[0] == module_name(importer).rpartition(".")[0]:
                return True
        return False


_current: ContextVar[ProjectIndex | None] = ContextVar("tapecheck_project", default=None)


def current() -> ProjectIndex | None:
    """The index of the lint run in progress, if the run linted paths (not a lone source)."""
    return _current.get()


@contextmanager
def using(index: ProjectIndex) -> Iterator[ProjectIndex]:
    token = _current.set(index)
    try:
        yield index
    finally:
        _current.reset(token)

"""The one finding type shared by the linter and the runtime probe.

Plain data only (no libcst nodes, no tensors), so findings can be cached,
serialized, compared in tests and printed by any reporter.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class Edit:
    """Replace the text from (line, col) up to (end_line, end_col) with `text`.

    1-based lines and columns counted in characters of the decoded source, the
    end exclusive; an insertion has start == end. `text` uses "\n" newlines:
    the fixer writes the file's own line ending.
    """

    line: int
    col: int
    end_line: int
    end_col: int
    text: str


@dataclass(frozen=True)
class Fix:
    """What `--fix` would do for a finding: text edits applied together."""

    title: str  # what the fix does, e.g. "Add `persistent=True`"
    edits: tuple[Edit, ...]
    safe: bool = True  # unsafe fixes need --unsafe-fixes


@dataclass(frozen=True, order=True)
class Finding:
    path: str
    line: int  # 1-based
    col: int  # 1-based
    code: str  # e.g. "TAP101"
    message: str
    hint: str = ""  # what to do about it, one sentence
    origin: str = "lint"  # "lint" or "probe"
    count: int = 1  # the probe folds repeats of one (site, cause) into a count
    cell: int | None = None  # notebook cell (1-based) when path is an .ipynb
    details: dict = field(default_factory=dict, compare=False, hash=False)
    fix: Fix | None = field(default=None, compare=False, hash=False)  # set by tapecheck.lint.fixes

    def location(self) -> str:
        if self.cell is not None:
            return f"{self.path}:cell {self.cell}:{self.line}:{self.col}"
        return f"{self.path}:{self.line}:{self.col}"

    def format(self) -> str:
        text = f"{self.location()}: {self.code} {self.message}"
        if self.count > 1:
            text += f" ({self.count} times)"
        return text

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True, order=True)
class FileError:
    """A file that could not be linted: unreadable, not UTF-8, not Python..."""

    path: str
    message: str

    def format(self) -> str:
        return f"{self.path}: error: {self.message}"


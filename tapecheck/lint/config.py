"""`[tool.tapecheck]` in pyproject.toml: which rules run where, and which files are skipped.

The settings for a file come from the nearest `pyproject.toml` with a
`[tool.tapecheck]` table, walking up from the file's folder (as ruff does), or
from the one file named by `--config`. Patterns (`exclude`, `extend-exclude`,
`per-file-ignores`) are gitignore-style, relative to that file's folder.
Selectors are rule codes or code prefixes (`TAP1`, `TAP` or `ALL`).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field

from tapecheck.lint.files import SKIP_DIRS
from tapecheck.rules import RULES

KEYS = ("select", "extend-select", "ignore", "per-file-ignores", "exclude", "extend-exclude", "keras-version",
        "file-time-budget")
KERAS_VERSIONS = ("2", "3")
ALL_CODES = tuple(rule.code for rule in RULES)


class ConfigError(ValueError):
    """A configuration that cannot be used; the message names the file and the key."""


def expand(selector: str, where: str) -> set[str]:
    """The rule codes a selector names; ConfigError when it names none."""
    key = selector.strip().upper()
    if key == "ALL":
        return set(ALL_CODES)
    codes = {code for code in ALL_CODES if key and code.startswith(key)}
    if not codes:
        raise ConfigError(f"{where}: unknown rule code {selector!r} (`tapecheck rules` lists them)")
    return codes


def _selectors(value, where: str) -> set[str]:
    if isinstance(value, str):
        value = [part for part in value.split(",") if part.strip()]
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ConfigError(f"{where}: expected a list of rule codes")
    codes: set[str] = set()
    for item in value:
        codes |= expand(item, where)
    return codes


def _patterns(value, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ConfigError(f"{where}: expected a list of path patterns")
    return value


def _spec(patterns: list[str], where: str):
    from pathspec import GitIgnoreSpec

    try:
        return GitIgnoreSpec.from_lines(patterns)
    except ValueError as exc:  # pathspec's pattern errors are ValueErrors
        raise ConfigError(f"{where}: {exc}") from None


@dataclass
class Config:
    root: str  # patterns are relative to this folder
    path: str | None = None  # the file the settings came from; None: defaults
    select: set[str] = field(default_factory=lambda: set(ALL_CODES))
    ignore: set[str] = field(default_factory=set)
    per_file_ignores: list[tuple[object, set[str]]] = field(default_factory=list)  # (spec, codes)
    exclude: object | None = None  # spec replacing the default skipped folders
    extend_exclude: object | None = None
    keras_version: str | None = None  # "2" or "3"; None: decided per file from what it does (default "3")
    time_budget: float | None = None  # `file-time-budget`: seconds per file's analysis (0: none); None: the default

    def enabled(self, code: str, path: str) -> bool:
        if code not in self.select or code in self.ignore:
            return code not in ALL_CODES  # codes from elsewhere (the probe's) are never filtered out
        relative = self._relative(path)
        return not any(codes and code in codes and spec.match_file(relative) for spec, codes in self.per_file_ignores)

    def excluded(self, path: str, is_dir: bool) -> bool:
        """Whether discovery skips this file or folder."""
        if self.exclude is None and self.extend_exclude is None:  # the common case: no path matching
            return is_dir and os.path.basename(os.path.normpath(path)) in SKIP_DIRS
        name = os.path.basename(os.path.normpath(path))
        relative = self._relative(path) + ("/" if is_dir else "")
        if self.exclude is not None:
            if self.exclude.match_file(relative):
                return True
        elif is_dir and name in SKIP_DIRS:
            return True
        return self.extend_exclude is not None and bool(self.extend_exclude.match_file(relative))

    def _relative(self, path: str) -> str:
        relative = os.path.relpath(os.path.abspath(path), self.root).replace(os.sep, "/")
        return os.path.basename(path) if relative.startswith("..") else relative


def _table(path: str) -> dict | None:
    """The `[tool.tapecheck]` table of a TOML file, None when it has none."""
    if sys.version_info >= (3, 11):  # imported here: a run with no pyproject.toml never needs it
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib

    try:
        with open(path, "rb") as handle:
            document = tomllib.load(handle)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: invalid TOML: not UTF-8") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    tool = document.get("tool")
    table = tool.get("tapecheck") if isinstance(tool, dict) else None
    if table is not None and not isinstance(table, dict):
        raise ConfigError(f"{path}: [tool.tapecheck] must be a table")
    return table


def parse(table: dict, path: str) -> Config:
    """Settings from a `[tool.tapecheck]` table; ConfigError names any bad key or code."""
    config = Config(root=os.path.dirname(os.path.abspath(path)), path=path)
    extend_select: set[str] = set()
    for key, value in table.items():
        where = f"{path}: [tool.tapecheck] {key}"
        if key == "select":
            config.select = _selectors(value, where)
        elif key == "extend-select":
            extend_select = _selectors(value, where)
        elif key == "ignore":
            config.ignore = _selectors(value, where)
        elif key == "per-file-ignores":
            if not isinstance(value, dict):
                raise ConfigError(f"{where}: expected a table of pattern = [codes]")
            for pattern, codes in value.items():
                config.per_file_ignores.append((_spec([pattern], where), _selectors(codes, f"{where} {pattern!r}")))
        elif key == "exclude":
            config.exclude = _spec(_patterns(value, where), where)
        elif key == "extend-exclude":
            config.extend_exclude = _spec(_patterns(value, where), where)
        elif key == "keras-version":
            version = str(value).strip() if isinstance(value, (str, int)) and not isinstance(value, bool) else ""
            if version not in KERAS_VERSIONS:
                raise ConfigError(f'{where}: expected "2" (tf_keras) or "3", got {value!r}')
            config.keras_version = version
        elif key == "file-time-budget":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ConfigError(f"{where}: expected a number of seconds (0: no limit), got {value!r}")
            config.time_budget = float(value)
        else:
            raise ConfigError(f"{path}: [tool.tapecheck] unknown key {key!r} (known: {', '.join(KEYS)})")
    config.select |= extend_select  # on top of `select`, wherever it stands in the table; `ignore` still wins
    return config


def load(path: str) -> Config:
    """The settings in the file named by `--config`."""
    if not os.path.isfile(path):
        raise ConfigError(f"{path}: no such configuration file")
    table = _table(path)
    if table is None:
        raise ConfigError(f"{path}: has no [tool.tapecheck] table")
    return parse(table, path)


@dataclass
class Overrides:
    """Command-line flags that take precedence over every configuration file."""

    select: set[str] | None = None  # replaces the configured select (extend-select too) and ignore
    ignore: set[str] = field(default_factory=set)  # added to the configured ignore
    extend_select: set[str] = field(default_factory=set)  # added to the selection

    @classmethod
    def from_flags(cls, select: str | None, ignore: str | None, extend_select: str | None = None) -> "Overrides":
        return cls(
            select=_selectors(select, "--select") if select is not None else None,
            ignore=_selectors(ignore, "--ignore") if ignore is not None else set(),
            extend_select=_selectors(extend_select, "--extend-select") if extend_select is not None else set(),
        )

    def apply(self, config: Config) -> Config:
        if self.select is not None:
            config.select, config.ignore = set(self.select), set()
        config.select |= self.extend_select
        config.ignore |= self.ignore
        return config


class Settings:
    """Finds and caches the configuration for each path of a run."""

    def __init__(self, config_file: str | None = None, overrides: Overrides | None = None):
        self.overrides = overrides or Overrides()
        self._fixed = self.overrides.apply(load(config_file)) if config_file else None
        self._by_folder: dict[str, Config] = {}

    def for_path(self, path: str) -> Config:
        if self._fixed is not None:
            return self._fixed
        folder = os.path.abspath(path if os.path.isdir(path) else os.path.dirname(path) or ".")
        return self._for_folder(folder)

    def _for_folder(self, folder: str) -> Config:
        cached = self._by_folder.get(folder)
        if cached is not None:
            return cached
        candidate = os.path.join(folder, "pyproject.toml")
        table = _table(candidate) if os.path.isfile(candidate) else None
        if table is not None:
            config = self.overrides.apply(parse(table, candidate))
        else:
            parent = os.path.dirname(folder)
            config = self._for_folder(parent) if parent != folder else self.overrides.apply(Config(root=os.getcwd()))
        self._by_folder[folder] = config
        return config

    def enabled(self, code: str, path: str) -> bool:
        return self.for_path(path).enabled(code, path)

    def rules_for(self, paths) -> list:
        """The catalog's rules that some file of `paths` may report: the ones selected and
        not ignored by the configuration of at least one of them. Only these run; the
        per-file ignores still filter their findings afterwards."""
        configs = {id(config): config for config in map(self.for_path, paths)}.values()
        return [rule for rule in RULES if any(rule.code in c.select and rule.code not in c.ignore for c in configs)]

    def excluded(self, path: str, is_dir: bool) -> bool:
        """Whether discovery skips this file or folder: the settings of the folder holding it decide."""
        config = self._fixed or self._for_folder(os.path.dirname(os.path.abspath(path)))
        return config.excluded(path, is_dir)


def keras_version(config: Config, path: str, detected: dict[str, str]) -> tuple[str, str | None]:
    """The Keras a file's code targets, and why when it is Keras 2: the configured
    `keras-version`, else "2" when the file's own code imports `tf_keras` or sets
    `TF_USE_LEGACY_KERAS` (`detected`: path -> why, parallel.keras2_reason), else "3".
    Another file of the run, or a comment, never decides it."""
    if config.keras_version is not None:
        why = f'keras-version = "{config.keras_version}" in {config.path}' if config.keras_version == "2" else None
        return config.keras_version, why
    why = detected.get(path)
    return ("2", why) if why is not None else ("3", None)


def for_keras(finding, version: str):
    """A finding as the targeted Keras sees it: findings carrying `details["keras2"]` (TAP302)
    are dropped for Keras 2 when it is None (Keras 2 has that API), else re-worded. None: dropped."""
    if version != "2" or "keras2" not in finding.details:
        return finding
    message = finding.details["keras2"]
    if message is None:
        return None
    import dataclasses

    return dataclasses.replace(finding, message=message)

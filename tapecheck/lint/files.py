"""Find the files to lint under the paths a user names.

Folders are walked recursively, skipping what ruff skips by default (version-control
folders, virtual environments, `site-packages`, build output, caches, `node_modules`)
and whatever `.gitignore` files ignore. A file or folder named explicitly is always
linted, whatever its name (unless `--force-exclude`).
"""

from __future__ import annotations

import os
import stat
from typing import Callable, Iterable

from tapecheck.findings import FileError

SOURCE_SUFFIXES = (".py", ".pyi", ".ipynb")
# ruff's default `exclude` (every name of it), and tapecheck's own cache and bytecode folders.
RUFF_EXCLUDES = (
    ".bzr", ".direnv", ".eggs", ".git", ".git-rewrite", ".hg", ".ipynb_checkpoints", ".mypy_cache", ".nox",
    ".pants.d", ".pyenv", ".pytest_cache", ".pytype", ".ruff_cache", ".svn", ".tox", ".venv", ".vscode",
    "__pypackages__", "_build", "buck-out", "build", "dist", "node_modules", "site-packages", "venv",
)
SKIP_DIRS = frozenset(RUFF_EXCLUDES + ("__pycache__", ".tapecheck_cache"))


def _is_virtualenv(path: str) -> bool:
    return os.path.isfile(os.path.join(path, "pyvenv.cfg"))


class _GitIgnores:
    """The .gitignore files that apply to a walk, read once per folder."""

    def __init__(self):
        self._specs: dict[str, object | None] = {}

    def _spec(self, folder: str):
        if folder not in self._specs:
            spec = None
            try:
                with open(os.path.join(folder, ".gitignore"), encoding="utf-8", errors="replace") as handle:
                    lines = handle.read().splitlines()
                from pathspec import GitIgnoreSpec

                spec = GitIgnoreSpec.from_lines(lines)
            except OSError:
                pass
            self._specs[folder] = spec
        return self._specs[folder]

    def ignored(self, path: str, is_dir: bool, folders: list[str]) -> bool:
        for folder in folders:
            spec = self._spec(folder)
            if spec is None:
                continue
            relative = os.path.relpath(path, folder).replace(os.sep, "/")
            if is_dir:
                relative += "/"
            if spec.match_file(relative):
                return True
        return False


def _repo_folders(root: str) -> list[str]:
    """Folders from the enclosing git work tree's top down to (not including) root."""
    folders = []
    current = os.path.abspath(root)
    while True:
        parent = os.path.dirname(current)
        if os.path.exists(os.path.join(current, ".git")):
            folders.append(current)
            break
        if parent == current:
            return []  # not inside a git work tree: only the walk's own .gitignore files count
        folders.append(current)
        current = parent
    folders.reverse()
    return folders[:-1] if folders and folders[-1] == os.path.abspath(root) else folders


def tidy(path: str) -> str:
    """The path as ruff prints it: without the `./` that walking `.` puts in front
    (`./train.py` is `train.py`). Only leading `./` parts go, so a symlink's `..` keeps
    its meaning; `.` itself stays `.`."""
    sep = os.sep + (os.altsep or "")
    while path.startswith(".") and len(path) > 2 and path[1] in sep:
        path = path[2:].lstrip(sep) or "."
    return path


def _default_excluded(path: str, is_dir: bool) -> bool:
    return is_dir and os.path.basename(path) in SKIP_DIRS


def discover(
    paths: Iterable[str],
    excluded: Callable[[str, bool], bool] | None = None,
    force_exclude: bool = False,
) -> tuple[list[str], list[FileError]]:
    """The files to lint (sorted, without repeats) and errors for paths that do not exist.

    `excluded(path, is_dir)` (the configuration's `exclude`, by default the
    SKIP_DIRS names) prunes the walk; it applies to files named on the command
    line only with `force_exclude` (what pre-commit needs).
    """
    excluded = excluded or _default_excluded
    files: dict[str, None] = {}
    errors: list[FileError] = []
    ignores = _GitIgnores()
    for given in paths:
        if force_exclude and _excluded_with_parents(given, excluded):
            continue  # pre-commit names files one by one: `exclude` must still apply to them
        if os.path.isdir(given):
            for path in _walk(given, ignores, excluded):
                if _special(path):
                    errors.append(FileError(path, "not a regular file (a FIFO, socket or device), skipped"))
                else:
                    files.setdefault(tidy(path))
        elif os.path.exists(given) or os.path.islink(given):
            if _special(given):
                errors.append(FileError(given, "not a regular file (a FIFO, socket or device), skipped"))
            else:
                files.setdefault(tidy(given))
        else:
            errors.append(FileError(given, "no such file or directory"))
    return sorted(files), list(dict.fromkeys(errors))


def _excluded_with_parents(given: str, excluded: Callable[[str, bool], bool]) -> bool:
    """Whether a named path, or a folder it lies in, is excluded (`--force-exclude`).

    Only the folders below the working folder count (as the path is written), so a
    project that itself lives under a folder named `build` is still linted.
    """
    absolute = os.path.abspath(given)
    if excluded(given, os.path.isdir(given)):
        return True
    relative = os.path.relpath(absolute)
    if relative == os.curdir or relative.startswith(os.pardir):
        return False
    parent = os.path.dirname(relative)
    while parent:
        if excluded(parent, True):
            return True
        parent = os.path.dirname(parent)
    return False


def _special(path: str) -> bool:
    """A FIFO, socket or device: opening one to read can block forever, and it holds no source."""
    try:
        mode = os.stat(path).st_mode
        return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))
    except OSError:
        return False  # missing or a broken link: reading it reports the problem


def _walk(root: str, ignores: _GitIgnores, excluded: Callable[[str, bool], bool]) -> Iterable[str]:
    base_folders = _repo_folders(root)
    if base_folders and ignores.ignored(os.path.abspath(root), True, base_folders):
        base_folders = []  # the user named an ignored folder: lint it, honour only its own .gitignore files
    seen: set[tuple[int, int]] = set()  # (device, inode) of folders: symlink loops end here

    def walk(folder: str, real_folders: list[str]):
        try:
            stat = os.stat(folder)
        except OSError:
            return
        key = (stat.st_dev, stat.st_ino)
        if key in seen:
            return
        seen.add(key)
        folders = real_folders + [os.path.abspath(folder)]
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            return
        for entry in entries:
            absolute = os.path.join(folders[-1], entry.name)
            try:
                is_dir = entry.is_dir()
            except OSError:  # a symlink loop: reading it reports the loop
                if entry.name.endswith(SOURCE_SUFFIXES) and not excluded(absolute, False):
                    yield entry.path
                continue
            if is_dir:
                if excluded(absolute, True) or _is_virtualenv(entry.path):
                    continue
                if ignores.ignored(absolute, True, folders):
                    continue
                yield from walk(entry.path, folders)
            elif entry.name.endswith(SOURCE_SUFFIXES):
                if not excluded(absolute, False) and not ignores.ignored(absolute, False, folders):
                    yield entry.path

    yield from walk(root, base_folders)

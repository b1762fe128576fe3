"""The project's other files: which file `import module` reads (`module_file`: nearby
folders only; libraries are never read) and the files a source imports, for cache keys
(`dependencies`). The models of those files are built in `program.py` (`load_module`).
"""

from __future__ import annotations

import os
import re


# -- other files of the project ----------------------------------------------------------
LIBRARIES = frozenset({"tensorflow", "keras", "tf_keras", "numpy", "scipy", "sklearn", "torch", "jax", "pandas"})


MAX_MODULE_BYTES = 512 * 1024


MAX_MODULES = 64  # other files kept per process


SEARCH_LEVELS = 6  # folders above the importing file searched for an absolute import


_modules: dict[str, tuple[tuple[int, int], object]] = {}  # path -> (stamp, its ProgramModel or None)


def module_file(importer: str, module: str, relative: bool) -> str | None:
    """The file that `import module` (or `from .module import`) in `importer` reads, if it is nearby.

    Relative imports are looked up from the importer's folder up; absolute ones from the
    importer's folder and the folders above it (a script beside its modules, a `src/` layout).
    Libraries are never read: only the project's own files inform the model."""
    if not module or module.split(".")[0] in LIBRARIES:
        return None
    folder = os.path.dirname(os.path.abspath(importer))
    parts = module.split(".")
    for _ in range(1 if relative else SEARCH_LEVELS):
        base = os.path.join(folder, *parts)
        for candidate in (base + ".py", os.path.join(base, "__init__.py")):
            if os.path.isfile(candidate) and os.path.abspath(candidate) != os.path.abspath(importer):
                return candidate
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    return None


def dependencies(path: str, source: bytes) -> list[str]:
    """The project files `source` imports (those the model may read), for cache keys."""
    found = []
    for match in _IMPORT.finditer(source):
        dots, module, names = match.group(1) or b"", match.group(2) or b"", match.group(3) or match.group(4) or b""
        relative = bool(dots)
        module_text = module.decode("utf-8", "replace").strip()
        candidates = [module_text] if module_text else []
        for name in re.split(rb"[,\s()]+", names):
            name = name.split(b" as ")[0].strip().decode("utf-8", "replace")
            if name and name.isidentifier():
                candidates.append(f"{module_text}.{name}" if module_text else name)
        for candidate in candidates:
            file = module_file(path, candidate, relative)
            if file is not None and file not in found:
                found.append(file)
    return found


_IMPORT = re.compile(rb"^[ \t]*(?:from[ \t]+(\.*)([\w.]*)[ \t]+import[ \t]+([^\n#;]+)|import[ \t]+([^\n#;]+))", re.M)

"""Running a fixture script in this process as its own `__main__` would run."""

from __future__ import annotations

import contextlib
import io
import sys
import warnings
from pathlib import Path


@contextlib.contextmanager
def fixture_run(path: Path):
    """Its folder importable (a fixture may import a sibling module), `sys.argv` its own, its
    prints and warnings kept quiet; all put back after."""
    siblings = {p.stem for p in path.parent.glob("_*.py")}  # `_data`: other fixture folders have one too
    for name in siblings:
        sys.modules.pop(name, None)  # imported afresh from this fixture's own folder
    sys.path.insert(0, str(path.parent))
    saved_argv, sys.argv = sys.argv, [str(path)]
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        sys.argv = saved_argv
        sys.path.remove(str(path.parent))
        for name in siblings:
            sys.modules.pop(name, None)

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
    sys.path.insert(0, str(path.parent))
    saved_argv, sys.argv = sys.argv, [str(path)]
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        sys.argv = saved_argv
        sys.path.remove(str(path.parent))

"""Fixtures written the way real projects are (trainer classes, loss helpers, Keras layers,
losses given to `compile`, two-module projects), for what the program model must see.

- `fixtures/model/bad/`: each gives exactly its `# expect:` findings, and run under real
  TensorFlow it fails as its docstring's `fails-with:` line says.
- `fixtures/model/good/`: each corrected twin is clean, and runs to the end.

All fixtures run in this process (one TensorFlow import), as `__main__`.
"""

from __future__ import annotations

import contextlib
import io
import re
import runpy
import sys
import warnings
from pathlib import Path

import pytest

from expectations import expected, found
from tapecheck.lint import lint_paths

ROOT = Path(__file__).resolve().parents[1] / "fixtures" / "model"
BAD = sorted((ROOT / "bad").glob("*.py"))
GOOD = sorted((ROOT / "good").glob("*.py"))
FAILS_WITH = re.compile(r"^fails-with: (\w+): (.+)$", re.M)


def runnable(paths):
    return [p for p in paths if not p.name.startswith("_")]


_FOLDERS: dict[Path, tuple[list, dict[Path, list]]] = {}


def findings_of(path: Path):
    """Lint the fixture's folder as one project (a fixture may import a sibling module);
    each folder is linted once per session, its findings indexed by file."""
    folder = path.parent.resolve()
    if folder not in _FOLDERS:
        report = lint_paths([str(folder)], jobs=1)
        by_file: dict[Path, list] = {}
        for f in report.findings:
            by_file.setdefault(Path(f.path).resolve(), []).append(f)
        _FOLDERS[folder] = (report.errors, by_file)
    errors, by_file = _FOLDERS[folder]
    assert errors == []
    return list(by_file.get(path.resolve(), []))


def test_there_are_fixtures_of_both_kinds():
    assert len(BAD) >= 3 and len(GOOD) >= 3
    assert {p.name for p in BAD} == {p.name for p in GOOD}, "every bad fixture has a corrected twin of the same name"


@pytest.mark.parametrize("path", BAD, ids=lambda p: p.name)
def test_bad_fixture_gives_exactly_its_annotated_findings(path):
    expectations = expected(path.read_text(encoding="utf-8"))
    if not path.name.startswith("_"):
        assert expectations or FAILS_WITH.search(path.read_text(encoding="utf-8"))
    assert found(findings_of(path)) == expectations


@pytest.mark.parametrize("path", GOOD, ids=lambda p: p.name)
def test_good_fixture_is_clean(path):
    assert expected(path.read_text(encoding="utf-8")) == []
    assert findings_of(path) == []


def run(path: Path):
    """Run a fixture as `__main__`; the exception it raised, or None."""
    pytest.importorskip("tensorflow")
    sys.path.insert(0, str(path.parent))
    saved_argv, sys.argv = sys.argv, [str(path)]
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            runpy.run_path(str(path), run_name="__main__")
    except Exception as exc:  # noqa: BLE001 - the failure the fixture claims
        return exc
    finally:
        sys.path.remove(str(path.parent))
        sys.argv = saved_argv
        for name in [n for n, m in sys.modules.items() if getattr(m, "__file__", "") and str(path.parent) in str(m.__file__)]:
            del sys.modules[name]  # a sibling module of one project must not leak into the next
    return None


@pytest.mark.parametrize("path", runnable(BAD), ids=lambda p: p.name)
def test_bad_fixture_fails_under_tensorflow_as_it_claims(path):
    claim = FAILS_WITH.search(path.read_text(encoding="utf-8"))
    assert claim, f"{path.name} says in its docstring how it fails (`fails-with: Type: message`)"
    error = run(path)
    assert error is not None, f"{path.name} ran to the end"
    assert type(error).__name__ == claim.group(1) and claim.group(2) in str(error), repr(error)


@pytest.mark.parametrize("path", runnable(GOOD), ids=lambda p: p.name)
def test_good_fixture_runs_under_tensorflow(path):
    assert run(path) is None


def test_a_file_linted_alone_still_reads_the_modules_it_imports():
    """Pre-commit names only the staged files: the project's other files must still inform them."""
    trainer = ROOT / "bad" / "project_trainer.py"
    report = lint_paths([str(trainer)], jobs=1)
    assert found(report.findings) == expected(trainer.read_text(encoding="utf-8"))
    assert "line 9 of _project_losses.py" in report.findings[0].message


def test_the_cache_follows_an_edit_of_an_imported_module(tmp_path):
    from tapecheck.lint.cache import Cache

    for name in ("project_trainer.py", "_project_losses.py"):
        (tmp_path / name).write_bytes((ROOT / "bad" / name).read_bytes())
    trainer = str(tmp_path / "project_trainer.py")
    cache = Cache(root=str(tmp_path / ".cache"))
    assert [f.code for f in lint_paths([trainer], jobs=1, cache=cache).findings] == ["TAP104"]
    (tmp_path / "_project_losses.py").write_bytes((ROOT / "good" / "_project_losses.py").read_bytes())
    assert lint_paths([trainer], jobs=1, cache=cache).findings == []
    (tmp_path / "_project_losses.py").write_bytes((ROOT / "bad" / "_project_losses.py").read_bytes())
    assert [f.code for f in lint_paths([trainer], jobs=1, cache=cache).findings] == ["TAP104"]

"""The static pass: `tapecheck lint`. Never imports TensorFlow or the code it reads.

Files to facts (`files`, `source`, `extract`, `facts`: read, screen, parse, one walk), the
engine that runs the rules on them (`engine`; `parallel` for many files, `cache`), and what
users see (`output`, `fixes`/`fixing`, `notebooks`, `suppressions`, `cli`). The program model
the rules ask is its own package, `tapecheck.model`.
"""

__all__ = ["LintError", "Report", "lint_file", "lint_paths", "lint_source"]
_HOMES = {"LintError": "source", "Report": "engine", "lint_file": "engine", "lint_source": "engine", "lint_paths": "parallel"}


def __getattr__(name):
    # Lazy, so that `import tapecheck.lint.facts` (the model's input) loads no engine and no rules.
    if name in _HOMES:
        import importlib

        return getattr(importlib.import_module(f"tapecheck.lint.{_HOMES[name]}"), name)
    raise AttributeError(f"module 'tapecheck.lint' has no attribute {name!r}")

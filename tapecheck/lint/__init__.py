"""The static pass: `tapecheck lint`. Never imports TensorFlow or the code it reads."""

__all__ = ["LintError", "Report", "lint_file", "lint_paths", "lint_source"]


def __getattr__(name):
    # Lazy, so that rule modules can import `tapecheck.lint.facts` while the
    # rule catalog (which the engine imports) is still loading.
    if name in __all__:
        from tapecheck.lint import engine

        return getattr(engine, name)
    raise AttributeError(f"module 'tapecheck.lint' has no attribute {name!r}")

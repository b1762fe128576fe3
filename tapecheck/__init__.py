"""tapecheck: find the silent mistakes of tf.GradientTape training loops.

`tapecheck lint` reads source and never imports TensorFlow; `tapecheck.probe()`
watches real training. Both report the same rule codes (see `tapecheck rules`).
"""

from tapecheck._version import __version__  # noqa: F401


def __getattr__(name):
    # The probe imports TensorFlow; keep `import tapecheck` (and the linter) light.
    if name == "probe":
        from tapecheck.probe import probe

        return probe
    raise AttributeError(f"module 'tapecheck' has no attribute {name!r}")

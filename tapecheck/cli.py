"""The `tapecheck` command.

Each subcommand lives in its own module and is imported only when it runs, so
`tapecheck --version` and `tapecheck lint` never pay for TensorFlow.
"""

from __future__ import annotations

import importlib

import click

from tapecheck import __version__

# name -> "module:attribute" of a click command
SUBCOMMANDS = {
    "lint": "tapecheck.lint.cli:lint",
    "rules": "tapecheck.lint.cli:rules",
    "rule": "tapecheck.lint.cli:rule",
    "probe": "tapecheck.probe.cli:probe",
    "reference": "tapecheck.reference:cli",
    "align": "tapecheck.align:cli",
}


# What the runtime commands need beyond the linter's own dependencies.
OPTIONAL_RUNTIME = {"tensorflow", "keras", "numpy", "sklearn", "matplotlib"}


class LazyGroup(click.Group):
    def list_commands(self, ctx):
        return list(SUBCOMMANDS)

    def get_command(self, ctx, name):
        target = SUBCOMMANDS.get(name)
        if target is None:
            return None
        module_name, attr = target.split(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            missing = (exc.name or "").split(".")[0]
            if missing not in OPTIONAL_RUNTIME:
                raise
            raise click.UsageError(
                f"`tapecheck {name}` needs {missing!s}, which is not installed. "
                "Install TensorFlow or tapecheck with an extra: "
                "pip install 'tapecheck[tensorflow-cpu]' (or [tensorflow], or [runtime] "
                "beside a TensorFlow you already have)."
            ) from None
        return getattr(module, attr)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="tapecheck")
def main():
    """Find the silent mistakes of tf.GradientTape custom training loops."""

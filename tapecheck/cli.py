"""The `tapecheck` command.

Each subcommand lives in its own module and is imported only when it runs, so
`tapecheck --version` and `tapecheck lint` never pay for TensorFlow.
"""

from __future__ import annotations

import importlib
import os

import click

from tapecheck._version import __version__

# name -> ("module:attribute" of a click command, one-line help shown by `tapecheck --help`)
SUBCOMMANDS = {
    "lint": ("tapecheck.lint.cli:lint", "Lint files and folders for GradientTape pitfalls."),
    "check": ("tapecheck.lint.cli:lint", "The same as `lint` (ruff's spelling)."),
    "rules": ("tapecheck.lint.cli:rules", "List every rule: code, name, where it is checked."),
    "rule": ("tapecheck.lint.cli:rule", "Print the documentation of one rule."),
    "probe": ("tapecheck.probe.cli:probe", "Run a training script and report what its tapes and metrics did."),
    "reference": ("tapecheck.reference:cli", "Train with the reference custom loop."),
    "align": ("tapecheck.align:cli", "Prove a custom loop does what fit does, step by step."),
    "server": ("tapecheck.server:cli", "Run the language server (LSP over stdio) for editors."),
}
# Commands that are tapecheck's own TensorFlow programs: keep TF's start-up banner quiet.
QUIET_TENSORFLOW = {"reference", "align"}

# What the runtime commands need beyond the linter's own dependencies.
OPTIONAL_RUNTIME = {"tensorflow", "keras", "numpy", "sklearn", "matplotlib"}


class LazyGroup(click.Group):
    def list_commands(self, ctx):
        return list(SUBCOMMANDS)

    def format_commands(self, ctx, formatter):
        # From the table, so that `--help` imports neither libcst nor TensorFlow.
        with formatter.section("Commands"):
            formatter.write_dl([(name, help_text) for name, (_, help_text) in SUBCOMMANDS.items()])

    def resolve_command(self, ctx, args):
        # what follows the subcommand's name: get_command (which sets TensorFlow's log level
        # before the import) must know whether `-v` asked for TensorFlow's own lines
        self._verbose_args = any(arg in ("-v", "--verbose") for arg in args[1:])
        return super().resolve_command(ctx, args)

    def get_command(self, ctx, name):
        if name not in SUBCOMMANDS:
            return None
        module_name, attr = SUBCOMMANDS[name][0].split(":")
        verbose = getattr(self, "_verbose_args", False)  # `-v` shows TensorFlow's own lines
        if name in QUIET_TENSORFLOW and "TF_CPP_MIN_LOG_LEVEL" not in os.environ and not verbose:
            os.environ["TF_CPP_MIN_LOG_LEVEL"] = "1"
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

"""`tapecheck server`: a Language Server (LSP over stdio) for editors.

The protocol is pygls + lsprotocol (tapecheck/server/lsp.py), imported only when the
server starts: `tapecheck --help` and `tapecheck lint` never load them. What a buffer
shows is worked out in tapecheck/server/linting.py with the linter's own engine.
"""

from __future__ import annotations

import sys

import click

# Where the rule pages (rules/TAP101.md ...) are published, when they are. The project
# has no public site yet: diagnostics then link to the page in the checkout tapecheck
# runs from (a file URI), and carry no link from an installed wheel.
RULES_BASE_URL: str | None = None


@click.command()
@click.option("--stdio", is_flag=True, help="Talk over standard input and output (the default and only transport).")
def cli(stdio):
    """Run the language server over stdio: diagnostics as you type, quick fixes, suppressions.

    Editors start it themselves; see the README's "Editor integration".
    """
    from tapecheck.server.lsp import serve

    sys.exit(serve())

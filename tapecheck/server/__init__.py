"""`tapecheck server`: a Language Server (LSP over stdio) for editors.

The protocol is pygls + lsprotocol (tapecheck/server/lsp.py), imported only when the
server starts: `tapecheck --help` and `tapecheck lint` never load them. What a buffer
shows is worked out in tapecheck/server/linting.py with the linter's own engine.
"""

from __future__ import annotations

import sys

import click

@click.command()
@click.option("--stdio", is_flag=True, help="Talk over standard input and output (the default and only transport).")
def cli(stdio):
    """Run the language server over stdio: diagnostics as you type, quick fixes, suppressions.

    Editors start it themselves; see the README's "Editor integration".
    """
    from tapecheck.server.lsp import serve

    sys.exit(serve())

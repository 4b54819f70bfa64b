"""``torchpact server``: lint in the editor, as a Language Server over stdio.

Built on pygls and lsprotocol (the optional extra ``torchpact[server]``): pygls is the maintained
Python LSP framework (Microsoft's template for Python-tool extensions and many servers use it); it does
the JSON-RPC, the document synchronisation (incremental edits, notebook documents, position encodings)
and ships a client the tests drive the server with; lsprotocol is the protocol's types generated from
the LSP specification itself. Lint stays pure Python and stdlib ``ast``; only this package imports them,
and only when the server starts.
"""

from __future__ import annotations


def serve() -> int:
    """Run the server on stdin/stdout until the client says exit. Raises ImportError when pygls is missing."""
    from torchpact.server.app import create_server

    create_server().start_io()
    return 0

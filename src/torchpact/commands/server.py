"""``torchpact server``: the Language Server over stdio (needs the ``server`` extra)."""

from __future__ import annotations

import argparse

from torchpact.commands.outcome import Outcome, UsageError


def execute(args: argparse.Namespace) -> Outcome:
    try:
        import lsprotocol  # noqa: F401
        import pygls  # noqa: F401
    except ImportError:
        raise UsageError("torchpact server needs pygls: pip install 'torchpact[server]'") from None
    from torchpact.server import serve

    return Outcome(code=serve())

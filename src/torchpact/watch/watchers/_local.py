"""This rank's own data of a parameter: a sharded DTensor (FSDP2, tensor parallel) as its local shard.

Watchers read parameters on sampled steps; an op on a DTensor would run a collective (a norm
all-reduces, a reshape may all-gather), which an observer must never add.
"""

from __future__ import annotations

from typing import Any


def local(t: Any) -> Any:
    """``t.to_local()`` for a DTensor (or a Parameter wrapping one), else ``t`` itself, detached."""
    t = t.detach()
    to_local = getattr(t, "to_local", None)
    return to_local() if callable(to_local) else t

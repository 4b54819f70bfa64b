"""Text on the HTML page: escaping, and numbers as the page's tables and axes show them."""

from __future__ import annotations

import html
import math
from typing import Any


def e(value: Any) -> str:
    """Escape anything for HTML text and attribute values."""
    return html.escape("" if value is None else str(value), quote=True)

def number(v: float) -> str:
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 1e4 or a < 1e-3:
        return f"{v:.1e}"
    if a >= 100:
        return f"{v:.0f}"
    return f"{v:.3g}"


def tick_label(v: float, step: float) -> str:
    """A tick label with as many decimals as the tick spacing needs (2.295, 2.3, 2.305 — not 2.3 thrice)."""
    if not step or abs(v) >= 1e5 or (v and abs(v) < 1e-3 and step < 1e-3):
        return number(v)
    decimals = max(0, -math.floor(math.log10(step) + 1e-9))
    return f"{v:.{min(decimals, 6)}f}"


def size(v: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(v) < 1024 or unit == "TiB":
            return f"{v:.0f} {unit}" if unit == "B" else f"{v:.1f} {unit}"
        v /= 1024
    return str(v)


def duration(v: float) -> str:
    return f"{v * 1000:.3g} ms" if v < 1 else f"{v:.3g} s"

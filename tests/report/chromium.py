"""Real headless Chromium for the HTML report tests: a screenshot, the console, the DOM.

Console messages reach stderr with ``--enable-logging=stderr`` as ``INFO:CONSOLE:<line>] "<text>",
source: <url>``; the report page has no script, so any console line at all — a Content-Security-Policy
violation from an injected ``<img onerror>`` or ``<script>``, a failed load — is an error.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-quic",
         "--no-first-run", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
         "--enable-logging=stderr", "--v=0"]
_CONSOLE = re.compile(r":CONSOLE(?:\(\d+\)|:\d+)\] (.*)$")
MISSING = ("Chromium is not installed (`make chromium` installs Debian's `chromium` package, as root with "
           "apt-get), so the HTML page was not rendered in a browser")


def binary() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


def require() -> str:
    path = binary()
    if path is None:
        pytest.skip(MISSING)
    return path


@dataclass
class Rendered:
    console: list[str]
    stderr: str
    dom: str | None = None
    screenshot: Path | None = None


def render(page: Path, *, screenshot: Path | None = None, dom: bool = False, width: int = 1200,
           height: int = 2400, timeout: float = 90) -> Rendered:
    """Load ``page`` (a file) in headless Chromium; take a screenshot or dump the DOM."""
    exe = require()
    with tempfile.TemporaryDirectory(prefix="torchpact-chromium-") as profile:
        args = [exe, *FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}"]
        if dom:
            args.append("--dump-dom")
        elif screenshot is not None:
            args.append(f"--screenshot={screenshot}")
        args.append(page.resolve().as_uri())
        env = dict(os.environ, HOME=profile)  # chromium writes its crash and font caches under HOME
        proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env)
    console = [m.group(1) for line in proc.stderr.splitlines() if (m := _CONSOLE.search(line))]
    if proc.returncode != 0:
        raise AssertionError(f"chromium exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return Rendered(console=console, stderr=proc.stderr, dom=proc.stdout if dom else None,
                    screenshot=screenshot if screenshot is not None and screenshot.exists() else None)

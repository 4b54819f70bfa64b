"""Where each rule's page lives on the web, for SARIF's ``helpUri`` and the HTML report's links.

The pages are docs/rules/TPnnn.md of the repository. ``TORCHPACT_RULES_URL`` points the links
elsewhere (a mirror, a pinned tag, a local checkout's ``file:///.../docs/rules/``).
"""

from __future__ import annotations

import os

PROJECT_URL = "https://github.com/torchpact/torchpact"
RULES_URL = f"{PROJECT_URL}/blob/main/docs/rules/"


def rules_base() -> str:
    """The URL the rule pages are under, ending in ``/``."""
    base = os.environ.get("TORCHPACT_RULES_URL") or RULES_URL
    return base if base.endswith("/") else base + "/"


def rule_url(code: str) -> str:
    """The web address of a code's page."""
    return f"{rules_base()}{code}.md"

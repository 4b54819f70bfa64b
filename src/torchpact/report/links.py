"""Where the rule pages live on the web, only when the user says so: SARIF's ``helpUri``.

torchpact is not published at a public address, so no report links to one: SARIF carries each rule's
text in its rule table (``help``), and the HTML page in its own Rules section. ``TORCHPACT_RULES_URL``
names a place where the user serves ``docs/rules/`` (an internal mirror, a pinned tag of their copy,
a checkout's ``file:///.../docs/rules/``); SARIF's rules then link there as well.
"""

from __future__ import annotations

import os


def rules_base() -> str | None:
    """The URL the rule pages are under, ending in ``/``; None when none was given."""
    base = os.environ.get("TORCHPACT_RULES_URL")
    if not base:
        return None
    return base if base.endswith("/") else base + "/"


def rule_url(code: str) -> str | None:
    """The web address of a code's page, when ``TORCHPACT_RULES_URL`` gives one."""
    base = rules_base()
    return f"{base}{code}.md" if base else None

"""The package layout of DESIGN.md: the middle packages do not import each other (except launch -> watch)."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize("module", ["torchpact.audit.export", "torchpact.audit.compile", "torchpact.audit._common"])
def test_audit_does_not_import_watch(module):
    code = (f"import sys, {module}; "
            "print(sorted(m for m in sys.modules if m.startswith(('torchpact.watch', 'torchpact.launch', "
            "'torchpact.lint'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_shared_check_and_user_file_test_are_one():
    from torchpact import checks, userframes
    from torchpact.audit import _common, export
    from torchpact.watch import frames, watcher

    assert watcher.Check is checks.Check is export.Check
    assert frames.is_user_file is userframes.is_user_file is _common.is_user_file
    assert not userframes.is_user_file(frames.__file__)  # torchpact's own frames are never the user's
    assert not userframes.is_user_file(subprocess.__file__)
    assert userframes.is_user_file("/home/someone/train.py")

from __future__ import annotations


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "heavy: an architecture test over ~10 s on a loaded 2-core machine; runs in CI, "
        "deselect with -m 'not heavy' for a quick local pass")

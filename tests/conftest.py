from __future__ import annotations


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "proves(*codes): executes the pitfall of these rules with real torch and asserts "
        "the consequence the rule's docs name")

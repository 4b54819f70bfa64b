"""Lint rules, one per file, in one folder per category. Discovered by ``registry.all_rules``."""

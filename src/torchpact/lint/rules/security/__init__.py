"""Lint rules of category `security`."""

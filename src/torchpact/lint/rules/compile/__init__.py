"""Lint rules of category `compile`."""

"""Lint rules of category `export`."""

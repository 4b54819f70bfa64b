"""Lint rules of category `performance`."""

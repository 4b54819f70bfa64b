"""Lint rules of category `data`."""

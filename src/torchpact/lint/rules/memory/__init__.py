"""Lint rules of category `memory`."""

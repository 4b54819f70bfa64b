"""Lint rules of category `distributed`."""

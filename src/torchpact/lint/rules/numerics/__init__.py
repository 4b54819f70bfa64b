"""Lint rules of category `numerics`."""

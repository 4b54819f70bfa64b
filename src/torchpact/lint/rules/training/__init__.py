"""Lint rules of category `training`."""

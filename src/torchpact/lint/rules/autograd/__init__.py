"""Lint rules of category `autograd`."""

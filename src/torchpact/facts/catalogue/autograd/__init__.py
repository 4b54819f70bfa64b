"""Autograd: leaves, grad mode, in-place changes and what backward really uses."""

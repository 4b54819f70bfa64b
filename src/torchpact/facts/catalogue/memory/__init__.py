"""Tensor memory: what shares storage, what copies, and what keeps memory alive."""

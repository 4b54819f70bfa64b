"""Numerics: losses, softmax and float16."""

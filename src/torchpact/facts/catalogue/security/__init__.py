"""Loading checkpoints."""

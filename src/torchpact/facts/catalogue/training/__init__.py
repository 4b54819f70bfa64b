"""Training loops: modules, modes and optimizers."""

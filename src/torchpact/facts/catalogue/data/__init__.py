"""Data loading: samplers and DataLoader options."""

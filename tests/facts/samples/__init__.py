"""Facts that misbehave on purpose, for the runner's tests (not part of the catalogue)."""

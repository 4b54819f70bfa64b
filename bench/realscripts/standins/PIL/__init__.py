"""Stand-in for Pillow: the subset pytorch/examples' super_resolution uses (see Image)."""

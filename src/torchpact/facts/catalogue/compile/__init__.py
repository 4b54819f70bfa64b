"""torch.compile: modes, recompilation and graph breaks."""

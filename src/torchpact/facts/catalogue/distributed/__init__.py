"""DistributedDataParallel on 2 local gloo ranks (CPU)."""

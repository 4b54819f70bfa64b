"""`torchpact run`: the user's script under the watchers (one process; --nproc through torch.distributed.run)."""

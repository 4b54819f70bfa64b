CLAIM = ("`torch.load` defaults to `weights_only=True` (since torch 2.6): a checkpoint that would run code "
         "when unpickled is refused unless `weights_only=False` is passed.")
EXPECTED = "true"


class _RunsCode:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))  # harmless, visible and as arbitrary as os.system


def run() -> str:
    import os
    import pickle
    import tempfile

    import torch

    with tempfile.TemporaryDirectory() as tmp:
        marker, path = os.path.join(tmp, "code-ran"), os.path.join(tmp, "ckpt.pt")
        torch.save({"w": torch.zeros(2), "payload": _RunsCode(marker)}, path)
        torch.save({"w": torch.zeros(2)}, os.path.join(tmp, "plain.pt"))
        print(f"a plain state dict loads: {list(torch.load(os.path.join(tmp, 'plain.pt')))}")
        try:
            torch.load(path)
            refused = False
        except pickle.UnpicklingError:
            refused = True
        print(f"torch.load(path): refused with UnpicklingError: {refused}; code ran: {os.path.exists(marker)}")
        safe = refused and not os.path.exists(marker)
        torch.load(path, weights_only=False)["payload"].close()
        print(f"torch.load(path, weights_only=False): code ran: {os.path.exists(marker)}")
    return "true" if safe else "false"

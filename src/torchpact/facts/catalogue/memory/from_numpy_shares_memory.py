CLAIM = ("`torch.from_numpy(a)` and `t.numpy()` share memory with the array; `torch.tensor(a)` copies "
         "it.")
EXPECTED = "true"


def run() -> str:
    import numpy as np
    import torch

    a = np.zeros(3, dtype=np.float32)
    shared, copied = torch.from_numpy(a), torch.tensor(a)
    a[0] = 7.0
    print(f"after a[0] = 7: from_numpy sees {shared[0].item()}, torch.tensor sees {copied[0].item()}")
    t = torch.zeros(3)
    view = t.numpy()
    t[1] = 5.0
    print(f"after t[1] = 5: t.numpy() sees {view[1]}")
    return "true" if shared[0].item() == 7.0 and copied[0].item() == 0.0 and view[1] == 5.0 else "false"

CLAIM = ("Submodules kept in a plain Python `list` attribute are not registered: `parameters()`, `.to()` "
         "and `state_dict()` miss them; `nn.ModuleList` registers them.")
EXPECTED = "true"


def run() -> str:
    import torch
    from torch import nn

    class Plain(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = [nn.Linear(2, 2), nn.Linear(2, 2)]

    class Registered(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList([nn.Linear(2, 2), nn.Linear(2, 2)])

    for cls in (Plain, Registered):
        m = cls()
        m.double()
        print(f"{cls.__name__}: {len(list(m.parameters()))} parameters, {len(m.state_dict())} state_dict "
              f"entries, layer dtype after .double(): {m.layers[0].weight.dtype}")
    plain = Plain()
    unregistered = not list(plain.parameters()) and plain.double().layers[0].weight.dtype == torch.float32
    return "true" if unregistered else "false"

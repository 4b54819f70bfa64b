CLAIM = "`torch.no_grad()` is thread-local: another thread keeps recording gradients meanwhile."
EXPECTED = "true"


def run() -> str:
    import threading

    import torch

    seen = {}

    def other_thread():
        seen["grad enabled"] = torch.is_grad_enabled()
        seen["result requires grad"] = (torch.ones(1, requires_grad=True) * 2).requires_grad

    with torch.no_grad():
        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join()
        here = torch.is_grad_enabled()
    print(f"grad enabled in the thread that entered no_grad: {here}")
    for key, value in seen.items():
        print(f"in another thread meanwhile, {key}: {value}")
    return "true" if not here and seen["grad enabled"] and seen["result requires grad"] else "false"

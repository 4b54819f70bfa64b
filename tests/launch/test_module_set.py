"""`torchpact run` imports nothing but its own modules: the script's process, and its DataLoader worker
processes, hold the modules a plain `python script.py` holds plus ``torchpact.*`` — in particular no
``torch._dynamo`` (seconds of CPU at start-up) unless the script itself brings it in.

Sets of module names are compared, never timings.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent('''
    import json
    import os
    import sys

    import torch
    import torch.nn as nn
    from torch.utils.data import DataLoader, Dataset

    OUT = sys.argv[1]


    class Squares(Dataset):
        def __len__(self):
            return 16

        def __getitem__(self, i):
            info = torch.utils.data.get_worker_info()
            path = f"{OUT}.worker{info.id}" if info is not None else None
            if path is not None and not os.path.exists(path):  # each worker's modules, at its first item
                with open(path, "w") as fh:
                    json.dump(sorted(sys.modules), fh)
            x = torch.full((3,), float(i))
            return x, x.pow(2).sum()


    model = nn.Linear(3, 1)
    for x, y in DataLoader(Squares(), batch_size=4, num_workers=2):
        loss = (model(x).squeeze(1) - y).pow(2).mean()
        loss.backward()  # no optimizer: torch.optim's constructor is what imports torch._dynamo in torch itself
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.001 * p.grad
                p.grad = None
    with open(f"{OUT}.main", "w") as fh:
        json.dump(sorted(sys.modules), fh)
''')


def _modules(tmp_path, name, cmd):
    out = tmp_path / name
    done = subprocess.run([*cmd, str(out)], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    read = lambda suffix: set(json.loads((tmp_path / f"{name}.{suffix}").read_text()))  # noqa: E731
    return read("main"), [read("worker0"), read("worker1")]


def test_run_adds_only_torchpacts_own_modules_to_the_script_and_its_workers(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    plain_main, plain_workers = _modules(tmp_path, "plain", [sys.executable, str(script)])
    tp_main, tp_workers = _modules(tmp_path, "tp", [sys.executable, "-m", "torchpact", "run", "-q",
                                                    "--format", "json", "--output", str(tmp_path / "r.json"),
                                                    str(script)])
    assert "torch._dynamo" not in plain_main  # the premise: this script does not bring it in
    ours = lambda names: {m for m in names if m != "torchpact" and not m.startswith("torchpact.")}  # noqa: E731
    assert ours(tp_main) == plain_main
    for plain, tp in zip(plain_workers, tp_workers, strict=True):
        assert ours(tp) == plain
    assert "torch._dynamo" not in tp_main


def test_the_standard_library_folders_are_sysconfigs():
    # userframes finds them without importing sysconfig (which the test above would see in the script's process)
    import sysconfig

    from torchpact.userframes import stdlib_dirs

    assert stdlib_dirs() == [sysconfig.get_paths().get(key) for key in ("stdlib", "platstdlib")]

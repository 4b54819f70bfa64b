"""torchpact tells its own frames from the user's and torch's by where its package is, never by a
folder's name: a project in a folder named `torchpact` (what `git clone` of torchpact creates, with
the venv inside it) is the user's code like any other."""

from __future__ import annotations

import os
import textwrap

import torch

from torchpact.launch.single import format_user_exception, is_torch_file, is_torchpact_frame, run_script
from torchpact.userframes import is_user_file

SCRIPT = textwrap.dedent('''
    import torch
    import torch.nn as nn


    def check(total):
        raise ValueError(f"stop after {total.item():.3f}")


    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    total = 0
    for step in range(10):
        loss = model(torch.randn(8, 4)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        total += loss
    check(total)
''')


def test_a_project_in_a_folder_named_torchpact_is_the_users(tmp_path):
    folder = tmp_path / "torchpact" / "src" / "torchpact"  # the clone's own layout, as a user's project
    folder.mkdir(parents=True)
    script = folder / "train.py"
    script.write_text(SCRIPT)
    assert is_user_file(str(script)) and not is_torchpact_frame(str(script)) and not is_torch_file(str(script))

    outcome = run_script(str(script), live=False)
    assert outcome.exit_code == 1
    by_code = {f.code: f for f in outcome.findings}
    assert (by_code["TP101"].path, by_code["TP101"].line) == (str(script), 18)  # `total += loss`
    assert (by_code["TP003"].path, by_code["TP003"].line) == (str(script), 7)   # the raise in check()


def test_torch_and_torchpact_are_told_by_their_package_folders():
    import torchpact.launch.single as single

    assert is_torch_file(torch.nn.functional.__file__) and not is_user_file(torch.nn.functional.__file__)
    assert is_torchpact_frame(single.__file__) and not is_user_file(single.__file__)


def test_the_users_traceback_keeps_frames_under_a_folder_named_torchpact(tmp_path):
    folder = tmp_path / "torchpact"
    folder.mkdir()
    script = folder / "boom.py"
    script.write_text("def f():\n    raise ValueError('boom')\n\n\nf()\n")
    try:
        exec(compile(script.read_text(), str(script), "exec"), {"__name__": "boom"})
    except ValueError as exc:
        text = format_user_exception(exc)
    assert text.count(f'File "{script}"') == 2 and os.path.basename(__file__) in text


def test_a_crash_is_placed_in_the_scripts_folder_not_in_one_whose_name_starts_alike(tmp_path):
    # the script's own code is what lies under its folder: /x/proj holds it, /x/proj2 (a library beside it) not
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj2").mkdir()
    (tmp_path / "proj2" / "helper.py").write_text("def fail():\n    raise RuntimeError('in the library')\n")
    script = tmp_path / "proj" / "train.py"
    script.write_text(f"import sys\nsys.path.insert(0, {str(tmp_path / 'proj2')!r})\nimport helper\n\nhelper.fail()\n")
    outcome = run_script(str(script), live=False)
    [crash] = [f for f in outcome.findings if f.code == "TP003"]
    assert (crash.path, crash.line) == (str(script), 5)

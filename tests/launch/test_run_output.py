"""Where `torchpact run` writes its report: never into the script's own stdout as a document.

Each test runs the real command in a subprocess with its stdout on a real pipe, as
`torchpact run --format json train.py > r.json` would.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

PRINTING = textwrap.dedent('''
    import sys
    import torch
    import torch.nn as nn

    print("epoch 0: loss 1.0")  # the script's own output, as a training script prints it
    model = nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    total = 0
    for _ in range(10):
        loss = model(torch.randn(4, 3)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        total += loss  # keeps every step's graph alive (TP101)
    sys.stdout.write("done, no newline at the end")
''')


def _run(tmp_path, *args):
    script = tmp_path / "train.py"
    script.write_text(PRINTING)
    return subprocess.run([sys.executable, "-m", "torchpact", "run", "--quiet", *args, str(script)],
                          cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)


@pytest.mark.parametrize("fmt", ["json", "sarif"])
def test_a_document_format_without_output_is_refused_before_the_script_runs(tmp_path, fmt):
    out = _run(tmp_path, "--format", fmt)
    assert out.returncode == 2
    assert out.stdout == ""  # not a byte of the script ran
    [line] = out.stderr.splitlines()
    assert line.startswith(f"torchpact: error: run --format {fmt} needs --output FILE")


def test_the_json_report_goes_to_its_file_and_stdout_stays_the_scripts(tmp_path):
    report = tmp_path / "r.json"
    out = _run(tmp_path, "--format", "json", "--output", str(report))
    assert out.returncode == 1, out.stderr  # TP101 is an error
    assert out.stdout == "epoch 0: loss 1.0\ndone, no newline at the end"
    doc = json.loads(report.read_text())
    assert [f["code"] for f in doc["findings"]] == ["TP101"]


def test_github_annotations_on_stdout_each_start_a_line_of_their_own(tmp_path):
    out = _run(tmp_path, "--format", "github")
    assert out.returncode == 1, out.stderr
    lines = out.stdout.splitlines()
    assert lines[:2] == ["epoch 0: loss 1.0", "done, no newline at the end"]
    annotations = [ln for ln in lines[2:] if ln]
    assert annotations and all(ln.startswith("::error ") for ln in annotations), lines
    assert any("TP101" in ln for ln in annotations)

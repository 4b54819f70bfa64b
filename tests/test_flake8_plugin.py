"""The flake8 entry point (``TP`` codes): real flake8 runs lint's rules through it."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("flake8")

TRAIN = textwrap.dedent("""\
    import torch


    def train(model, loader, opt):
        for x, y in loader:
            loss = model(x).sum()
            loss.backward()
            opt.step()
        return torch.log(1 + loss)
""")


# TP319 (an info measured under its bar in blind round 2) is reported only with preview on
PREVIEW = "[tool.torchpact]\npreview = true\n"


def flake8(cwd, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "flake8", "--select", "TP", *args], cwd=cwd, input=stdin,
                          capture_output=True, text=True, timeout=300)


def lines(out: str) -> list[str]:
    return [ln.split(" [")[0] for ln in out.splitlines()]


def test_flake8_reports_what_lint_reports_with_lint_positions(tmp_path):
    (tmp_path / "pyproject.toml").write_text(PREVIEW)
    (tmp_path / "train.py").write_text(TRAIN)
    out = flake8(tmp_path, "train.py")
    assert out.returncode == 1, out.stderr
    assert lines(out.stdout) == ["train.py:8:9: TP401", "train.py:9:12: TP319"]
    assert "TP401 [info] the training loop never clears gradients" in out.stdout
    lint = subprocess.run([sys.executable, "-m", "torchpact", "lint", "--no-cache", "--format", "json", "train.py"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    import json

    found = [(f["line"], f["column"], f["code"]) for f in json.loads(lint.stdout)["findings"]]
    assert found == [(8, 9, "TP401"), (9, 12, "TP319")]


def test_flake8_noqa_config_and_severity_floor(tmp_path):
    (tmp_path / "pyproject.toml").write_text(PREVIEW + 'ignore = ["TP319"]\n')
    (tmp_path / "train.py").write_text(TRAIN.replace("opt.step()", "opt.step()  # noqa: TP401"))
    out = flake8(tmp_path, "train.py")
    assert (out.returncode, out.stdout) == (0, ""), out.stderr  # noqa and the pyproject's ignore
    (tmp_path / "pyproject.toml").write_text(PREVIEW)
    assert lines(flake8(tmp_path, "train.py").stdout) == ["train.py:9:12: TP319"]
    # info findings (advice, heuristics) left out, as `torchpact lint` does not fail on them
    assert flake8(tmp_path, "--torchpact-min-severity", "warning", "train.py").stdout == ""


def test_flake8_on_standard_input_and_a_broken_configuration(tmp_path):
    (tmp_path / "pyproject.toml").write_text(PREVIEW)
    out = flake8(tmp_path, "-", stdin=TRAIN)
    assert lines(out.stdout) == ["stdin:8:9: TP401", "stdin:9:12: TP319"]
    (tmp_path / "pyproject.toml").write_text('[tool.torchpact]\nignroe = ["TP319"]\n')
    (tmp_path / "train.py").write_text(TRAIN)
    out = flake8(tmp_path, "train.py")
    assert "TP001 torchpact cannot use its configuration" in out.stdout and "did you mean 'ignore'" in out.stdout
    assert "Traceback" not in out.stderr

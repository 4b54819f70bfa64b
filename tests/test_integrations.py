"""Where users already are: pre-commit hooks and the example CI workflow stay consistent with the CLI."""

from __future__ import annotations

import shlex
from pathlib import Path

from torchpact.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]


def _yaml_values(path: Path, key: str) -> list[str]:
    # The files are small and flat; reading `key: value` lines keeps YAML out of the test dependencies.
    out = []
    for line in path.read_text().splitlines():
        stripped = line.strip().lstrip("- ")
        if stripped.startswith(f"{key}:"):
            out.append(stripped.split(":", 1)[1].strip())
    return out


def test_pre_commit_hook_entries_parse():
    entries = _yaml_values(ROOT / ".pre-commit-hooks.yaml", "entry")
    assert entries, "no hooks declared"
    for entry in entries:
        argv = shlex.split(entry)
        assert argv[0] == "torchpact"
        build_parser().parse_args([*argv[1:], "some_file.py"])


def test_example_workflow_commands_parse():
    runs = [r for r in _yaml_values(ROOT / "docs" / "ci" / "github-actions.yml", "run") if r.startswith("torchpact")]
    assert len(runs) == 2
    for run in runs:
        args = build_parser().parse_args(shlex.split(run)[1:])
        assert args.command == "lint" and args.format in ("sarif", "github")

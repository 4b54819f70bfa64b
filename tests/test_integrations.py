"""Where users already are: pre-commit hooks and the example CI workflow stay consistent with the CLI."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

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


# ------------------------------------------------------------------------------ installing torchpact
def _project() -> dict:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _yaml_values_text(text: str, key: str) -> list[str]:
    return [line.strip().lstrip("- ").split(":", 1)[1].split(" #")[0].strip() for line in text.splitlines()
            if line.strip().lstrip("- ").startswith(f"{key}:")]


def _install_targets(text: str) -> list[str]:
    """What each `pip install` line of the shell blocks (and the workflow's run lines) installs."""
    blocks = text.split("```sh")[1:] if "```sh" in text else [text]
    lines = [line for block in blocks for line in block.split("```")[0].splitlines()]
    return [shlex.split(line.split("pip install", 1)[1], comments=True)[-1] for line in lines
            if "pip install" in line and not line.lstrip().startswith("#") and "pip install" in line.split("#")[0]]


def _check_installable(target: str) -> None:
    """A pip target that exists: this clone (``.``) or the wheel built from it, with extras it declares."""
    project = _project()
    path, _, extras = target.rstrip("]").partition("[")
    if path.endswith(".whl"):
        assert Path(path).name == f"torchpact-{project['version']}-py3-none-any.whl", target
    else:
        assert path == ".", target  # a clone; torchpact is published nowhere else
    assert set(extras.split(",")) - {""} <= set(project["optional-dependencies"]), target


def test_example_workflow_installs_what_exists():
    targets = _install_targets((ROOT / "docs" / "ci" / "github-actions.yml").read_text())
    assert targets, "the workflow installs nothing"
    for target in targets:
        _check_installable(target)


def _workflow_steps() -> list[dict[str, str]]:
    """The example workflow's steps as ``{key: value}`` (flat, one level under ``- ``)."""
    steps: list[dict[str, str]] = []
    for line in (ROOT / "docs" / "ci" / "github-actions.yml").read_text().splitlines():
        stripped = line.strip()
        if stripped.startswith("#") or ":" not in stripped:
            continue
        if stripped.startswith("- "):
            steps.append({})
        key, _, value = stripped.lstrip("- ").partition(":")
        if steps:
            steps[-1][key.strip()] = value.strip()
    return steps


def test_example_workflow_uploads_with_upload_sarif_v4_and_the_permissions_it_needs():
    text = (ROOT / "docs" / "ci" / "github-actions.yml").read_text()
    permissions = text.split("\npermissions:\n", 1)[1].split("\njobs:", 1)[0]
    granted = dict(_yaml_values_text(permissions, k) and (k, _yaml_values_text(permissions, k)[0])
                   for k in ("contents", "actions", "security-events"))
    # actions: read lets upload-sarif read the run in a private repository; security-events: write uploads
    assert granted == {"contents": "read", "actions": "read", "security-events": "write"}
    uses = [s["uses"] for s in _workflow_steps() if "uses" in s]
    assert "github/codeql-action/upload-sarif@v4" in uses
    assert not any(u.startswith("github/codeql-action/") and not u.endswith("@v4") for u in uses)


def test_example_workflow_skips_the_upload_on_a_fork_pull_request_and_still_annotates():
    steps = _workflow_steps()
    upload = next(s for s in steps if s.get("uses", "").startswith("github/codeql-action/upload-sarif"))
    # a fork's pull request runs with a read-only token: code scanning would refuse the upload and fail the job
    assert "!github.event.pull_request.head.repo.fork" in upload["if"] and "!cancelled()" in upload["if"]
    annotate = next(s for s in steps if "--format github" in s.get("run", ""))
    assert "fork" not in annotate.get("if", "") and "!cancelled()" in annotate["if"]


def test_readme_says_how_to_install_from_a_clone_or_a_wheel():
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Install into your own project", 1)[1].split("\n## ", 1)[0]
    targets = _install_targets(section)
    assert {".", ".[torch]"} <= set(targets)
    assert any(t.endswith(".whl") for t in targets) and any(t.endswith(".whl[torch]") for t in targets)
    for target in targets:
        _check_installable(target)


def test_no_file_sends_users_to_an_address_where_torchpact_is_not():
    # torchpact is not published at github.com/torchpact/torchpact; a git URL in the docs is a marked placeholder
    texts = {p: p.read_text() for p in [ROOT / "README.md", *(ROOT / "docs").rglob("*.md"),
                                         *(ROOT / "docs").rglob("*.yml"), *(ROOT / "src").rglob("*.py")]}
    for path, text in texts.items():
        assert "github.com/torchpact" not in text, path
        for url in re.findall(r"git\+https?://[^\s\"'`]+", text):
            assert "example.com" in url and "YOUR-ORG" in url, (path, url)


def test_readme_pre_commit_snippet_runs_the_installed_torchpact_as_the_declared_hooks_do():
    readme = (ROOT / "README.md").read_text()
    block = next(b for b in readme.split("```yaml")[1:] if "repos:" in b).split("```")[0]
    assert _yaml_values_text(block, "repo") == ["local"]
    hook_entries = {tuple(shlex.split(e)) for e in _yaml_values(ROOT / ".pre-commit-hooks.yaml", "entry")}
    [entry] = [v.split("#")[0].strip() for v in _yaml_values_text(block, "entry")]
    assert tuple(shlex.split(entry)) in hook_entries
    build_parser().parse_args([*shlex.split(entry)[1:], "some_file.py"])
    assert _yaml_values_text(block, "types_or") == _yaml_values(ROOT / ".pre-commit-hooks.yaml", "types_or")[:1]


def test_the_readme_states_no_rule_count_the_registry_contradicts():
    from torchpact.lint.registry import all_rules

    readme = (ROOT / "README.md").read_text()
    for count in re.findall(r"(\d+) lint rules", readme):
        assert int(count) == len(all_rules()), f"README says {count} lint rules; the registry has {len(all_rules())}"


def test_rules_lists_every_code_and_counts_them(capsys):
    from torchpact.cli import main
    from torchpact.lint.registry import all_rules

    assert main(["rules"]) == 0
    out = capsys.readouterr().out
    listed = {line.split()[0] for line in out.splitlines() if re.match(r"TP\d{3}\s", line)}
    assert {"TP001", "TP002"} <= listed and {r.code for r in all_rules()} <= listed
    assert f"{len(all_rules())} lint rules" in out


def test_the_project_lints_itself_clean():
    done = subprocess.run([sys.executable, "-m", "torchpact", "lint"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]  # info advice may remain


# ------------------------------------------------------------------------------------------- Chromium
@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_setup_installs_no_system_package():
    done = subprocess.run(["make", "-n", "-B", "setup"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "apt-get" not in done.stdout and "chromium" not in done.stdout


def test_make_chromium_says_what_it_installs_before_installing():
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("\nchromium:\n", 1)[1].split("\n\n", 1)[0]
    assert recipe.index('echo "Installing') < recipe.index("apt-get install")
    assert 'id -u)" = 0' in recipe  # as root only; otherwise it says how and installs nothing
    assert "make chromium" in (ROOT / "README.md").read_text()


def test_html_tests_skip_with_a_reason_without_chromium(tmp_path, monkeypatch):
    from tests.report import chromium

    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(pytest.skip.Exception, match="make chromium"):
        chromium.require()

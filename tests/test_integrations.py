"""Where users already are: pre-commit hooks and the example CI workflow stay consistent with the CLI."""

from __future__ import annotations

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


def _install_targets(text: str) -> list[str]:
    return [shlex.split(line.split("pip install", 1)[1])[-1] for line in text.splitlines()
            if "pip install" in line and "torchpact" in line and not line.lstrip().startswith("#")]


def _check_installable(target: str) -> None:
    """A pip target for torchpact that exists: a git URL or a wheel built from this project, valid extras."""
    from packaging.requirements import Requirement

    project = _project()
    if ".whl" in target:
        wheel, _, extras = target.rstrip("]").partition("[")
        assert Path(wheel).name == f"torchpact-{project['version']}-py3-none-any.whl", target
        extras_set = set(extras.split(",")) - {""}
    else:
        req = Requirement(target)
        assert req.name == "torchpact" and req.url and req.url.startswith("git+https://"), target
        assert req.url.split("@")[0] == "git+" + _repo_url(), target
        extras_set = set(req.extras)
    assert extras_set <= set(project["optional-dependencies"]), target


def _repo_url() -> str:
    from torchpact.report.links import PROJECT_URL

    return PROJECT_URL


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


def test_readme_says_how_to_install_into_a_project():
    readme = (ROOT / "README.md").read_text()
    targets = _install_targets(readme)
    assert any("[torch]" in t and t.endswith("]") for t in targets)  # the wheel, with the torch extra
    assert any(t.startswith("torchpact[torch] @ git+") for t in targets)
    for target in targets:
        _check_installable(target)


def test_readme_pre_commit_snippet_names_the_repo_rev_and_real_hooks():
    readme = (ROOT / "README.md").read_text()
    block = next(b for b in readme.split("```yaml")[1:] if "repos:" in b).split("```")[0]
    assert _yaml_values_text(block, "repo") == [_repo_url()]
    assert len(_yaml_values_text(block, "rev")) == 1 and _yaml_values_text(block, "rev")[0]
    hooks = set(_yaml_values(ROOT / ".pre-commit-hooks.yaml", "id"))
    ids = [v.split("#")[0].strip() for v in _yaml_values_text(block, "id")]
    assert ids and set(ids) <= hooks


def _yaml_values_text(text: str, key: str) -> list[str]:
    return [line.strip().lstrip("- ").split(":", 1)[1].split(" #")[0].strip() for line in text.splitlines()
            if line.strip().lstrip("- ").startswith(f"{key}:")]


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

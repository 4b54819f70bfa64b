"""The lint-only install: torchpact's wheel, built from this checkout, installed into a fresh virtualenv
without torch. Lint works there; each command that needs torch says so in one line with exit 2; the
demo lints its bundled examples and says what the rest needs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# torchpact's own dependencies without torch (pyproject's [project] dependencies and what they import)
LINT_ONLY = ("pathspec", "rich", "markdown-it-py", "mdurl", "pygments")


def _tracked_copy(dest: Path) -> None:
    """The files git tracks (symlinks kept as links): what a clone has, without build outputs or .venv."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in filter(None, listed.decode().split("\0")):
        src, dst = ROOT / name, dest / name
        if not src.exists() and not src.is_symlink():
            continue  # deleted in the work tree, not yet committed
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            os.symlink(os.readlink(src), dst)
        else:
            shutil.copy2(src, dst)


def _top_level(dist: str) -> set[str]:
    """The import names one installed distribution provides."""
    files = metadata.distribution(dist).files or []
    return {f.parts[0] for f in files if len(f.parts) > 1 and not f.parts[0].endswith((".dist-info", "__pycache__"))}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout to know which files are the project's")
    work = tmp_path_factory.mktemp("clone")
    _tracked_copy(work)
    dist = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist),
                    str(work)], check=True, capture_output=True, timeout=600)
    [built] = dist.glob("torchpact-*.whl")
    return built


@pytest.fixture(scope="module")
def lint_only(wheel, tmp_path_factory) -> Path:
    """A fresh virtualenv holding the wheel and its lint-only dependencies (linked from this environment:
    no index is needed), and no torch. Returns its bin folder."""
    env = tmp_path_factory.mktemp("venv")
    venv.create(env, with_pip=False)
    python = env / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index",
                    str(wheel)], check=True, capture_output=True, timeout=300)
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    for dist in LINT_ONLY:
        for name in _top_level(dist):
            origin = Path(metadata.distribution(dist).locate_file(name))
            if origin.exists() and not (site / name).exists():
                os.symlink(origin, site / name)
    return env / "bin"


def _run(bin_dir: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run([str(bin_dir / "torchpact"), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env={**env, "NO_COLOR": "1"})


def test_the_wheels_default_dependencies_do_not_pull_torch(wheel):
    with zipfile.ZipFile(wheel) as whl:
        meta = whl.read(next(n for n in whl.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    requires = [line.split(":", 1)[1].strip() for line in meta.splitlines() if line.startswith("Requires-Dist:")]
    torch = [r for r in requires if r.split(";")[0].strip().startswith("torch")]
    assert torch and all("extra ==" in r for r in torch), requires  # only through the [torch] extra


def test_the_wheel_bundles_the_demo_examples(wheel):
    with zipfile.ZipFile(wheel) as whl:
        names = set(whl.namelist())
    assert {"torchpact/examples/train_classifier.py", "torchpact/examples/export_target.py"} <= names


def test_the_fresh_environment_has_no_torch(lint_only, tmp_path):
    done = subprocess.run([str(lint_only / "python"), "-c", "import torch"], capture_output=True, text=True)
    assert done.returncode != 0 and "No module named 'torch'" in done.stderr


def test_lint_works_without_torch(lint_only, tmp_path):
    (tmp_path / "train.py").write_text(
        "import torch\n\ndef train(model, opt, data):\n    running = 0\n    for x in data:\n"
        "        loss = model(x).sum()\n        loss.backward()\n        running += loss\n    return running\n")
    done = _run(lint_only, "lint", "--preview", "train.py", cwd=tmp_path)
    assert done.returncode == 1 and "TP101" in done.stdout, done.stdout + done.stderr


@pytest.mark.parametrize("args", [
    ("run", "train.py"),
    ("run", "-m", "train"),
    ("facts",),
    ("facts", "detach-shares-storage"),
    ("export-check", "train.py:make"),
    ("compile-check", "train.py:make"),
])
def test_a_command_that_needs_torch_says_so_in_one_line_with_exit_2(lint_only, tmp_path, args):
    (tmp_path / "train.py").write_text("import torch\nprint('trained')\n")
    done = _run(lint_only, *args, cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "trained" not in done.stdout
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"torchpact: error: {args[0]}") and "needs torch" in line
    assert "pip install 'torchpact[torch]'" in line


def test_facts_list_needs_no_torch(lint_only, tmp_path):
    done = _run(lint_only, "facts", "--list", cwd=tmp_path)
    assert done.returncode == 0 and "detach-shares-storage" in done.stdout


def test_the_demo_lints_its_bundled_examples_and_says_what_needs_torch(lint_only, tmp_path):
    done = _run(lint_only, "demo", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "train_classifier.py" in done.stdout and "TP101" in done.stdout  # the bundled examples, linted
    assert "torch is not installed here" in done.stdout and "Traceback" not in done.stderr

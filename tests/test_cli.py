"""The lint command end to end: formats, exit codes, output files, fixes, configuration, noqa."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from torchpact.cli import main

FIXTURES = Path(__file__).parent / "fixtures"
GOLDEN = Path(__file__).parent / "golden"
LEAKY = FIXTURES / "leaky_train.py"


def run_cli(args, capsys, preview=True):
    args = [str(a) for a in args]
    if preview and args[:1] == ["lint"]:
        args.insert(1, "--preview")  # these tests are about what lint reports, not about the default set
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def leaky(tmp_path):
    target = tmp_path / "train.py"
    shutil.copy(LEAKY, target)
    return target


def _normalised_json(text: str) -> dict:
    doc = json.loads(text)
    doc["version"] = "<version>"
    assert doc["torch"].startswith("2.13")
    doc["torch"] = "<torch>"
    doc["summary"]["seconds"] = 0
    for f in doc["findings"]:
        f["path"] = Path(f["path"]).name
    doc["command"] = "lint <path>"
    return doc


def _check_golden(name: str, doc: dict) -> None:
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(json.dumps(doc, indent=2) + "\n")
    assert doc == json.loads(path.read_text()), f"golden {name} differs; UPDATE_GOLDEN=1 to accept"


def test_json_report_matches_golden(leaky, capsys):
    code, out, _ = run_cli(["lint", leaky, "--format", "json"], capsys)
    assert code == 1
    doc = _normalised_json(out)
    assert doc["tool"] == "torchpact" and doc["findings"][0]["code"] == "TP101"
    assert set(doc["findings"][0]) >= {"code", "category", "severity", "message", "path", "line", "column",
                                       "end_line", "end_column", "subject", "fix", "rank", "step"}
    _check_golden("leaky_train.json", doc)


def test_sarif_report_matches_golden(leaky, capsys, monkeypatch):
    monkeypatch.chdir(leaky.parent)
    code, out, _ = run_cli(["lint", leaky, "--format", "sarif"], capsys)
    assert code == 1
    doc = json.loads(out)
    assert doc["version"] == "2.1.0"
    run = doc["runs"][0]
    rule_ids = [r["id"] for r in run["tool"]["driver"]["rules"]]
    assert rule_ids == ["TP101"]  # only the rules of this run's results
    result = run["results"][0]
    assert result["ruleId"] == "TP101" and rule_ids[result["ruleIndex"]] == "TP101"
    region = result["locations"][0]["physicalLocation"]["region"]
    assert region == {"startLine": 14, "startColumn": 5, "endLine": 14, "endColumn": 18}
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == leaky.parent.as_uri() + "/"
    run["originalUriBaseIds"]["%SRCROOT%"]["uri"] = "file:///<cwd>/"
    run["tool"]["driver"]["version"] = "<version>"
    rule = run["tool"]["driver"]["rules"][0]
    assert "Why is this bad?" in rule["help"]["markdown"]
    assert rule["fullDescription"]["text"].startswith("Flags ")
    rule.pop("help"), rule.pop("fullDescription")  # the rule page has its own test
    _check_golden("leaky_train.sarif", doc)


def test_github_annotations(leaky, capsys):
    code, out, _ = run_cli(["lint", leaky, "--format", "github"], capsys)
    assert code == 1
    line = out.strip().splitlines()[0]
    assert line.startswith(f"::error file={leaky},line=14,endLine=14,col=5,endColumn=18,"
                           "title=torchpact TP101 (memory)::")
    assert "Fix: accumulate" in line


def test_text_report_shows_source_and_fix(leaky, capsys):
    code, out, _ = run_cli(["lint", leaky], capsys)
    assert code == 1
    assert f"{leaky}:14:5: TP101 error" in out
    assert "   14 |     total += loss" in out and "^^^^^^^^^^^^^" in out
    assert "fix: accumulate" in out and "1 fixable with --fix" in out


def test_output_file_and_exit_codes(leaky, tmp_path, capsys):
    report = tmp_path / "report.json"
    code, out, _ = run_cli(["lint", leaky, "--format", "json", "--output", report], capsys)
    assert code == 1 and out == "" and json.loads(report.read_text())["findings"]
    clean = tmp_path / "clean.py"
    clean.write_text("import torch\nx = torch.zeros(3)\n")
    assert run_cli(["lint", clean], capsys)[0] == 0
    assert run_cli(["lint", leaky, "--ignore", "TP101"], capsys)[0] == 0
    assert run_cli(["lint", leaky, "--select", "TP2"], capsys)[0] == 0
    assert run_cli(["lint", leaky, "--select", "memory"], capsys)[0] == 1


def test_fail_on_threshold(tmp_path, leaky, capsys):
    (tmp_path / "pyproject.toml").write_text('[tool.torchpact]\nseverity = {TP101 = "info"}\n')
    code, out, _ = run_cli(["lint", leaky], capsys)
    assert code == 0 and "TP101 info" in out
    assert run_cli(["lint", leaky, "--fail-on", "info"], capsys)[0] == 1


def test_usage_errors_exit_2_with_one_line(tmp_path, capsys):
    (tmp_path / "pyproject.toml").write_text("[tool.torchpact]\nselect = 3\n")
    (tmp_path / "a.py").write_text("import torch\n")
    code, _, err = run_cli(["lint", tmp_path / "a.py"], capsys)
    assert code == 2 and "select must be a list" in err
    with pytest.raises(SystemExit) as exc:
        main(["lint", "--format", "yaml"])
    assert exc.value.code == 2


def test_a_reader_that_leaves_early_ends_the_output_quietly():
    """`torchpact rules | head -1`: the pipe closes under the writer, which exits 0 without a traceback."""
    proc = subprocess.Popen([sys.executable, "-m", "torchpact", "rules"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdout.readline().startswith(b"TP")
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 0 and b"Traceback" not in err


def test_fix_writes_and_diff_only_prints(leaky, capsys):
    before = leaky.read_text()
    code, out, err = run_cli(["lint", leaky, "--diff"], capsys)
    assert code == 1 and "+    total += loss.detach()" in out and leaky.read_text() == before
    code, out, _ = run_cli(["lint", leaky, "--fix"], capsys)
    assert code == 0 and "total += loss.detach()" in leaky.read_text()
    assert "1 fix applied" in out and "1 file, " in out  # not "1 fixes", "1 files"
    assert run_cli(["lint", leaky, "--diff"], capsys)[0] == 0


def test_noqa_and_per_file_ignores(tmp_path, leaky, capsys):
    text = leaky.read_text().replace("total += loss", "total += loss  # noqa: TP101")
    leaky.write_text(text)
    assert run_cli(["lint", leaky], capsys)[0] == 0
    leaky.write_text(text.replace("# noqa: TP101", "# noqa: TP999"))
    assert run_cli(["lint", leaky], capsys)[0] == 1
    (tmp_path / "pyproject.toml").write_text('[tool.torchpact]\nper-file-ignores = {"train.py" = ["TP101"]}\n')
    assert run_cli(["lint", leaky], capsys)[0] == 0


def test_rule_and_rules_commands(capsys):
    code, out, _ = run_cli(["rule", "TP101"], capsys)
    assert code == 0 and out.startswith("# TP101") and "## Why is this bad?" in out and "## Example" in out
    code, out, _ = run_cli(["rule", "tp001"], capsys)
    assert code == 0 and "input" in out
    assert run_cli(["rule", "TP000"], capsys)[0] == 2
    code, out, _ = run_cli(["rules"], capsys)
    assert code == 0 and "TP101" in out
    lines = out.splitlines()
    # TP102 is a lint warning, but `run` reports it as an error unless no loop variable holds the graphs
    below_tp102 = lines[next(i for i, line in enumerate(lines) if line.startswith("TP102")) + 1]
    assert below_tp102.startswith("       at run time: error; warning when the graphs of earlier steps")
    below_tp913 = lines[next(i for i, line in enumerate(lines) if line.startswith("TP913")) + 1]
    assert below_tp913.startswith("       warning on a GPU busy")


def test_lint_never_imports_torch(leaky):
    notebook = leaky.with_suffix(".ipynb")
    notebook.write_text(json.dumps({"cells": [{"cell_type": "code", "source": "!ls\n%time x = 1\n"}]}))
    script = (
        "import sys\nfrom torchpact.cli import main\n"
        f"code = main(['lint', '--preview', {str(leaky)!r}, {str(notebook)!r}, "
        "'--format', 'json', '-o', '/dev/null', '-j', '1'])\n"
        "assert 'torch' not in sys.modules, 'lint imported torch'\n"
        "assert 'IPython' not in sys.modules, 'lint imported IPython: it must work without it'\n"
        "print(code)\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "1"


def test_console_script_and_module_entry(leaky):
    out = subprocess.run([sys.executable, "-m", "torchpact", "lint", "--preview", str(leaky), "--format", "json"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and json.loads(out.stdout)["findings"][0]["code"] == "TP101"


def _tree(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def _codes(out: str) -> list[tuple[str, str, str]]:
    """(path relative to the run, code, severity) of each finding of a JSON report."""
    return sorted((Path(f["path"]).as_posix(), f["code"], f["severity"]) for f in json.loads(out)["findings"])


def test_each_file_uses_its_closest_config(tmp_path, capsys, monkeypatch):
    leak = LEAKY.read_text()
    (tmp_path / ".git").mkdir()
    _tree(tmp_path, {
        "pyproject.toml": '[tool.torchpact]\nseverity = {TP101 = "info"}\n',
        "a/pyproject.toml": '[tool.torchpact]\nexclude = ["gen/"]\nper-file-ignores = {"sub/*" = ["memory"]}\n',
        "a/train.py": leak, "a/gen/train.py": leak, "a/sub/train.py": leak,
        "b/train.py": leak,
        # a pyproject.toml without [tool.torchpact] does not stop the search, as in ruff
        "c/pyproject.toml": '[project]\nname = "c"\n', "c/train.py": leak,
    })
    monkeypatch.chdir(tmp_path)
    code, out, _ = run_cli(["lint", ".", "--format", "json", "--fail-on", "info"], capsys)
    assert code == 1
    assert _codes(out) == [("a/train.py", "TP101", "error"), ("b/train.py", "TP101", "info"),
                           ("c/train.py", "TP101", "info")]
    # --config names one configuration for every file; its exclude is relative to its folder
    code, out, _ = run_cli(["lint", ".", "--format", "json", "--config", "a/pyproject.toml"], capsys)
    assert _codes(out) == [("a/train.py", "TP101", "error"), ("b/train.py", "TP101", "error"),
                           ("c/train.py", "TP101", "error")]
    # the command line goes on top of each file's settings
    code, out, _ = run_cli(["lint", ".", "--format", "json", "--ignore", "TP1"], capsys)
    assert code == 0 and _codes(out) == []


LOAD = "import torch\nstate = torch.load('checkpoint.pt')\n"


@pytest.mark.parametrize("declaration", [
    {"pyproject.toml": '[project]\nname = "p"\ndependencies = ["numpy", "torch>={v}"]\n'},
    {"setup.py": 'from setuptools import setup\nsetup(name="p", install_requires=["torch>={v}"])\n'},
    {"setup.py": 'import setuptools\nREQ = ["numpy", "torch >= {v}"]\nsetuptools.setup(install_requires=REQ)\n'},
    {"setup.cfg": "[metadata]\nname = p\n[options]\ninstall_requires =\n    numpy\n    torch>={v}\n"},
    {"requirements.txt": "# pinned\nnumpy\ntorch>={v}  # cpu\n"},
    # [project] without torch: the requirements file beside it still counts
    {"pyproject.toml": '[project]\nname = "p"\ndependencies = ["numpy"]\n', "requirements-gpu.txt": "torch=={v}.0\n"},
    # a declaration lint cannot read (computed, broken) states nothing; the next one counts
    {"setup.py": "from setuptools import setup\nsetup(install_requires=read_reqs(),\n",
     "setup.cfg": "[options\n", "requirements.txt": "torch>={v}\n"},
])
def test_tp952_reads_the_torch_floor_wherever_it_is_declared(tmp_path, capsys, monkeypatch, declaration):
    (tmp_path / ".git").mkdir()
    monkeypatch.chdir(tmp_path)
    for version, expected in (("2.1", ["TP952"]), ("2.6", [])):
        _tree(tmp_path, {name: text.replace("{v}", version) for name, text in declaration.items()})
        _tree(tmp_path, {"pkg/load.py": LOAD})
        _, out, _ = run_cli(["lint", ".", "--format", "json", "--select", "TP952"], capsys)
        assert [code for _, code, _ in _codes(out) if code != "TP001"] == expected, (version, out)



@pytest.mark.parametrize("files, expected", [
    # an unpinned torch lets the installer take the newest: no floor, not a floor of 0.0
    ({"requirements.txt": "numpy\ntorch\n"}, []),
    ({"requirements.txt": "torch<3  # any 2.x\n"}, []),
    ({"pyproject.toml": '[project]\nname = "p"\ndependencies = ["torch"]\n', "requirements.txt": "torch>=1.8\n"}, []),
    # the closest project that names torch decides, even without a floor
    ({"pyproject.toml": '[project]\nname = "root"\ndependencies = ["torch>=1.13"]\n',
      "pkg/requirements.txt": "torch\n"}, []),
    ({"pyproject.toml": '[project]\nname = "root"\ndependencies = ["torch>=1.13"]\n[tool.torchpact]\n',
      "pkg/requirements.txt": "torch\n"}, []),
    # other distributions whose names start with "torch" state nothing about torch
    ({"pyproject.toml": '[project]\nname = "p"\ndependencies = ["torch-audiomentations>=0.12", "torch>=2.8"]\n'}, []),
    ({"setup.cfg": "[options]\ninstall_requires =\n    torch_geometric>=2.0\n    Torch>=2.1\n"}, ["TP952"]),
    ({"requirements.txt": "torch[opt-einsum]>=1.13 ; python_version >= '3.8'\n"}, ["TP952"]),
])
def test_tp952_only_a_lower_bound_of_torch_itself_is_a_floor(tmp_path, capsys, monkeypatch, files, expected):
    (tmp_path / ".git").mkdir()
    monkeypatch.chdir(tmp_path)
    _tree(tmp_path, {**files, "pkg/load.py": LOAD})
    _, out, _ = run_cli(["lint", ".", "--format", "json", "--select", "TP952"], capsys)
    assert [code for _, code, _ in _codes(out) if code != "TP001"] == expected, out

@pytest.mark.parametrize("args, pyproject, expected", [
    (["--select", "TP1011"], None, "unknown selector 'TP1011' in --select (did you mean 'TP101'?)"),
    (["--ignore", "memroy"], None, "unknown selector 'memroy' in --ignore (did you mean 'memory'?)"),
    (["--select", "AL"], None, "(did you mean 'ALL'?)"),
    ([], "selct = ['ALL']", "unknown key tool.torchpact.selct (did you mean 'select'?)"),
    ([], "ignore = ['TP9999']", "tool.torchpact.ignore"),
    ([], "per-file-ignores = {'tests/*' = ['securty']}", "(did you mean 'security'?)"),
    ([], "severity = {TP10 = 'info'}", "unknown code 'TP10'"),
    ([], "per-file-ignores = {'a.py' = 3}", "per-file-ignores values must be lists of codes"),
    ([], "[tool.torchpact.select]", "tool.torchpact.select must be a list of strings"),
    # as ruff: one code is still written as a list
    ([], "ignore = 'TP101'", 'tool.torchpact.ignore must be a list of strings, not a string: write ignore = ["TP101"]'),
    ([], "exclude = 'build/'", 'write exclude = ["build/"]'),
    ([], "per-file-ignores = {'tests/*' = 'TP101'}", 'not a string: write "tests/*" = ["TP101"]'),
])
def test_unknown_keys_and_selectors_are_usage_errors(tmp_path, capsys, args, pyproject, expected):
    target = tmp_path / "train.py"
    shutil.copy(LEAKY, target)
    if pyproject:
        (tmp_path / "pyproject.toml").write_text(f"[tool.torchpact]\n{pyproject}\n")
    code, out, err = run_cli(["lint", target, *args], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1 and expected in err, err


def test_config_naming_a_pyproject_without_a_torchpact_table_is_a_usage_error(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n[tool.ruff]\nline-length = 100\n')
    (tmp_path / "a.py").write_text("import torch\n")
    code, out, err = run_cli(["lint", "a.py", "--config", "pyproject.toml"], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "pyproject.toml has no [tool.torchpact] table" in err
    # found on its own (not named), such a file is another project's: lint goes on with the defaults
    assert run_cli(["lint", "a.py"], capsys)[0] == 0


def test_named_paths_are_linted_even_when_excluded(tmp_path, capsys, monkeypatch):
    leak = LEAKY.read_text()
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True, timeout=60)
    _tree(tmp_path, {"pyproject.toml": '[tool.torchpact]\nexclude = ["vendor/"]\n', ".gitignore": "build/\n",
                     "vendor/lib/train.py": leak, "build/train.py": leak, ".venv/pyvenv.cfg": "home = /usr\n",
                     ".venv/lib/train.py": leak, "README.md": "# no Python here\n"})
    monkeypatch.chdir(tmp_path)

    def linted(*args):
        code, out, err = run_cli(["lint", *args, "--format", "json"], capsys)
        return [path for path, _, _ in _codes(out)], code, err

    assert linted(".") == ([], 0, "torchpact: warning: no Python files found under the given path(s)\n")
    for named in ("vendor", "vendor/lib/train.py", "build", "build/train.py", ".venv", ".venv/lib",
                  ".venv/lib/train.py"):
        files, code, _ = linted(named)
        assert code == 1 and len(files) == 1, named
        assert linted(named, "--force-exclude") == (
            [], 0, "torchpact: warning: no Python files found under the given path(s)\n"), named
    assert linted("README.md")[1] == 0  # a named non-Python file is read as Python, as before


def test_runtime_codes_are_known_selectors_too(tmp_path, capsys):
    target = tmp_path / "train.py"
    shutil.copy(LEAKY, target)
    (tmp_path / "pyproject.toml").write_text('[tool.torchpact]\nignore = ["TP913"]\nseverity = {TP351 = "info"}\n')
    assert run_cli(["lint", target, "--ignore", "TP91"], capsys)[0] == 1


def test_pre_commit_hooks_keep_the_project_exclusions():
    # pre-commit names each file: without --force-exclude, `exclude` would not apply to them
    text = (Path(__file__).parents[1] / ".pre-commit-hooks.yaml").read_text()
    entries = [ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.strip().startswith("entry:")]
    assert entries and all("--force-exclude" in entry for entry in entries)


def test_another_projects_broken_pyproject_is_not_lints_business(tmp_path, capsys, monkeypatch):
    (tmp_path / ".git").mkdir()
    _tree(tmp_path, {"vendored/pyproject.toml": "[tool.black\n", "vendored/train.py": LEAKY.read_text()})
    monkeypatch.chdir(tmp_path)
    code, out, _ = run_cli(["lint", ".", "--format", "json"], capsys)
    assert code == 1 and _codes(out) == [("vendored/train.py", "TP101", "error")]
    (tmp_path / "vendored/pyproject.toml").write_text("[tool.torchpact\n")  # meant for us: an error
    code, _, err = run_cli(["lint", "."], capsys)
    assert code == 2 and "cannot read" in err and err.count("\n") == 1


def test_unknown_export_paths_and_compile_modes_name_the_closest(capsys):
    code, _, err = run_cli(["export-check", "model.py:make", "--paths", "trace,onx"], capsys)
    assert code == 2 and "unknown path(s): onx (did you mean 'onnx'?)" in err
    code, _, err = run_cli(["compile-check", "model.py:make", "--modes", "max-autotune-no-cudagraph"], capsys)
    assert code == 2 and "(did you mean 'max-autotune-no-cudagraphs'?)" in err


def test_unknown_watcher_names_the_closest(tmp_path, capsys):
    script = tmp_path / "s.py"
    script.write_text("raise SystemExit('the script must not run')\n")
    code, _, err = run_cli(["run", "--watchers", "gradient_flow,gradflow", script], capsys)
    assert code == 2 and "unknown watcher 'gradflow' (did you mean 'gradient_flow'?)" in err


def test_parallel_lint_uses_each_files_config(tmp_path, capsys, monkeypatch):
    leak = LEAKY.read_text()
    (tmp_path / ".git").mkdir()
    _tree(tmp_path, {"a/pyproject.toml": '[tool.torchpact]\nseverity = {TP101 = "info"}\n'})
    _tree(tmp_path, {f"{project}/m{i}.py": leak for project in "ab" for i in range(15)})
    monkeypatch.chdir(tmp_path)
    serial = run_cli(["lint", ".", "--format", "json", "-j", "1"], capsys)[1]
    parallel = run_cli(["lint", ".", "--format", "json", "-j", "2"], capsys)[1]
    assert _codes(serial) == _codes(parallel)
    assert {sev for path, _, sev in _codes(parallel) if path.startswith("a/")} == {"info"}
    assert {sev for path, _, sev in _codes(parallel) if path.startswith("b/")} == {"error"}


def test_run_help_states_the_samplers_real_schedule_and_budget():
    from torchpact.cli import (SAMPLE_EVERY, SAMPLE_FIRST, SAMPLE_SPREAD, SAMPLED_CALLS, SAMPLED_CHARGE, SAMPLED_SHARE,
                               build_parser)
    from torchpact.launch import rank
    from torchpact.watch import Sampler

    default = Sampler()
    assert (SAMPLE_FIRST, SAMPLE_EVERY, SAMPLED_CALLS, SAMPLED_SHARE, SAMPLED_CHARGE, SAMPLE_SPREAD) == default
    opts = rank.parser().parse_args(["--report-dir", "r", "s.py"])
    assert (opts.sample_first, opts.sample_every) == (default.first, default.every)
    run = build_parser()._subparsers._group_actions[0].choices["run"]
    text = " ".join(run.format_help().split())
    assert f"at most {default.calls} module calls plus {default.share * 100:g}% of all" in text
    assert f"each sampled step counted {default.charge} calls more" in text
    assert f"past {default.spread}*N steps the gap doubles" in text


def test_the_torch_version_in_reports_is_importlib_metadata_s():
    from importlib import metadata

    from torchpact.cli import installed_torch_version

    assert installed_torch_version() == metadata.version("torch")


def test_a_pyproject_without_a_torchpact_table_is_not_parsed(tmp_path, monkeypatch, capsys):
    # another project's file, even a broken one, is none of lint's business
    (tmp_path / "pyproject.toml").write_text("[tool.other\nkey = = 1\n")
    (tmp_path / "a.py").write_text("import torch\nx = torch.range(0, 3)\n")
    monkeypatch.chdir(tmp_path)
    code, out, _ = run_cli(["lint", "--no-cache", "a.py"], capsys)
    assert code == 1 and "TP313" in out

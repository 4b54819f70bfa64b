"""The HTML report: self-contained, escaped, rendered in real headless Chromium without console errors."""

from __future__ import annotations

import json
import os
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.report import chromium
from torchpact.cli import main
from torchpact.findings import Category, Finding, Severity
from torchpact.report import render
from torchpact.report.html import page

ROOT = Path(__file__).resolve().parents[2]
HOSTILE_MODULE = "<img src=x onerror=alert(1)>"
HOSTILE_FROZEN = "<script>alert(2)</script>"
HOSTILE_SCRIPT = "tr<a\"i'n&.py"

SCRIPT = f'''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
model = nn.Sequential()
model.add_module({HOSTILE_MODULE!r}, nn.Linear(8, 16))
model.add_module("act", nn.Tanh())
model.add_module("head", nn.Linear(16, 1))
frozen = nn.Linear(8, 8)
holder = nn.Module()
holder.add_module({HOSTILE_FROZEN!r}, frozen)
optimizer = torch.optim.SGD(list(model.parameters()) + list(frozen.parameters()), lr=0.05)
for p in model.head.parameters():
    p.requires_grad_(False)
loader = DataLoader(TensorDataset(torch.randn(96, 8), torch.randn(96, 1)), batch_size=8)
criterion = nn.MSELoss()
for x, y in loader:
    optimizer.zero_grad()
    loss = criterion(model(x) + holder.get_submodule({HOSTILE_FROZEN!r})(x).sum(1, keepdim=True) * 0, y)
    loss.backward()
    optimizer.step()
'''


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory):
    """One watched, profiled run of a script whose module and file names are HTML; its page and JSON report."""
    folder = tmp_path_factory.mktemp("hostile")
    script = folder / HOSTILE_SCRIPT
    script.write_text(SCRIPT)
    page, report = folder / "report.html", folder / "report.json"
    code = main(["run", "--quiet", "--profile", "--profile-warmup", "2", "--profile-steps", "3",
                 "--profile-dir", str(folder / "trace"), "--html", str(page), "--format", "json",
                 "--output", str(report), str(script)])
    assert code in (0, 1), code
    return folder, page, json.loads(report.read_text())


def _keep(shot: Path) -> None:
    """TORCHPACT_SCREENSHOTS=DIR keeps the screenshots, to look at them."""
    where = os.environ.get("TORCHPACT_SCREENSHOTS")
    if where and shot.exists():
        os.makedirs(where, exist_ok=True)
        shutil.copy(shot, where)


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def _tags(text: str) -> list[tuple[str, dict]]:
    parser = _Tags()
    parser.feed(text)
    return parser.tags


def test_page_escapes_everything_from_the_user(hostile_run):
    folder, page, doc = hostile_run
    text = page.read_text()
    subjects = " ".join(str(f.get("subject")) + f["message"] for f in doc["findings"])
    assert HOSTILE_MODULE in json.dumps(doc["summary"]["data"]["grad_health"]) or HOSTILE_MODULE in subjects
    for raw in (HOSTILE_MODULE, HOSTILE_FROZEN, HOSTILE_SCRIPT):
        assert raw not in text
    assert "&lt;img src=x onerror=alert(1)&gt;" in text
    assert "tr&lt;a&quot;i&#x27;n&amp;.py" in text
    tags = {t for t, _ in _tags(text)}
    assert not tags & {"script", "img", "iframe", "object", "embed"}
    assert [a for t, a in _tags(text) if t == "link"] == [{"rel": "icon", "href": "data:,"}]


def test_page_is_self_contained(hostile_run):
    _, page, _ = hostile_run
    text = page.read_text()
    assert not re.search(r"""src\s*=\s*["']?(?:https?:|//)""", text)
    # no link leaves the page: torchpact is not published at any address, the rules' text is on the page
    assert not re.findall(r"""href\s*=\s*["']?((?:https?:|//|file:)[^"' >]*)""", text)
    assert "url(" not in text and "@import" not in text
    assert "Content-Security-Policy" in text and "default-src 'none'" in text


def test_page_has_the_run_sections(hostile_run):
    _, page, doc = hostile_run
    text = page.read_text()
    for anchor in ('id="findings"', 'id="training"', 'id="profile"'):
        assert anchor in text
    assert "Gradient norm per layer over steps" in text and "Where step time goes" in text
    assert "Top operators" in text and "<svg" in text
    profile = doc["summary"]["data"]["profile"]
    assert profile["status"] == "ok" and len(profile["steps"]) == 3 and Path(profile["trace"]).is_file()


def test_each_finding_links_to_its_rules_text_on_the_page(hostile_run):
    _, page, doc = hostile_run
    text = page.read_text()
    hrefs = [a.get("href") for t, a in _tags(text) if t == "a" and a.get("class") == "code"]
    assert sorted(hrefs) == sorted(f"#rule-{f['code']}" for f in doc["findings"])
    ids = {a.get("id") for _, a in _tags(text)}
    for code in {f["code"] for f in doc["findings"]}:
        assert f"rule-{code}" in ids
        article = text.split(f'id="rule-{code}"', 1)[1].split("</article>", 1)[0]
        assert f"{code} — " in article and "What it does" in article and "Why is this bad?" in article


def test_a_page_rendered_without_rule_texts_links_nowhere(monkeypatch):
    monkeypatch.setenv("TORCHPACT_RULES_URL", "https://docs.example.com/torchpact/rules")  # for SARIF only
    finding = Finding("TP101", Category.MEMORY, Severity.ERROR, "leak")
    text = render("html", [finding], {"command": "run t.py", "summary": {}})
    assert "href=" not in text.split("<body>", 1)[1] and '<span class="code"><code>TP101</code></span>' in text


def test_page_says_torchpacts_exit_code_beside_the_scripts(hostile_run, tmp_path):
    _, page, doc = hostile_run
    text = page.read_text()
    code = doc["summary"]["torchpact_exit_code"]
    assert "<dt>script exit code</dt><dd>0</dd>" in text
    assert f"<dt>torchpact exit code</dt><dd>{code} (" in text and doc["summary"]["fail_on"] == "error"
    crash = tmp_path / "crash.py"
    crash.write_text("import sys\nsys.exit(3)\n")
    html = tmp_path / "crash.html"
    assert main(["run", "-q", "--html", str(html), "--output", str(tmp_path / "r.txt"), str(crash)]) == 3
    text = html.read_text()
    assert "<dt>script exit code</dt><dd>3</dd>" in text
    assert "<dt>torchpact exit code</dt><dd>3 (the script&#x27;s own exit code, kept)</dd>" in text


def test_report_command_renders_the_same_page_from_json(hostile_run, tmp_path):
    folder, page, doc = hostile_run
    report = tmp_path / "r.json"
    report.write_text(json.dumps(doc))
    again = tmp_path / "again.html"
    assert main(["report", "--html", str(again), str(report)]) in (0, 1)
    assert again.read_text() == page.read_text()


def test_hostile_page_in_chromium(hostile_run):
    folder, page, _ = hostile_run
    shot = folder / "hostile.png"
    rendered = chromium.render(page, screenshot=shot, height=3200)
    assert rendered.console == [], rendered.console
    assert rendered.screenshot is not None and shot.stat().st_size > 20_000
    _keep(shot)
    dom = chromium.render(page, dom=True).dom
    tags = {t for t, _ in _tags(dom)}
    assert "img" not in tags and "script" not in tags
    assert HOSTILE_MODULE in dom.replace("&lt;", "<").replace("&gt;", ">")  # shown as text


def test_export_parity_page_in_chromium(tmp_path, capsys):
    page = tmp_path / "export.html"
    code = main(["export-check", "--paths", "trace,script", "--html", str(page), "--format", "json",
                 f"{ROOT / 'examples' / 'export_target.py'}:make"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 1 and {"trace", "script"} <= set(doc["summary"]["paths"])
    text = page.read_text()
    assert 'id="parity"' in text and "seq=24" in text and 'class="bad"' in text
    rendered = chromium.render(page, screenshot=tmp_path / "export.png", height=1600)
    assert rendered.console == [], rendered.console
    assert rendered.screenshot is not None
    _keep(tmp_path / "export.png")


def test_console_errors_are_caught(tmp_path):
    """The check above would see a page that logs: a page with a script that does."""
    page = tmp_path / "noisy.html"
    page.write_text('<!DOCTYPE html><p>x</p><script>console.error("boom from the page")</script>')
    rendered = chromium.render(page, screenshot=tmp_path / "noisy.png", height=200)
    assert any("boom from the page" in line for line in rendered.console), rendered.stderr[-2000:]


def test_distributed_run_page_has_per_rank_step_times(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the example saves checkpoint.pt in the current folder
    page, report = tmp_path / "ddp.html", tmp_path / "ddp.json"
    # --fail-on warning: the exit code then rests on a finding each rank makes alone (the sampler replaying
    # its order, TP501), not on the cross-rank checksum exchange, whose end-of-run wait a loaded machine
    # can outlast
    code = main(["run", "-q", "--nproc", "2", "--fail-on", "warning", "--html", str(page), "--format", "json",
                 "--output", str(report), str(ROOT / "examples" / "ddp_train.py")])
    assert code == 1  # the example carries DDP bugs on purpose
    doc = json.loads(report.read_text())
    ranks = doc["summary"]["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1]
    assert all(len(r["step_times"]) == r["steps"] > 0 for r in ranks)
    assert doc["summary"]["data"]["progress"]["step_time"]  # rank 0's series
    text = page.read_text()
    assert 'id="ranks"' in text and "Step time per rank" in text and "rank 1" in text


def test_export_latency_shows_p99_and_says_when_unstable():
    def path(latency):
        return {"status": "ok", "reason": "matches eager", "variants": [{"name": "example", "status": "ok"}],
                "latency_ms": latency}

    stable = {"artifact": 0.61, "eager": 1.71, "artifact_p99": 0.9, "eager_p99": 2.4}
    shaky = {"artifact": 24.1, "eager": 0.077, "artifact_p99": 90.0, "eager_p99": 0.5,
             "unstable": "artifact: p99 is 3.7x p50 <load>"}
    summary = {"variants": [{"name": "example", "kind": "example"}],
               "paths": {"trace": path(stable), "export": path(shaky)}}
    text = render("html", [], {"command": "export-check m.py:make", "summary": summary})
    rows = {m.group(1): m.group(0) for m in re.finditer(r"<tr><th>(\w+)</th>.*?</tr>", text)}
    assert "p50 0.61 / 1.71 ms" in rows["trace"] and "p99 0.9 / 2.4 ms" in rows["trace"]
    assert "unstable" not in rows["trace"]
    export = rows["export"]
    assert "not comparable" in export and "artifact: p99 is 3.7x p50 &lt;load&gt;" in export
    assert "p99 90 / 0.5 ms" in export  # the figures stay readable, apart from the verdict


def test_compile_modes_show_latency_p50_p99_and_unstable():
    summary = {"graphs": 1, "graph_breaks": [],
               "eager_latency_ms": {"example": {"p50": 1.8, "p99": 9.7, "unstable": "p99 is 5.4x p50"}},
               "modes": {"default": {"status": "ok", "reason": "matches eager", "cold_compile_s": 7.0,
                                     "latency_ms": {"example": {"p50": 0.54, "p99": 0.6}}}},
               "recommendation": {"latency": "no recommendation, the timings are unstable"}}
    text = render("html", [], {"command": "compile-check m.py:make", "summary": summary})
    rows = {m.group(1): m.group(0) for m in re.finditer(r"<tr><th>([\w-]+)</th>.*?</tr>", text)}
    assert "example: 1.8 / 9.7 ms" in rows["eager"] and "(unstable: p99 is 5.4x p50)" in rows["eager"]
    assert "example: 0.54 / 0.6 ms" in rows["default"] and "unstable" not in rows["default"]
    assert "<li><b>latency</b>: no recommendation, the timings are unstable</li>" in text


def _chart_ticks(svg: str) -> list[str]:
    return re.findall(r'<text class="tick" x="\d+(?:\.\d+)?" y="[\d.]+" text-anchor="end">([^<]+)</text>', svg)


def test_the_memory_chart_starts_at_zero_so_a_small_change_does_not_look_like_a_cliff():
    mib = 1024 * 1024
    # 0.4 MiB more on a 500 MiB process over 30 steps
    memory = [[step, 500 * mib + step * 0.4 * mib / 30] for step in range(31)]
    doc = {"tool": "torchpact", "command": "run train.py", "findings": [],
           "summary": {"data": {"progress": {"memory": memory, "memory_kind": "rss"}}}}
    text = page(doc)
    svg = text[text.index('aria-label="Process memory (RSS)"'):].split("</svg>", 1)[0]
    ticks = [t for t in _chart_ticks(svg) if t != "step"]  # the y axis's labels, bottom up
    assert ticks[0] == "0 B" and all(t.endswith("MiB") for t in ticks[1:]), ticks

"""The server's computing, without the protocol: positions in the client's units, notebooks as files,
``# noqa`` edits, and the project facts' bookkeeping."""

from __future__ import annotations


from torchpact.config import Config
from torchpact.findings import Finding
from torchpact.lint.project import EVAL, ZERO_GRAD, ProjectFacts, summarize
from torchpact.server.documents import (Cell, Positions, encoded, lint_document, lint_notebook, noqa_edit,
                                        whole_text_edit)
from torchpact.server.project import ProjectIndex, changed_answers, scan

LOG = "import torch\n\n\ndef f(x):\n    return torch.log(1 + x)\n"
# TP319, the finding with a safe fix used here, is a preview finding (measured under the info bar)
PREVIEW = Config(preview=True)


def test_columns_are_counted_in_the_clients_units():
    text = "s = '😀é'; y = 1\r\nz = 2\rw\n"
    pos = Positions(text)  # UTF-16: the emoji is two units
    assert pos.at(1, 9) == (0, 9)  # `;`: lint's character column 9, after 8 characters = 9 UTF-16 units
    assert pos.at_offset(text.index("z")) == (1, 0) and pos.at_offset(text.index("w")) == (2, 0)
    assert pos.offset(0, 9) == text.index(";") and pos.offset(5, 0) == len(text)
    assert Positions(text, len).at(1, 9) == (0, 8)  # UTF-32 when the client chose it
    assert pos.end_of(1) == (0, 16)  # 15 characters


def test_a_finding_without_columns_covers_its_line():
    pos = Positions("a = 1\nbb = 22\n")
    f = Finding(code="TP001", category="input", severity="error", message="m", path="x.py", line=2)
    assert pos.finding_range(f) == ((1, 0), (1, 7))


def test_the_editor_text_is_linted_with_its_coding_cookie():
    text = "# -*- coding: latin-1 -*-\nname = 'café'\n"
    assert encoded(text) == text.encode("latin-1")
    linted = lint_document("/tmp/m.py", "file:///tmp/m.py", text, Config(), None)
    assert [f.code for f in linted.result.findings] == []


def test_a_fix_is_placed_in_the_document():
    linted = lint_document("/tmp/ops.py", "file:///tmp/ops.py", LOG, PREVIEW, None)
    [entry] = linted.entries
    assert entry.finding.code == "TP319" and entry.range == ((4, 11), (4, 27)) and not entry.unsafe
    [((start, end), new)] = entry.fix
    assert (start, end, new) == ((4, 11), (4, 27), "torch.log1p(x)")


def test_notebook_cells_get_their_own_findings_and_fixes():
    cells = [Cell("nb#0", False, "# title\n"), Cell("nb#1", True, "import torch\n%time x = 1\n"),
             Cell("nb#2", True, "def f(t):\n    return torch.log(1 + t)\n")]
    linted = lint_notebook("/tmp/nb.ipynb", cells, PREVIEW, None)
    [entry] = linted.entries
    assert (entry.uri, entry.range) == ("nb#2", ((1, 11), (1, 27)))
    assert entry.fix == [(((1, 11), (1, 27)), "torch.log1p(t)")]


def test_noqa_edit_adds_or_merges_a_comment():
    f = lint_document("/tmp/ops.py", "u", LOG, PREVIEW, None).result.findings[0]
    start, end, new = noqa_edit(LOG, f)
    assert LOG[:start] + new + LOG[end:] == LOG.replace("(1 + x)\n", "(1 + x)  # noqa: TP319\n")
    merged = LOG.replace("(1 + x)\n", "(1 + x)  # noqa: E501\n")
    start, end, new = noqa_edit(merged, f)
    assert merged[:start] + new + merged[end:] == LOG.replace("(1 + x)\n", "(1 + x)  # noqa: E501, TP319\n")


def test_whole_text_edit_keeps_the_common_ends():
    assert whole_text_edit("abcXYZdef", "abcQdef") == (3, 6, "Q")
    assert whole_text_edit("same", "same") == (4, 4, "")


def test_the_index_reports_changed_facts_only_when_they_change(tmp_path):
    helper = tmp_path / "helpers.py"
    helper.write_text("def reset(opt):\n    opt.lr = 1\n")
    index = ProjectIndex()
    assert index.load(scan([str(tmp_path)])) is None  # no fact anywhere: nothing changed
    zeroing = summarize("def reset(opt):\n    opt.zero_grad()\n").to_json()
    old = index.edit(str(helper), zeroing)
    assert old is not None and index.facts.has("reset", ZERO_GRAD)
    assert changed_answers([("reset", ZERO_GRAD)], old, index.facts)
    assert not changed_answers([("other", ZERO_GRAD)], old, index.facts)
    assert index.edit(str(helper), zeroing) is None  # the same summary again
    old = index.close(str(helper))  # back to what the disk says
    assert old is not None and not index.facts.has("reset", ZERO_GRAD)


def test_the_scan_reads_summaries_from_lints_cache(tmp_path, monkeypatch):
    from torchpact.lint import lint_paths
    from torchpact.server import project

    (tmp_path / "helpers.py").write_text("def reset(opt):\n    opt.zero_grad()\n")
    monkeypatch.chdir(tmp_path)
    lint_paths(["."], Config(), jobs=1, cache=True)
    monkeypatch.setattr(project, "_summary_from_disk", lambda path: (_ for _ in ()).throw(AssertionError(path)))
    summaries = scan([str(tmp_path)], settings=None)
    assert ProjectFacts([project.FileSummary.from_json(s) for s in summaries.values()]).has("reset", ZERO_GRAD)
    (tmp_path / "helpers.py").write_text("def reset(opt):\n    pass\n")  # changed since: read again
    monkeypatch.undo()
    assert scan([str(tmp_path)])[str(tmp_path / "helpers.py")] == {}


def test_a_change_of_calls_that_carries_no_fact_is_not_merged_and_one_that_does_is():
    index = ProjectIndex()
    index.load({"/p/helpers.py": summarize("def reset(opt):\n    opt.zero_grad()\n").to_json()})
    merged = index.facts
    evaluate = "\n\ndef evaluate(model):\n    model.eval()\n"  # a fact of its own: the file is summarised
    typing = summarize("def fit(opt):\n    res(opt)\n" + evaluate).to_json()  # on the way to `reset(`
    assert index.edit("/p/fit.py", typing) is merged and index.facts.has("evaluate", EVAL)
    merged = index.facts
    typing = summarize("def fit(opt):\n    rese(opt)\n" + evaluate).to_json()
    assert index.edit("/p/fit.py", typing) is None and index.facts is merged
    done = summarize("def fit(opt):\n    reset(opt)\n" + evaluate).to_json()
    assert index.edit("/p/fit.py", done) is merged and index.facts.has("fit", ZERO_GRAD)
    # the facts the index holds are always what a full merge gives
    full = ProjectFacts([project_summary(s) for s in {**index.disk, **index.edited}.values()])
    assert full.functions == index.facts.functions


def project_summary(data):
    from torchpact.lint.project import FileSummary

    return FileSummary.from_json(data)

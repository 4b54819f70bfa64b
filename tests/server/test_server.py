"""``torchpact server`` driven by a real LSP client over stdio (pygls' client, tests/server/lsp_client.py):
the diagnostics lint's engine gives, kept current as the editor and the disk change; code actions;
hover; notebooks; each file's own configuration."""

from __future__ import annotations

import asyncio
import textwrap

import pytest

pytest.importorskip("pygls")

from lsprotocol import types as lsp  # noqa: E402

from tests.server.lsp_client import Editor, apply_text_edits  # noqa: E402

TRAIN = textwrap.dedent("""\
    import torch


    def train(model, loader, opt):
        for x, y in loader:
            loss = model(x).sum()
            loss.backward()
            opt.step()
""")

HELPERS = textwrap.dedent("""\
    def reset(optimizer):
        optimizer.lr = 0.1
""")

CALLER = textwrap.dedent("""\
    import torch
    from helpers import reset


    def fit(model, loader, optimizer):
        for x, y in loader:
            reset(optimizer)
            model(x).sum().backward()
            optimizer.step()
""")

LOG = textwrap.dedent("""\
    import torch


    def f(x):
        return torch.log(1 + x)
""")


# The findings these tests use (TP401's info, TP319 with its safe fix) are preview findings (unmeasured, or
# measured under the info bar): the workspace turns preview on
PREVIEW = "[tool.torchpact]\npreview = true\n"


def run(coro):
    return asyncio.run(coro)


def codes(diagnostics):
    return [d.code for d in diagnostics]


def test_a_bug_arrives_with_its_range_and_code_and_goes_once_fixed(tmp_path):
    (tmp_path / "pyproject.toml").write_text(PREVIEW)
    (tmp_path / "train.py").write_text(TRAIN)

    async def session():
        async with Editor(tmp_path) as ed:
            uri = ed.open("train.py")
            [d] = await ed.for_version(uri, 1)
            assert (d.code, d.source, d.severity) == ("TP401", "torchpact", lsp.DiagnosticSeverity.Information)
            # `opt.step()` on line 8 (0-based 7), columns 9-19 as lint reports them (0-based 8-18)
            r = d.range
            assert (r.start.line, r.start.character, r.end.line, r.end.character) == (7, 8, 7, 18)
            assert "never clears gradients" in d.message
            # the fix typed in, as an editor sends it: an incremental insertion
            version = ed.edit(uri, (5, 0), (5, 0), "        opt.zero_grad()\n")
            assert await ed.for_version(uri, version) == []
            # and back: the finding returns
            version = ed.edit(uri, (5, 0), (6, 0), "")
            [again] = await ed.for_version(uri, version)
            assert again.code == "TP401" and again.range.start.line == 7
            # a noqa on the line silences it, as in `torchpact lint`
            version = ed.edit(uri, (7, 18), (7, 18), "  # noqa: TP401")
            assert await ed.for_version(uri, version) == []

    run(session())


def test_code_actions_apply_the_safe_fix_and_add_noqa(tmp_path):
    (tmp_path / "pyproject.toml").write_text(PREVIEW)
    (tmp_path / "ops.py").write_text(LOG)

    async def session():
        async with Editor(tmp_path) as ed:
            uri = ed.open("ops.py")
            [d] = await ed.for_version(uri, 1)
            assert d.code == "TP319" and (d.range.start.line, d.range.start.character) == (4, 11)
            actions = await ed.client.text_document_code_action_async(lsp.CodeActionParams(
                text_document=lsp.TextDocumentIdentifier(uri=uri), range=d.range,
                context=lsp.CodeActionContext(diagnostics=[d])))
            by_kind = {}
            for a in actions:
                by_kind.setdefault(a.kind, []).append(a)
            fix = next(a for a in by_kind[lsp.CodeActionKind.QuickFix] if a.title.startswith("Fix TP319"))
            assert fix.is_preferred
            fixed = apply_text_edits(LOG, fix.edit.changes[uri])
            assert "return torch.log1p(x)\n" in fixed
            assert await ed.for_version(uri, ed.replace(uri, fixed)) == []

            noqa = next(a for a in by_kind[lsp.CodeActionKind.QuickFix] if "noqa" in a.title)
            silenced = apply_text_edits(LOG, noqa.edit.changes[uri])
            assert "return torch.log(1 + x)  # noqa: TP319\n" in silenced
            assert await ed.for_version(uri, ed.replace(uri, silenced)) == []

            # every safe fix at once (source.fixAll.torchpact), on a text with two findings
            twice = LOG + "\n\ndef g(y):\n    return torch.log(1 + y)\n"
            found = await ed.for_version(uri, ed.replace(uri, twice))
            assert codes(found) == ["TP319", "TP319"]
            [fix_all] = await ed.client.text_document_code_action_async(lsp.CodeActionParams(
                text_document=lsp.TextDocumentIdentifier(uri=uri), range=found[0].range,
                context=lsp.CodeActionContext(diagnostics=[], only=["source.fixAll.torchpact"])))
            everything = apply_text_edits(twice, fix_all.edit.changes[uri])
            assert everything.count("log1p") == 2 and "torch.log(1" not in everything

    run(session())


def test_a_change_in_another_file_updates_a_cross_file_finding(tmp_path):
    (tmp_path / "pyproject.toml").write_text(PREVIEW)
    (tmp_path / "helpers.py").write_text(HELPERS)
    (tmp_path / "fit.py").write_text(CALLER)

    async def session():
        async with Editor(tmp_path) as ed:
            fit = ed.open("fit.py")
            assert codes(await ed.for_version(fit, 1)) == ["TP401"]  # reset() clears nothing
            helpers = ed.open("helpers.py")
            await ed.for_version(helpers, 1)
            before = ed.count(fit)
            # the helper, edited in the editor (unsaved), now clears the gradients
            ed.edit(helpers, (1, 0), (2, 0), "    optimizer.zero_grad()\n")
            assert await ed.diagnostics(fit, after=before, until=lambda d: "TP401" not in codes(d)) == []
            # undone: the finding is back
            before = ed.count(fit)
            ed.edit(helpers, (1, 0), (2, 0), "    optimizer.lr = 0.1\n")
            assert codes(await ed.diagnostics(fit, after=before, until=lambda d: "TP401" in codes(d))) == ["TP401"]

            # a file that is not open, changed on disk: the client's file watcher says so
            ed.client.text_document_did_close(lsp.DidCloseTextDocumentParams(lsp.TextDocumentIdentifier(uri=helpers)))
            (tmp_path / "helpers.py").write_text(HELPERS.replace("optimizer.lr = 0.1", "optimizer.zero_grad()"))
            before = ed.count(fit)
            ed.client.workspace_did_change_watched_files(lsp.DidChangeWatchedFilesParams(
                changes=[lsp.FileEvent(uri=helpers, type=lsp.FileChangeType.Changed)]))
            assert await ed.diagnostics(fit, after=before, until=lambda d: "TP401" not in codes(d)) == []

    run(session())


def test_hover_shows_the_rule_page(tmp_path):
    (tmp_path / "pyproject.toml").write_text(PREVIEW)
    (tmp_path / "train.py").write_text(TRAIN)

    async def session():
        async with Editor(tmp_path) as ed:
            uri = ed.open("train.py")
            await ed.for_version(uri, 1)
            hover = await ed.client.text_document_hover_async(lsp.HoverParams(
                text_document=lsp.TextDocumentIdentifier(uri=uri), position=lsp.Position(7, 10)))
            text = hover.contents.value
            assert "**TP401**" in text and "# TP401 — missing-zero-grad" in text and "## What it does" in text
            nothing = await ed.client.text_document_hover_async(lsp.HoverParams(
                text_document=lsp.TextDocumentIdentifier(uri=uri), position=lsp.Position(0, 0)))
            assert nothing is None

    run(session())


def test_each_file_uses_its_closest_pyproject_and_a_broken_one_is_said(tmp_path):
    (tmp_path / "pyproject.toml").write_text(PREVIEW)
    (tmp_path / "train.py").write_text(TRAIN)
    quiet = tmp_path / "quiet"
    quiet.mkdir()
    (quiet / "pyproject.toml").write_text('[tool.torchpact]\npreview = true\nignore = ["TP401"]\n')
    (quiet / "train.py").write_text(TRAIN)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "pyproject.toml").write_text('[tool.torchpact]\nignroe = ["TP401"]\n')
    (broken / "train.py").write_text(TRAIN)

    async def session():
        async with Editor(tmp_path) as ed:
            assert codes(await ed.for_version(ed.open("train.py"), 1)) == ["TP401"]
            assert await ed.for_version(ed.open("quiet/train.py"), 1) == []
            [d] = await ed.for_version(ed.open("broken/train.py"), 1)
            assert d.severity == lsp.DiagnosticSeverity.Error
            assert "cannot use its configuration" in d.message and "did you mean 'ignore'" in d.message
            # a buffer never saved is linted as a file at the workspace's root
            untitled = "untitled:Untitled-1"
            ed.versions[untitled] = 1
            ed.client.text_document_did_open(lsp.DidOpenTextDocumentParams(
                lsp.TextDocumentItem(uri=untitled, language_id="python", version=1, text=TRAIN)))
            assert codes(await ed.for_version(untitled, 1)) == ["TP401"]

    run(session())


def test_a_notebook_is_linted_cell_by_cell(tmp_path):
    (tmp_path / "pyproject.toml").write_text(PREVIEW)
    nb = (tmp_path / "explore.ipynb").as_uri()
    cells = [("md", lsp.NotebookCellKind.Markup, "markdown", "# Training\n"),
             ("c1", lsp.NotebookCellKind.Code, "python", "import torch\n%matplotlib inline\n"),
             ("c2", lsp.NotebookCellKind.Code, "python", TRAIN.split("\n", 1)[1])]

    async def session():
        async with Editor(tmp_path) as ed:
            cell_uri = {name: f"{nb}#{name}" for name, *_ in cells}
            ed.client.notebook_document_did_open(lsp.DidOpenNotebookDocumentParams(
                notebook_document=lsp.NotebookDocument(
                    uri=nb, notebook_type="jupyter-notebook", version=1,
                    cells=[lsp.NotebookCell(kind=kind, document=cell_uri[name]) for name, kind, *_ in cells]),
                cell_text_documents=[lsp.TextDocumentItem(uri=cell_uri[name], language_id=lang, version=1, text=text)
                                     for name, _, lang, text in cells]))
            [d] = await ed.diagnostics(cell_uri["c2"])
            # the cell's own line: `opt.step()` is its 7th line
            assert d.code == "TP401" and (d.range.start.line, d.range.start.character) == (6, 8)
            assert await ed.diagnostics(cell_uri["c1"]) == []

    run(session())


def test_positions_follow_the_encoding_the_client_prefers(tmp_path):
    # Neovim offers UTF-8 first: a column counts bytes there, UTF-16 units in VS Code
    text = LOG.replace("    return torch.log(1 + x)", "    é = 'ü'; return torch.log(1 + x)")
    (tmp_path / "pyproject.toml").write_text(PREVIEW)
    (tmp_path / "ops.py").write_text(text)
    utf8 = lsp.ClientCapabilities(general=lsp.GeneralClientCapabilities(
        position_encodings=[lsp.PositionEncodingKind.Utf8, lsp.PositionEncodingKind.Utf16]))

    async def session():
        async with Editor(tmp_path, utf8) as ed:
            uri = ed.open("ops.py")
            [d] = await ed.for_version(uri, 1)
            line = text.splitlines()[4]
            start = len(line[:line.index("torch.log")].encode("utf-8"))
            # 20 characters, 22 bytes
            assert (d.range.start.line, d.range.start.character) == (4, start) and start == 22
            assert d.range.end.character == start + len("torch.log(1 + x)")

    run(session())

"""``torchpact server``: the Language Server Protocol over stdio, on pygls and lsprotocol.

It publishes lint's findings for each open Python file and notebook on open, change and save; offers
each finding's fix and a ``# noqa`` as code actions (and every safe fix as ``source.fixAll.torchpact``);
shows the rule's page on hover. The computing is ``documents.py`` and ``project.py``; this module only
speaks the protocol.
"""

from __future__ import annotations

import asyncio
import os
import threading
from dataclasses import dataclass, field

from lsprotocol import types as lsp
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path

from torchpact import __version__
from torchpact.config import Config, ConfigError, Settings
from torchpact.findings import Severity
from torchpact.lint.files import LINTED_SUFFIXES
from torchpact.server.documents import (Cell, Entry, Linted, Positions, lint_document, lint_notebook, noqa_edit,
                                        whole_text_edit)
from torchpact.server.project import ProjectIndex, changed_answers, scan

FIX_ALL = "source.fixAll.torchpact"
SCANNED = "torchpact/projectScanned"  # sent once the workspace's facts are read (benchmarks, tests)
_SEVERITY = {Severity.ERROR: lsp.DiagnosticSeverity.Error, Severity.WARNING: lsp.DiagnosticSeverity.Warning,
             Severity.INFO: lsp.DiagnosticSeverity.Information}
_UNITS = {lsp.PositionEncodingKind.Utf8: lambda s: len(s.encode("utf-8", "surrogatepass")),
          lsp.PositionEncodingKind.Utf32: len}


@dataclass
class OpenDoc:
    """A file or notebook open in the editor, and its latest lint."""

    uri: str
    path: str
    notebook: bool = False
    linted: Linted | None = None
    config: Config | None = None
    published: set[str] = field(default_factory=set)  # uris with diagnostics from it (a notebook's cells)


class TorchpactServer(LanguageServer):
    """The language server's state: open documents, the project's facts, and the settings per file."""

    def __init__(self) -> None:
        sync = lsp.NotebookDocumentSyncOptions(notebook_selector=[lsp.NotebookDocumentFilterWithCells(
            cells=[lsp.NotebookCellLanguage(language="python")], notebook="*")], save=True)
        super().__init__("torchpact", __version__, text_document_sync_kind=lsp.TextDocumentSyncKind.Incremental,
                         notebook_document_sync=sync)
        self.settings = Settings()
        self.index = ProjectIndex()
        self.docs: dict[str, OpenDoc] = {}
        self.roots: list[str] = []
        self.pending: set[str] = set()
        self.flush_scheduled = False

    # --- linting ---------------------------------------------------------------------------------

    def units(self):
        return _UNITS.get(self.workspace.position_encoding, lambda s: len(s.encode("utf-16-le")) // 2)

    def schedule(self, uri: str) -> None:
        """Lint ``uri`` after the messages already handed to the event loop (changes queued there together
        are linted once)."""
        self.pending.add(uri)
        if not self.flush_scheduled:
            self.flush_scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        self.flush_scheduled = False
        pending, self.pending = self.pending, set()
        for uri in sorted(pending):
            if uri in self.docs:
                self.lint(self.docs[uri])

    def cells(self, doc: OpenDoc) -> list[Cell]:
        notebook = self.workspace.get_notebook_document(notebook_uri=doc.uri)
        if notebook is None:
            return []
        return [Cell(c.document, c.kind == lsp.NotebookCellKind.Code,
                     self.workspace.get_text_document(c.document).source)
                for c in notebook.cells]

    def lint(self, doc: OpenDoc, relint_others: bool = True) -> None:
        try:
            config = self.settings.for_path(doc.path)
        except ConfigError as exc:
            self.publish_config_error(doc, str(exc))
            return
        doc.config = config
        if doc.notebook:
            doc.linted = lint_notebook(doc.path, self.cells(doc), config, self.index.facts, self.units())
        else:
            text = self.workspace.get_text_document(doc.uri).source
            doc.linted = lint_document(doc.path, doc.uri, text, config, self.index.facts, self.units())
        self.publish(doc)
        old = self.index.edit(doc.path, doc.linted.result.summary)
        if old is not None and relint_others:
            self.facts_changed(old)

    def facts_changed(self, old) -> None:
        """Lint again every open document whose rules asked the project a question answered otherwise now."""
        for other in list(self.docs.values()):
            if other.linted is not None and changed_answers(other.linted.result.asked, old, self.index.facts):
                self.lint(other, relint_others=False)

    def relint_all(self) -> None:
        for doc in list(self.docs.values()):
            self.lint(doc, relint_others=False)

    # --- publishing ------------------------------------------------------------------------------

    def diagnostic(self, entry: Entry) -> lsp.Diagnostic:
        f = entry.finding
        (sl, sc), (el, ec) = entry.range
        return lsp.Diagnostic(
            range=lsp.Range(lsp.Position(sl, sc), lsp.Position(el, ec)), message=f.message,
            severity=_SEVERITY.get(f.severity, lsp.DiagnosticSeverity.Information), code=f.code, source="torchpact",
            data={"fixable": bool(entry.fix) and not entry.unsafe})

    def publish(self, doc: OpenDoc) -> None:
        assert doc.linted is not None
        by_uri: dict[str, list[lsp.Diagnostic]] = {uri: [] for uri in doc.linted.texts}
        for entry in doc.linted.entries:
            by_uri.setdefault(entry.uri, []).append(self.diagnostic(entry))
        for uri in doc.published - set(by_uri):
            self.text_document_publish_diagnostics(lsp.PublishDiagnosticsParams(uri=uri, diagnostics=[]))
        for uri, diagnostics in by_uri.items():
            version = self.workspace.get_text_document(uri).version
            self.text_document_publish_diagnostics(
                lsp.PublishDiagnosticsParams(uri=uri, diagnostics=diagnostics, version=version))
        doc.published = set(by_uri)

    def publish_config_error(self, doc: OpenDoc, message: str) -> None:
        doc.linted = None
        diagnostic = lsp.Diagnostic(range=lsp.Range(lsp.Position(0, 0), lsp.Position(0, 0)), source="torchpact",
                                    severity=lsp.DiagnosticSeverity.Error,
                                    message=f"torchpact cannot use its configuration, so nothing was linted: {message}")
        uris = [c.uri for c in self.cells(doc)[:1]] if doc.notebook else [doc.uri]
        for uri in (doc.published | set(uris)):
            self.text_document_publish_diagnostics(lsp.PublishDiagnosticsParams(
                uri=uri, diagnostics=[diagnostic] if uri in uris else [],
                version=self.workspace.get_text_document(uri).version))
        doc.published = set(uris)

    def forget(self, uri: str) -> None:
        doc = self.docs.pop(uri, None)
        if doc is None:
            return
        for published in doc.published:
            self.text_document_publish_diagnostics(lsp.PublishDiagnosticsParams(uri=published, diagnostics=[]))
        old = self.index.close(doc.path)
        if old is not None:
            self.facts_changed(old)

    # --- the project -----------------------------------------------------------------------------

    def start_scan(self) -> None:
        """Read the facts of the workspace's files in a thread; the editor is served meanwhile."""
        loop = asyncio.get_running_loop()
        roots = list(self.roots)

        def work() -> None:
            try:
                summaries = scan(roots)
            except Exception as exc:  # noqa: BLE001 - a broken tree must not take the server down
                message = f"torchpact: could not read the project's facts: {exc.__class__.__name__}: {exc}"
                loop.call_soon_threadsafe(self.window_log_message, lsp.LogMessageParams(
                    type=lsp.MessageType.Warning, message=message))
                summaries = {}
            loop.call_soon_threadsafe(self.scanned, summaries)

        threading.Thread(target=work, name="torchpact-scan", daemon=True).start()

    def scanned(self, summaries: dict[str, dict]) -> None:
        old = self.index.load(summaries)
        if old is not None:
            self.facts_changed(old)
        self.protocol.notify(SCANNED, {"files": len(summaries)})

    def doc_of(self, uri: str) -> OpenDoc | None:
        """The open document a uri (a file, or a notebook's cell) belongs to."""
        if uri in self.docs:
            return self.docs[uri]
        notebook = self.workspace.get_notebook_document(cell_uri=uri)
        return self.docs.get(notebook.uri) if notebook is not None else None


def path_of(uri: str) -> str | None:
    path = to_fs_path(uri) if uri.startswith("file:") else None
    return os.path.abspath(path) if path else None


def is_python(uri: str, language: str | None) -> bool:
    path = path_of(uri)
    return language == "python" or (path is not None and path.endswith(LINTED_SUFFIXES))


def excluded(server: TorchpactServer, path: str) -> bool:
    """As ``lint --force-exclude --stdin-filename``: a file the configuration excludes gets no diagnostics."""
    from torchpact.lint.files import _force_excluded, excluded_by

    try:
        return _force_excluded(path, excluded_by(server.settings.for_path))
    except ConfigError:
        return False  # lint() reports the configuration


def create_server() -> TorchpactServer:
    """The server with its handlers (``app.register``)."""
    from torchpact.server import handlers

    server = TorchpactServer()
    handlers.register(server)
    return server


def hover_text(entries: list[Entry]) -> str:
    """The hover: each finding's message and fix, then its rule's page (as ``torchpact rule``)."""
    from torchpact.docs import page

    parts = []
    for code in dict.fromkeys(e.finding.code for e in entries):
        found = [e.finding for e in entries if e.finding.code == code]
        head = "\n\n".join(f"**{f.code}** ({f.severity.value}{f', evidence {f.evidence}' if f.evidence else ''}): "
                           f"{f.message}" + (f"\n\nFix: {f.fix}" if f.fix else "") for f in found)
        parts.append(head + "\n\n---\n\n" + (page(code) or ""))
    return "\n\n---\n\n".join(parts)


def covering(linted: Linted, uri: str, line: int, unit: int) -> list[Entry]:
    """The entries of ``uri`` whose range holds the position; else those on its line."""
    mine = [e for e in linted.entries if e.uri == uri]
    inside = [e for e in mine if e.range[0] <= (line, unit) <= e.range[1]]
    return inside or [e for e in mine if e.range[0][0] <= line <= e.range[1][0]]


def fix_all_edits(server: TorchpactServer, doc: OpenDoc) -> dict[str, list[lsp.TextEdit]]:
    """Every safe fix of a document (and the unsafe ones where configured), as ``lint --fix`` applies them."""
    from torchpact.lint.source import cell_sources

    assert doc.linted is not None and doc.config is not None
    units = server.units()
    changes: dict[str, list[lsp.TextEdit]] = {}
    if doc.notebook:
        cells = server.cells(doc)
        fixed = lint_notebook(doc.path, cells, doc.config, server.index.facts, units, fix=True).result.fixed
        sources = cell_sources(fixed) if fixed is not None else {}
        pairs = [(c.uri, c.text, sources.get(i, c.text)) for i, c in enumerate(cells, start=1) if c.code]
    else:
        text = doc.linted.texts[doc.uri]
        result = lint_document(doc.path, doc.uri, text, doc.config, server.index.facts, units, fix=True).result
        pairs = [(doc.uri, text, result.fixed)] if result.fixed is not None else []
    for uri, old, new in pairs:
        if new != old:
            start, end, replacement = whole_text_edit(old, new)
            changes[uri] = [text_edit(Positions(old, units), start, end, replacement)]
    return changes


def text_edit(pos: Positions, start: int, end: int, replacement: str) -> lsp.TextEdit:
    (sl, sc), (el, ec) = pos.at_offset(start), pos.at_offset(end)
    return lsp.TextEdit(range=lsp.Range(lsp.Position(sl, sc), lsp.Position(el, ec)), new_text=replacement)


def noqa_action(server: TorchpactServer, doc: OpenDoc, entry: Entry) -> lsp.CodeAction | None:
    assert doc.linted is not None
    text = doc.linted.texts.get(entry.uri, "")
    edit = noqa_edit(text, entry.finding)
    if edit is None:
        return None
    code = entry.finding.code
    return lsp.CodeAction(title=f"Silence {code} on this line (# noqa: {code})", kind=lsp.CodeActionKind.QuickFix,
                          diagnostics=[server.diagnostic(entry)],
                          edit=lsp.WorkspaceEdit(
                              changes={entry.uri: [text_edit(Positions(text, server.units()), *edit)]}))


def fix_action(server: TorchpactServer, doc: OpenDoc, entry: Entry) -> lsp.CodeAction | None:
    if not entry.fix or (entry.unsafe and not (doc.config and doc.config.unsafe_fixes)):
        return None
    f = entry.finding
    edits = [lsp.TextEdit(range=lsp.Range(lsp.Position(*a), lsp.Position(*b)), new_text=new)
             for (a, b), new in entry.fix]
    title = f"Fix {f.code}" + (f": {f.fix}" if f.fix else "") + (" (unsafe: review it)" if entry.unsafe else "")
    return lsp.CodeAction(title=title, kind=lsp.CodeActionKind.QuickFix, diagnostics=[server.diagnostic(entry)],
                          is_preferred=not entry.unsafe, edit=lsp.WorkspaceEdit(changes={entry.uri: edits}))

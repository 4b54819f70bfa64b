"""The protocol messages ``torchpact server`` answers, each handed to ``app.TorchpactServer``."""

from __future__ import annotations

import os

from lsprotocol import types as lsp

from torchpact.config import Settings
from torchpact.server.app import (FIX_ALL, OpenDoc, TorchpactServer, covering, excluded, fix_action, fix_all_edits,
                                  hover_text, is_python, noqa_action, path_of)

_WATCHED = ("**/*.py", "**/*.pyw", "**/*.ipynb", "**/pyproject.toml")


def register(server: TorchpactServer) -> None:
    """Attach every handler to ``server``."""

    @server.feature(lsp.INITIALIZE)
    def initialize(ls: TorchpactServer, params: lsp.InitializeParams) -> None:
        folders = [path_of(f.uri) for f in params.workspace_folders or []]
        root = path_of(params.root_uri) if params.root_uri else params.root_path
        ls.roots = [f for f in folders if f] or ([os.path.abspath(root)] if root else [])

    @server.feature(lsp.INITIALIZED)
    def initialized(ls: TorchpactServer, params: lsp.InitializedParams) -> None:
        ls.start_scan()
        caps = ls.client_capabilities.workspace
        watched = caps.did_change_watched_files if caps is not None else None
        if watched is not None and watched.dynamic_registration:
            ls.client_register_capability(lsp.RegistrationParams(registrations=[lsp.Registration(
                id="torchpact-watched-files", method=lsp.WORKSPACE_DID_CHANGE_WATCHED_FILES,
                register_options=lsp.DidChangeWatchedFilesRegistrationOptions(
                    watchers=[lsp.FileSystemWatcher(glob_pattern=g) for g in _WATCHED]))]))

    @server.feature(lsp.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: TorchpactServer, params: lsp.DidOpenTextDocumentParams) -> None:
        item = params.text_document
        if (ls.workspace.get_notebook_document(cell_uri=item.uri) is not None
                or not is_python(item.uri, item.language_id)):
            return
        path = path_of(item.uri) or os.path.join(ls.roots[0] if ls.roots else os.getcwd(), "untitled.py")
        if excluded(ls, path):
            return
        ls.docs[item.uri] = OpenDoc(item.uri, path)
        ls.lint(ls.docs[item.uri])

    @server.feature(lsp.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: TorchpactServer, params: lsp.DidChangeTextDocumentParams) -> None:
        if params.text_document.uri in ls.docs:
            ls.schedule(params.text_document.uri)

    @server.feature(lsp.TEXT_DOCUMENT_DID_SAVE)
    def did_save(ls: TorchpactServer, params: lsp.DidSaveTextDocumentParams) -> None:
        uri = params.text_document.uri
        if uri.endswith("pyproject.toml"):
            ls.settings = Settings()
            ls.relint_all()
        elif uri in ls.docs:
            ls.schedule(uri)

    @server.feature(lsp.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: TorchpactServer, params: lsp.DidCloseTextDocumentParams) -> None:
        ls.forget(params.text_document.uri)

    @server.feature(lsp.NOTEBOOK_DOCUMENT_DID_OPEN)
    def notebook_open(ls: TorchpactServer, params: lsp.DidOpenNotebookDocumentParams) -> None:
        uri = params.notebook_document.uri
        path = path_of(uri) or os.path.join(ls.roots[0] if ls.roots else os.getcwd(), "untitled.ipynb")
        if not path.endswith(".ipynb"):
            path += ".ipynb"  # linted as a notebook, whatever the editor calls it
        if excluded(ls, path):
            return
        ls.docs[uri] = OpenDoc(uri, path, notebook=True)
        ls.lint(ls.docs[uri])

    @server.feature(lsp.NOTEBOOK_DOCUMENT_DID_CHANGE)
    def notebook_change(ls: TorchpactServer, params: lsp.DidChangeNotebookDocumentParams) -> None:
        if params.notebook_document.uri in ls.docs:
            ls.schedule(params.notebook_document.uri)

    @server.feature(lsp.NOTEBOOK_DOCUMENT_DID_SAVE)
    def notebook_save(ls: TorchpactServer, params: lsp.DidSaveNotebookDocumentParams) -> None:
        if params.notebook_document.uri in ls.docs:
            ls.schedule(params.notebook_document.uri)

    @server.feature(lsp.NOTEBOOK_DOCUMENT_DID_CLOSE)
    def notebook_close(ls: TorchpactServer, params: lsp.DidCloseNotebookDocumentParams) -> None:
        ls.forget(params.notebook_document.uri)

    @server.feature(lsp.WORKSPACE_DID_CHANGE_WATCHED_FILES)
    def watched(ls: TorchpactServer, params: lsp.DidChangeWatchedFilesParams) -> None:
        config_changed = False
        for change in params.changes:
            path = path_of(change.uri)
            if path is None:
                continue
            if os.path.basename(path) == "pyproject.toml":
                config_changed = True
                continue
            old = ls.index.on_disk(path, deleted=change.type == lsp.FileChangeType.Deleted)
            if old is not None:
                ls.facts_changed(old)
        if config_changed:
            ls.settings = Settings()
            ls.relint_all()

    @server.feature(lsp.TEXT_DOCUMENT_HOVER)
    def hover(ls: TorchpactServer, params: lsp.HoverParams) -> lsp.Hover | None:
        ls.flush()  # a change received but not yet linted: answer about the text the editor shows
        doc = ls.doc_of(params.text_document.uri)
        if doc is None or doc.linted is None:
            return None
        found = covering(doc.linted, params.text_document.uri, params.position.line, params.position.character)
        if not found:
            return None
        return lsp.Hover(contents=lsp.MarkupContent(kind=lsp.MarkupKind.Markdown, value=hover_text(found)))

    @server.feature(lsp.TEXT_DOCUMENT_CODE_ACTION, lsp.CodeActionOptions(
        code_action_kinds=[lsp.CodeActionKind.QuickFix, FIX_ALL]))
    def code_action(ls: TorchpactServer, params: lsp.CodeActionParams) -> list[lsp.CodeAction] | None:
        uri = params.text_document.uri
        ls.flush()  # edits are placed in the text the editor shows, not in a text already changed
        doc = ls.doc_of(uri)
        if doc is None or doc.linted is None:
            return None
        only = params.context.only
        actions: list[lsp.CodeAction] = []
        wanted = lambda kind: not only or any(kind == k or kind.startswith(f"{k}.") for k in only)  # noqa: E731
        if wanted(lsp.CodeActionKind.QuickFix):
            start = (params.range.start.line, params.range.start.character)
            end = (params.range.end.line, params.range.end.character)
            for entry in doc.linted.entries:
                if entry.uri != uri or entry.range[1] < start or entry.range[0] > end:
                    continue
                actions += [a for a in (fix_action(ls, doc, entry), noqa_action(ls, doc, entry)) if a is not None]
        if wanted(FIX_ALL) and any(e.fix and not e.unsafe for e in doc.linted.entries):
            changes = fix_all_edits(ls, doc)
            if changes:
                actions.append(lsp.CodeAction(title="Apply every safe torchpact fix", kind=FIX_ALL,
                                              edit=lsp.WorkspaceEdit(changes=changes)))
        return actions

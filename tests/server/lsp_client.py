"""A real LSP client (pygls') driving ``torchpact server`` over stdio, for the tests.

Waits are for events (a diagnostics notification that satisfies a condition), never for time: the
timeout only turns a server that never answers into a failure instead of a hung suite.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from pathlib import Path

from lsprotocol import types as lsp
from pygls.lsp.client import LanguageClient

from torchpact.server.app import SCANNED

NEVER = 120.0  # seconds after which a missing notification fails the test


class Editor:
    """An editor session: opens files, edits them, and sees what the server publishes."""

    def __init__(self, root: Path, capabilities: lsp.ClientCapabilities | None = None):
        self.root = root
        self.capabilities = capabilities or lsp.ClientCapabilities()
        self.client = LanguageClient("torchpact-tests", "1")
        self.published: dict[str, list[lsp.PublishDiagnosticsParams]] = {}
        self.scanned = asyncio.Event()
        self.changed = asyncio.Condition()
        self.versions: dict[str, int] = {}
        self.messages: list[str] = []  # what the server logged or showed

        @self.client.feature(lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
        async def on_diagnostics(params: lsp.PublishDiagnosticsParams) -> None:
            async with self.changed:
                self.published.setdefault(params.uri, []).append(params)
                self.changed.notify_all()

        @self.client.feature(SCANNED)
        def on_scanned(params) -> None:
            self.scanned.set()

        @self.client.feature(lsp.CLIENT_REGISTER_CAPABILITY)
        def on_register(params) -> None:
            return None

        @self.client.feature(lsp.WINDOW_LOG_MESSAGE)
        def on_log(params: lsp.LogMessageParams) -> None:
            self.messages.append(params.message)

        @self.client.feature(lsp.WINDOW_SHOW_MESSAGE)
        def on_message(params: lsp.ShowMessageParams) -> None:
            self.messages.append(params.message)

    async def __aenter__(self) -> "Editor":
        await self.client.start_io(sys.executable, "-m", "torchpact", "server", cwd=str(self.root))
        await self.client.initialize_async(lsp.InitializeParams(
            capabilities=self.capabilities, root_uri=self.root.as_uri(),
            workspace_folders=[lsp.WorkspaceFolder(uri=self.root.as_uri(), name="project")]))
        self.client.initialized(lsp.InitializedParams())
        await asyncio.wait_for(self.scanned.wait(), NEVER)
        return self

    async def __aexit__(self, *exc) -> None:
        try:
            await asyncio.wait_for(self.client.shutdown_async(None), NEVER)
            self.client.exit(None)
            await asyncio.wait_for(self.client.stop(), NEVER)
        finally:
            process = self.client._server  # never left running, whatever happened
            if process is not None and process.returncode is None:
                process.kill()
                await process.wait()

    def uri(self, name: str) -> str:
        return (self.root / name).as_uri()

    def count(self, uri: str) -> int:
        return len(self.published.get(uri, []))

    async def diagnostics(self, uri: str, after: int = 0,
                          until: Callable[[list[lsp.Diagnostic]], bool] = lambda d: True) -> list[lsp.Diagnostic]:
        """The diagnostics of the first publication of ``uri`` after the ``after``-th that satisfies ``until``."""
        async def wait() -> list[lsp.Diagnostic]:
            async with self.changed:
                seen = after
                while True:
                    for params in self.published.get(uri, [])[seen:]:
                        seen += 1
                        if until(list(params.diagnostics)):
                            return list(params.diagnostics)
                    await self.changed.wait()

        return await asyncio.wait_for(wait(), NEVER)

    def open(self, name: str, text: str | None = None) -> str:
        uri = self.uri(name)
        text = (self.root / name).read_text() if text is None else text
        self.versions[uri] = 1
        self.client.text_document_did_open(lsp.DidOpenTextDocumentParams(
            lsp.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)))
        return uri

    def replace(self, uri: str, text: str) -> int:
        """Send the whole new text (a full-document change); returns the new version."""
        self.versions[uri] += 1
        self.client.text_document_did_change(lsp.DidChangeTextDocumentParams(
            text_document=lsp.VersionedTextDocumentIdentifier(uri=uri, version=self.versions[uri]),
            content_changes=[lsp.TextDocumentContentChangeWholeDocument(text=text)]))
        return self.versions[uri]

    def edit(self, uri: str, start: tuple[int, int], end: tuple[int, int], text: str) -> int:
        """An incremental change, as editors send while typing; returns the new version."""
        self.versions[uri] += 1
        self.client.text_document_did_change(lsp.DidChangeTextDocumentParams(
            text_document=lsp.VersionedTextDocumentIdentifier(uri=uri, version=self.versions[uri]),
            content_changes=[lsp.TextDocumentContentChangePartial(
                range=lsp.Range(lsp.Position(*start), lsp.Position(*end)), text=text)]))
        return self.versions[uri]

    async def for_version(self, uri: str, version: int) -> list[lsp.Diagnostic]:
        async def wait() -> list[lsp.Diagnostic]:
            async with self.changed:
                while True:
                    for params in self.published.get(uri, []):
                        if params.version == version:
                            return list(params.diagnostics)
                    await self.changed.wait()

        return await asyncio.wait_for(wait(), NEVER)


def apply_text_edits(text: str, edits: list[lsp.TextEdit]) -> str:
    """What an editor does with a WorkspaceEdit's edits for one document (UTF-16 positions)."""
    from torchpact.server.documents import Positions

    pos = Positions(text)
    spans = sorted(((pos.offset(e.range.start.line, e.range.start.character),
                     pos.offset(e.range.end.line, e.range.end.character), e.new_text) for e in edits), reverse=True)
    for start, end, new in spans:
        text = text[:start] + new + text[end:]
    return text

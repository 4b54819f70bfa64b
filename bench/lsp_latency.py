"""``torchpact server`` in an editor's shoes (issue 37): how soon diagnostics follow an edit, and how much
memory the server holds for a large workspace.

A real LSP client (pygls', as in tests/server/) starts ``torchpact server`` over stdio with the TUNING
projects of the corpus (``bench/lint_split.py``; never the blind ones) as its workspace folders, waits
until the server has read their cross-file facts, then opens a real ~2,000-line torch file of the corpus
and, after its first lint, makes ``--changes`` incremental edits (typing a character into a comment,
then deleting it, as an editor sends them). Each latency is the wall time from sending the change to
receiving the diagnostics of that version (client side: the protocol, the server's lint and its reply);
the server's CPU time per change is read from /proc alongside. For reference the same text is then
linted in this process (``lint_document``, what the server runs per change): the gap between the two
is the protocol's share, and on a shared machine both wall times grow with the neighbours' load (the
load average is printed) while the CPU times do not.

Targets: median latency <= 150 ms (CPU only); memory: reported (VmRSS and peak VmHWM of the server
process once the workspace is read, and after the edits).

Usage: TORCHPACT_CORPUS=/work/corpus python bench/lsp_latency.py [--changes 20] [--file PATH] [--projects a,b]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))  # the tests' LSP client

from corpus import NoCorpus, corpus_dir  # noqa: E402
from lint_split import TUNING  # noqa: E402
from lsprotocol import types as lsp  # noqa: E402

from tests.server.lsp_client import Editor  # noqa: E402

TARGET_MS = 150.0
TARGET_LINES = 2000


def pick_file(folders: list[Path]) -> Path:
    """The torch file whose length is closest to 2,000 lines (ties: by path), for a stable choice."""
    best: tuple[int, str] | None = None
    for folder in folders:
        for p in sorted(folder.rglob("*.py")):
            try:
                data = p.read_bytes()
            except OSError:
                continue
            if b"import torch" not in data:
                continue
            score = (abs(data.count(b"\n") - TARGET_LINES), str(p))
            best = min(best, score) if best else score
    if best is None:
        sys.exit("no torch file in the chosen projects")
    return Path(best[1])


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS / VmHWM of a process, in MiB."""
    out = {}
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0]) // 1024
    return out


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Workspace(Editor):
    """The tests' editor with several workspace folders."""

    def __init__(self, folders: list[Path]):
        super().__init__(folders[0])
        self.folders = folders

    async def __aenter__(self) -> "Workspace":
        await self.client.start_io(sys.executable, "-m", "torchpact", "server", cwd=str(self.root))
        await self.client.initialize_async(lsp.InitializeParams(
            capabilities=self.capabilities, root_uri=self.root.as_uri(),
            workspace_folders=[lsp.WorkspaceFolder(uri=f.as_uri(), name=f.name) for f in self.folders]))
        self.client.initialized(lsp.InitializedParams())
        return self


async def measure(folders: list[Path], file: Path, changes: int) -> dict:
    async with Workspace(folders) as ed:
        pid = ed.client._server.pid  # the server process the client started
        start = time.perf_counter()
        await asyncio.wait_for(ed.scanned.wait(), 900)
        scan_s = time.perf_counter() - start
        memory_scanned = proc_status(pid)
        text = file.read_text(encoding="utf-8")
        lines = text.splitlines()
        target = next((i for i, ln in enumerate(lines) if ln.lstrip().startswith("#")), 0)
        col = len(lines[target])
        uri = file.as_uri()
        self_start = time.perf_counter()
        ed.versions[uri] = 1
        ed.client.text_document_did_open(lsp.DidOpenTextDocumentParams(
            lsp.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)))
        first = await ed.for_version(uri, 1)
        first_ms = (time.perf_counter() - self_start) * 1000
        latencies, cpu = [], []
        for i in range(changes):
            typed = i % 2 == 0
            before_cpu = cpu_seconds(pid)
            t0 = time.perf_counter()
            if typed:
                version = ed.edit(uri, (target, col), (target, col), "x")
            else:
                version = ed.edit(uri, (target, col), (target, col + 1), "")
            diagnostics = await ed.for_version(uri, version)
            latencies.append((time.perf_counter() - t0) * 1000)
            cpu.append((cpu_seconds(pid) - before_cpu) * 1000)
            assert len(diagnostics) == len(first), "an edit inside a comment changed the findings"
        memory_after = proc_status(pid)
    return {"alone": lint_alone(file, text, changes), "scan_s": scan_s, "first_ms": first_ms, "findings": len(first),
            "latencies": latencies, "cpu": cpu, "memory_scanned": memory_scanned, "memory_after": memory_after,
            "lines": len(lines)}


def lint_alone(file: Path, text: str, times: int) -> tuple[float, float]:
    """Median wall and CPU milliseconds of linting ``text`` as the server does, in this process."""
    from torchpact.config import Settings
    from torchpact.server.documents import lint_document

    config = Settings().for_path(str(file))
    lint_document(str(file), file.as_uri(), text, config, None)
    wall, cpu = [], []
    for _ in range(times):
        w, c = time.perf_counter(), time.process_time()
        lint_document(str(file), file.as_uri(), text, config, None)
        wall.append((time.perf_counter() - w) * 1000)
        cpu.append((time.process_time() - c) * 1000)
    return statistics.median(wall), statistics.median(cpu)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--changes", type=int, default=20)
    ap.add_argument("--file", help="the file to edit (default: the TUNING torch file closest to 2,000 lines)")
    ap.add_argument("--projects", help="comma-separated TUNING projects (default: all of them)")
    args = ap.parse_args()
    names = args.projects.split(",") if args.projects else list(TUNING)
    unknown = [n for n in names if n not in TUNING]
    if unknown:
        sys.exit(f"not TUNING projects (the blind ones are never read here): {', '.join(unknown)}")
    try:
        corpus, names = corpus_dir(names)
    except NoCorpus as exc:
        print(f"skipped: {exc}")
        return 0
    folders = [corpus / n for n in names]
    file = Path(args.file).resolve() if args.file else pick_file(folders)
    r = asyncio.run(measure(folders, file, args.changes))
    median = statistics.median(r["latencies"])
    print(f"workspace: {len(folders)} TUNING projects (in-sample); facts read in {r['scan_s']:.1f} s")
    print(f"memory of the server: {r['memory_scanned']['VmRSS']} MiB resident once the workspace is read "
          f"(peak {r['memory_scanned']['VmHWM']} MiB); {r['memory_after']['VmRSS']} MiB after the edits")
    print(f"file: {file} ({r['lines']} lines, {r['findings']} findings); first lint on open: {r['first_ms']:.0f} ms")
    print(f"diagnostics after a change: median {median:.0f} ms of {len(r['latencies'])} changes "
          f"(min {min(r['latencies']):.0f}, max {max(r['latencies']):.0f}); server CPU per change: median "
          f"{statistics.median(r['cpu']):.0f} ms; target <= {TARGET_MS:.0f} ms: "
          f"{'met' if median <= TARGET_MS else 'MISSED'}")
    print(f"the same lint in this process: median {r['alone'][0]:.0f} ms wall, {r['alone'][1]:.0f} ms CPU; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    return 0 if median <= TARGET_MS else 1


if __name__ == "__main__":
    sys.exit(main())

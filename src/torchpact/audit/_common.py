"""What export-check and compile-check share: output comparison, warnings with the user's line (timing: ``timing``)."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import logging
import math
import os
import sys
import traceback
import warnings
from dataclasses import dataclass
from typing import Any, Iterator

from torchpact.checks import Check
from torchpact.findings import Finding, Severity
from torchpact.userframes import is_user_file

# Outputs agree when max |artifact - eager| <= ATOL + RTOL * max |eager|, per output tensor.
RTOL, ATOL = 1e-4, 1e-5


def user_frame(frames: list[traceback.FrameSummary]) -> traceback.FrameSummary | None:
    """The innermost frame of model code (site-packages such as transformers count as model code)."""
    for frame in reversed(frames):
        if is_user_file(frame.filename):
            return frame
    return None


_TORCHPACT = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def inner_user_frame(frames: list[traceback.FrameSummary]) -> traceback.FrameSummary | None:
    """The innermost model-code frame below torchpact's own frames: the model line at work, never the
    script or test that called torchpact."""
    last = max((i for i, f in enumerate(frames) if os.path.abspath(f.filename).startswith(_TORCHPACT)), default=-1)
    return user_frame(frames[last + 1:])


def source_line(path: str | None, line: int | None) -> str:
    if not path or not line:
        return ""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for i, text in enumerate(fh, 1):
                if i == line:
                    text = text.strip()
                    return text if len(text) <= 70 else text[:67] + "..."
    except OSError:
        pass
    return ""


def short_path(path: str | None) -> str | None:
    if path is None:
        return None
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith(".." + os.sep + "..") else rel


def finding(check: Check, message: str, severity: Severity | None = None, path: str | None = None,
            line: int | None = None, subject: str | None = None, fix: str | None = None) -> Finding:
    """A Finding of ``check`` (at its own severity unless told), at the model's line when known."""
    return Finding(code=check.code, category=check.category, severity=severity or check.severity,
                   message=message, path=short_path(path), line=line, subject=subject, fix=fix,
                   evidence=check.evidence)


@dataclass
class CaughtWarning:
    category: type
    message: str
    path: str | None  # the model code's line that led to the warning
    line: int | None


class WarningLog:
    """Records every warning raised inside the block, with the model code's line at that moment.

    The location is taken from the stack when the warning is raised, so a warning torch emits from
    its own code (``stacklevel`` pointing into torch) is still tied to the line that caused it.
    """

    def __init__(self) -> None:
        self.caught: list[CaughtWarning] = []
        self._cm: Any = None

    def __enter__(self) -> "WarningLog":
        self._cm = warnings.catch_warnings()
        self._cm.__enter__()
        warnings.simplefilter("always")
        warnings.showwarning = self._show
        return self

    def __exit__(self, *exc: Any) -> None:
        self._cm.__exit__(*exc)

    def _show(self, message, category, filename, lineno, file=None, line=None) -> None:
        path, where = (filename, lineno) if is_user_file(filename) else (None, None)
        if path is None:
            frame = inner_user_frame(traceback.extract_stack()[:-1])
            if frame is not None:
                path, where = frame.filename, frame.lineno
        self.caught.append(CaughtWarning(category, str(message), path, where))


@contextlib.contextmanager
def quiet() -> Iterator[io.StringIO]:
    """Model code and exporters print progress (and torch.export prints partial graphs on stderr when
    it fails); the report owns stdout, and the findings say it in one line."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf), torch_logs_quiet():
        yield buf


@contextlib.contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Run with ``n`` intra-op threads (None: as configured), restoring the setting afterwards."""
    import torch

    if n is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class _Drop(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.CRITICAL


@contextlib.contextmanager
def torch_logs_quiet() -> Iterator[None]:
    """torch logs whole graphs on stderr when an export fails; the finding says it in one line."""
    drop = _Drop()
    handlers = set()
    for name, logger in list(logging.root.manager.loggerDict.items()):
        if isinstance(logger, logging.Logger) and name.split(".")[0] in ("torch", "onnxscript", "onnx_ir"):
            handlers.update(h for h in logger.handlers if isinstance(h, logging.StreamHandler))
    for h in handlers:
        h.addFilter(drop)
    try:
        yield
    finally:
        for h in handlers:
            h.removeFilter(drop)


def first_line(exc: BaseException | str, limit: int = 300) -> str:
    text = str(exc).strip()
    for line in text.splitlines():
        line = line.strip()
        if line:
            text = line
            break
    text = text.replace("\x1b[96m", "").replace("\x1b[0m", "")
    name = type(exc).__name__ if isinstance(exc, BaseException) else ""
    out = f"{name}: {text}" if name else text
    return out if len(out) <= limit else out[: limit - 3] + "..."


def error_text(exc: BaseException) -> str:
    """The exception's message with those of its causes and contexts, one per line."""
    parts, current, seen = [], exc, set()
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        parts.append(str(current))
        current = current.__cause__ or current.__context__
    return "\n".join(parts)


def exception_location(exc: BaseException) -> tuple[str | None, int | None]:
    """The innermost model-code frame of the exception's traceback (or of what caused it)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        frame = user_frame(traceback.extract_tb(current.__traceback__))
        if frame is not None:
            return frame.filename, frame.lineno
        current = current.__cause__ or current.__context__
    return None, None


# Outputs ---------------------------------------------------------------------------------------

def output_leaves(obj: Any, name: str = "output") -> tuple[list[tuple[str, Any]], list[tuple[str, str]]]:
    """(tensors, foreign): the output's tensors in order, and objects that are neither tensors,
    plain containers, numbers nor types torch's pytree knows (e.g. a cache object)."""
    import torch
    from torch.utils import _pytree

    tensors: list[tuple[str, Any]] = []
    foreign: list[tuple[str, str]] = []

    def walk(x: Any, path: str) -> None:
        if isinstance(x, torch.Tensor):
            tensors.append((path, x))
        elif x is None or isinstance(x, (bool, int, float, str, complex, torch.dtype, torch.device)):
            return
        elif isinstance(x, dict):
            for k, v in x.items():
                walk(v, f"{path}.{k}" if isinstance(k, str) and k.isidentifier() else f"{path}[{k!r}]")
        elif isinstance(x, (tuple, list)):
            for i, v in enumerate(x):
                walk(v, f"{path}[{i}]")
        elif dataclasses.is_dataclass(x) and not isinstance(x, type):
            for f in dataclasses.fields(x):
                walk(getattr(x, f.name), f"{path}.{f.name}")
        elif type(x) in _pytree.SUPPORTED_NODES:
            children, _ = _pytree.tree_flatten(x)
            for i, v in enumerate(children):
                walk(v, f"{path}[{i}]")
        else:
            foreign.append((path, type(x).__module__ + "." + type(x).__qualname__))

    walk(obj, name)
    return tensors, foreign


@dataclass
class Comparison:
    """How an artifact's outputs compare with eager's on one input."""

    ok: bool
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    problem: str | None = None  # structure/shape/dtype difference, in words


def _finite_max(x: Any) -> float:
    import torch

    x = x.detach().float()
    x = x[torch.isfinite(x)]
    return float(x.abs().max()) if x.numel() else 0.0


def compare(ref: list[tuple[str, Any]], got: list[Any], rtol: float = RTOL, atol: float = ATOL) -> Comparison:
    """``ref``: eager's (name, tensor) leaves; ``got``: the artifact's tensors in the same order."""
    import torch

    if len(got) != len(ref):
        return Comparison(False, problem=f"returns {len(got)} tensors where eager returns {len(ref)}")
    worst_abs, worst_rel, ok, problem = 0.0, 0.0, True, None
    for (name, r), g in zip(ref, got, strict=True):
        if not isinstance(g, torch.Tensor):
            g = torch.as_tensor(g)
        if tuple(g.shape) != tuple(r.shape):
            return Comparison(False, problem=f"{name} has shape {tuple(g.shape)} where eager has {tuple(r.shape)}")
        if r.numel() == 0:
            continue
        r32, g32 = r.detach().cpu().double(), g.detach().cpu().double()
        both_nan = torch.isnan(r32) & torch.isnan(g32)
        same_inf = torch.isinf(r32) & (r32 == g32)
        diff = (r32 - g32).abs()
        diff = torch.where(both_nan | same_inf, torch.zeros_like(diff), diff)
        diff = torch.where(torch.isnan(diff), torch.full_like(diff, math.inf), diff)
        err = float(diff.max())
        scale = _finite_max(r32)
        rel = err / scale if scale > 0 else (0.0 if err == 0 else math.inf)
        exact = not r.dtype.is_floating_point and not r.dtype.is_complex
        bad = err > 0 if exact else err > atol + rtol * scale
        if bad and ok:
            ok, problem = False, f"{name} differs by up to {err:.3g}"
        worst_abs, worst_rel = max(worst_abs, err), max(worst_rel, rel)
    return Comparison(ok, worst_abs, worst_rel, problem)


def model_device(model: Any) -> str:
    """The device of the model's first parameter (or buffer); ``cpu`` for a model without either."""
    for p in model.parameters():
        return str(p.device)
    for b in model.buffers():
        return str(b.device)
    return "cpu"


def rounded(x: float | None, digits: int = 4) -> float | None:
    if x is None or not math.isfinite(x):
        return None  # JSON has no inf/nan; the variant's `problem` says what happened
    return float(f"{x:.{digits}g}")


def stderr_note(text: str) -> None:
    print(text, file=sys.stderr, flush=True)

"""While one of torch's tracers runs, torch is as the script would find it without torchpact.

The entry points wrapped here are the tracers that run the script's Python code and keep what they saw:
``torch.export.export`` / ``draft_export`` (also reached from ``torch.onnx.export``), ``torch.jit.trace`` /
``trace_module``, ``torch.jit._get_trace_graph`` (the TorchScript ONNX exporter) and ``torch.fx.Tracer.trace``
(``symbolic_trace``, ``make_fx``). For as long as one runs, the session's global module hooks and the
``__call__`` it may have set on model classes are off, and every function a watcher wrapped is torch's own
again (``_patch.pause_all``); all of it comes back when the tracer returns or raises. The watchers would see
nothing there anyway (``watch.tracing``), but their presence alone changes what these tracers produce:

- on torch 2.13 a strict export fails while any global module hook is registered: Dynamo then traces
  ``Module.__call__`` of the wrapper module export puts around the model, and refuses to inline that
  wrapper's ``forward`` ("Attempted to inline function marked as skipped");
- a TorchScript trace names the values it records after the locals of the frame that called the op, so a
  wrapper's frame renames the inputs of an exported ONNX graph;
- an FX graph records the function it was handed as a node's target: it would hold the wrapper.

``torch.compile`` is not paused: its guards check the functions it read, which must be the ones the
compiled code will find (the wrappers tell Dynamo to trace torch's function instead, see ``_patch``).
``torch.jit.script`` is not wrapped: it resolves names in its caller's frame.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torchpact.watch.watchers._patch import Patch, pause_all, resume_all


def _entry_points() -> list[tuple[Any, str]]:
    import torch.export
    import torch.fx
    import torch.jit

    points = [(torch.export, "export"), (torch.export, "draft_export"), (torch.jit, "trace"),
              (torch.jit, "trace_module"), (torch.jit, "_get_trace_graph"), (torch.fx.Tracer, "trace")]
    return [(owner, name) for owner, name in points if hasattr(owner, name)]


def pause_while_tracing(pause: Callable[[], None], resume: Callable[[], None]) -> list[Patch]:
    """Wrap torch's tracers so that ``pause()`` and ``pause_all()`` run before each, ``resume()`` after."""

    def make(original: Callable) -> Callable:
        def tracer(*args: Any, **kwargs: Any) -> Any:
            pause()
            pause_all()
            try:
                return original(*args, **kwargs)
            finally:
                resume_all()
                resume()
        return tracer

    return [Patch(owner, name, make) for owner, name in _entry_points()]

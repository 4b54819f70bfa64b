"""Work off the training path: a probe that trains a copy of the model, which training never sees.

A check that needs to know what the model *could* do (fit one batch, say) runs it on a copy of the
model and of its optimizers, between two steps of the script:

- ``copy_model(model, optimizers)`` deep-copies them together, so the copied optimizers hold the copied
  parameters and their state (Adam's moments). The copies get no hooks: the modules' and optimizers'
  own hook dictionaries are copied empty, so the script's hooks (and what they close over) are
  neither copied nor called. Objects a module merely refers to (a config, a trainer, a logger) are
  shared, not copied. Refused, with the reason, for a model too large to copy cheaply, one split over
  processes (``torch.distributed`` initialised: a copy's forward would join the job's collectives),
  and one that is compiled or scripted.
- ``unobserved(session)`` sets torch's global module and optimizer hooks aside (the session's and the
  script's) and makes the watchers' wrappers, which act on sampled steps, pass the probe through.
- ``forked_rng(devices)`` restores torch's CPU and CUDA generators afterwards: dropout in the copy
  consumes no random number the script would have drawn.
- ``step(optimizer)`` calls the optimizer class's ``step``: an LR scheduler replaces the *instance's*
  ``step`` by a wrapper bound to the original optimizer, which a copy would otherwise call.

The original model, its optimizers, their state and every generator are untouched, so the script
trains bit for bit as without the probe.
"""

from __future__ import annotations

import contextlib
import copy
from typing import Any, Iterator

MAX_BYTES = 1 << 30           # the most a copy may take (parameters, buffers, optimizer state)
CUDA_FREE_FACTOR = 3          # on CUDA, free memory must hold this many copies (activations of the probe)

_SHARED_TYPES: tuple[type, ...] = (int, float, complex, str, bytes, bool, type(None))


class Refused(Exception):
    """The model cannot be copied for a probe; the message says why."""


def _tensor_bytes(t: Any) -> int:
    return t.numel() * t.element_size()


def _size(model: Any, optimizers: list[Any]) -> int:
    import torch

    seen: set[int] = set()
    total = 0
    for t in [*model.parameters(), *model.buffers()]:
        if id(t) not in seen:
            seen.add(id(t))
            total += _tensor_bytes(t)
    for opt in optimizers:
        for state in opt.state.values():
            for value in state.values():
                if isinstance(value, torch.Tensor):
                    total += _tensor_bytes(value)
    for m in model.modules():
        for value in vars(m).values():
            if isinstance(value, torch.Tensor) and id(value) not in seen:
                seen.add(id(value))
                total += _tensor_bytes(value)
    return total


def _refusal(model: Any, optimizers: list[Any]) -> str | None:
    import torch

    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return "the job runs a process group: a copy's forward would join its collectives"
    for m in model.modules():
        name = type(m).__name__
        if name in ("OptimizedModule", "DistributedDataParallel", "FullyShardedDataParallel") or isinstance(
                m, torch.jit.ScriptModule):
            return f"the model holds a {name}"
    size = _size(model, optimizers)
    if size > MAX_BYTES:
        return f"copying the model and its optimizer state would take {size / 2**20:.0f} MiB"
    devices = {p.device for p in model.parameters()}
    for device in devices:
        if device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(device)
            if free < CUDA_FREE_FACTOR * size:
                return f"{device} has {free / 2**20:.0f} MiB free for a copy of {size / 2**20:.0f} MiB"
        elif device.type not in ("cpu", "cuda"):
            return f"the model is on {device.type}"
    return None


def _memo(model: Any) -> dict[int, Any]:
    """A deepcopy memo that gives every module of the copy empty hook dictionaries, and shares (does not
    copy) what a module merely refers to: objects that are neither tensors, modules nor plain containers."""
    import torch

    memo: dict[int, Any] = {}
    for m in model.modules():
        for key, value in vars(m).items():
            if key in ("_parameters", "_buffers", "_modules", "_non_persistent_buffers_set"):
                continue
            if isinstance(value, dict) and key.endswith(("hooks", "hooks_with_kwargs", "hooks_always_called")):
                memo[id(value)] = type(value)()
            elif not isinstance(value, (torch.Tensor, torch.nn.Module, list, tuple, dict, set, *_SHARED_TYPES)):
                memo[id(value)] = value
    return memo


def copy_model(model: Any, optimizers: list[Any]) -> tuple[Any, list[Any]]:
    """Copies of ``model`` and of ``optimizers`` (over the copied parameters); raises ``Refused``."""
    reason = _refusal(model, optimizers)
    if reason is not None:
        raise Refused(reason)
    try:
        model_copy, optimizer_copies = copy.deepcopy((model, list(optimizers)), _memo(model))
    except Exception as exc:
        raise Refused(f"the model cannot be copied ({exc.__class__.__name__}: {exc})") from None
    for opt in optimizer_copies:
        for key, value in vars(opt).items():
            if isinstance(value, dict) and key.startswith("_optimizer_") and key.endswith("hooks"):
                value.clear()
    return model_copy, optimizer_copies


def step(optimizer: Any) -> None:
    """``optimizer.step()`` through its class (see the module's doc)."""
    type(optimizer).step(optimizer)


@contextlib.contextmanager
def unobserved(session: Any) -> Iterator[None]:
    """Nobody sees what runs inside: not torch's global hooks (the session's, the script's), not the
    watchers' wrappers, which take it for an unsampled step. Between steps only, never inside a forward."""
    import torch.nn.modules.module as modules
    import torch.optim.optimizer as optimizers

    hooks = (modules._global_forward_pre_hooks, modules._global_forward_hooks,
             modules._global_backward_pre_hooks, modules._global_backward_hooks,
             optimizers._global_optimizer_pre_hooks, optimizers._global_optimizer_post_hooks)
    saved = [dict(d) for d in hooks]
    sampled = session._sampled
    roots = session._root_calls  # the classes' __call__ that sees outermost calls (watch/root_calls)
    roots_on = roots.on
    roots.remove()
    for d in hooks:
        d.clear()
    session._sampled = False  # (not through the setter: the routes and module hooks stay as they are)
    try:
        yield
    finally:
        session._sampled = sampled
        for d, entries in zip(hooks, saved, strict=True):
            d.clear()
            d.update(entries)
        if roots_on:
            roots.install()


def _cuda_devices(model: Any) -> list[int]:
    return sorted({p.device.index or 0 for p in model.parameters() if p.device.type == "cuda"})


@contextlib.contextmanager
def forked_rng(model: Any) -> Iterator[None]:
    """torch's CPU generator and those of the CUDA devices ``model`` lives on, restored on exit."""
    import torch

    with torch.random.fork_rng(devices=_cuda_devices(model)):
        yield


def reseed(model: Any, seed: int) -> None:
    """Seed the generators ``forked_rng(model)`` restores (and no other): inside it only."""
    import torch

    torch.random.default_generator.manual_seed(seed)
    for index in _cuda_devices(model):
        torch.cuda.default_generators[index].manual_seed(seed)

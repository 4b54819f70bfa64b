"""The hooks one session puts into torch, and their handles: torch's global module hooks (on only while a
watcher needs the calls inside models), the ``__call__`` of the models' classes that sees their outermost
calls otherwise (``root_calls``), the optimizer step hooks, the guard that sees torch.compile start and the
patches that pause everything while one of torch's tracers runs. ``remove()`` takes out all of them."""

from __future__ import annotations

from typing import Any, Callable

from torchpact.watch.dynamo import DynamoGuard
from torchpact.watch.root_calls import Parked, RootCalls
from torchpact.watch.tracer_pause import pause_while_tracing
from torchpact.watch.watchers._patch import Patch, remove_all


class TorchHooks:
    """Installs, switches and removes the session's hooks; decides nothing about which are needed."""

    def __init__(self, forward_pre: Callable[[Any, tuple[Any, ...]], None],
                 forward: Callable[..., None], root_calls: RootCalls) -> None:
        self._forward_pre = forward_pre
        self._forward = forward
        self.root_calls = root_calls
        self.module_handles: list[Any] = []   # the global module hooks, while they are on
        self.paused: list[tuple[bool, bool]] = []   # per tracer running: (module hooks on, root calls on) before it
        self._handles: list[Any] = []         # optimizer hooks
        self._guard: DynamoGuard | None = None
        self._tracer_patches: list[Patch] = []
        self._parked: Parked | None = None

    def install(self, step_pre: Callable[..., Any], step_post: Callable[..., Any], dynamo_started: Callable[[], None],
                pause: Callable[[], None], resume: Callable[[], None]) -> None:
        """Every hook of a starting session (the module hooks on); on failure the caller calls ``remove``."""
        import torch.optim.optimizer as optimizer_hooks

        self.set_module_hooks(True)
        self._handles.append(optimizer_hooks.register_optimizer_step_pre_hook(step_pre))
        self._handles.append(optimizer_hooks.register_optimizer_step_post_hook(step_post))
        self._guard = DynamoGuard(on_start=dynamo_started)
        self._tracer_patches = pause_while_tracing(pause, resume)

    @property
    def compiling(self) -> bool:
        """Whether torch.compile has started tracing in this run (for good: the global hooks stay on)."""
        guard = self._guard
        return guard is not None and guard.started

    def arrange(self, want: str) -> None:
        """Module calls reach the session as ``want`` says: "all" through torch's global hooks, "roots" (the
        models' outermost calls) through their classes, or "none". With "all", the models' classes still take
        their grad-disabled outermost calls off the global hooks, except once dynamo compiles: it must find
        the global hooks, never a class's ``__call__``."""
        if want == "all":
            self.set_module_hooks(True)
            if self.compiling:
                self.root_calls.remove()
            else:
                self.root_calls.install()
        else:
            self.set_module_hooks(False)
            if want == "roots":
                self.root_calls.install()
            else:
                self.root_calls.remove()

    def set_module_hooks(self, on: bool) -> None:
        if on == bool(self.module_handles):
            return
        if on:
            import torch.nn.modules.module as module_hooks

            self.module_handles = [
                module_hooks.register_module_forward_pre_hook(self._forward_pre),
                module_hooks.register_module_forward_hook(self._forward, with_kwargs=True, always_call=True)]
        else:
            while self.module_handles:
                self.module_handles.pop().remove()

    def take_out(self) -> bool:
        """The global module hooks taken out for one call (see root_calls); False when they cannot be
        (another global module hook)."""
        if self._parked is None:
            self._parked = Parked()
        return self._parked.take(frozenset(h.id for h in self.module_handles))

    def put_back(self) -> None:
        """Undo ``take_out``."""
        if self._parked is not None:
            self._parked.put_back()

    def dynamo_started(self) -> None:
        """torch.compile is about to trace: it must find the global hooks, never a class's ``__call__``."""
        if not self.paused:  # (a tracer puts them back when it returns)
            self.root_calls.remove()
            self.set_module_hooks(True)

    def pause(self) -> None:
        """One of torch's tracers starts (see ``tracer_pause``): no module hook of ours while it runs."""
        self.paused.append((bool(self.module_handles), self.root_calls.on))
        self.root_calls.remove()
        self.set_module_hooks(False)

    def resume(self, closed: bool) -> bool:
        """The tracer ended: the hooks as they were, even inside a forward (make_fx under a compiled submodule:
        the enclosing modules' post hooks are still to come). True when no tracer runs any more."""
        hooks, roots = self.paused.pop()
        if self.paused or closed:
            return False
        self.set_module_hooks(hooks)
        if roots:
            self.root_calls.install()
        return True

    def remove(self) -> None:
        """Every hook out, whatever failed before."""
        if self._guard is not None:
            self._guard.remove()
            self._guard = None
        remove_all(self._tracer_patches)
        self.root_calls.remove()
        self._handles.extend(self.module_handles)
        self.module_handles = []
        while self._handles:
            handle = self._handles.pop()
            try:
                handle.remove()
            except Exception:  # a handle torch already dropped
                pass

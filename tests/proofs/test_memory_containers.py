"""Proofs for memory rules about containers and evaluation loops, run with real torch."""

from __future__ import annotations

import weakref

import pytest
import torch

from tests.proofs.graph import graph_size


class _Saved:
    """What the pack hook stores instead of the tensor: weak-referenceable, and holding a detached
    alias so that it cannot itself keep a graph alive (saving the tensor as-is would make a cycle
    through its own ``grad_fn`` that Python's GC cannot see)."""

    def __init__(self, tensor: torch.Tensor):
        self.tensor = tensor.detach()


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))


def _store_outputs(keep, backward: bool, steps: int = 5):
    """Run ``steps`` iterations storing ``keep(out)``; (saved tensors recorded, still alive, stored)."""
    model = _mlp()
    saved: list[weakref.ref] = []

    def pack(t):
        holder = _Saved(t)
        saved.append(weakref.ref(holder))
        return holder

    stored = []

    def step():
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda h: h.tensor):
            out = model(torch.randn(8, 16))
            loss = out.pow(2).mean()
        if backward:
            model.zero_grad()
            loss.backward()
        stored.append(keep(out))

    for _ in range(steps):
        step()  # its locals (out, loss) die on return; only ``stored`` can keep a graph
    return len(saved), sum(r() is not None for r in saved), stored


@pytest.mark.proves("TP102")
def test_a_list_of_outputs_keeps_every_steps_graph_and_activations():
    # Not back-propagated through (e.g. outputs kept "for later"): every saved activation of every
    # step stays alive — 4 per step here (the input, two weights' inputs, the ReLU output).
    recorded, alive, stored = _store_outputs(lambda out: out, backward=False)
    assert recorded == 25 and alive == 20
    assert all(t.grad_fn is not None for t in stored)

    # .cpu() / .to() keep the graph: same result.
    assert _store_outputs(lambda out: out.cpu(), backward=False)[1] == 20
    assert _store_outputs(lambda out: out.to(torch.float64), backward=False)[1] == 20

    # .detach() / .item() keep only the numbers.
    assert _store_outputs(lambda out: out.detach(), backward=False)[1] == 0
    assert _store_outputs(lambda out: out.sum().item(), backward=False)[1] == 0


@pytest.mark.proves("TP102")
def test_after_backward_the_graph_nodes_of_every_step_stay_reachable():
    _, alive, stored = _store_outputs(lambda out: out, backward=True)
    assert alive == 0  # backward released the saved tensors...
    per_step = graph_size(stored[0])
    assert per_step >= 4  # ...but each stored tensor still holds its step's graph
    nodes = set()
    for t in stored:
        stack = [t.grad_fn]
        while stack:
            fn = stack.pop()
            if fn is not None and fn not in nodes:
                nodes.add(fn)
                stack.extend(n for n, _ in fn.next_functions)
    # one graph per step; only the 4 parameters' AccumulateGrad nodes are shared between steps
    assert len(nodes) == 5 * (per_step - 4) + 4, (len(nodes), per_step)

    _, _, detached = _store_outputs(lambda out: out.detach(), backward=True)
    assert all(t.grad_fn is None for t in detached)
    # what stays after backward is the node chain alone: its saved tensors are gone (a second
    # backward through a kept output raises), so in a loop of constant length the kept nodes are
    # bounded by that length (TP102 reports it as info)
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        stored[0].pow(2).mean().backward()


@pytest.mark.proves("TP102")
def test_a_container_emptied_on_some_iterations_holds_only_the_graphs_since():
    # Emptied at a logging boundary (`if (i + 1) % 4 == 0: buf.clear()`, `del buf[:]`, `buf[:] = []`):
    # the graph nodes alive through the list never span more than the iterations since the reset.
    model = _mlp()

    def nodes_in(tensors):
        seen, stack = set(), [t.grad_fn for t in tensors]
        while stack:
            fn = stack.pop()
            if fn is not None and fn not in seen:
                seen.add(fn)
                stack.extend(n for n, _ in fn.next_functions)
        return len(seen)

    def empty_by_del(buf):
        del buf[:]

    def empty_by_slice(buf):
        buf[:] = []

    for empty in (list.clear, empty_by_del, empty_by_slice):
        buf, peaks = [], []
        for i in range(12):
            out = model(torch.randn(8, 16))
            model.zero_grad()
            out.pow(2).mean().backward()
            buf.append(out)
            peaks.append(nodes_in(buf))
            if (i + 1) % 4 == 0:
                empty(buf)
        assert peaks[0:4] == peaks[4:8] == peaks[8:12], peaks


@pytest.mark.proves("TP103")
def test_eval_mode_still_records_graphs_and_saves_activations():
    model = _mlp()
    model.eval()
    assert torch.is_grad_enabled()  # eval() switches dropout/batch-norm, not autograd
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        out = model(torch.randn(8, 16))
    assert out.requires_grad and type(out.grad_fn).__name__ == "AddmmBackward0"
    assert len(saved) == 4  # input, first weight, ReLU output, second weight

    saved.clear()
    with torch.no_grad(), torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        out = model(torch.randn(8, 16))
    assert not out.requires_grad and out.grad_fn is None and saved == []


@pytest.mark.proves("TP103")
def test_a_forward_that_takes_gradients_fails_under_no_grad_so_its_retry_needs_autograd():
    # What the rule leaves alone: `try: with no_grad(): out = model(x)` / `except RuntimeError: out = model(x)`.
    class Penalised(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 1)

        def forward(self, x):
            x = x.detach().requires_grad_(True)
            y = self.lin(x).sum()
            (g,) = torch.autograd.grad(y, x, create_graph=True)  # a gradient penalty inside the forward
            return y + g.pow(2).sum()

    model = Penalised().eval()
    x = torch.randn(4, 3)
    with pytest.raises(RuntimeError, match="does not require grad"):
        with torch.no_grad():
            model(x)
    assert model(x).grad_fn is not None  # the fallback is the only way the forward runs at all


@pytest.mark.proves("TP103")
def test_collecting_eval_outputs_without_no_grad_keeps_every_batchs_activations():
    model = _mlp()
    model.eval()
    saved: list[weakref.ref] = []

    def pack(t):
        holder = _Saved(t)
        saved.append(weakref.ref(holder))
        return holder

    def evaluate(grad: bool):
        saved.clear()
        preds = []
        with torch.set_grad_enabled(grad), torch.autograd.graph.saved_tensors_hooks(pack, lambda h: h.tensor):
            for _ in range(5):
                preds.append(model(torch.randn(8, 16)))
        return sum(r() is not None for r in saved), preds

    alive, preds = evaluate(grad=True)
    assert alive == 20 and all(p.grad_fn is not None for p in preds)
    alive, preds = evaluate(grad=False)
    assert alive == 0 and not saved and all(p.grad_fn is None for p in preds)

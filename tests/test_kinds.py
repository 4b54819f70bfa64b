"""The kinds analysis alone (lint/kinds.py): what a value holds, and how surely each kind holds."""

from __future__ import annotations

import ast
import gc
import textwrap

from torchpact.findings import Evidence
from torchpact.lint.context import FileContext
from torchpact.lint.engine import index
from torchpact.lint.kinds import (
    GRAPH, LOSS, MAY, MODULE, MUST, OPTIMIZER, OUTPUT, UNRESOLVED, Kinds, Noted, kinds_of,
)
from torchpact.lint.source import Source


def _ctx(code: str) -> FileContext:
    text = textwrap.dedent(code)
    ctx = FileContext(Source(path="t.py", text=text), ast.parse(text))
    index(ctx)
    return ctx


def _last_read(ctx: FileContext, name: str) -> ast.Name:
    return [n for n in ctx.nodes(ast.Name) if n.id == name and isinstance(n.ctx, ast.Load)][-1]


def _level(ctx: FileContext, name: str, kind: str) -> int | None:
    entry = kinds_of(ctx, _last_read(ctx, name)).levels.get(kind)
    return None if entry is None else entry[0]


def test_a_module_built_from_torch_is_certain_and_so_is_its_output():
    ctx = _ctx("""
        import torch.nn as nn
        net = nn.Linear(4, 1)
        out = net(x)
        use(net, out)
    """)
    assert _level(ctx, "net", MODULE) == MUST
    assert _level(ctx, "out", OUTPUT) == MUST and _level(ctx, "out", GRAPH) == MUST


def test_a_parameter_known_by_its_name_only_is_unresolved_and_so_is_what_it_computes():
    ctx = _ctx("""
        import torch
        def train(model, batch):
            out = model(batch)
            use(model, out)
    """)
    assert _level(ctx, "model", MODULE) == UNRESOLVED
    assert _level(ctx, "out", OUTPUT) == UNRESOLVED
    entry = kinds_of(ctx, _last_read(ctx, "out")).levels[OUTPUT]
    from torchpact.lint.kinds import reason
    assert reason(entry[1]) == "`model` is taken for a module by its name"


def test_an_annotation_or_a_class_of_the_file_is_certain_an_optional_one_is_not():
    ctx = _ctx("""
        import torch
        from typing import Optional
        class Net(torch.nn.Module):
            pass
        def train(m: torch.nn.Module, o: Optional[torch.optim.Optimizer], n=Net()):
            use(m, o, n)
    """)
    assert _level(ctx, "m", MODULE) == MUST
    assert _level(ctx, "o", OPTIMIZER) == MAY


def test_a_kind_on_some_paths_only_is_may():
    ctx = _ctx("""
        import torch.nn as nn
        def build(flag, other):
            net = None
            if flag:
                net = nn.Linear(4, 1)
            alt = nn.Linear(2, 2) if flag else other
            both = nn.Linear(1, 1) if flag else nn.Conv1d(1, 1, 1)
            use(net, alt, both)
    """)
    assert _level(ctx, "net", MODULE) == MAY
    assert _level(ctx, "alt", MODULE) == MAY
    assert _level(ctx, "both", MODULE) == MUST


def test_a_loss_is_as_surely_graph_attached_as_its_input():
    ctx = _ctx("""
        import torch.nn as nn
        import torch.nn.functional as F
        def step(model, x, y, logits):
            real = nn.Linear(4, 2)
            a = F.cross_entropy(real(x), y)
            b = F.cross_entropy(model(x), y)
            c = F.cross_entropy(logits, y)
            use(a, b, c)
    """)
    assert (_level(ctx, "a", LOSS), _level(ctx, "a", GRAPH)) == (MUST, MUST)
    assert (_level(ctx, "b", LOSS), _level(ctx, "b", GRAPH)) == (MUST, UNRESOLVED)
    assert _level(ctx, "c", GRAPH) == UNRESOLVED


def test_a_parameter_free_module_s_output_is_as_surely_graph_attached_as_its_input():
    ctx = _ctx("""
        import torch
        import torch.nn as nn
        def forward(model, x, flag):
            act = nn.ReLU()
            w = torch.randn(3, requires_grad=True)
            plain = act(torch.randn(3))
            sure = act(w)
            hinted = act(model(x))
            some = act(w if flag else x)
            use(plain, sure, hinted, some)
    """)
    assert _level(ctx, "plain", OUTPUT) == MUST and _level(ctx, "plain", GRAPH) is None
    assert _level(ctx, "sure", GRAPH) == MUST
    assert _level(ctx, "hinted", GRAPH) == UNRESOLVED
    assert _level(ctx, "some", GRAPH) == MAY


def test_a_class_of_the_file_that_holds_no_parameter_is_parameter_free_too():
    ctx = _ctx("""
        import torch
        import torch.nn as nn
        from torch import nn as tnn

        class Swish(nn.Module):
            def forward(self, x):
                return x * torch.sigmoid(x)

        class Scaled(Swish):
            def __init__(self):
                super().__init__()
                self.alpha = 0.5

            def forward(self, x):
                return self.alpha * super().forward(x)

        class Head(tnn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(3, 3)

        class Gated(nn.Module):
            def __init__(self, gate):
                super().__init__()
                self.gate = gate

        def run(x, flag):
            w = torch.randn(3, requires_grad=True)
            act = Swish() if flag else Scaled()
            plain = act(torch.linspace(-10.0, 10.0, 50))
            sure = Scaled()(w)
            trained = Head()(torch.zeros(3))
            handed = Gated(nn.Linear(3, 3))(torch.zeros(3))
            use(plain, sure, trained, handed)
    """)
    assert _level(ctx, "plain", OUTPUT) == MUST and _level(ctx, "plain", GRAPH) is None
    assert _level(ctx, "sure", GRAPH) == MUST
    assert _level(ctx, "trained", GRAPH) == MUST  # a submodule with parameters
    assert _level(ctx, "handed", GRAPH) == MUST  # an argument stored on self may hold parameters


def test_backward_on_a_name_makes_it_a_loss_on_some_path():
    ctx = _ctx("""
        import torch
        def step(batch):
            loss = compute(batch)
            loss.backward()
            use(loss)
    """)
    assert _level(ctx, "loss", GRAPH) == MAY


def test_a_rule_s_yes_notes_its_level_a_no_notes_nothing_and_the_analysis_notes_nothing():
    ctx = _ctx("""
        import torch
        def train(model, batch):
            out = model(batch)
            use(out)
    """)
    read = _last_read(ctx, "out")
    assert ctx.evidence.level == MUST  # computing the kinds noted nothing
    kinds = ctx.kinds(read)
    assert isinstance(kinds, Noted) and isinstance(kinds_of(ctx, read), Kinds)
    assert OPTIMIZER not in kinds and not kinds & {OPTIMIZER} and ctx.evidence.level == MUST
    assert OUTPUT in kinds_of(ctx, read) and ctx.evidence.level == MUST
    assert kinds & {OUTPUT, LOSS}
    assert ctx.evidence.level == UNRESOLVED
    assert ctx.evidence.rendered() == ["`model` is taken for a module by its name"]
    ctx.evidence.reset()
    assert ctx.kinds(read) is kinds and GRAPH in kinds and ctx.evidence.level == UNRESOLVED  # memoised, levels kept


def test_a_remembered_fact_notes_its_evidence_on_every_use():
    ctx = _ctx("""
        import torch
        def train(optimizer):
            optimizer.step()
    """)
    call = ctx.nodes(ast.Call)[0]

    def steps() -> bool:
        return OPTIMIZER in ctx.kinds(call.func.value)

    assert ctx.remember("steps", steps) is True and ctx.evidence.level == UNRESOLVED
    ctx.evidence.reset()
    assert ctx.remember("steps", steps) is True and ctx.evidence.level == UNRESOLVED
    ctx.evidence.reset()
    ctx.note(Evidence.MAY, "a helper of another module may zero the gradients")
    assert ctx.evidence.level == MAY
    assert ctx.evidence.rendered() == ["a helper of another module may zero the gradients"]


def test_the_context_and_its_kinds_form_no_reference_cycle():
    ctx = _ctx("""
        import torch.nn as nn
        net = nn.Linear(4, 1)
        out = net(x)
    """)
    for read in ctx.nodes(ast.Name):
        ctx.kinds(read) & {MODULE}
    gc.collect()
    gc.disable()
    try:
        del ctx
        assert gc.collect() == 0  # nothing was left for the cyclic collector: refcounting freed it all
    finally:
        gc.enable()


# ------------------------------------------------------------------ parameters typed by this file's calls
def _reason(ctx: FileContext, name: str, kind: str) -> str:
    from torchpact.lint.kinds import reason
    return reason(kinds_of(ctx, _last_read(ctx, name)).levels[kind][1])


def test_a_parameter_holds_what_every_call_of_a_private_or_nested_function_passes():
    ctx = _ctx("""
        import torch.nn as nn
        class Net(nn.Module):
            pass
        def _fit(net, x):
            out = net(x)
            use(out)
        def main():
            def step(m, x):
                y = m(x)
                use(y)
            step(nn.Linear(2, 2), 1)
            step(x=2, m=Net().to("cpu"))
        _fit(Net(), 1)
    """)
    assert _level(ctx, "out", OUTPUT) == MUST
    assert _level(ctx, "y", OUTPUT) == MUST


def test_a_public_function_s_parameter_is_at_most_may_other_modules_may_call_it():
    ctx = _ctx("""
        import torch.nn as nn
        def fit(model, x):
            out = model(x)
            use(out)
        fit(nn.Linear(2, 2), 1)
    """)
    assert _level(ctx, "out", OUTPUT) == MAY
    assert "other modules may call it" in _reason(ctx, "out", OUTPUT)


def test_a_kind_some_calls_pass_is_may_and_unseen_values_count_as_other_paths():
    ctx = _ctx("""
        import torch.nn as nn
        def _fit(m, x):
            out = m(x)
            use(out)
        _fit(nn.Linear(2, 2), 1)
        _fit(build(), 1)
    """)
    assert _level(ctx, "out", OUTPUT) == MAY
    assert "some of this file's calls" in _reason(ctx, "out", OUTPUT)
    ctx = _ctx("""
        import torch.nn as nn
        def _fit(m, x):
            out = m(x)
            use(out)
        _fit(nn.Linear(2, 2), 1)
        _fit(*args)
    """)
    assert _level(ctx, "out", OUTPUT) == MAY


def test_a_function_used_otherwise_than_called_has_calls_not_seen_here():
    ctx = _ctx("""
        import torch.nn as nn
        def _fit(m, x):
            out = m(x)
            use(out)
        _fit(nn.Linear(2, 2), 1)
        callbacks = [_fit]
    """)
    assert _level(ctx, "out", OUTPUT) == MAY


def test_an_ambiguous_name_or_no_call_types_nothing_and_the_name_hint_still_applies():
    ctx = _ctx("""
        import torch.nn as nn
        def fit(model, x):
            out = model(x)
            use(out)
        def other(net, x):
            res = net(x)
            use(res)
        if cond:
            def other(net, x):
                pass
        other(nn.Linear(2, 2), 1)
    """)
    assert _level(ctx, "out", OUTPUT) == UNRESOLVED  # no call: `model` by its name only
    assert _level(ctx, "res", OUTPUT) == UNRESOLVED  # two functions `other`


def test_a_method_s_parameter_is_typed_by_the_class_s_self_calls_and_a_default_fills_in():
    ctx = _ctx("""
        import torch.nn as nn
        class Trainer:
            def __init__(self):
                self.model = nn.Linear(2, 2)
            def _step(self, net, x, crit=nn.MSELoss()):
                out = net(x)
                use(out, crit)
            def fit(self, x):
                self._step(self.model, x)
    """)
    assert _level(ctx, "out", OUTPUT) == MUST
    from torchpact.lint.kinds import LOSS_FN
    assert _level(ctx, "crit", LOSS_FN) == MUST


def test_an_annotation_is_kept_beside_what_the_calls_pass():
    ctx = _ctx("""
        import torch.nn as nn
        def fit(model: nn.Module, x):
            use(model)
        fit(build(), 1)
    """)
    assert _level(ctx, "model", MODULE) == MUST


def test_recursion_through_a_parameter_terminates():
    ctx = _ctx("""
        import torch.nn as nn
        def _walk(m, depth):
            if depth:
                _walk(m, depth - 1)
                _walk(other_of(m), depth - 1)
            out = m(1)
            use(out)
        _walk(nn.Linear(2, 2), 3)
    """)
    assert _level(ctx, "out", OUTPUT) == MAY

"""The lint dataflow: reaching definitions per scope, bounded cost, and the engine's guards."""

from __future__ import annotations

import ast
import textwrap

from torchpact.config import Config
from torchpact.findings import Severity
from torchpact.lint import engine
from torchpact.lint.context import FileContext
from torchpact.lint.dataflow import ScopeFlow
from torchpact.lint.engine import index, lint_source
from torchpact.lint.rule import Rule
from torchpact.lint.source import Source
from torchpact.findings import Category
from tests.lint_helpers import lint_code


def _ctx(code: str) -> FileContext:
    text = textwrap.dedent(code)
    ctx = FileContext(Source(path="t.py", text=text), ast.parse(text))
    index(ctx)
    return ctx


def _reads(ctx: FileContext, name: str) -> list[ast.Name]:
    return [n for n in ctx.nodes(ast.Name) if n.id == name and isinstance(n.ctx, ast.Load)]


def _values(ctx: FileContext, use: ast.Name) -> list[str]:
    return sorted(ast.unparse(v) for _, v in ctx.bindings(use) if v is not None)


def test_a_reset_inside_the_loop_is_the_only_definition_that_reaches_the_accumulation():
    ctx = _ctx("""
        running = 0
        for batch in loader:
            running = 0
            running = running + model(batch)
    """)
    use = _reads(ctx, "running")[0]
    assert _values(ctx, use) == ["0"]


def test_a_definition_after_the_loop_body_reaches_the_next_iteration():
    ctx = _ctx("""
        total = 0
        for batch in loader:
            total = total + loss
            loss = model(batch)
    """)
    assert _values(ctx, _reads(ctx, "total")[0]) == ["0", "total + loss"]
    assert _values(ctx, _reads(ctx, "loss")[0]) == ["model(batch)"]


def test_branches_join_and_later_rebinding_replaces():
    ctx = _ctx("""
        def f(net, device, c):
            if c:
                net = net.eval().cpu()
            else:
                net = net.half()
            use(net)
            net = net.to(device).train()
            use(net)
    """)
    uses = [n for n in _reads(ctx, "net") if isinstance(ctx.parent(n), ast.Call) and ctx.parent(n).func.id == "use"]
    assert _values(ctx, uses[0]) == ["net.eval().cpu()", "net.half()"]
    assert _values(ctx, uses[1]) == ["net.to(device).train()"]


def test_self_rebinding_refers_to_the_previous_definition():
    ctx = _ctx("""
        model = Net()
        model = model.to(rank)
        model = model.eval()
    """)
    reads = _reads(ctx, "model")
    assert _values(ctx, reads[0]) == ["Net()"]
    assert _values(ctx, reads[1]) == ["model.to(rank)"]
    assert ctx.local_module_class(reads[1]) is None  # no local class: the answer, and no recursion


def test_return_ends_a_path():
    ctx = _ctx("""
        def f(x):
            if x:
                y = 1
                return y
            y = 2
            return y
    """)
    assert [_values(ctx, r) for r in _reads(ctx, "y")] == [["1"], ["2"]]


def _rebinding_function(n: int, depth: int = 0) -> str:
    lines = ["def f(x, dev, c):"]
    indent = "    "
    for d in range(depth):
        lines.append(f"{indent}for i{d} in range(3):")
        indent += "    "
    lines += [f"{indent}x = x.to(dev) if c else x.float()" for _ in range(n)]
    lines.append(f"{indent}return x.sum()")
    return "\n".join(lines) + "\n"


def test_cost_is_linear_in_the_scope_size():
    """Statements processed grow linearly with rebindings and with loop nesting, never multiply."""
    def visits(code: str) -> int:
        tree = ast.parse(code)
        return ScopeFlow(tree.body[0]).visits

    assert visits(_rebinding_function(400)) == 2 * visits(_rebinding_function(200)) - 1
    deep, deeper = visits(_rebinding_function(10, depth=10)), visits(_rebinding_function(10, depth=20))
    assert deeper - deep == 10  # ten more loops: ten more statements, not 3**10 times more work


def test_pathological_rebinding_lints_and_every_kinds_query_is_memoised():
    code = "import torch\n" + _rebinding_function(60, depth=2).replace("return x.sum()", "x.sum().backward()")
    findings, _ = lint_code(code)
    assert not [f for f in findings if f.code in ("TP001", "TP002")], findings
    ctx = _ctx(code)
    last = [n for n in _reads(ctx, "x")][-1]
    ctx.kinds(last)
    assert len(ctx.value_kinds.computed) < 20 * 60  # each expression evaluated once, not once per path


def test_self_referential_module_rebinding_is_no_input_error():
    findings, _ = lint_code("""
        import torch
        class Net(torch.nn.Module):
            def forward(self, x):
                return x
        model = Net()
        for _ in range(3):
            model = model.to(rank)
            model = model.eval()
            model = model.half()
        torch.onnx.export(model, (x,), "m.onnx")
        model(x).sum().backward()
    """)
    assert not [f for f in findings if f.category == Category.INPUT], findings


class _Broken(Rule):
    """Raises on purpose.

    ## What it does
    x
    ## Why is this bad?
    x
    ## Fix safety
    x
    """

    code = "TP999"
    category = Category.MEMORY
    message = "never"
    fix_hint = "never"
    nodes = (ast.Call,)

    def check(self, node, ctx):
        if getattr(node.func, "id", None) == "boom":
            raise RecursionError("maximum recursion depth exceeded")
        return iter(())


def test_a_rule_that_raises_is_tp002_with_its_code_and_line_never_tp001():
    source = Source(path="t.py", text="import torch\nx = 1\nboom()\n")
    findings, _ = lint_source(source, Config(), rules=[_Broken()])
    assert [(f.code, f.severity, f.line) for f in findings] == [("TP002", Severity.WARNING, 3)]
    assert "TP999" in findings[0].message


def test_a_rule_past_its_budget_stops_with_one_info_finding(monkeypatch):
    monkeypatch.setattr(engine, "RULE_BUDGET_S", -1.0)  # already out of time: deterministic
    source = Source(path="t.py", text="import torch\nf()\ng()\nh()\n")
    findings, _ = lint_source(source, Config(), rules=[_Broken()])
    assert [(f.code, f.severity) for f in findings] == [("TP002", Severity.WARNING)]
    assert "TP999" in findings[0].message and "budget" in findings[0].message


def _kinds_of(code: str, name: str, hints: bool = True) -> frozenset[str]:
    ctx = _ctx(code)
    return ctx.kinds(_reads(ctx, name)[-1], hints)


def test_annotations_tell_what_a_parameter_holds():
    code = """
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP
        def step(m: DDP, o: "torch.optim.Optimizer", layer: torch.nn.Module | None, x: torch.Tensor):
            use(m, o, layer, x)
    """
    assert _kinds_of(code, "m", hints=False) == {"module", "ddp"}
    assert _kinds_of(code, "o", hints=False) == {"optimizer"}
    assert _kinds_of(code, "layer", hints=False) == {"module"}
    assert _kinds_of(code, "x", hints=False) == {"tensor"}


def test_subscripted_and_attribute_layers_are_modules_and_calling_them_is_a_forward():
    ctx = _ctx("""
        import torch.nn as nn
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.blocks = nn.ModuleList([nn.Linear(2, 2)])
            def forward(self, x, i):
                y = self.blocks[i](x)
                return y
        net = nn.Sequential(nn.Linear(2, 2))
        out = net[0](x)
        z = out
    """)
    assert "output" in ctx.kinds(_reads(ctx, "y")[-1])
    assert "output" in ctx.kinds(_reads(ctx, "out")[-1])


def test_chained_module_methods_keep_the_module_and_factories_are_not_forwards():
    ctx = _ctx("""
        import torch.nn as nn
        from peft import get_peft_model
        net = nn.Linear(2, 2)
        net = net.eval().cpu()
        net = net.to(device).train()
        peft = get_peft_model(net, cfg)
        use(net, peft)
    """)
    assert ctx.kinds(_reads(ctx, "net")[-1]) == {"module"}
    assert "output" not in ctx.kinds(_reads(ctx, "peft")[-1])

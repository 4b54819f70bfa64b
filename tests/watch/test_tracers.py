"""torch's tracers and compilers give under `torchpact run` what they give without it.

One script traces, scripts, exports and compiles a model whose forward calls functions the watchers wrap
(F.dropout with positional ``training``, scaled_dot_product_attention, mse_loss, Tensor.copy_/zero_) and
a loss function that calls F.cross_entropy; it writes what each tracer produced. The script runs as a plain
python process and under `torchpact run`, and both outputs must be equal: TorchScript graphs (value names
included), FX and export graphs and their targets, the ops of a fullgraph compile, a compiled optimizer step's
weights, torch.func gradients, the ONNX graph of the TorchScript exporter.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

SCRIPT = '''
import io, json, sys, warnings
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
results = {}


class Block(nn.Module):
    def __init__(self, copy_through: bool):
        super().__init__()
        self.inp = nn.Linear(4, 8)
        self.norm = nn.BatchNorm1d(8)
        self.out = nn.Linear(8, 3)
        self.copy_through = copy_through

    def forward(self, x):
        h = F.relu(self.norm(self.inp(x)))
        h = F.dropout(h, 0.25, self.training)
        h = F.scaled_dot_product_attention(h[None, None], h[None, None], h[None, None])[0, 0]
        if self.copy_through:
            kept = torch.empty_like(h)
            kept.copy_(h)
            h = kept + torch.empty_like(h).zero_() + F.mse_loss(h, kept)
        return self.out(h)


def criterion(logits, target):
    return F.cross_entropy(logits, target, label_smoothing=0.1)


def train(model, steps=3):
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    for _ in range(steps):
        opt.zero_grad()
        criterion(model(x), y).backward()
        opt.step()
    return model.eval()


x, y = torch.randn(6, 4), torch.randint(0, 3, (6,))
model = train(Block(copy_through=True))
plain = train(Block(copy_through=False))  # aten::copy has no ONNX export
expected = model(x)


def record(name, make):
    try:
        results[name] = make()
    except Exception as error:  # the same failure with and without torchpact is the same outcome
        results[name] = f"{type(error).__name__}: {str(error).splitlines()[0]}"


def scripted():
    s = torch.jit.script(model)
    return [str(s.graph), torch.equal(s(x), expected), str(torch.jit.script(criterion).graph)]


def traced():
    t = torch.jit.trace(model, (x,))
    return [str(t.graph), torch.equal(t(x), expected)]


def targets(gm):
    return [(n.op, getattr(n.target, "__qualname__", str(n.target))) for n in gm.graph.nodes]


def fx():
    gm = torch.fx.symbolic_trace(model)
    return [gm.code, targets(gm)]


def exported(strict):
    ep = torch.export.export(model, (x,), strict=strict)
    return [ep.graph_module.code, str(ep.graph_signature), torch.equal(ep.module()(x), expected)]


def make_fx():
    from torch.fx.experimental.proxy_tensor import make_fx
    return make_fx(model)(x).code


def compiled():
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(sorted(t for op, t in targets(gm) if op == "call_function"))
        return gm.forward

    torch._dynamo.reset()
    out = torch.compile(model, backend=backend, fullgraph=True)(x)
    return [graphs, torch.equal(out, expected)]


def compiled_training():
    torch._dynamo.reset()
    torch.manual_seed(1)
    net = Block(copy_through=True)
    opt = torch.optim.Adam(net.parameters(), lr=0.01)
    fast = torch.compile(net, backend="eager", fullgraph=True)

    @torch.compile(backend="eager")
    def step():
        opt.step()

    for _ in range(3):
        opt.zero_grad()
        criterion(fast(x), y).backward()
        step()
    return [p.detach().flatten().tolist() for p in net.parameters()]


def per_sample_grads():
    from torch.func import functional_call, grad, vmap

    params = {k: v.detach() for k, v in model.named_parameters()}
    buffers = dict(model.named_buffers())

    def loss(p, xi, yi):
        return criterion(functional_call(model, (p, buffers), (xi[None],)), yi[None])

    return {k: v.flatten().tolist() for k, v in vmap(grad(loss), in_dims=(None, 0, 0))(params, x, y).items()}


def onnx_graph():
    try:
        import onnx
    except ImportError:
        return "no onnx"
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(plain, (x,), f, dynamo=False)
    graph = onnx.load_from_string(f.getvalue()).graph
    return [[i.name for i in graph.input], [(n.op_type, list(n.input)) for n in graph.node]]


record("jit.script", scripted)
record("jit.trace", traced)
record("fx", fx)
record("export", lambda: exported(False))
record("export strict", lambda: exported(True))
record("make_fx", make_fx)
record("compile fullgraph", compiled)
record("compiled training", compiled_training)
record("torch.func", per_sample_grads)
record("onnx (TorchScript exporter)", onnx_graph)
with open(sys.argv[1], "w") as f:
    json.dump(results, f)
'''


def _results(tmp_path, *command: str) -> tuple[dict, str]:
    script = tmp_path / "tracers.py"
    script.write_text(textwrap.dedent(SCRIPT))
    out = tmp_path / f"{len(command)}.json"
    done = subprocess.run([sys.executable, *command, str(script), str(out)], capture_output=True, text=True,
                          check=False, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text()), done.stderr


def test_tracers_and_compilers_give_what_they_give_without_torchpact(tmp_path):
    plain, _ = _results(tmp_path)
    report = tmp_path / "report.json"
    watched, stderr = _results(tmp_path, "-m", "torchpact", "run", "--quiet", "--format", "json", "-o", str(report))
    assert plain["jit.script"][1] is True and plain["compile fullgraph"][1] is True  # each case really ran
    assert plain["export strict"][2] is True and len(plain["compile fullgraph"][0]) == 1
    for name, value in plain.items():
        assert watched[name] == value, name
    assert "global hooks" not in stderr, stderr[-3000:]  # torch.compile's warning about torchpact's own hooks
    assert not [f for f in json.loads(report.read_text())["findings"] if f["code"] in ("TP002", "TP003")]

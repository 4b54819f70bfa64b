"""export-check's per-path verdicts on real architectures against ground truth computed here with
plain torch: the same model and dims exported by hand (torch.jit.trace, torch.export.export with
``Dim.AUTO``, torch.onnx.export run in an onnxruntime session), run on the variants export-check
used, compared with eager. Every verdict must agree; a path that disagrees with eager must come with
a finding the user sees.
"""

from __future__ import annotations

import os
from functools import cache

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
pytest.importorskip("transformers")

import torch  # noqa: E402
from torch.export import Dim  # noqa: E402
from torch.utils import _pytree  # noqa: E402

from tests.audit import arch_targets as A  # noqa: E402
from tests.audit.util import export_report  # noqa: E402
from torchpact.audit.variants import flatten_inputs  # noqa: E402

# architecture -> the paths checked against ground truth (ONNX where its verdict is in question:
# the recurrent op over other lengths, and a list of images)
ARCHS = {
    "lstm": ("trace", "export", "onnx"), "gru": ("trace", "export"), "detector": ("trace", "export", "onnx"),
    "resnet": ("trace", "export"), "convnext": ("trace", "export"), "vit": ("trace", "export"),
    "yolos": ("trace", "export"), "bert": ("trace", "export"), "gpt2": ("trace", "export"),
    "t5": ("trace", "export"), "llama": ("trace", "export"), "wav2vec2": ("trace", "export"),
}
HEAVY = {"lstm", "detector", "t5", "wav2vec2", "gru"}  # over ~10 s each on a loaded 2-core machine


def _target(func):
    out = getattr(A, func)()
    return (out + ({},))[:3]


class ByHand(torch.nn.Module):
    """What a user exporting by hand writes: tensors in, the keyword constants bound."""

    def __init__(self, model, args, kwargs):
        super().__init__()
        self.model, self.spec = model, flatten_inputs(args, kwargs)

    def forward(self, *tensors):
        leaves, spec = self.spec
        it = iter(tensors)
        leaves = [next(it) if isinstance(x, torch.Tensor) else x for x in leaves]
        args, kwargs = _pytree.tree_unflatten(leaves, spec)
        return self.model(*args, **kwargs)


def _tensors(args, kwargs):
    return tuple(x for x in flatten_inputs(args, kwargs)[0] if isinstance(x, torch.Tensor))


def _dynamic(func, args, kwargs):
    """Dim.AUTO per tensor input, from the architecture's DYNAMIC table (list images: height, width)."""
    import inspect

    model, *_ = _target(func)
    table = A.DYNAMIC[func]
    params = list(inspect.signature(model.forward).parameters)
    specs = []
    for path, x in _pytree.tree_flatten_with_path((tuple(args), dict(kwargs)))[0]:
        if not isinstance(x, torch.Tensor):
            continue
        top, key = path[0].idx, path[1]
        name = params[key.idx] if top == 0 else key.key
        dims = table.get(name, {1: "height", 2: "width"} if func == "detector" else {})
        specs.append({d: Dim.AUTO for d in dims} or None)
    return tuple(specs)


def _agrees(ref, out):
    ref_t = [t for t in _pytree.tree_leaves(ref) if isinstance(t, torch.Tensor)]
    out_t = [t for t in _pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]
    if len(ref_t) != len(out_t):
        return False
    for r, o in zip(ref_t, out_t, strict=True):
        o = torch.as_tensor(o)
        if r.shape != o.shape:
            return False
        if r.numel() and (r.double() - o.double()).abs().max() > 1e-5 + 1e-4 * r.double().abs().max():
            return False
    return True


def _onnx_runner(module, example, dynamic):
    import onnxruntime as ort

    program = torch.onnx.export(module, example, dynamic_shapes=dynamic, verbose=False)
    session = ort.InferenceSession(program.model_proto.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    def run(*ts):
        feed = {f"tensors_{i}" if i >= len(names) else names[i]: t.numpy() for i, t in enumerate(ts)}
        return [torch.from_numpy(a) for a in session.run(None, feed)]

    return run


def ground_truth(func, path, variants):
    """{variant: ok / mismatch / error}, or "failed" when the artifact cannot be built."""
    model, args, kwargs = _target(func)
    by_hand = ByHand(model, args, kwargs).eval()
    example = _tensors(args, kwargs)
    try:
        if path == "trace":
            artifact = torch.jit.trace(by_hand, example, check_trace=False)
        elif path == "export":
            artifact = torch.export.export(by_hand, example, dynamic_shapes=(_dynamic(func, args, kwargs),)).module()
        else:
            artifact = _onnx_runner(by_hand, example, (_dynamic(func, args, kwargs),))
    except Exception:
        return "failed"
    out = {}
    with torch.no_grad():
        for v in variants:
            ref = model(*v.args, **v.kwargs)
            try:
                got = artifact(*_tensors(v.args, v.kwargs))
            except Exception:
                out[v.name] = "error"
                continue
            out[v.name] = "ok" if _agrees(ref, got) else "mismatch"
    return out


@cache
def report(func):
    return export_report(func, paths=ARCHS[func], strict_too=False, file="arch_targets.py")


@pytest.mark.parametrize("func", [pytest.param(f, marks=pytest.mark.heavy) if f in HEAVY else f for f in ARCHS])
def test_export_check_verdicts_agree_with_plain_torch(func):
    r = report(func)
    for path in ARCHS[func]:
        truth = ground_truth(func, path, r.variants)
        result = r.paths[path]
        if truth == "failed":
            assert result.status == "failed", (path, result.reason)
            continue
        got = {v.name: v.status for v in result.variants}
        assert got == truth, path
        expected = "ok" if set(truth.values()) == {"ok"} else "mismatch"
        assert result.status == expected, (path, result.reason)
        if expected != "ok":  # the user sees why
            assert [f for f in r.findings if f.severity.value in ("warning", "error")], path


def test_float_sequences_get_their_time_axis_varied():
    r = report("lstm")
    assert r.dims.describe() == {"batch": 2, "time": 10}
    names = [v.name for v in r.variants]
    assert {"time=1", "time=2", "time=5", "time=21", "time=41"} <= set(names)
    assert not [n for n in names if n.startswith("length=")]  # the feature axis is not a time axis
    assert not r.invalid_variants
    # torch.export fixes the time axis (Dim.AUTO), and says so instead of "matches eager"
    export = r.paths["export"]
    assert export.status == "mismatch" and "time=5" in export.reason
    f = [f for f in r.findings if f.code == "TP752"]
    assert len(f) == 1 and "x.shape[1] (time, marked Dim.AUTO) to the example's 10" in f[0].message
    assert f[0].path.endswith("arch_targets.py") and "self.rnn(x)" in f[0].message
    assert "onnxruntime accepts time=1, time=2, time=5, time=21, time=41 and matches eager" in f[0].message
    assert "fixes the time length an nn.LSTM / nn.GRU / nn.RNN runs over" in f[0].fix
    # trace records aten::lstm, which takes any length; so does the ONNX LSTM op
    assert r.paths["trace"].status == "ok" and r.paths["onnx"].status == "ok"


@pytest.mark.heavy
def test_raw_audio_gets_a_time_axis_its_smallest_length_and_the_bound_the_guards_state():
    r = report("wav2vec2")
    assert r.dims.describe() == {"batch": 2, "time": 400}
    # found by halving and bisecting: the feature extractor's two convolutions need 20 samples
    assert r.dims.smallest["time"] == 20 and {"time=1", "time=2"} <= set(r.invalid_variants)
    # torch.export's guards refuse lengths under 30 (0/1 specialisation), where eager takes 20 and more
    statuses = {v.name: v.status for v in r.paths["export"].variants}
    assert statuses["time=20"] == statuses["time=29"] == "error" and statuses["time=30"] == "ok"
    f = [f for f in r.findings if f.code == "TP752"]
    assert len(f) == 1 and f[0].subject == "input_values.shape[1]" and "refuse sizes 1..29" in f[0].message
    assert "0/1 specialisation" in f[0].message and "refuses time=20, time=29 where eager accepts" in f[0].message
    # plain torch says the same
    model, _, kwargs = _target("wav2vec2")
    with torch.no_grad():
        with pytest.raises(RuntimeError, match="Kernel size can't be greater than actual input size"):
            model(torch.randn(2, 19), return_dict=False)
        model(torch.randn(2, 20), return_dict=False)
        ep = torch.export.export(ByHand(model, (), kwargs), (kwargs["input_values"],),
                                 dynamic_shapes=(({0: Dim.AUTO, 1: Dim.AUTO},),))
        with pytest.raises(AssertionError, match=r"Guard failed: .*size\(\)\[1\] >= 30"):
            ep.module()(torch.randn(2, 29))


def test_list_of_images_varies_count_and_size_never_channels():
    r = report("detector")
    assert r.dims.describe() == {"height": 32, "width": 32, "images": 2}
    names = {v.name for v in r.variants}
    assert {"images=1", "images=5", "image size x0.5", "image size x2"} <= names
    assert not [n for n in names if n.startswith("batch=")]
    for path in ("trace", "export", "onnx"):
        statuses = {v.name: v.status for v in r.paths[path].variants}
        assert statuses["image size x2"] == "ok" and statuses["images=1"] == "error"
    f = [f for f in r.findings if f.subject == "images"]
    assert len(f) == 1 and f[0].code == "TP757" and f[0].severity.value == "warning"
    assert "only the example's number of images" in f[0].message
    assert [x.code for x in r.findings if x.severity.value == "error"] == []


def test_paths_summary_lists_errors():
    paths = report("detector").summary()["paths"]
    errors = paths["export"]["errors"]
    assert {e["at"] for e in errors} == {"images=1", "images=5"}
    assert all(e["error"] for e in errors)

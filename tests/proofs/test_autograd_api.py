"""Proofs for the autograd rules about misspelled, deprecated and silently ignored APIs, with real torch."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from tests.proofs.warned import warned


@pytest.mark.proves("TP210")
def test_require_grad_typo_leaves_the_parameter_trainable():
    layer = nn.Linear(3, 3)
    layer.weight.require_grad = False
    assert layer.weight.requires_grad  # still trained
    x = torch.zeros(3)
    x.require_grad = True
    assert not x.requires_grad
    layer.weight.requires_grad = False  # the fix
    assert not layer.weight.requires_grad


@pytest.mark.proves("TP211")
def test_implicit_reentrant_checkpoint_warns_and_drops_the_segment_weight_gradients():
    torch.manual_seed(0)
    block, head = nn.Linear(4, 4), nn.Linear(4, 1)
    data = torch.randn(2, 4)  # an input that does not require grad, like a batch of data
    out, text = warned(lambda: checkpoint(block, data), UserWarning)
    assert "use_reentrant parameter should be passed explicitly" in text
    head(out).sum().backward()  # trains without an error...
    assert head.weight.grad is not None
    assert block.weight.grad is None  # ...but the weights inside the checkpoint got no gradient

    head(checkpoint(block, data, use_reentrant=False)).sum().backward()  # the fix
    expected = torch.autograd.grad(head(block(data)).sum(), block.weight)[0]
    assert torch.allclose(block.weight.grad, expected)


@pytest.mark.proves("TP212")
def test_functorch_transforms_warn_and_torch_func_is_the_same():
    import functorch

    f = lambda x: (x ** 3).sum()  # noqa: E731
    x = torch.randn(3)
    old, text = warned(lambda: functorch.grad(f)(x), FutureWarning)
    assert "`functorch.grad` is deprecated as of PyTorch 2.0" in text
    assert torch.allclose(old, torch.func.grad(f)(x))
    old, text = warned(lambda: functorch.vmap(torch.sin)(x), FutureWarning)
    assert "`functorch.vmap` is deprecated" in text
    assert torch.equal(old, torch.func.vmap(torch.sin)(x))


@pytest.mark.proves("TP213")
def test_stateless_functional_call_warns_and_torch_func_is_the_same():
    lin = nn.Linear(2, 2)
    params = {"weight": torch.eye(2), "bias": torch.zeros(2)}
    x = torch.randn(1, 2)
    old, text = warned(lambda: torch.nn.utils.stateless.functional_call(lin, params, (x,)), FutureWarning)
    assert "stateless.functional_call` is deprecated" in text
    assert torch.equal(old, torch.func.functional_call(lin, params, (x,))) and torch.equal(old, x)


@pytest.mark.proves("TP214")
def test_volatile_variable_still_records_the_graph():
    from torch.autograd import Variable

    model = nn.Linear(3, 3)
    inputs, text = warned(lambda: Variable(torch.randn(2, 3), volatile=True), UserWarning)
    assert "volatile was removed and now has no effect" in text
    out = model(inputs)
    assert out.requires_grad and out.grad_fn is not None  # the graph (and activations) are kept
    with torch.no_grad():
        assert model(inputs).grad_fn is None


@pytest.mark.proves("TP215")
def test_torch_tensor_of_an_output_detaches_it():
    model = nn.Linear(3, 1)
    out = model(torch.randn(4, 3))
    scores, text = warned(lambda: torch.tensor(out), UserWarning)
    assert "To copy construct from a tensor" in text
    assert not scores.requires_grad and scores.grad_fn is None
    with pytest.raises(RuntimeError, match="does not require grad"):
        scores.sum().backward()
    out.clone().sum().backward()  # the fix keeps the graph
    assert model.weight.grad is not None
    # data that is not a tensor (a numpy array, a list) has no graph: copied silently, nothing lost
    import numpy as np

    for data in (np.arange(3.0), [1.0, 2.0]):
        copied, text = warned(lambda data=data: torch.tensor(data), UserWarning)
        assert text == "" and not copied.requires_grad


class _Swish(nn.Module):
    def forward(self, x):
        return x * torch.sigmoid(x)


@pytest.mark.proves("TP215")
def test_a_module_class_holding_no_parameter_attaches_its_output_only_when_its_input_is():
    act = _Swish()
    assert list(act.parameters()) == []
    curve = act(torch.linspace(-10.0, 10.0, steps=50))
    assert not curve.requires_grad and curve.numpy().shape == (50,)
    assert act(torch.randn(3, requires_grad=True)).requires_grad


# Constructor arguments for the parameter-free modules that need some.
_ARGS = {
    "Threshold": (0.1, 0.0), "MaxPool1d": (2,), "MaxPool2d": (2,), "MaxPool3d": (2,), "AvgPool1d": (2,),
    "AvgPool2d": (2,), "AvgPool3d": (2,), "LPPool1d": (2, 2), "LPPool2d": (2, 2), "AdaptiveAvgPool1d": (1,),
    "AdaptiveAvgPool2d": (1,), "AdaptiveAvgPool3d": (1,), "AdaptiveMaxPool1d": (1,), "AdaptiveMaxPool2d": (1,),
    "AdaptiveMaxPool3d": (1,), "Unflatten": (1, (2, 2)), "Upsample": (None, 2), "UpsamplingNearest2d": (None, 2),
    "UpsamplingBilinear2d": (None, 2), "PixelShuffle": (2,), "PixelUnshuffle": (2,), "ZeroPad2d": (1,),
    "ConstantPad1d": (1, 0.0), "ConstantPad2d": (1, 0.0), "ConstantPad3d": (1, 0.0), "ReflectionPad1d": (1,),
    "ReflectionPad2d": (1,), "ReplicationPad1d": (1,), "ReplicationPad2d": (1,), "Fold": ((4, 4), 2),
    "Unfold": (2,), "LocalResponseNorm": (2,), "GLU": (1,),
}
# An input each module accepts (most take any (N, C, H, W) tensor).
_INPUTS = {"Unflatten": (2, 4), "Fold": (1, 4, 9), "PixelUnshuffle": (1, 1, 4, 4), "ReflectionPad1d": (1, 2, 4),
           "ReplicationPad1d": (1, 2, 4), "ConstantPad1d": (1, 2, 4), "MaxPool1d": (1, 2, 4),
           "AvgPool1d": (1, 2, 4), "LPPool1d": (1, 2, 4), "AdaptiveAvgPool1d": (1, 2, 4),
           "AdaptiveMaxPool1d": (1, 2, 4), "MaxPool3d": (1, 1, 4, 4, 4), "AvgPool3d": (1, 1, 4, 4, 4),
           "AdaptiveAvgPool3d": (1, 1, 4, 4, 4), "AdaptiveMaxPool3d": (1, 1, 4, 4, 4),
           "ConstantPad3d": (1, 1, 4, 4, 4), "Dropout3d": (1, 1, 4, 4, 4), "Dropout1d": (1, 2, 4),
           "PixelShuffle": (1, 4, 2, 2)}


@pytest.mark.proves("TP215")
def test_a_parameter_free_module_attaches_its_output_only_when_its_input_is():
    from torchpact.lint.context import PARAMETER_FREE_MODULES

    for qn in sorted(PARAMETER_FREE_MODULES):
        name = qn.rsplit(".", 1)[1]
        module = getattr(nn, name)(*_ARGS.get(name, ()))
        assert list(module.parameters()) == [], name
        shape = _INPUTS.get(name, (1, 2, 4, 4))
        other = [torch.randn(shape)] if name in ("CosineSimilarity", "PairwiseDistance") else []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the deprecated upsampling modules, implicit softmax dims
            plain = module(torch.randn(shape), *other)
            attached = module(torch.randn(shape, requires_grad=True), *other)
        assert not plain.requires_grad and plain.grad_fn is None, name
        assert attached.requires_grad, name
    copied, _ = warned(lambda: torch.tensor(nn.ReLU()(torch.randn(3))))  # no graph was there to lose
    assert not copied.requires_grad

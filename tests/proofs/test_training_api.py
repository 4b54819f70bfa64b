"""Proofs for the training rules about silently ignored calls, removed arguments and deprecated
names, with real torch training steps."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tests.proofs.warned import warned


def _sgd(lr=1.0):
    return torch.optim.SGD([nn.Parameter(torch.ones(1))], lr=lr)


@pytest.mark.proves("TP411")
@pytest.mark.parametrize("make", [
    lambda o: torch.optim.lr_scheduler.ReduceLROnPlateau(o, patience=3, verbose=True),
    lambda o: torch.optim.lr_scheduler.StepLR(o, 10, verbose=True),
    lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, 10, verbose=False),
])
def test_scheduler_verbose_argument_raises(make):
    with pytest.raises(TypeError, match="unexpected keyword argument 'verbose'"):
        make(_sgd())


@pytest.mark.proves("TP412")
def test_scheduler_step_with_epoch_warns_and_recursive_schedulers_ignore_it():
    opt = _sgd()
    sched = torch.optim.lr_scheduler.MultiplicativeLR(opt, lambda e: 0.5)
    opt.step()
    _, text = warned(lambda: sched.step(5), UserWarning)
    assert "The epoch parameter in `scheduler.step()` was not necessary and is being deprecated" in text
    assert opt.param_groups[0]["lr"] == 0.5  # not 0.5 ** 5: the epoch did not place the schedule
    for _ in range(2):
        opt.step()
        warned(lambda: sched.step(5))
    assert opt.param_groups[0]["lr"] == 0.125  # the "same epoch" decays again each call


@pytest.mark.proves("TP413")
def test_weight_norm_warns_and_the_parametrization_renames_the_state():
    old, text = warned(lambda: torch.nn.utils.weight_norm(nn.Linear(3, 3)), FutureWarning)
    assert "torch.nn.utils.weight_norm` is deprecated" in text
    new = torch.nn.utils.parametrizations.weight_norm(nn.Linear(3, 3))
    assert {"weight_g", "weight_v"} <= set(old.state_dict())
    assert {"parametrizations.weight.original0", "parametrizations.weight.original1"} <= set(new.state_dict())

    # the rule's warning_category / warning_text are torch's own, and a scoped filter matches as lint
    # assumes: by category (or a base class), or by a message regex matched at the start of the text
    from torchpact.lint.rules.training.deprecated_weight_norm import DeprecatedWeightNorm as rule

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.nn.utils.weight_norm(nn.Linear(3, 3))
    [w] = caught
    assert (w.category.__name__, str(w.message)) == (rule.warning_category, rule.warning_text)
    for install in (lambda: warnings.filterwarnings("ignore", message=r".*deprecated in favor of"),
                    lambda: warnings.simplefilter("ignore", FutureWarning)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            install()
            torch.nn.utils.weight_norm(nn.Linear(3, 3))
        assert caught == []
    for install in (lambda: warnings.filterwarnings("ignore", message="weight_norm is deprecated"),
                    lambda: warnings.simplefilter("ignore", DeprecationWarning)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            install()
            torch.nn.utils.weight_norm(nn.Linear(3, 3))
        assert len(caught) == 1


@pytest.mark.proves("TP414")
def test_init_without_underscore_warns_and_fills_like_the_underscore_version():
    a, b = torch.empty(4, 4), torch.empty(4, 4)
    torch.manual_seed(0)
    _, text = warned(lambda: nn.init.xavier_uniform(a, gain=2.0), FutureWarning)
    assert "nn.init.xavier_uniform` is now deprecated in favor of `nn.init.xavier_uniform_`" in text
    torch.manual_seed(0)
    nn.init.xavier_uniform_(b, gain=2.0)
    assert torch.equal(a, b)


@pytest.mark.proves("TP414")
def test_a_reference_to_a_deprecated_function_warns_only_when_called():
    # Looking the name up, keeping it in a dict, or saving it to patch nn.init and restore it runs
    # nothing; only the call warns.
    saved, text = warned(lambda: {"normal": nn.init.normal, "orig": nn.init.uniform})
    assert text == ""
    nn.init.uniform = lambda tensor, *args, **kwargs: tensor
    try:
        _, text = warned(lambda: nn.init.uniform(torch.empty(3)))
        assert text == ""  # the patch runs, not the deprecated function
    finally:
        nn.init.uniform = saved["orig"]
    _, text = warned(lambda: saved["normal"](torch.empty(3)), FutureWarning)
    assert "nn.init.normal` is now deprecated" in text
    # "fixing" the saved original to the underscore name would restore another function
    assert nn.init.uniform is saved["orig"] and saved["orig"] is not nn.init.uniform_


@pytest.mark.proves("TP414")
def test_code_python_never_evaluates_does_not_warn():
    # Postponed annotations, a local variable's annotation and a TYPE_CHECKING block hold deprecated
    # calls that never run; the same call in an evaluated parameter annotation warns at def time.
    never = [
        ("from __future__ import annotations\nfrom torch import nn\nimport torch\n"
         "def f(w: nn.init.normal(torch.empty(1))): pass\n"),
        "from torch import nn\nimport torch\ndef f():\n    w: nn.init.normal(torch.empty(1)) = 0\nf()\n",
        ("from typing import TYPE_CHECKING\nfrom torch import nn\nimport torch\n"
         "if TYPE_CHECKING:\n    nn.init.normal(torch.empty(1))\n"),
    ]

    def run(code):
        exec(compile(code, "<case>", "exec", dont_inherit=True), {})  # noqa: S102 - the test's own code

    for code in never:
        _, text = warned(lambda code=code: run(code))
        assert text == "", code
    evaluated = "from torch import nn\nimport torch\ndef f(w: nn.init.normal(torch.empty(1))): pass\n"
    _, text = warned(lambda: run(evaluated), FutureWarning)
    assert "nn.init.normal` is now deprecated" in text


@pytest.mark.proves("TP415")
def test_clip_grad_norm_without_underscore_warns_and_clips_the_same():
    def grads():
        p = nn.Parameter(torch.ones(3))
        p.grad = torch.tensor([3.0, 4.0, 12.0])
        return [p]

    p1, p2 = grads(), grads()
    n1, text = warned(lambda: torch.nn.utils.clip_grad_norm(p1, max_norm=1.0), FutureWarning)
    assert "clip_grad_norm` is now deprecated in favor of `torch.nn.utils.clip_grad_norm_`" in text
    n2 = torch.nn.utils.clip_grad_norm_(p2, max_norm=1.0)
    assert n1.item() == n2.item() == 13.0 and torch.equal(p1[0].grad, p2[0].grad)


@pytest.mark.proves("TP416")
def test_method_named_without_call_changes_nothing():
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5))
    model.eval  # noqa: B018 - the pitfall itself
    assert model.training and model[1].training  # dropout still on
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.randn(2, 4)).sum().backward()
    opt.zero_grad  # noqa: B018
    assert model[0].weight.grad is not None  # gradients not cleared
    model.eval()
    assert not model.training


@pytest.mark.proves("TP417")
def test_tensor_methods_as_statements_leave_the_tensor_unchanged():
    x = torch.tensor([-2.0, 0.5, 3.0])
    x.to(torch.float64)
    x.clamp(0, 1)
    x.unsqueeze(0)
    assert x.dtype == torch.float32 and x.tolist() == [-2.0, 0.5, 3.0] and x.shape == (3,)
    m = nn.Linear(2, 2)
    m.to(torch.float64)  # modules, by contrast, convert in place
    assert m.weight.dtype == torch.float64


@pytest.mark.proves("TP417")
def test_a_conversion_to_where_the_tensor_already_is_returns_the_tensor_itself():
    # What the rule leaves alone: `.to(k.device)` of a tensor computed from k and non-tensors.
    # The meta device stands in for a second device on a CPU-only torch.
    import math

    import numpy as np

    k = torch.rand(4, device="meta")
    n = 3
    gap = (torch.sqrt(4 * k ** 2 + (n - 1) ** 2) - 2 * k) / (n - 1) - n * np.log(n - 1) + math.pi
    assert gap.device == k.device and (np.float64(0.5) * k).device == k.device
    assert gap.to(k.device) is gap and gap.to(device=k.device, non_blocking=True) is gap
    bias = torch.zeros(2, 2, dtype=torch.float16)
    assert bias.to(torch.float16) is bias and bias.cpu() is bias
    assert bias.to("cpu", copy=True) is not bias
    # A tensor of unknown placement among the operands decides the device: a 0-dim CPU tensor
    # combined with a tensor on another device gives a result on that other device.
    scalar = torch.tensor(2.0)
    assert (scalar * k).device == k.device != scalar.device
    with pytest.raises(TypeError):
        k + np.ones(4)  # a numpy array cannot join a tensor of another device: it raises


@pytest.mark.proves("TP417")
def test_objects_that_are_not_tensors_convert_in_place(tmp_path):
    # What torch.load / torch.jit.load / quantize_dynamic return may be a whole module, whose .to()
    # and .half() convert it in place; a numpy array's .fill() fills it in place.
    import numpy as np

    torch.save(nn.Linear(2, 2), tmp_path / "whole.pt")
    whole = torch.load(tmp_path / "whole.pt", weights_only=False)
    whole.double()
    assert isinstance(whole, nn.Module) and whole.weight.dtype == torch.float64
    scripted_path = tmp_path / "scripted.pt"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.save(torch.jit.script(nn.Linear(2, 2)), scripted_path)
        scripted = torch.jit.load(scripted_path)
    scripted.double()
    assert scripted.weight.dtype == torch.float64
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # quantize_dynamic's own deprecation notes
        quantized = torch.quantization.quantize_dynamic(nn.Sequential(nn.Linear(2, 2)), {nn.Linear})
    assert quantized.to("cpu") is quantized
    grid = np.empty(4)
    grid.fill(0.5)
    assert grid.tolist() == [0.5] * 4


@pytest.mark.proves("TP458")
def test_functional_dropout_keeps_dropping_after_eval():
    class Block(nn.Module):
        def __init__(self, fixed):
            super().__init__()
            self.fixed = fixed

        def forward(self, x):
            if self.fixed:
                return F.dropout(x, p=0.5, training=self.training)
            return F.dropout(x, p=0.5)

    x = torch.ones(1000)
    buggy, fixed = Block(False).eval(), Block(True).eval()
    out = buggy(x)
    assert (out == 0).sum() > 300 and (out == 2).sum() > 300  # still dropping and rescaling
    assert torch.equal(fixed(x), x)
    torch.manual_seed(0)
    a = Block(False).train()(x)
    torch.manual_seed(0)
    b = Block(True).train()(x)
    assert torch.equal(a, b)  # the fix is identical in training mode


@pytest.mark.proves("TP458")
def test_functional_dropout_behind_a_mode_test_drops_nothing_after_eval():
    # what the rule's valid examples rely on: eval() sets training=False on every submodule, so a call
    # behind a test of it does not run; p=0 drops nothing; the alpha dropouts default to training=False
    class Guarded(nn.Module):
        def __init__(self):
            super().__init__()
            self.p = 0.5

        def _drop(self, t):
            return F.dropout(t, self.p)

        def forward(self, x):
            if self.training and self.p > 0:
                x = F.dropout(x, self.p)
            x = F.dropout(x, self.p) if self.training else x
            x = F.dropout(x, self.p if self.training else 0.0)
            if self.training:
                x = self._drop(x)
            if not self.training:
                return x
            return F.dropout(x, self.p)

    x = torch.ones(1000)
    model = nn.Sequential(nn.Linear(1000, 1000), Guarded())
    model.eval()
    assert not model[1].training
    with torch.no_grad():
        assert torch.equal(model[1](x), x)
    torch.manual_seed(0)
    assert (model[1].train()(x) == 0).sum() > 500  # the same calls drop in training mode
    assert torch.equal(F.alpha_dropout(x, 0.5), x) and torch.equal(F.feature_alpha_dropout(x[None, :, None], 0.5),
                                                                    x[None, :, None])
    assert not torch.equal(F.alpha_dropout(x, 0.5, training=True), x)


@pytest.mark.proves("TP460")
def test_optimizer_recreated_each_step_loses_adam_state():
    torch.manual_seed(0)
    target = torch.tensor([3.0])

    def train(recreate):
        w = nn.Parameter(torch.zeros(1))
        opt = torch.optim.Adam([w], lr=0.1)
        steps = []
        for _ in range(5):
            if recreate:
                opt = torch.optim.Adam([w], lr=0.1)
            opt.zero_grad()
            before = w.detach().clone()
            ((w - target) ** 2 * (0.01 if _ % 2 else 1.0)).sum().backward()
            opt.step()
            steps.append((w.detach() - before).item())
        return steps, opt

    recreated, opt = train(True)
    assert all(s == pytest.approx(0.1, abs=1e-6) for s in recreated)  # a full lr-sized step each time
    assert opt.state[opt.param_groups[0]["params"][0]]["step"].item() == 1
    kept, _ = train(False)
    assert kept != pytest.approx(recreated)


@pytest.mark.proves("TP460")
def test_plain_sgd_keeps_no_state_so_recreating_it_changes_nothing():
    def train(make, recreate):
        torch.manual_seed(0)
        net = nn.Linear(4, 1)
        data = [(torch.randn(8, 4), torch.randn(8, 1)) for _ in range(5)]
        opt = make(net.parameters())
        for x, y in data:
            if recreate:
                opt = make(net.parameters())
            opt.zero_grad()
            F.mse_loss(net(x), y).backward()
            opt.step()
        return [p.detach().clone() for p in net.parameters()], opt

    for make in (lambda ps: torch.optim.SGD(ps, lr=0.1), lambda ps: torch.optim.SGD(ps, 0.1, 0, weight_decay=0.01)):
        fresh, opt = train(make, True)
        kept, _ = train(make, False)
        assert all(torch.equal(a, b) for a, b in zip(fresh, kept, strict=True))  # bit for bit
        assert len(opt.state) == 0  # nothing to lose
    def with_momentum(ps):
        return torch.optim.SGD(ps, lr=0.1, momentum=0.9)

    fresh, _ = train(with_momentum, True)
    kept, opt = train(with_momentum, False)
    assert not all(torch.equal(a, b) for a, b in zip(fresh, kept, strict=True))
    assert all("momentum_buffer" in state for state in opt.state.values())


@pytest.mark.proves("TP420")
def test_scheduler_stepped_first_skips_the_first_learning_rate():
    factors = [1.0, 0.5, 0.25, 0.125]

    def used_lrs(scheduler_first):
        opt = _sgd()
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda e: factors[min(e, 3)])
        lrs = []
        for _ in range(3):
            if scheduler_first:
                sched.step()
            lrs.append(opt.param_groups[0]["lr"])
            opt.step()
            if not scheduler_first:
                sched.step()
        return lrs

    lrs, text = warned(lambda: used_lrs(True), UserWarning)
    assert "Detected call of `lr_scheduler.step()` before `optimizer.step()`" in text
    assert lrs == [0.5, 0.25, 0.125]  # 1.0 is never used
    assert used_lrs(False) == [1.0, 0.5, 0.25]


def test_optimizer_built_before_module_to_still_updates_the_moved_parameters():
    """Survey: the folklore "build the optimizer after .to()" is false on torch 2.13 for Module.to,
    which converts parameters in place (the same Parameter objects)."""
    model = nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    before = model.weight
    model.to(torch.float64)
    assert model.weight is before and model.weight.dtype == torch.float64
    model(torch.ones(1, 2, dtype=torch.float64)).sum().backward()
    w = model.weight.detach().clone()
    opt.step()
    assert not torch.equal(w, model.weight.detach())

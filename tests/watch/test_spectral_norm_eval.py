"""Runtime TP467: a spectral-normalised layer run in eval mode before its power iteration was refined
(pytorch/pytorch#51800).

Variants written before the watcher was tuned: the old hook API on Linear and Conv layers, evaluated
under no_grad and with grad on, from a helper; an EMA copy made at initialisation that only receives
parameters; the parametrization API whose weight was re-initialised after registration. Clean twins:
evaluation after training, after a train-mode forward under no_grad, after load_state_dict of a
trained model, the parametrization API as registered, and a ConvTranspose (dim=1) after training.
"""

from __future__ import annotations

import copy

import torch
import torch.nn as nn
from torch.nn.utils import spectral_norm
from torch.nn.utils.parametrizations import spectral_norm as sn_param

from tests.watch.util import codes, watched

WATCHER = ["spectral_norm_eval"]


def _disc():
    return nn.Sequential(spectral_norm(nn.Linear(16, 64)), nn.LeakyReLU(0.2), spectral_norm(nn.Linear(64, 1)))


def _conv_disc():
    return nn.Sequential(spectral_norm(nn.Conv2d(3, 16, 3, 2)), nn.LeakyReLU(0.2),
                         spectral_norm(nn.Conv2d(16, 32, 3, 2)), nn.Flatten(), nn.LazyLinear(1))


def _train(model, x, steps=3):
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model.train()
    for _ in range(steps):
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()


def _tp467(findings):
    return [f for f in findings if f.code == "TP467"]


def test_the_bug_is_real_on_this_torch():
    """Eval before any training forward divides the weight by u^T W v with random u, v."""
    torch.manual_seed(0)
    d, x = _disc(), torch.randn(32, 16)
    trained = copy.deepcopy(d)
    trained.train()
    with torch.no_grad():
        trained(x)
    d.eval(), trained.eval()
    with torch.no_grad():
        before, after = d(x).abs().mean().item(), trained(x).abs().mean().item()
    assert before > 20 * after


def test_eval_under_no_grad_before_training_names_each_layer():
    torch.manual_seed(0)
    d, x = _disc(), torch.randn(32, 16)

    def run():
        d.eval()
        with torch.no_grad():
            d(x)  # a "baseline" evaluation before training
        _train(d, x)

    found = _tp467(watched(run, WATCHER))
    assert sorted(f.subject for f in found) == ["0", "2"]
    assert all(f.severity.value == "warning" and "eval mode" in f.message for f in found)


def test_eval_with_grad_enabled_from_a_helper_conv_layers():
    torch.manual_seed(0)
    d, x = _conv_disc(), torch.randn(4, 3, 16, 16)
    d(x)  # materialise the lazy head (train mode: also refines u, v once) ...
    fresh = _conv_disc()
    fresh[4] = d[4]

    def evaluate(model, batch):
        model.eval()
        score = model(batch).mean()  # grad mode on: only the mode matters
        model.train()
        return score

    found = _tp467(watched(lambda: evaluate(fresh, x), WATCHER))
    assert sorted(f.subject for f in found) == ["0", "2"]
    assert _tp467(watched(lambda: evaluate(d, x), WATCHER)) == []


def test_ema_copy_made_at_initialisation_that_only_receives_parameters():
    torch.manual_seed(0)
    g, x = _disc(), torch.randn(32, 16)
    g_ema = copy.deepcopy(g).eval()  # u, v copied while still random, never refined: buffers not averaged

    def run():
        opt = torch.optim.Adam(g.parameters(), lr=1e-3)
        for _ in range(3):
            opt.zero_grad()
            g(x).pow(2).mean().backward()
            opt.step()
            with torch.no_grad():
                for pe, p in zip(g_ema.parameters(), g.parameters(), strict=True):
                    pe.lerp_(p, 0.1)
        with torch.no_grad():
            g_ema(x)

    assert len(_tp467(watched(run, WATCHER))) == 2


def test_parametrization_api_with_the_weight_reinitialised_after_registration():
    torch.manual_seed(0)
    net = nn.Sequential(sn_param(nn.Linear(32, 64)), nn.ReLU(), nn.Linear(64, 1))
    with torch.no_grad():
        nn.init.orthogonal_(net[0].parametrizations.weight.original)  # u, v were computed for the old weight
    x = torch.randn(8, 32)

    def run():
        net.eval()
        with torch.no_grad():
            net(x)

    [f] = _tp467(watched(run, WATCHER))
    assert f.subject == "0"


def test_clean_twins_are_silent():
    torch.manual_seed(0)
    x = torch.randn(32, 16)

    d = _disc()  # evaluated after training
    def after_training():
        _train(d, x)
        d.eval()
        with torch.no_grad():
            d(x)
    assert codes(watched(after_training, WATCHER)) == []

    d2 = _disc()  # a train-mode forward under no_grad refines u, v too
    def after_no_grad_train_forward():
        with torch.no_grad():
            d2(x)
        d2.eval()
        d2(x)
    assert codes(watched(after_no_grad_train_forward, WATCHER)) == []

    d3 = _disc()  # restored from a trained model's state dict
    d3.load_state_dict(d.state_dict())
    def restored():
        d3.eval()
        with torch.no_grad():
            d3(x)
    assert codes(watched(restored, WATCHER)) == []

    net = nn.Sequential(sn_param(nn.Linear(16, 64)), nn.ReLU(), sn_param(nn.Linear(64, 1)))  # 15 iterations
    def parametrized():                                                                      # at registration
        net.eval()
        with torch.no_grad():
            net(x)
    assert codes(watched(parametrized, WATCHER)) == []

    up = nn.Sequential(spectral_norm(nn.ConvTranspose2d(4, 3, 3)), nn.Tanh())  # dim=1
    z = torch.randn(2, 4, 5, 5)
    def transposed():
        _train(up, z)
        up.eval()
        with torch.no_grad():
            up(z)
    assert codes(watched(transposed, WATCHER)) == []

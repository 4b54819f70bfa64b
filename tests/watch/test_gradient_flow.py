"""gradient_flow: TP251 (a trainable parameter never gets a gradient), TP252 (always exactly zero)."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint

from tests.watch.util import codes, run_source, watched

WATCHER = ["gradient_flow"]


def _train(model: nn.Module, steps: int = 8, opt: torch.optim.Optimizer | None = None, d_in: int = 8,
           classes: int = 3) -> None:
    torch.manual_seed(1)
    opt = opt or torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(steps):
        x, y = torch.randn(8, d_in), torch.randint(0, classes, (8,))
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()


def _findings(fn, code: str):
    return [f for f in watched(fn, WATCHER) if f.code == code]


# ---------------------------------------------------------------------------------------- TP251
class WithUnusedHead(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(8, 16)
        self.aux_head = nn.Sequential(nn.Linear(16, 4), nn.Linear(4, 3))  # never called
        self.head = nn.Linear(16, 3)

    def forward(self, x):
        return self.head(torch.relu(self.body(x)))


def test_unused_submodule_is_reported_once_with_its_definition_line():
    found = _findings(lambda: _train(WithUnusedHead()), "TP251")
    assert len(found) == 1
    f = found[0]
    assert f.subject == "aux_head"
    assert "never called in forward" in f.message and "4 trainable parameters" in f.message
    assert f.path == __file__ and f.line == WithUnusedHead.__init__.__code__.co_firstlineno + 3
    assert f.extra["parameters"] == ["aux_head.0.weight", "aux_head.0.bias", "aux_head.1.weight", "aux_head.1.bias"]


class DetachedEncoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16))
        self.head = nn.Linear(16, 3)

    def forward(self, x):
        h = self.encoder(x).detach()
        return self.head(h)


def test_detach_on_the_path_names_the_cut_and_its_line():
    found = _findings(lambda: _train(DetachedEncoder()), "TP251")
    assert [f.subject for f in found] == ["encoder"]
    assert "cut from the loss" in found[0].message and "`encoder` is called with grad enabled" in found[0].message
    assert found[0].path == __file__ and found[0].line == DetachedEncoder.forward.__code__.co_firstlineno + 1


class ItemAuxLoss(nn.Module):
    """The auxiliary loss is added as a Python float: its head never learns."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(8, 16)
        self.head = nn.Linear(16, 3)
        self.aux = nn.Linear(16, 1)

    def forward(self, x):
        h = torch.relu(self.body(x))
        self.aux_loss = self.aux(h).pow(2).mean().item()
        return self.head(h) + self.aux_loss


def test_item_on_the_path_is_a_cut():
    found = _findings(lambda: _train(ItemAuxLoss()), "TP251")
    assert [f.subject for f in found] == ["aux"]
    assert "cut from the loss" in found[0].message


class NoGradBranch(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        with torch.no_grad():
            x = self.proj(x)
        return self.head(x)


def test_module_called_under_no_grad():
    found = _findings(lambda: _train(NoGradBranch()), "TP251")
    assert [f.subject for f in found] == ["proj"]
    assert "only called under torch.no_grad()" in found[0].message
    assert found[0].line == NoGradBranch.forward.__code__.co_firstlineno + 2


class UnusedParameter(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Linear(8, 3)
        self.temperature = nn.Parameter(torch.ones(()))  # forgotten in forward

    def forward(self, x):
        return self.net(x)


def test_unused_parameter_of_a_used_module():
    found = _findings(lambda: _train(UnusedParameter()), "TP251")
    assert [f.subject for f in found] == ["temperature"]
    assert "not used in its forward" in found[0].message
    assert found[0].line == UnusedParameter.__init__.__code__.co_firstlineno + 3


class ReentrantCheckpoint(nn.Module):
    """The classic: frozen embeddings feed a reentrant checkpoint, so the block never trains."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(10, 8).requires_grad_(False)
        self.block = nn.Sequential(nn.Linear(8, 8), nn.ReLU())
        self.head = nn.Linear(8, 3)

    def forward(self, idx):
        h = torch.utils.checkpoint.checkpoint(self.block, self.emb(idx), use_reentrant=True)
        return self.head(h)


def test_reentrant_checkpoint_without_grad_inputs(recwarn):
    def run():
        model = ReentrantCheckpoint()
        opt = torch.optim.AdamW(model.parameters())
        for _ in range(4):
            opt.zero_grad()
            model(torch.randint(0, 10, (4,))).sum().backward()
            opt.step()

    found = _findings(run, "TP251")
    assert [f.subject for f in found] == ["block"]
    assert "use_reentrant=False" in found[0].message


def test_script_run_reports_unused_head(tmp_path):
    outcome = run_source(tmp_path, """
        import torch, torch.nn as nn

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.backbone = nn.Linear(4, 8)
                self.classifier = nn.Linear(8, 2)
                self.new_head = nn.Linear(8, 2)

            def forward(self, x):
                return self.classifier(self.backbone(x))

        model = Net()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(5):
            loss = model(torch.randn(3, 4)).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
    """, watchers=WATCHER)
    assert outcome.exit_code == 0
    assert codes(outcome.findings) == ["TP251"]
    f = outcome.findings[0]
    assert f.subject == "new_head" and f.path.endswith("train.py") and f.line == 9


# ---------------------------------------------------------------------------------------- TP252
def test_dead_relu_names_the_dead_module():
    def run():
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 3))
        with torch.no_grad():
            model[2].bias.fill_(-100.0)  # every pre-activation of the second ReLU is negative
        _train(model, steps=8, opt=torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9))

    found = _findings(run, "TP252")
    assert len(found) == 1
    f = found[0]
    assert f.subject == "3" and "(ReLU)" in f.message
    assert sorted(f.extra["parameters"]) == ["0.bias", "0.weight", "2.bias", "2.weight", "4.weight"]


class ZeroMasked(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gate_branch = nn.Linear(8, 8)
        self.head = nn.Linear(8, 3)
        self.register_buffer("mask", torch.zeros(8))  # meant to be ones

    def forward(self, x):
        return self.head(x + self.gate_branch(x) * self.mask)


def test_branch_multiplied_by_zero_mask():
    found = _findings(lambda: _train(ZeroMasked()), "TP252")
    assert [f.subject for f in found] == ["gate_branch"]
    assert "zero mask" in found[0].message
    assert all(f.code != "TP251" for f in watched(lambda: _train(ZeroMasked()), WATCHER))


class TinyMasked(ZeroMasked):
    """The same branch scaled by 1e-30 instead of 0: its gradients are tiny (their squares are 0 in
    float32) but not zero, and the batched check must not call them zero."""

    def __init__(self) -> None:
        super().__init__()
        self.mask.fill_(1e-30)


def test_tiny_but_nonzero_gradients_are_not_exactly_zero():
    model = TinyMasked()
    found = _findings(lambda: _train(model), "TP252")
    g = model.gate_branch.weight.grad
    assert g is not None and 0 < g.abs().max() < 1e-25 and float((g.float() ** 2).sum()) == 0.0
    assert found == []


def test_needs_enough_steps_before_reporting():
    assert _findings(lambda: _train(WithUnusedHead(), steps=2), "TP251") == []
    assert _findings(lambda: _train(ZeroMasked(), steps=4), "TP252") == []


# ---------------------------------------------------------------------------------------- clean loops
def test_cnn_with_batchnorm_momentum_and_scheduler_is_silent():
    def run():
        torch.manual_seed(0)
        model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                              nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                              nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.2), nn.Linear(8, 4))
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=10, gamma=0.5)
        for _ in range(32):
            x, y = torch.randn(8, 3, 8, 8), torch.randint(0, 4, (8,))
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
            sched.step()

    assert watched(run, WATCHER) == []


class TinyGPT(nn.Module):
    def __init__(self, vocab: int = 50, d: int = 32, seq: int = 16) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.zeros(seq, d))
        layer = nn.TransformerEncoderLayer(d, 4, 64, dropout=0.1, batch_first=True)
        self.blocks = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.tok.weight  # tied
        self.register_buffer("causal", nn.Transformer.generate_square_subsequent_mask(seq))

    def forward(self, idx):
        h = self.tok(idx) + self.pos[: idx.shape[1]]
        return self.lm_head(self.norm(self.blocks(h, mask=self.causal, is_causal=True)))


def test_transformer_with_accumulation_clipping_and_cosine_schedule_is_silent():
    def run():
        torch.manual_seed(0)
        model = TinyGPT()
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=30)
        accum = 2
        for i in range(12 * accum):
            idx = torch.randint(0, 50, (4, 16))
            logits = model(idx)
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, 50), idx[:, 1:].reshape(-1)) / accum
            loss.backward()
            if (i + 1) % accum == 0:
                nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                sched.step()
                opt.zero_grad(set_to_none=True)

    assert watched(run, WATCHER) == []


def test_frozen_backbone_on_purpose_is_silent():
    def run():
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 3))
        model[0].requires_grad_(False)
        model[2].requires_grad_(False)
        _train(model, steps=10, opt=torch.optim.AdamW(model.parameters(), lr=1e-3))  # frozen ones included

    assert watched(run, WATCHER) == []


def test_head_only_optimizer_with_no_grad_backbone_is_silent():
    class Probe(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.backbone = nn.Sequential(nn.Linear(8, 16), nn.ReLU())
            self.head = nn.Linear(16, 3)

        def forward(self, x):
            with torch.no_grad():
                h = self.backbone(x)
            return self.head(h)

    def run():
        model = Probe()
        _train(model, steps=10, opt=torch.optim.SGD(model.head.parameters(), lr=0.1))

    assert watched(run, WATCHER) == []


def test_gan_with_two_optimizers_is_silent():
    def run():
        torch.manual_seed(0)
        G = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 8))
        D = nn.Sequential(nn.Linear(8, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))
        opt_g = torch.optim.Adam(G.parameters(), lr=2e-4, betas=(0.5, 0.999))
        opt_d = torch.optim.Adam(D.parameters(), lr=2e-4, betas=(0.5, 0.999))
        bce = nn.BCEWithLogitsLoss()
        for _ in range(12):
            real, z = torch.randn(8, 8), torch.randn(8, 4)
            fake = G(z)
            opt_d.zero_grad()
            d_loss = bce(D(real), torch.ones(8, 1)) + bce(D(fake.detach()), torch.zeros(8, 1))
            d_loss.backward()
            opt_d.step()
            opt_g.zero_grad()
            bce(D(fake), torch.ones(8, 1)).backward()
            opt_g.step()

    assert watched(run, WATCHER) == []


def test_module_used_every_other_step_and_zero_init_gates_are_silent():
    class Gated(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = nn.Linear(8, 8)
            self.branch = nn.Linear(8, 8)
            self.alpha = nn.Parameter(torch.zeros(()))      # ReZero: branch grads are 0 until alpha moves
            self.lora_a = nn.Linear(8, 2, bias=False)
            self.lora_b = nn.Linear(2, 3, bias=False)
            nn.init.zeros_(self.lora_b.weight)              # LoRA: lora_a grads are 0 at the first step
            self.head = nn.Linear(8, 3)
            self.aux = nn.Linear(8, 3)                      # used on odd steps only
            self.calls = 0

        def forward(self, x):
            self.calls += 1
            h = torch.relu(self.body(x))
            h = h + self.alpha * self.branch(h)
            out = self.head(h) + self.lora_b(self.lora_a(h))
            return out + self.aux(h) if self.calls % 2 else out

    assert watched(lambda: _train(Gated(), steps=24), WATCHER) == []


def test_training_is_bitwise_identical_under_the_watcher():
    def make():
        torch.manual_seed(3)
        return WithUnusedHead()

    plain = make()
    _train(plain, steps=6)
    watchedm = make()
    watched(lambda: _train(watchedm, steps=6), WATCHER)
    for (n, a), (_, b) in zip(plain.state_dict().items(), watchedm.state_dict().items(), strict=True):
        assert torch.equal(a, b), n


def test_no_optimizer_no_findings():
    def run():
        model = WithUnusedHead()
        for _ in range(5):
            model(torch.randn(2, 8)).sum().backward()

    assert watched(run, WATCHER) == []


def test_single_class_cross_entropy_is_named_as_the_cause_not_dead_relus():
    def run():
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))  # one logit for a binary task
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(8):
            x, y = torch.randn(8, 8), torch.zeros(8, dtype=torch.long)
            loss = F.cross_entropy(model(x), y)  # log_softmax over one column: always exactly 0
            assert loss.item() == 0.0
            opt.zero_grad()
            loss.backward()
            opt.step()

    (f,) = _findings(run, "TP252")
    assert "single column" in f.message and "cross_entropy over one class is always exactly 0" in f.message
    assert "ReLU" not in f.message and "binary_cross_entropy_with_logits" in f.fix
    assert f.path.endswith("test_gradient_flow.py")


def test_a_correct_binary_classifier_with_one_logit_is_silent():
    def run():
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(8):
            x = torch.randn(8, 8)
            loss = F.binary_cross_entropy_with_logits(model(x).squeeze(1), (x[:, 0] > 0).float())
            opt.zero_grad()
            loss.backward()
            opt.step()

    assert watched(run, WATCHER) == []

"""The session's dispatch: what each watcher receives on unsampled steps, the sampler's call budget,
and hooks that compiled code runs as no-ops."""

from __future__ import annotations

import inspect
import os
import sys

import torch
import torch.nn as nn
import torch.nn.modules.module as module_hooks

from torchpact.watch import Sampler, Watcher, watch


class Recorder(Watcher):
    name = "recorder"

    def __init__(self, calls: str) -> None:
        super().__init__()
        self.unsampled_calls = calls
        self.pre: list[tuple[int, int]] = []    # (step, depth)
        self.post: list[tuple[int, int]] = []
        self.sampled: list[bool] = []
        self.periodic: list[bool] = []

    def on_forward_pre(self, module, args):
        self.pre.append((self.session.step, self.session.depth))

    def on_forward(self, module, args, output):
        self.post.append((self.session.step, self.session.depth))

    def on_step_end(self, step):
        self.sampled.append(self.session.sampled)
        self.periodic.append(self.session.periodic)


def _train(steps: int, forwards: int = 1) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(steps):
        opt.zero_grad()
        loss = sum(model(torch.randn(2, 4)).pow(2).mean() for _ in range(forwards))
        loss.backward()
        opt.step()


def test_unsampled_steps_deliver_only_the_calls_each_watcher_asks_for():
    everything, roots, none = Recorder("all"), Recorder("roots"), Recorder("none")
    with watch([everything, roots, none], sampler=Sampler(first=2, every=100)):
        _train(5)
    per_step = lambda rec, step: [d for s, d in rec.pre if s == step]  # noqa: E731
    for step in range(5):
        assert per_step(everything, step) == [1, 2, 2, 2]
        assert per_step(roots, step) == ([1, 2, 2, 2] if step < 2 else [1])
        assert per_step(none, step) == ([1, 2, 2, 2] if step < 2 else [])
    assert [d for s, d in roots.post if s >= 2] == [0, 0, 0]  # after the root's forward: depth 0


def test_a_watcher_can_widen_what_it_receives_from_the_next_step():
    rec = Recorder("none")

    class Widen(Watcher):
        name = "widen"

        def on_step_end(self, step):
            if step == 3:
                rec.unsampled_calls = "all"

    with watch([rec, Widen()], sampler=Sampler(first=2, every=100)):
        _train(6)
    assert sorted({s for s, _ in rec.pre}) == [0, 1, 4, 5]


def test_step_callbacks_declared_sampled_only_are_called_on_sampled_steps_only():
    class Steps(Watcher):
        name = "steps"
        sampled_only = frozenset({"on_step_pre"})

        def __init__(self) -> None:
            super().__init__()
            self.pre: list[int] = []
            self.end: list[int] = []

        def on_step_pre(self, optimizer):
            self.pre.append(self.session.step)

        def on_step_end(self, step):
            self.end.append(step)

    rec = Steps()
    with watch([rec], sampler=Sampler(first=2, every=3)):
        _train(8)
    assert rec.pre == [0, 1, 3, 6]
    assert rec.end == list(range(8))


def test_call_budget_spaces_out_sampled_steps_of_call_heavy_scripts():
    heavy, unlimited = Recorder("none"), Recorder("none")
    # 30 forwards of 4 module calls: 120 calls a step
    with watch([heavy], sampler=Sampler(first=20, every=5, calls=200, share=0.1)):
        _train(25, forwards=30)
    with watch([unlimited], sampler=Sampler(first=20, every=5, calls=None)):
        _train(25, forwards=30)
    assert unlimited.sampled[:19] == [True] * 19
    # budget after s steps: 200 + 0.1 * 120 * s calls; each sampled step costs its 120 calls + a charge of 12
    assert [s for s in range(25) if any(p == s for p, _ in heavy.pre)] == [0, 6, 17]
    assert Sampler(first=20, calls=200).affordable(0, 0, 0)  # the first sampled step is always paid


def test_each_sampled_step_is_charged_for_its_own_checks_so_a_long_run_of_a_tiny_model_is_spaced_out():
    charged, uncharged = Recorder("none"), Recorder("none")
    with watch([charged], sampler=Sampler(first=2, every=2, calls=200, share=0.1, spread=None)):
        _train(40)  # 4 module calls a step
    with watch([uncharged], sampler=Sampler(first=2, every=2, calls=200, share=0.1, charge=0, spread=None)):
        _train(40)
    # k sampled steps cost 4k calls + 12 each: the budget 200 + 0.4 a step pays 13 of them by step 22, a 14th
    # only at step 60; without the charge 4 calls a step never exhaust it
    assert [s for s, sampled in enumerate(charged.sampled) if sampled] == [0, 1, *range(2, 23, 2)]
    assert [s for s, sampled in enumerate(uncharged.sampled) if sampled] == [0, 1, *range(2, 40, 2)]


def test_periodic_steps_spread_out_as_the_run_grows_so_a_late_problem_is_seen_a_bounded_share_late():
    sampler = Sampler(calls=None)  # first 10, every 20, spread 10
    periodic = [s for s in range(2000) if sampler.periodic(s)]
    assert periodic[:10] == list(range(20, 201, 20))  # one in 20 up to every * spread
    assert periodic[10:] == [*range(240, 400, 40), *range(400, 800, 80), *range(800, 1600, 160), 1600, 1920]
    for begins in range(1, 2000):  # a problem beginning at any step is on a sampled step within max(20, s / 5)
        seen = next(s for s in range(begins, 4000) if sampler(s))
        assert seen - begins <= max(20, begins / 5)
    assert [s for s in range(2000) if Sampler(spread=None, calls=None).periodic(s)] == list(range(20, 2000, 20))
    assert Sampler(first=0, every=1, calls=None).gap(10**6) >= 1  # every=1 spreads too


class FollowUp(Recorder):
    """Asks for the next step after each of ``steps`` to be sampled, from a sampled step's callback."""

    def __init__(self, steps: set[int]) -> None:
        super().__init__("none")
        self.steps = steps

    def on_step(self, optimizer):
        if self.session.sampled and self.session.step in self.steps:
            self.session.sample_next()


def test_a_watcher_gets_the_step_after_a_sampled_one_sampled_when_it_asks():
    rec = FollowUp({1, 5, 6, 20, 21})
    with watch([rec], sampler=Sampler(first=2, every=5, calls=None)):
        _train(25)
    # 0, 1 first; 2 asked for at 1; 5, 10, 15, 20 the pattern; 6 and 7 asked at 5 and 6; 21, 22 at 20, 21
    assert [s for s, sampled in enumerate(rec.sampled) if sampled] == [0, 1, 2, 5, 6, 7, 10, 15, 20, 21, 22]
    # periodic: picked by the pattern alone, past the first steps
    assert [s for s, periodic in enumerate(rec.periodic) if periodic] == [5, 10, 15, 20]
    asked_on_pattern = FollowUp({4})
    with watch([asked_on_pattern], sampler=Sampler(first=2, every=1, calls=None)):
        _train(8)
    assert asked_on_pattern.periodic == [False, False, True, True, True, False, True, True]  # 5 was asked for

    exact = FollowUp(set(range(25)))
    with watch([exact], sampler=lambda step: step % 5 == 0):  # a plain callable is the exact schedule
        _train(12)
    assert [s for s, sampled in enumerate(exact.sampled) if sampled] == [0, 5, 10]
    assert not any(exact.periodic)


def test_follow_ups_stay_within_the_call_budget():
    asks, pattern = FollowUp(set(range(25))), Recorder("none")
    with watch([asks], sampler=Sampler(first=20, every=5, calls=200, share=0.1)):
        _train(25, forwards=30)
    with watch([pattern], sampler=Sampler(first=20, every=5, calls=200, share=0.1)):
        _train(25, forwards=30)
    assert asks.sampled == pattern.sampled  # every step asks, yet only what the budget pays for is sampled


class Forecast(Recorder):
    """Asks, at each step's end, whether the next step will be sampled (as the optimizer watcher does)."""

    def __init__(self) -> None:
        super().__init__("none")
        self.promised: list[bool] = []

    def on_step_end(self, step):
        super().on_step_end(step)
        self.promised.append(self.session.will_sample(step + 1))


def test_will_sample_foretells_the_next_step_also_when_the_budget_refuses_it():
    # 120 calls and a charge of 12 a step against a budget of 200 + 12 a step: step 0 is paid, steps 1-5 are not
    rec = Forecast()
    with watch([rec], sampler=Sampler(first=20, every=5, calls=200, share=0.1)):
        _train(8, forwards=30)
    assert rec.sampled == [True, False, False, False, False, False, True, False]
    assert rec.promised == rec.sampled[1:] + [rec.promised[-1]]


def test_another_optimizer_takes_over_counting_steps_once_the_first_one_stops():
    """Layer-wise training (pytorch/examples' forward-forward): each layer's optimizer trains it in turn.
    The first optimizer stays alive but stops stepping; without a handover the step count would stop,
    and with it the sampling schedule."""
    from torchpact.watch.session import HANDOVER_STEPS

    rec = Recorder("none")
    torch.manual_seed(0)
    layers = [nn.Linear(4, 4), nn.Linear(4, 4)]
    optimizers = [torch.optim.SGD(layer.parameters(), lr=0.01) for layer in layers]
    with watch([rec], sampler=Sampler(first=2, every=5, calls=None)) as session:
        for layer, opt, steps in zip(layers, optimizers, (12, 40), strict=True):
            for _ in range(steps):
                opt.zero_grad()
                layer(torch.randn(2, 4)).pow(2).mean().backward()
                opt.step()
    assert session.step == 12 + 40 - HANDOVER_STEPS + 1
    assert session.optimizers() == [optimizers[1], optimizers[0]]  # the one counting steps comes first
    assert [s for s, sampled in enumerate(rec.sampled) if sampled] == [0, 1, 5, 10, 15, 20, 25, 30]

    wgan = Recorder("none")  # 5 critic steps per generator step: the generator keeps counting
    critic, generator = (torch.optim.SGD(layer.parameters(), lr=0.01) for layer in layers)
    with watch([wgan], sampler=Sampler(first=2, every=5, calls=None)) as session:
        for _ in range(30):
            for opt, layer in [(generator, layers[1])] + [(critic, layers[0])] * 5:
                opt.zero_grad()
                layer(torch.randn(2, 4)).pow(2).mean().backward()
                opt.step()
    assert session.step == 30


def test_compiled_code_runs_the_hooks_as_no_ops_so_dynamo_builds_one_graph():
    """Dynamo traces the session's hooks as returning at once: no graph break, fullgraph=True compiles, and
    the graph holds the same ops as without torchpact (hooks wrapped in torch.compiler.disable, as before,
    made fullgraph=True fail)."""
    def graph_ops(model, x):
        graphs = []

        def backend(gm, example_inputs):
            graphs.append([str(n.target) for n in gm.graph.nodes if n.op == "call_function"])
            return gm.forward

        torch._dynamo.reset()
        out = torch.compile(model, backend=backend, fullgraph=True)(x)
        return graphs, out

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Dropout(0.0), nn.Linear(8, 1))
    x = torch.randn(3, 4)
    plain_graphs, expected = graph_ops(model, x)
    torch.optim.SGD(model.parameters(), lr=0.1)  # imports torch._dynamo, as every optimizer does
    recorder = Recorder("all")
    with watch([recorder]) as session:
        assert "torch._dynamo" in sys.modules
        graphs, out = graph_ops(model, x)
        assert graphs == plain_graphs and len(graphs) == 1
        assert torch.equal(out, expected)
        ours = [h for h in module_hooks._global_forward_hooks.values() if getattr(h, "__self__", None) is session]
        assert len(ours) == 1 and not getattr(ours[0], "_torchdynamo_disable", False)
        # the inner modules ran inside the compiled graph: none of their calls reached the watcher
        assert all(depth <= 1 for _, depth in recorder.pre)
    assert not [h for h in module_hooks._global_forward_hooks.values() if getattr(h, "__self__", None) is session]


class StepPre(Watcher):
    name = "step_pre_seen"

    def __init__(self) -> None:
        super().__init__()
        self.grads: list[torch.Tensor | None] = []
        self.calls = 0

    def on_step_pre(self, optimizer):
        g = optimizer.param_groups[0]["params"][0].grad
        self.grads.append(None if g is None else g.clone())

    def on_forward_pre(self, module, args):
        self.calls += 1


def test_step_with_a_closure_delivers_step_pre_after_the_closures_backward():
    # torch runs step pre-hooks before step() calls the closure; LBFGS calls it again in its line search
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    grads: list[torch.Tensor] = []

    def closure():
        model.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        grads.append(model.weight.grad.clone())
        return loss

    seen = StepPre()
    for make in (lambda: torch.optim.LBFGS(model.parameters(), max_iter=4),
                 lambda: torch.optim.SGD(model.parameters(), lr=0.1)):
        opt = make()
        seen.grads.clear()
        with watch([seen]):
            for call in (lambda opt=opt: opt.step(closure), lambda opt=opt: opt.step(closure=closure),
                         lambda opt=opt: opt.step(closure)):
                first = len(grads)
                call()
                assert torch.equal(seen.grads[-1], grads[first])  # the first closure call's gradient
        assert len(seen.grads) == 3


def test_step_with_a_closure_trains_exactly_as_without_torchpact():
    def train() -> torch.Tensor:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
        opt = torch.optim.LBFGS(model.parameters(), max_iter=5)
        x, y = torch.randn(32, 4), torch.randn(32, 1)

        def closure():
            opt.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            return loss

        for _ in range(3):
            opt.step(closure)
        return torch.cat([p.detach().flatten() for p in model.parameters()])

    plain = train()
    with watch():
        watched = train()
    assert torch.equal(plain, watched)


class NeedsGroup(Recorder):
    """Notes the steps whose ``on_step_pre`` it got and the depth-1 calls it saw, as a DDP watcher would."""

    needs_process_group = True

    def __init__(self) -> None:
        super().__init__("roots")
        self.step_pres: list[int] = []

    def on_step_pre(self, optimizer):
        self.step_pres.append(self.session.step)


def test_watchers_that_need_a_process_group_are_not_called_until_one_exists(tmp_path):
    import torch.distributed as dist

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step():
        opt.zero_grad()
        model(torch.randn(2, 4)).pow(2).mean().backward()
        opt.step()

    waiting, plain = NeedsGroup(), Recorder("roots")
    with watch([waiting, plain], sampler=Sampler(first=2, every=5, calls=None)):
        for _ in range(4):  # steps 0-3, no process group: never called
            step()
        dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
        try:
            for _ in range(4):  # steps 4-7: every step from step 4's on_step_pre, every call from step 5
                step()
        finally:
            dist.destroy_process_group()
    assert waiting.step_pres == [4, 5, 6, 7]
    assert sorted({s for s, _ in waiting.pre}) == [5, 6, 7]
    assert sorted({s for s, _ in plain.pre}) == list(range(8))  # a watcher without the need: every step


def test_a_group_made_after_the_session_started_is_found_at_step_0s_first_forward(tmp_path):
    import torch.distributed as dist

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    waiting = NeedsGroup()
    with watch([waiting], sampler=Sampler(first=1, every=100, calls=None)):
        dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
        try:
            for _ in range(3):
                opt.zero_grad()
                model(torch.randn(2, 4)).pow(2).mean().backward()
                opt.step()
        finally:
            dist.destroy_process_group()
    assert waiting.pre[0] == (0, 1)  # step 0's outermost call, with the calls inside it
    assert sorted({s for s, _ in waiting.pre}) == [0, 1, 2]
    assert waiting.step_pres == [0, 1, 2]


def test_a_default_run_does_not_import_the_watchers_that_are_off_by_default():
    import subprocess

    from torchpact.watch import make_watchers, watcher_classes
    from torchpact.watch.watchers import OFF_BY_DEFAULT

    off = {c.__module__.rsplit(".", 1)[-1] for c in watcher_classes() if not c.enabled_by_default}
    assert off == OFF_BY_DEFAULT  # the list says which modules a default run may skip: it must be exact
    assert {w.name for w in make_watchers()} == {c.name for c in watcher_classes() if c.enabled_by_default}
    code = ("import sys; from torchpact.watch import make_watchers; make_watchers(); "
            "print(sorted(m.rsplit('.', 1)[-1] for m in sys.modules if m.startswith('torchpact.watch.watchers.')))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert not any(f"'{name}'" in loaded for name in OFF_BY_DEFAULT)
    assert "'nonfinite'" in loaded


def test_a_finding_carries_the_evidence_its_check_states():
    from torchpact.findings import Evidence
    from torchpact.watch.session import Session
    from torchpact.watch.watchers.chance_loss import CHANCE_LOSS
    from torchpact.watch.watchers.nonfinite import FORWARD

    session = Session([])
    inferred = session.report(CHANCE_LOSS, "loss at ln(C)")
    observed = session.report(FORWARD, "NaN out of a finite input", subject="fc")
    assert (inferred.evidence, observed.evidence) == (Evidence.INFERRED, Evidence.OBSERVED)


class _StepCounter(Watcher):
    name = "step_counter"

    def __init__(self) -> None:
        super().__init__()
        self.events: list[str] = []

    def on_step_pre(self, optimizer):
        self.events.append("pre")

    def on_step(self, optimizer):
        self.events.append("post")


class _AdamThatCallsSuper(torch.optim.Adam):
    """A subclass whose step() calls Adam.step(): torch runs the step hooks for both once Adam's is wrapped too."""

    fail_once = False

    def step(self, closure=None):
        if self.fail_once:
            self.fail_once = False
            raise RuntimeError("a step that raised")
        return super().step(closure)


def test_a_step_that_calls_its_parent_s_step_is_one_step():
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    torch.optim.Adam(model.parameters())  # Adam's own step() is wrapped (and hooked) from now on
    opt = _AdamThatCallsSuper(model.parameters(), lr=1e-3)
    counter = _StepCounter()
    with watch([counter]) as session:
        for i in range(4):
            opt.zero_grad()
            model(torch.randn(2, 4)).sum().backward()
            if i == 1:
                opt.fail_once = True
                try:
                    opt.step()
                except RuntimeError:
                    pass  # the script goes on: the hooks' bookkeeping must not stay "inside a step"
            opt.step()
    assert session.step == 4
    assert counter.events == ["pre", "post", "pre", "pre", "post", "pre", "post", "pre", "post"]


def test_optimizer_sites_are_the_sessions_and_the_wrapper_goes_at_close():
    # the construction sites and the wrapper that records them belong to one session: another session does not
    # see its optimizers, and torch's Optimizer.__init__ is back at close, also when the watcher failed
    from torchpact.watch.watchers._sites import SiteWatcher

    class Named(SiteWatcher):
        name = "named"

        def on_step_pre(self, optimizer):
            raise RuntimeError("a watcher bug")  # switched off: its on_close is never called

    init = torch.optim.Optimizer.__init__
    named = Named()
    with watch([named]) as session:
        line = inspect.currentframe().f_lineno + 1
        opt = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1)
        assert named.creation_site(opt) == (__file__, line)
        opt.step()
    assert [f.code for f in session.findings] == ["TP002"]
    assert torch.optim.Optimizer.__init__ is init
    assert named.site_label(opt) == f"SGD created at {os.path.basename(__file__)}:{line}"  # readable after close
    with watch([Named()]) as other:
        torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1)
    assert other.optimizer_sites.site(opt) == (None, None)

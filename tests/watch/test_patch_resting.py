"""Sampled-only wrappers come off torch for unsampled steps (``Patches.rest``): a loss or ``backward`` call there
costs what it costs without torchpact, and the watchers still hear every call of a sampled step."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from torchpact.watch import watch
from torchpact.watch.watcher import Watcher
from torchpact.watch.watchers._patch import Patch, remove_all

ORIGINAL_CROSS_ENTROPY = F.cross_entropy
ORIGINAL_BACKWARD = torch.autograd.backward
SAMPLED = {0, 1, 5}


def every_step_sampled(step: int) -> bool:
    return step in SAMPLED


class Counting(Watcher):
    """Counts the cross-entropy calls its sampled-only wrapper sees, per step, and what F.cross_entropy is then."""

    name = "counting"

    def __init__(self, sampled_only=True):
        super().__init__()
        self.sampled_only = sampled_only
        self.heard: list[int] = []
        self.seen_as: dict[int, bool] = {}    # step -> F.cross_entropy is torch's own at the loss call

    def attach(self, session):
        super().attach(session)
        self.patches = [Patch(F, "cross_entropy", self._wrap, sampled_only=self.sampled_only)]

    def _wrap(self, original):
        def cross_entropy(*args, **kwargs):
            if self.session.sampled:
                self.heard.append(self.session.step)
            return original(*args, **kwargs)
        return cross_entropy

    def on_close(self):
        remove_all(self.patches)


def _train(steps, seen_as=None, session=None, loss_fn=None):
    torch.manual_seed(0)
    model = nn.Linear(6, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        opt.zero_grad()
        if seen_as is not None:
            seen_as[session.step] = F.cross_entropy is ORIGINAL_CROSS_ENTROPY
        loss = (loss_fn or nn.CrossEntropyLoss())(model(torch.randn(4, 6)), torch.tensor([0, 1, 2, 0]))
        loss.backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def test_wrapper_off_on_unsampled_steps_and_back_on_sampled_ones():
    counting = Counting()
    with watch([counting], sampler=every_step_sampled) as session:
        _train(8, counting.seen_as, session)
    assert counting.heard == [0, 1, 5]
    assert counting.seen_as == {0: False, 1: False, 2: True, 3: True, 4: True, 5: False, 6: True, 7: True}
    assert F.cross_entropy is ORIGINAL_CROSS_ENTROPY


def test_an_every_step_patch_on_the_same_function_keeps_both_on():
    sampled_only, every_step = Counting(), Counting(sampled_only=False)
    every_step.name = "counting_every_step"
    with watch([sampled_only, every_step], sampler=every_step_sampled) as session:
        _train(4, sampled_only.seen_as, session)
    assert set(sampled_only.seen_as.values()) == {False}
    assert sampled_only.heard == every_step.heard == [0, 1]
    assert F.cross_entropy is ORIGINAL_CROSS_ENTROPY


def test_a_reference_taken_to_the_wrapper_passes_through_on_unsampled_steps():
    counting = Counting()
    with watch([counting], sampler=every_step_sampled):
        held = F.cross_entropy  # taken on step 0 (sampled): the wrapper
        assert held is not ORIGINAL_CROSS_ENTROPY
        _train(7, loss_fn=held)
    assert counting.heard == [0, 1, 5]


def test_a_patch_made_on_top_by_someone_else_is_left_alone():
    counting = Counting()
    theirs_calls = []
    with watch([counting], sampler=every_step_sampled) as session:
        ours = F.cross_entropy

        def theirs(*args, **kwargs):
            theirs_calls.append(session.step)
            return ours(*args, **kwargs)

        F.cross_entropy = theirs
        try:
            _train(4)
            assert F.cross_entropy is theirs
        finally:
            F.cross_entropy = ours
    assert theirs_calls == [0, 1, 2, 3]
    assert counting.heard == [0, 1]
    assert F.cross_entropy is ORIGINAL_CROSS_ENTROPY


def test_a_patch_made_on_an_unsampled_step_wraps_the_wrappers_already_there():
    first, late = Counting(), Counting()
    late.name = "late"
    with watch([first], sampler=every_step_sampled) as session:
        _train(3)  # steps 0-2: step 2 is unsampled, F.cross_entropy is torch's own now
        assert F.cross_entropy is ORIGINAL_CROSS_ENTROPY
        late.attach(session)
        _train(4)  # steps 3-6
        late.on_close()
    assert first.heard == [0, 1, 5]
    assert late.heard == [5]
    assert F.cross_entropy is ORIGINAL_CROSS_ENTROPY


def _default_names(without=()):
    from torchpact.watch import make_watchers

    return [w.name for w in make_watchers() if w.name not in without]


def test_default_watchers_leave_loss_and_backward_to_torch_on_unsampled_steps_and_train_identically():
    seen: dict[int, tuple[bool, bool]] = {}

    def loss_fn(out, target):
        seen[session.step] = (F.cross_entropy is ORIGINAL_CROSS_ENTROPY, torch.autograd.backward is ORIGINAL_BACKWARD)
        return F.cross_entropy(out, target)

    plain = _train(8, loss_fn=lambda out, target: F.cross_entropy(out, target))
    # decorrelated_labels hears the loss of every step until it has decided (here it cannot: random labels)
    with watch(_default_names(without={"decorrelated_labels"}), sampler=every_step_sampled) as session:
        watched = _train(8, loss_fn=loss_fn)
    assert all(torch.equal(a, b) for a, b in zip(plain, watched, strict=True))
    assert {s for s, (ce, bw) in seen.items() if ce and bw} == {2, 3, 4, 6, 7}
    assert F.cross_entropy is ORIGINAL_CROSS_ENTROPY and torch.autograd.backward is ORIGINAL_BACKWARD


def test_a_listener_that_hears_unsampled_steps_keeps_the_loss_wrappers_on():
    seen: dict[int, tuple[bool, bool]] = {}

    def loss_fn(out, target):
        seen[session.step] = (F.cross_entropy is ORIGINAL_CROSS_ENTROPY, torch.autograd.backward is ORIGINAL_BACKWARD)
        return F.cross_entropy(out, target)

    with watch(_default_names(), sampler=every_step_sampled) as session:
        _train(8, loss_fn=loss_fn)
    assert {s for s, (ce, _) in seen.items() if ce} == set()       # decorrelated_labels undecided: it hears them
    assert {s for s, (_, bw) in seen.items() if bw} == {2, 3, 4, 6, 7}
    assert F.cross_entropy is ORIGINAL_CROSS_ENTROPY and torch.autograd.backward is ORIGINAL_BACKWARD


def test_a_switch_made_while_a_tracer_paused_the_patches_is_made_at_the_next_step():
    from torchpact.watch.watchers._patch import pause_all, resume_all

    counting = Counting()
    torch.manual_seed(0)
    model = nn.Linear(6, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with watch([counting], sampler=every_step_sampled) as session:
        for step in range(5):
            counting.seen_as[session.step] = F.cross_entropy is ORIGINAL_CROSS_ENTROPY
            opt.zero_grad()
            F.cross_entropy(model(torch.randn(4, 6)), torch.tensor([0, 1, 2, 0])).backward()
            if step == 1:  # the switch to unsampled steps comes while torch's own functions are put back
                pause_all()
                opt.step()
                resume_all()
            else:
                opt.step()
    assert counting.seen_as == {0: False, 1: False, 2: False, 3: True, 4: True}
    assert counting.heard == [0, 1]
    assert F.cross_entropy is ORIGINAL_CROSS_ENTROPY

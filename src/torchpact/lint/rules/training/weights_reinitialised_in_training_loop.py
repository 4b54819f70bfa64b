from __future__ import annotations

import ast
import functools
import re
from typing import Iterator

from torchpact.findings import Category, Evidence, Severity
from torchpact.lint.context import MODULE, FileContext
from torchpact.lint.dataflow import _Iterated
from torchpact.lint.rule import Hit, Invalid, Rule
from torchpact.lint.rules.memory._model_loops import iterates_models
from torchpact.lint.rules.memory._training_loops import is_step_loop, runs_every_iteration
from torchpact.lint.rules.training._util import local_callees, parameter_owners, stepped_optimizer

_PARAMETER_ITERATORS = frozenset({"parameters", "named_parameters", "modules", "named_modules", "children",
                                  "named_children"})
# an initialiser known by its name only: ``weights_init``, ``init_weights``, ``reset_parameters``; not
# ``reset_running_stats`` (BatchNorm statistics, no weights) nor ``freeze_bn``
_INIT_NAME = re.compile(r"(^|_)(init|initiali[sz]e)(_|$)|(^|_)reset_(param|weight)", re.I)
# torch.nn.init's in-place initialisers (their last names, for the engine's pre-filter)
_INITIALISERS = ("constant_", "dirac_", "eye_", "kaiming_normal_", "kaiming_uniform_", "normal_", "ones_",
                 "orthogonal_", "sparse_", "trunc_normal_", "uniform_", "xavier_normal_", "xavier_uniform_", "zeros_")
_DEPTH = 2


class WeightsReinitialisedInTrainingLoop(Rule):
    """The model's weights are re-initialised inside the loop that trains it (`model.apply(init_weights)`,
    `nn.init.*_`).

    ## What it does
    Flags a re-initialisation of a module that the loop trains, where it runs on every iteration of
    that loop:
    - `model.apply(fn)` where `fn` (a function or lambda of this file, followed two calls deep)
      calls a `torch.nn.init` function or `reset_parameters()` — or, as `info`, a function defined
      elsewhere whose name says it initialises (`weights_init`, `init_weights`, `reset_parameters`);
    - `torch.nn.init.<name>_(t)` on a parameter of the model (`model.fc.weight`, a `p` of
      `model.parameters()`, an `m.weight` of `model.modules()`);
    - `model.reset_parameters()` (or a submodule's).

    The module is one the loop trains: it is called in the loop, or the optimizer the loop steps was
    given its parameters. Inside the loop that steps the optimizer, every step starts again from
    random weights (`error`). In a loop around that one (an epoch loop) every epoch does (`warning`),
    unless that iteration also builds a new optimizer for it — a fresh run per fold or trial, which
    is what re-initialising is for — or the loop is over models. A re-initialisation under an `if`
    (a periodic reset, done on purpose by some methods) is not flagged.

    ## Why is this bad?
    The initialiser overwrites what the optimizer has learnt so far. On torch 2.13, in the proof, a
    linear model re-initialised by `model.apply(init_weights)` at the start of each epoch ends every
    epoch with the same loss as after its first epoch, while the same loop without it keeps
    improving; re-initialised before each step it never gets past one step of training. Nothing
    raises or warns. The run check of the same code sees parameters changed outside `step()`.

    ## Fix safety
    No autofix: initialise once, before the training loop (usually right after building the model).
    """

    code = "TP456"  # shared with the run check of the same pattern (watch/watchers/out_of_step.py)
    category = Category.TRAINING
    severity = Severity.ERROR
    requires = (
        "an initialiser this file shows (`torch.nn.init.*`, `reset_parameters()`, `apply` of a function calling one; "
        "one known by its name only is `info`) runs on every iteration of a loop that trains the module it resets",
        "for `error`, that loop itself steps the optimizer (every step); a loop around it (every epoch) is at most "
        "`warning`, and is left alone when the same iteration builds a new optimizer",
    )
    message = ("the model's weights are re-initialised inside the training loop: every step starts again from random "
               "weights and training never progresses")
    fix_hint = "initialise the weights once, before the training loop"
    nodes = (ast.Call,)
    calls = frozenset({"apply", "reset_parameters", *_INITIALISERS})
    triggers = ("init", "reset_parameters")

    valid = [
        """
import torch
import torch.nn as nn
from utils import freeze_batchnorm, reset_running_stats
model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 1))
opt = torch.optim.Adam(model.parameters())
for x, y in loader:
    model.apply(freeze_batchnorm)
    model.apply(reset_running_stats)
    opt.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    opt.step()
""",
        """
import torch
import torch.nn as nn
def init_weights(m):
    if isinstance(m, nn.Linear):
        nn.init.xavier_uniform_(m.weight)
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
model.apply(init_weights)
opt = torch.optim.Adam(model.parameters())
for epoch in range(10):
    for x, y in loader:
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
""",
        """
import torch
import torch.nn as nn
def reset(m):
    if hasattr(m, "reset_parameters"):
        m.reset_parameters()
def k_fold(net, folds):
    for train_loader in folds:
        net.apply(reset)
        opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
        for epoch in range(5):
            for x, y in train_loader:
                opt.zero_grad()
                (net(x) - y).pow(2).mean().backward()
                opt.step()
""",
        """
import torch
import torch.nn as nn
def train(agent, env_steps, opt, reset_every):
    for step, batch in enumerate(env_steps):
        if step % reset_every == 0:
            agent.head.reset_parameters()
        opt.zero_grad()
        agent(batch).mean().backward()
        opt.step()
""",
        """
import torch
import torch.nn as nn
def sample_noise(gen, opt, loader):
    for real in loader:
        z = torch.empty(real.size(0), 16)
        nn.init.normal_(z)
        opt.zero_grad()
        gen(z).mean().backward()
        opt.step()
""",
        """
import torch
import torch.nn as nn
for width in (16, 32, 64):
    probe = nn.Linear(width, 1)
    nn.init.zeros_(probe.weight)
    opt = torch.optim.Adam(probe.parameters())
    for x, y in make_loader(width):
        opt.zero_grad()
        (probe(x) - y).pow(2).mean().backward()
        opt.step()
""",
        """
import torch
import torch.nn as nn
def fit(model, loader, opt):
    for x, y in loader:
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    with torch.no_grad():
        fresh = nn.Linear(4, 1)
        nn.init.kaiming_normal_(fresh.weight)
""",
    ]
    invalid = [
        """
import torch
import torch.nn as nn
def init_weights(m):
    if isinstance(m, nn.Linear):
        nn.init.xavier_uniform_(m.weight)
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
opt = torch.optim.Adam(model.parameters())
for x, y in loader:
    model.apply(init_weights)
    opt.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    opt.step()
""",
        Invalid("""
import torch
import torch.nn as nn
def reset(m):
    if hasattr(m, "reset_parameters"):
        m.reset_parameters()
def fit(net, loader):
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    for epoch in range(5):
        net.apply(reset)
        for x, y in loader:
            opt.zero_grad()
            (net(x) - y).pow(2).mean().backward()
            opt.step()
fit(nn.Linear(4, 1), batches)
""", severity=Severity.WARNING, evidence=Evidence.MAY),  # every epoch
        """
import torch
import torch.nn as nn
agent = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 2))
opt = torch.optim.Adam(agent.parameters())
for batch in stream:
    agent[1].reset_parameters()
    opt.zero_grad()
    agent(batch).mean().backward()
    opt.step()
""",
        """
import torch
import torch.nn as nn
gen = nn.Linear(16, 4)
opt = torch.optim.Adam(gen.parameters())
step = 0
while step < 1000:
    for p in gen.parameters():
        nn.init.normal_(p, std=0.02)
    opt.zero_grad()
    gen(torch.randn(8, 16)).mean().backward()
    opt.step()
    step += 1
""",
        Invalid("""
import torch
import torch.nn as nn
def fit(model: nn.Module, loader, epochs):
    opt = torch.optim.AdamW(model.parameters())
    for epoch in range(epochs):
        model.apply(lambda m: nn.init.trunc_normal_(m.weight) if isinstance(m, nn.Linear) else None)
        for x, y in loader:
            opt.zero_grad()
            model(x).sub(y).abs().mean().backward()
            opt.step()
""", severity=Severity.WARNING, evidence=Evidence.MAY),
        Invalid("""
import torch
import torch.nn as nn
from utils import weights_init
netG = nn.Sequential(nn.ConvTranspose2d(100, 64, 4), nn.Tanh())
optG = torch.optim.Adam(netG.parameters(), lr=2e-4)
for noise in batches:
    netG.apply(weights_init)
    optG.zero_grad()
    netG(noise).mean().backward()
    optG.step()
""", severity=Severity.INFO, evidence=Evidence.UNRESOLVED),  # an initialiser by its name only
        Invalid("""
import torch
import helpers
def fit(net, data):
    optim = torch.optim.SGD(net.parameters(), lr=0.1)
    for epoch in range(5):
        for inp, tgt in data:
            net.apply(helpers.init_params)
            optim.zero_grad()
            torch.nn.functional.l1_loss(net(inp), tgt).backward()
            optim.step()
fit(torch.nn.Linear(3, 1), [])
""", severity=Severity.INFO, evidence=Evidence.UNRESOLVED),  # the same, through a module attribute
        """
import torch
import torch.nn as nn
net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.Flatten(), nn.LazyLinear(10))
opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
for images, labels in loader:
    for m in net.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight)
    opt.zero_grad()
    nn.functional.cross_entropy(net(images), labels).backward()
    opt.step()
""",
    ]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        assert isinstance(node, ast.Call)
        root = _reset_module(node, ctx)
        if root is None:
            return
        loops = ctx.enclosing_loops(node)
        if not loops:
            return
        step_loop = next((loop for loop in loops if is_step_loop(loop, ctx)), None)
        if step_loop is not None:
            if (not runs_every_iteration(_anchor(node, step_loop, ctx), step_loop, ctx)
                    or not _trained_in(root, step_loop, ctx)):
                return
            yield self.hit(node, subject=ctx.segment(root), evidence=Evidence.MUST)
            return
        for loop in loops:  # an epoch loop: a step loop runs inside its iterations
            if not ctx.unnoted(functools.partial(_holds_step_loop, loop, ctx)):
                continue
            if (not runs_every_iteration(_anchor(node, loop, ctx), loop, ctx) or iterates_models(loop, ctx)
                    or _new_optimizer_after(node, loop, ctx) or not _trained_in(root, loop, ctx)):
                return
            yield self.hit(node, EPOCH_MESSAGE, subject=ctx.segment(root))
            return


EPOCH_MESSAGE = ("the model's weights are re-initialised on every iteration of the loop around the training loop "
                 "(each epoch): each epoch starts again from random weights")


def _reset_module(call: ast.Call, ctx: FileContext) -> ast.expr | None:
    """The module ``call`` re-initialises (the receiver, or the owner of the parameter), or None."""
    func = call.func
    qn = ctx.call_name(call) or ""
    if qn.startswith("torch.nn.init.") and qn.endswith("_") and call.args:
        return _parameter_owner(call.args[0], ctx)
    if not isinstance(func, ast.Attribute) or ctx.resolve(func) is not None:
        return None
    if func.attr == "reset_parameters" and not call.args:
        return func.value if MODULE in ctx.kinds(_root(func.value)) else None
    if func.attr == "apply" and len(call.args) == 1 and not call.keywords and MODULE in ctx.kinds(func.value):
        return func.value if _initialiser(call.args[0], ctx) else None
    return None


def _anchor(node: ast.AST, loop: ast.AST, ctx: FileContext) -> ast.AST:
    """What must run every iteration of ``loop`` for ``node`` to: the outermost loop over the model's
    modules or parameters around it (``for m in model.modules(): if isinstance(m, nn.Conv2d): ...``
    selects layers, not iterations), else ``node`` itself."""
    anchor = node
    for inner in ctx.enclosing_loops(node):
        if inner is loop:
            break
        it = getattr(inner, "iter", None)
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and it.func.attr in _PARAMETER_ITERATORS:
            anchor = inner
    return anchor


def _root(expr: ast.expr) -> ast.expr:
    """``model`` of ``model.fc[0].weight``."""
    while isinstance(expr, (ast.Attribute, ast.Subscript)):
        expr = expr.value
    return expr


def _parameter_owner(tensor: ast.expr, ctx: FileContext) -> ast.expr | None:
    """The module whose parameter ``tensor`` is: ``model`` for ``model.fc.weight``, for a ``p`` of
    ``model.parameters()`` and for an ``m.weight`` of ``model.modules()``."""
    root = _root(tensor)
    if not isinstance(root, ast.Name):
        return None
    if isinstance(tensor, ast.Attribute) and MODULE in ctx.kinds(root) and root is not tensor:
        return root
    for _, value in ctx.bindings(root):
        if isinstance(value, _Iterated):
            it = value.iterable
            if (isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute)
                    and it.func.attr in _PARAMETER_ITERATORS and MODULE in ctx.kinds(it.func.value)):
                return it.func.value
    return None


def _initialiser(fn: ast.expr, ctx: FileContext) -> bool:
    """Whether ``fn`` (handed to ``Module.apply``) re-initialises: a lambda or a function of this file
    that calls a ``torch.nn.init`` function or ``reset_parameters()``, two calls deep."""
    if isinstance(fn, ast.Lambda):
        roots: list[ast.AST] = [fn.body]
    elif isinstance(fn, ast.Name) and ctx.functions.get(fn.id):
        roots = list(ctx.functions[fn.id])
    else:
        name = fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(fn, ast.Attribute) else ""
        if _INIT_NAME.search(name) and not ctx.kinds(fn):
            # ``model.apply(weights_init)`` with the initialiser imported from elsewhere
            ctx.note(Evidence.UNRESOLVED, f"`{name}` is taken for a weight initialiser by its name")
            return True
        return False
    return ctx.reaches(roots, lambda n: _initialises(n, ctx), depth=_DEPTH) is not None


def _initialises(node: ast.AST, ctx: FileContext) -> bool:
    if not isinstance(node, ast.Call):
        return False
    if (ctx.call_name(node) or "").startswith("torch.nn.init."):
        return True
    return isinstance(node.func, ast.Attribute) and node.func.attr == "reset_parameters"


def _holds_step_loop(loop: ast.AST, ctx: FileContext) -> bool:
    """Whether a loop inside ``loop`` (or a function of this file it calls) steps an optimizer."""
    for node in ctx.walk_scope(loop.body):  # type: ignore[attr-defined]
        if isinstance(node, (ast.For, ast.AsyncFor, ast.While)) and is_step_loop(node, ctx):
            return True
        if isinstance(node, ast.Call) and local_callees(ctx, node) and ctx.reaches(
                local_callees(ctx, node), lambda n: isinstance(n, (ast.For, ast.AsyncFor, ast.While))
                and is_step_loop(n, ctx), depth=1):
            return True
    return False


def _new_optimizer_after(node: ast.AST, loop: ast.AST, ctx: FileContext) -> bool:
    """Whether the iteration builds an optimizer after the reset: a fresh run (a fold, a trial)."""
    for sub in ctx.walk_scope(loop.body):  # type: ignore[attr-defined]
        qn = ctx.call_name(sub) if isinstance(sub, ast.Call) else None
        if (qn and qn.startswith("torch.optim.") and not qn.startswith("torch.optim.lr_scheduler.")
                and qn.rsplit(".", 1)[-1][:1].isupper() and sub.lineno >= node.lineno):  # type: ignore[attr-defined]
            return True
    return False


def _trained_in(module: ast.expr, loop: ast.AST, ctx: FileContext) -> bool:
    """Whether ``loop`` trains ``module`` (or the model it is part of): it calls it, or steps an
    optimizer built on its parameters."""
    text = ctx.segment(_root(module))
    for sub in ctx.walk_scope(loop.body):  # type: ignore[attr-defined]
        if not isinstance(sub, ast.Call):
            continue
        if ctx.segment(_root(sub.func)) == text and not isinstance(ctx.parent(sub), ast.Expr):
            return True  # ``model(x)``, ``model.encode(x)`` used in the computation
        optimizer = ctx.unnoted(lambda s=sub: stepped_optimizer(ctx, s))
        if optimizer is not None and any(o == text or o.startswith(text + ".") or text.startswith(o + ".")
                                         for o in parameter_owners(ctx, optimizer)):
            return True
    return False

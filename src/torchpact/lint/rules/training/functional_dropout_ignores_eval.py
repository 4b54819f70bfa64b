from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Severity
from torchpact.lint.context import FileContext, argument
from torchpact.lint.rule import Hit, Invalid, Rule, last_names

# The functional dropouts whose ``training`` defaults to True. ``F.alpha_dropout`` and
# ``F.feature_alpha_dropout`` default to False: without it they drop nothing, in either mode.
DROPOUTS = {f"torch.nn.functional.{n}" for n in ("dropout", "dropout1d", "dropout2d", "dropout3d")}


class FunctionalDropoutIgnoresEval(Rule):
    """`F.dropout(x, p)` inside a module does not pass `training=self.training`, so it drops in eval too.

    ## What it does
    Flags `F.dropout` and `F.dropout1d/2d/3d` calls inside an `nn.Module` subclass that leave
    `training` to its default and can run while the module is in eval mode.

    A functional dropout drops a fraction `p` of its input exactly when its `training` argument is
    true; it never reads the module's mode. In torch 2.13 `F.dropout` and `F.dropout1d/2d/3d` default
    to `training=True` (`F.alpha_dropout` and `F.feature_alpha_dropout` default to False and, without
    it, drop nothing in either mode: not this rule). Such a call keeps dropping after `model.eval()`
    when both hold:

    - its `training` is left out (by keyword and as the third positional argument); a value passed
      there (`training=self.training`, a flag of the caller's own, `True` for Monte-Carlo dropout) is
      the author's choice, which `torchpact run` reports at info when it drops in eval mode;
    - it is reachable while `self.training` is False. It is not when every path to it passes a test
      that only holds in training mode: an enclosing `if self.training:` / `if self.training and p >
      0:` / the `else` of `if not self.training:`, a conditional expression (`F.dropout(x, p) if
      self.training else x`), the right of `self.training and ...`, an earlier `if not self.training:
      return x` (or `continue`, `raise`, `assert self.training`) in an enclosing block, a local flag
      bound from such a test, a property or method of the class that returns one, or a helper (a
      method other than `forward`, or a function nested in one) that the file only calls from such
      places. Nor does a call whose `p` is 0 whenever the module is not training (`p=self.p if
      self.training else 0.0`, or a constant 0) drop anything.

    ## Why is this bad?
    Unlike `nn.Dropout`, the functional form does not look at the module's mode. On torch 2.13,
    after `model.eval()` such a model still zeroes a fraction `p` of its activations and rescales
    the rest by `1 / (1 - p)` on every call, so evaluation and inference are random and worse than
    they should be. Behind a test of `self.training` (which `model.eval()` sets to False on every
    submodule) the call does not run in eval mode and drops nothing.

    ## Fix safety
    The fix passes `training=self.training` where the call is inside a method of the module (the
    usual `forward`), which makes the call behave like `nn.Dropout`: identical in training mode,
    the identity in eval mode. It is unsafe because it changes the outputs in eval mode, which a
    deliberate eval-time dropout (Tacotron's prenet) relies on.
    """

    code = "TP458"  # shared with the run check of the same pattern (watch/watchers)
    category = Category.TRAINING
    severity = Severity.WARNING
    requires = (
        "the call resolves to a `torch.nn.functional` dropout and sits in an `nn.Module` class of this file",
        "no test of `self.training` seen in this file keeps the call from running in eval mode",
    )
    message = "functional dropout defaults to `training=True`: it keeps dropping activations after `model.eval()`"
    fix_hint = "pass `training=self.training` (or use an `nn.Dropout` submodule)"
    nodes = (ast.Call,)
    calls = last_names(DROPOUTS)
    triggers = ("dropout",)
    fixable = True
    unsafe_fix = True  # see Fix safety: applied only with --unsafe-fixes

    valid = ["""
import torch.nn.functional as F
from torch import nn
class Block(nn.Module):
    def forward(self, x):
        x = F.dropout(x, p=0.1, training=self.training)
        return F.dropout(x, 0.1, self.training)
def augment(x):
    return F.dropout(x, 0.5)
""", """
import torch
from torch import nn
class Encoder(nn.Module):
    def forward(self, feats):
        if self.training and self.drop_rate > 0:
            feats = torch.nn.functional.dropout(feats, p=self.drop_rate)
        return feats
""", """
from torch import nn
from torch.nn import functional as fn
class ChannelNoise(nn.Module):
    def forward(self, h):
        if not self.training or self.rate == 0:
            return h
        return fn.dropout1d(h, self.rate)
""", """
import torch.nn.functional as F
import torch.nn as nn
class Head(nn.Module):
    def forward(self, z):
        z = F.dropout(z, 0.3) if self.training else z
        if not self.training:
            out = self.proj(z)
        else:
            out = self.proj(F.dropout2d(z, 0.3))
        return out
""", """
import torch.nn.functional as F
from torch import nn
class Mixer(nn.Module):
    @property
    def dropping(self):
        return self.training and self.p > 0
    def _drop(self, t):
        return F.dropout3d(t, self.p)
    def forward(self, vol):
        if self.dropping:
            vol = self._drop(vol)
        return vol
""", """
import torch.nn.functional as F
from torch import nn
class Stack(nn.Module):
    def forward(m, x):
        train_mode = m.training
        def noisy(t):
            return F.dropout(t, p=0.2)
        for layer in m.layers:
            x = layer(x)
            if not train_mode:
                continue
            x = noisy(x)
        return x
""", """
import torch.nn.functional as F
from torch import nn
class Attention(nn.Module):
    def forward(self, weights, values):
        p = self.attn_drop if self.training else 0.0
        weights = F.dropout(weights, p)
        return F.dropout(weights @ values, p=0.0)
""", """
import torch.nn.functional as F
from torch import nn
class Gate(nn.Module):
    def _stochastic(self):
        return self.training is True and not self.deterministic
    def forward(self, x):
        assert self.training, "only used while training"
        return F.dropout(x, 0.1)
    def sample(self, x):
        while self._stochastic():
            x = F.dropout(x, 0.5)
            if x.sum() > 0:
                break
        return self.training and F.dropout(x, 0.1)
""", """
import torch.nn.functional as F
from torch import nn
class SelfNormalizing(nn.Module):
    def forward(self, x):
        # alpha dropouts default to training=False: they drop nothing in either mode
        return F.alpha_dropout(F.selu(x), 0.1) + F.feature_alpha_dropout(x, 0.1)
"""]
    invalid = [Invalid("""
import torch.nn.functional as F
from torch import nn
class Block(nn.Module):
    def forward(self, x):
        h = F.dropout(self.fc(x), p=0.1)
        return F.dropout2d(h, 0.2)
""", fixed="""
import torch.nn.functional as F
from torch import nn
class Block(nn.Module):
    def forward(self, x):
        h = F.dropout(self.fc(x), p=0.1, training=self.training)
        return F.dropout2d(h, 0.2, training=self.training)
""", count=2), Invalid("""
import torch
from torch import nn
class Encoder(nn.Module):
    def forward(self, feats):
        if self.drop_rate > 0 or self.training:
            feats = torch.nn.functional.dropout(feats, p=self.drop_rate)
        return feats
""", fixed="""
import torch
from torch import nn
class Encoder(nn.Module):
    def forward(self, feats):
        if self.drop_rate > 0 or self.training:
            feats = torch.nn.functional.dropout(feats, p=self.drop_rate, training=self.training)
        return feats
"""), Invalid("""
from torch import nn
from torch.nn import functional as fn
class ChannelNoise(nn.Module):
    def forward(self, h):
        if self.training:
            return h
        return fn.dropout1d(h, self.rate)
""", fixed="""
from torch import nn
from torch.nn import functional as fn
class ChannelNoise(nn.Module):
    def forward(self, h):
        if self.training:
            return h
        return fn.dropout1d(h, self.rate, training=self.training)
"""), Invalid("""
import torch.nn.functional as F
import torch.nn as nn
class Head(nn.Module):
    def forward(self, z, other):
        z = z if self.training else F.dropout(z, 0.3)
        if not other.training:
            z = F.dropout2d(z, 0.3)
        return z
""", fixed="""
import torch.nn.functional as F
import torch.nn as nn
class Head(nn.Module):
    def forward(self, z, other):
        z = z if self.training else F.dropout(z, 0.3, training=self.training)
        if not other.training:
            z = F.dropout2d(z, 0.3, training=self.training)
        return z
""", count=2), Invalid("""
import torch.nn.functional as F
from torch import nn
class Mixer(nn.Module):
    @property
    def dropping(self):
        return self.training or self.mc_samples > 0
    def _drop(self, t):
        return F.dropout3d(t, self.p)
    def forward(self, vol):
        if self.dropping:
            vol = self._drop(vol)
        return vol
""", fixed="""
import torch.nn.functional as F
from torch import nn
class Mixer(nn.Module):
    @property
    def dropping(self):
        return self.training or self.mc_samples > 0
    def _drop(self, t):
        return F.dropout3d(t, self.p, training=self.training)
    def forward(self, vol):
        if self.dropping:
            vol = self._drop(vol)
        return vol
"""), Invalid("""
import torch.nn.functional as F
from torch import nn
class Mixer(nn.Module):
    def _drop(self, t):
        return F.dropout(t, self.p)
    def forward(self, vol, extra):
        if self.training:
            vol = self._drop(vol)
        return vol + self._drop(extra)
""", fixed="""
import torch.nn.functional as F
from torch import nn
class Mixer(nn.Module):
    def _drop(self, t):
        return F.dropout(t, self.p, training=self.training)
    def forward(self, vol, extra):
        if self.training:
            vol = self._drop(vol)
        return vol + self._drop(extra)
"""), Invalid("""
import torch.nn.functional as F
from torch import nn
class Stack(nn.Module):
    def forward(m, x, train_mode):
        def noisy(t):
            return F.dropout(t, p=0.2)
        for layer in m.layers:
            x = layer(x)
            if not train_mode:
                continue
            x = noisy(x)
        return x
"""), Invalid("""
import torch.nn.functional as F
from torch import nn
class Attention(nn.Module):
    def forward(self, weights, values):
        p = 0.0 if self.training else self.attn_drop
        if self.causal:
            p = self.attn_drop
        weights = F.dropout(weights, p)
        return F.dropout(weights @ values, p=0.0 if self.training else 0.1)
""", fixed="""
import torch.nn.functional as F
from torch import nn
class Attention(nn.Module):
    def forward(self, weights, values):
        p = 0.0 if self.training else self.attn_drop
        if self.causal:
            p = self.attn_drop
        weights = F.dropout(weights, p, training=self.training)
        return F.dropout(weights @ values, p=0.0 if self.training else 0.1, training=self.training)
""", count=2)]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        assert isinstance(node, ast.Call)
        if ctx.call_name(node) not in DROPOUTS or argument(node, "training", 2) is not None:
            return
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            return
        cls = ctx.enclosing_class(node)
        if cls is None or cls.name not in ctx.module_classes:
            return
        if ctx.only_in_training(node) or _zero_outside_training(argument(node, "p", 1), node, ctx):
            return
        fn = ctx.enclosing_function(node)
        edits = []
        if fn is not None and fn.args.args and fn.args.args[0].arg == "self":
            edits = [ctx.locator.insert_after(node.args[-1] if not node.keywords else node.keywords[-1],
                                              ", training=self.training")]
        yield self.hit(node, edits=edits)


def _zero_outside_training(p: ast.expr | None, call: ast.Call, ctx: FileContext) -> bool:
    """``p`` is 0 whenever the module is not training: a constant 0, ``rate if self.training else 0.0``,
    or a name every reaching definition of which is one of those."""
    if p is None:
        return False  # the default, 0.5
    values = [v for _, v in ctx.bindings(p)] if isinstance(p, ast.Name) else [p]
    return bool(values) and all(v is not None and _zero_unless_training(v, call, ctx) for v in values)


def _zero_unless_training(value: ast.AST, call: ast.Call, ctx: FileContext) -> bool:
    if _is_zero(value):
        return True
    if isinstance(value, ast.IfExp):
        return (_is_zero(value.orelse) and ctx.implies_training(value.test, True, call)) or (
            _is_zero(value.body) and ctx.implies_training(value.test, False, call))
    return False


def _is_zero(value: ast.AST) -> bool:
    return isinstance(value, ast.Constant) and type(value.value) in (int, float) and value.value == 0

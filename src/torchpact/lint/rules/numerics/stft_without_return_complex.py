from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Severity
from torchpact.lint.context import FileContext, keyword
from torchpact.lint.rule import Hit, Invalid, Rule


class StftWithoutReturnComplex(Rule):
    """`torch.stft` is called without `return_complex`, which raises for real input on torch 2.13.

    ## What it does
    Flags `torch.stft(...)` and `x.stft(...)` calls that do not pass `return_complex`.

    ## Why is this bad?
    For a real input — an audio waveform, the usual case — torch 2.13 raises `RuntimeError: stft
    requires the return_complex parameter be given for real inputs`. Code written for torch < 1.8,
    which returned a real `(..., 2)` tensor by default, fails on its first call.

    ## Fix safety
    No autofix: `return_complex=True` returns a complex tensor (`torch.view_as_real(spec)` gives
    the old real layout) and `return_complex=False` is itself deprecated, so the caller must adapt
    the code that reads the spectrum.
    """

    code = "TP323"
    category = Category.NUMERICS
    severity = Severity.WARNING
    requires = (
        "the call is `torch.stft` or a tensor's `.stft()` without `return_complex`",
    )
    message = "`torch.stft` without `return_complex` raises RuntimeError for real inputs on torch 2.13"
    fix_hint = "pass `return_complex=True` and use `torch.view_as_real(spec)` where the old real layout is needed"
    nodes = (ast.Call,)
    calls = frozenset({"stft"})
    triggers = ("stft",)

    valid = ["""
import torch
spec = torch.stft(wave, n_fft=400, hop_length=160, window=win, return_complex=True)
spec2 = wave.stft(400, return_complex=True)
wave2 = torch.istft(spec, n_fft=400)
def f(**kw):
    return torch.stft(wave, **kw)
"""]
    invalid = [Invalid("""
import torch
spec = torch.stft(wave, n_fft=400, hop_length=160, window=torch.hann_window(400))
mag = audio.stft(512, 128).pow(2).sum(-1)
""", count=2)]


    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        assert isinstance(node, ast.Call)
        func = node.func
        qn = ctx.call_name(node)
        if qn != "torch.stft" and not (
                isinstance(func, ast.Attribute) and func.attr == "stft" and qn is None and node.args):
            return
        if keyword(node, "return_complex") is not None or any(k.arg is None for k in node.keywords):
            return
        if any(isinstance(a, ast.Starred) for a in node.args) or len(node.args) >= (10 if qn else 9):
            return
        yield self.hit(node)

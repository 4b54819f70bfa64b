from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Severity
from torchpact.lint.context import FileContext, keyword
from torchpact.lint.rule import Hit, Invalid, Rule
from torchpact.lint.rules._tensors import resolved_tensor


class StftWithoutReturnComplex(Rule):
    """`torch.stft` is called without `return_complex`, which raises for real input on torch 2.13.

    ## What it does
    Flags `torch.stft(...)` and `x.stft(...)` calls that do not pass `return_complex`.

    The condition it needs: the callee is resolved as torch's. `torch.stft` is (through the
    file's imports); `x.stft(...)` is `Tensor.stft` only when `x` is resolved as a tensor (every
    definition reaching it is a torch tensor function's result, a tensor method or operator on one,
    or a parameter annotated `Tensor`). An attribute of `self` or of any other object that happens
    to be named `stft` (`self.stft(wave, lengths)`, `frontend.stft(x)`: a project's STFT module or
    method) is that object's own callable and is not flagged.

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

    valid = [
        """
import torch
spec = torch.stft(wave, n_fft=400, hop_length=160, window=win, return_complex=True)
spec2 = wave.stft(400, return_complex=True)
wave2 = torch.istft(spec, n_fft=400)
def f(**kw):
    return torch.stft(wave, **kw)
""",
        """
import torch
from torch import nn
class Frontend(nn.Module):
    def __init__(self, stft_module):
        super().__init__()
        self.stft = stft_module

    def forward(self, speech, lengths):
        spec, spec_lengths = self.stft(speech, lengths)
        return spec.abs(), spec_lengths
""",
        """
import torch
class Analyzer:
    def stft(self, signal, n_fft):
        return torch.stft(signal, n_fft, window=torch.hann_window(n_fft), return_complex=True)

    def magnitude(self, signal):
        return self.stft(signal, 512).abs()
""",
        """
import torch
def features(extractor, audio):
    return extractor.stft(audio, 256, 64)
""",
        """
import torch
import librosa
spectrum = librosa.stft(samples, n_fft=1024)
""",
        """
import torch
class Block(torch.nn.Module):
    def forward(self, x):
        return self.norm(x) + self.stft_proj.stft(x)
""",
    ]
    invalid = [
        Invalid("""
import torch
spec = torch.stft(wave, n_fft=400, hop_length=160, window=torch.hann_window(400))
audio = torch.randn(16000)
mag = audio.stft(512, 128).pow(2).sum(-1)
""", count=2),
        """
import torch
def magnitude(signal: torch.Tensor, n_fft: int):
    return signal.stft(n_fft, hop_length=n_fft // 4).abs()
""",
        """
from torch import stft
class Analyzer:
    def magnitude(self, signal):
        return stft(signal, 512, window=self.window).abs()
""",
        """
import torch
def features(audio):
    mono = audio.mean(0) if audio.dim() > 1 else audio
    return torch.stft(mono, 256, 64)
""",
        """
import torch
samples = torch.from_numpy(raw).float()
frames = samples.stft(1024)
""",
    ]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        assert isinstance(node, ast.Call)
        func = node.func
        qn = ctx.call_name(node)
        if qn != "torch.stft" and not (
                isinstance(func, ast.Attribute) and func.attr == "stft" and qn is None and node.args
                and resolved_tensor(func.value, ctx)):
            return  # ``self.stft(x)``, ``frontend.stft(x)``: another object's method or module
        if keyword(node, "return_complex") is not None or any(k.arg is None for k in node.keywords):
            return
        if any(isinstance(a, ast.Starred) for a in node.args) or len(node.args) >= (10 if qn else 9):
            return
        yield self.hit(node)

"""TorchFix parity: does torchpact flag every line TorchFix 0.7.0 flags, for the TorchFix rules that
are true on torch 2.13?

Each case is a trigger for one TorchFix rule (TorchFix's wheel ships no test fixtures, so they are
written here, one per rule and one per deprecated symbol of TOR001/TOR101). The script runs TorchFix's
own checker on it, then torchpact with the equivalent rule, and compares the flagged lines.
Prints the parity count (N of M TorchFix rules covered) and, for the rest, why not; and checks that
every symbol of TorchFix's own table of deprecated symbols (TOR001 removed, TOR101 deprecated) is
called by a case, so a new TorchFix release's additions show up as missing.
Usage: python bench/torchfix_parity.py
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field

from torchpact.config import Config
from torchpact.lint.engine import lint_source
from torchpact.lint.source import Source


@dataclass(frozen=True)
class Case:
    """One TorchFix trigger and the torchpact rule that must flag the same line."""

    torchfix: str
    code: str
    torchpact: str
    config: dict = field(default_factory=dict, hash=False)

    @property
    def text(self) -> str:
        return textwrap.dedent(self.code).lstrip("\n")


CASES = [
    # removed functions: call (TOR001) and import (TOR004)
    Case("TOR001", "import torch\nx = torch.solve(b, A)\n", "TP310"),
    Case("TOR001", "import torch\nw, v = torch.symeig(S)\n", "TP310"),
    Case("TOR001", "import torch\nr = torch.matrix_rank(A)\n", "TP310"),
    Case("TOR001", "import torch\nx = torch.lstsq(b, A)\n", "TP310"),
    Case("TOR004", "from torch import symeig\n", "TP310"),
    # deprecated functions: call (TOR101) and import (TOR103)
    Case("TOR101", "import torch\nq, r = torch.qr(A)\n", "TP314"),
    Case("TOR101", "import torch\ny = torch.chain_matmul(a, b, c)\n", "TP316"),
    Case("TOR101", "import torch\nL = torch.cholesky(S)\n", "TP315"),
    Case("TOR101", "import torch\nm = torch.ger(u, v)\n", "TP328"),
    Case("TOR101", "import torch\nx = torch.lu_solve(b, LU, piv)\n", "TP317"),
    Case("TOR101", "import torch\nLU, piv = torch.lu(A)\n", "TP317"),
    Case("TOR101", "import torch\ny = torch.triangular_solve(b, U)\n", "TP317"),
    Case("TOR101", "import torch\nn = torch.norm(x)\n", "TP329"),
    Case("TOR101", "import torch\nr = torch.range(0, 9)\n", "TP313"),
    Case("TOR101", "import torch\nU, S, V = torch.svd(A)\n", "TP330"),
    Case("TOR101", "import torch\nup = torch.nn.UpsamplingNearest2d(scale_factor=2)\n", "TP325"),
    Case("TOR101", "import torch\nup = torch.nn.UpsamplingBilinear2d(scale_factor=2)\n", "TP325"),
    Case("TOR101", "import torch\ntorch.testing.assert_allclose(a, b)\n", "TP327"),
    Case("TOR101", "import torch\nconv = torch.nn.utils.weight_norm(conv)\n", "TP413"),
    Case("TOR101", "import torch\ntorch.utils._pytree._register_pytree_node(P, f, g)\n", "TP711"),
    Case("TOR101", "import torch\nwith torch.backends.cuda.sdp_kernel(enable_math=False):\n    pass\n", "TP921"),
    Case("TOR101", "import functorch\ng = functorch.grad(f)\n", "TP212"),
    Case("TOR101", "import functorch\nv = functorch.vmap(f)\n", "TP212"),
    Case("TOR101", "import functorch\nout, pull = functorch.vjp(f, x)\n", "TP212"),
    Case("TOR101", "import functorch\nout, tangent = functorch.jvp(f, (x,), (t,))\n", "TP212"),
    Case("TOR101", "import functorch\nJ = functorch.jacrev(f)(x)\n", "TP212"),
    Case("TOR101", "import functorch\nJ = functorch.jacfwd(f)(x)\n", "TP212"),
    Case("TOR101", "import functorch\nH = functorch.hessian(f)(x)\n", "TP212"),
    Case("TOR101", "import functorch\ng = functorch.functionalize(f)\n", "TP212"),
    Case("TOR103", "from functorch import vmap, jacrev\n", "TP212"),
    Case("TOR103", "from torch.nn.utils import weight_norm\n", "TP413"),
    # misuse
    Case("TOR002", "import torch\nx = torch.zeros(3)\nx.require_grad = True\n", "TP210"),
    Case("TOR003", "import torch\nfrom torch.utils.checkpoint import checkpoint\ny = checkpoint(f, x)\n", "TP211"),
    # torch.load is safe by default since torch 2.6; TP952 flags it where the project supports older torch
    Case("TOR102", "import torch\nstate = torch.load('model.pt')\n", "TP952", {"min_torch": (2, 4)}),
    Case("TOR104", "import torch\nb = torch.utils.data._utils.collate.default_collate(xs)\n", "TP511"),
    Case("TOR105", "from torch.utils.data._utils.collate import default_collate\n", "TP511"),
    Case("TOR106", "import torch\ny = torch.log(1 + x)\n", "TP319"),
    Case("TOR107", "import torch\ny = torch.exp(x) - 1\n", "TP320"),
    # torchvision
    Case("TOR201", "import torchvision\nm = torchvision.models.resnet50(pretrained=True)\n", "TP410"),
    Case("TOR202", "from torchvision.transforms import v2\nt = v2.ToTensor()\n", "TP512"),
    # performance (off by default in TorchFix; info in torchpact, which also needs a consumer doing
    # training steps: a loader nothing trains on costs no step)
    Case("TOR401", "import torch\nloader = torch.utils.data.DataLoader(ds, batch_size=8)\n"
                   "for x, y in loader:\n    model(x).sum().backward()\n", "TP920"),
]

NOT_COVERED = {
    "TOR203": "style only (`import torchvision.models as models` -> `from torchvision import models`): not a bug",
    "TOR901": "applies to PyTorch's own test suite (`torch.library._scoped_library`), not to user code",
}


def torchfix_lines(text: str, code: str) -> set[int]:
    """Lines TorchFix's own checker flags with ``code``."""
    from torchfix.torchfix import TorchChecker

    checker = TorchChecker(None, text.splitlines(keepends=True))
    return {line for line, _col, message, _type in checker.run() if message.startswith(code)}


def torchpact_lines(text: str, code: str, config: dict) -> set[int]:
    """Lines torchpact flags with ``code``."""
    cfg = Config(select=[code], **config)
    findings, _ = lint_source(Source(path="case.py", text=text), cfg)
    return {f.line for f in findings if f.code == code}


def check(case: Case) -> tuple[set[int], set[int]]:
    """(lines TorchFix flags, lines torchpact flags) for one case."""
    return torchfix_lines(case.text, case.torchfix), torchpact_lines(case.text, case.torchpact, case.config)


def deprecated_symbols() -> dict[str, str]:
    """TorchFix's table of deprecated symbols (the installed release's ``deprecated_symbols.yaml``, read
    as data): symbol -> the rule that flags its calls (TOR001 once removed from torch, else TOR101)."""
    import re
    from importlib.resources import files

    table = files("torchfix").joinpath("deprecated_symbols.yaml").read_text()
    out = {}
    for entry in re.split(r"^- ", table, flags=re.M)[1:]:
        name = re.search(r"^name:\s*(\S+)", entry, re.M)
        removed = re.search(r"^\s*remove_pr:[ \t]*(\S+)", entry, re.M)
        if name:
            out[name.group(1)] = "TOR001" if removed else "TOR101"
    return out


def symbols_without_a_call(cases: list[Case], symbols: dict[str, str]) -> list[str]:
    """Deprecated symbols no case calls under the rule TorchFix gives their calls."""
    return [name for name, rule in symbols.items()
            if not any(case.torchfix == rule and f"{name}(" in case.text for case in cases)]


def all_torchfix_codes() -> list[str]:
    from torchfix.torchfix import GET_ALL_ERROR_CODES

    return list(GET_ALL_ERROR_CODES())


def main() -> int:
    by_rule: dict[str, list[bool]] = {}
    for case in CASES:
        theirs, ours = check(case)
        ok = bool(theirs) and theirs <= ours
        by_rule.setdefault(case.torchfix, []).append(ok)
        mark = "ok  " if ok else "MISS"
        shown = case.text.splitlines()[min(theirs) - 1].strip() if theirs else case.text.strip()
        print(f"{mark} {case.torchfix} -> {case.torchpact}  torchfix lines {sorted(theirs)}  torchpact lines "
              f"{sorted(ours)}  | {shown}")
    codes = all_torchfix_codes()
    covered = [c for c in codes if by_rule.get(c) and all(by_rule[c])]
    print(f"\nTorchFix parity: {len(covered)} of {len(codes)} TorchFix rules covered "
          f"({sum(len(v) for v in by_rule.values())} triggers)")
    for code in codes:
        if code not in covered:
            print(f"  not covered {code}: {NOT_COVERED.get(code, 'a trigger is missed (see MISS above)')}")
    symbols = deprecated_symbols()
    uncalled = symbols_without_a_call(CASES, symbols)
    print(f"deprecated symbols of TOR001/TOR101 called by a case: {len(symbols) - len(uncalled)} of {len(symbols)}"
          + (f"; no call case for {', '.join(uncalled)}" if uncalled else ""))
    return 0 if len(covered) + len(NOT_COVERED) == len(codes) and not uncalled else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""The sizes an exported program takes along each dynamic dim, read from torch's guards.

``ep.range_constraints`` shows only the range of each size symbol (``[2, int_oo]`` for a dim whose
program refuses half the sizes below 17); the guards the exporter's shape environment collected say
the rest (``Ne((((s0 - 1)//16)) + 1, 1)``: after four stride-2 convolutions the width must not be 1).
For each marked dim this evaluates every guard that mentions its symbol over a scan of sizes (the
other symbols at the example's values), finds where the guards flip, and so which sizes the program
refuses, with the guards that refuse them. A guard of the form ``Ne(e, 1)`` / ``Ne(e, 0)`` is
torch.export's 0/1 specialisation: it assumed an intermediate size is neither 0 nor 1.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any, Callable

SCAN = 256  # every size up to here (and up to 4x the example + 2) is evaluated; beyond, the guards' constants


@dataclass
class Bound:
    """Where the guards flip along one dim: ``refused`` next to ``accepted``, because of ``guards``."""

    refused: int
    accepted: int
    guards: list[str] = field(default_factory=list)  # as torch states them, with input names for symbols
    zero_one: bool = False  # a guard is 0/1 specialisation (Ne(e, 1) / Ne(e, 0))
    where: tuple[str | None, int | None] = (None, None)  # the model line that added the first guard


def _python(expr: Any, symbols: dict[str, int]) -> Callable[[dict[str, int]], bool] | None:
    """``expr`` as a Python function of the symbol values; None when it cannot be written in Python."""
    text = str(expr)
    namespace = {"Ne": lambda a, b: a != b, "Eq": lambda a, b: a == b, "Max": max, "Min": min,
                 "Mod": lambda a, b: a % b, "PythonMod": lambda a, b: a % b, "FloorDiv": lambda a, b: a // b,
                 "CeilToInt": math.ceil, "FloorToInt": math.floor, "TruncToInt": int,
                 "IntTrueDiv": lambda a, b: a / b, "CleanDiv": lambda a, b: a // b}
    try:
        code = compile(text, "<guard>", "eval")
    except SyntaxError:
        return None
    unknown = set(code.co_names) - set(namespace) - set(symbols)
    if unknown:
        return None

    def holds(values: dict[str, int]) -> bool:
        return bool(eval(code, {"__builtins__": {}}, {**namespace, **values}))  # noqa: S307 (torch's own guard text)
    return holds


def readable(expr: Any, names: dict[str, str]) -> str:
    """The guard with each size symbol written as the input dim it stands for (``x.shape[3]``)."""
    text = str(expr)
    for symbol, name in sorted(names.items(), key=lambda kv: -len(kv[0])):
        text = re.sub(rf"\b{re.escape(symbol)}\b", name, text)
    return text


def _zero_one(expr: Any) -> bool:
    import sympy

    return isinstance(expr, sympy.Ne) and any(a in (sympy.Integer(0), sympy.Integer(1)) for a in expr.args)


def _probes(example: int, constants: set[int], upper: int | None) -> list[int]:
    sizes = set(range(1, max(SCAN, 4 * example + 2) + 1))
    for c in constants:
        sizes |= {c - 1, c, c + 1}
    sizes |= {2 ** k for k in range(1, 21)} | {2 ** k + 1 for k in range(1, 21)}
    if upper is not None:
        sizes |= {upper, upper + 1}
    return sorted(s for s in sizes if 1 <= s <= 2 ** 20 + 1)


def bounds(symbol: Any, shape_env: Any, range_upper: int | None, names: dict[str, str],
           locations: dict[str, tuple[str | None, int | None]]) -> list[Bound]:
    """Where the guards on ``symbol`` flip between refusing and accepting a size (other symbols at the
    example's values). ``range_upper``: the finite upper end of its range, when there is one;
    ``names``: symbol -> input dim; ``locations``: guard text -> the model line that added it."""
    import sympy

    values = {str(k): int(v) for k, v in _example_values(shape_env).items()}
    example = values.get(str(symbol))
    if example is None:
        return []
    guards = []
    for g in getattr(shape_env, "guards", []):
        expr = g.expr
        if symbol not in expr.free_symbols:
            continue
        fn = _python(expr, values)
        if fn is not None:
            guards.append((expr, fn))
    if range_upper is not None:
        guards.append((sympy.Le(symbol, range_upper), lambda v, u=range_upper, s=str(symbol): v[s] <= u))
    if not guards:
        return []
    constants = {int(a) for expr, _ in guards for a in expr.atoms(sympy.Integer) if 0 < abs(int(a)) < 2 ** 20}
    constants = {abs(c) for c in constants}

    def failing(size: int) -> list[Any]:
        at = {**values, str(symbol): size}
        out = []
        for expr, fn in guards:
            try:
                if not fn(at):
                    out.append(expr)
            except (ArithmeticError, TypeError, ValueError):
                continue
        return out

    probes = _probes(example, constants, range_upper)
    state = {s: not failing(s) for s in probes}
    out: list[Bound] = []
    for lo, hi in pairwise(probes):
        if state[lo] == state[hi]:
            continue
        a, b = lo, hi  # one flip assumed between two probes: bisect to the two sizes next to it
        while b - a > 1:
            mid = (a + b) // 2
            if (not failing(mid)) == state[lo]:
                a = mid
            else:
                b = mid
        refused, accepted = (b, a) if state[lo] else (a, b)
        why = failing(refused)
        first = str(why[0]) if why else ""
        out.append(Bound(refused, accepted, [readable(e, names) for e in why[:3]], any(_zero_one(e) for e in why),
                         locations.get(first, (None, None))))
    return out


def _example_values(shape_env: Any) -> dict[Any, int]:
    for attr in ("backed_var_to_val", "var_to_val"):
        values = getattr(shape_env, attr, None)
        if values:
            return dict(values)
    return {}


def refused_text(found: list[Bound]) -> str:
    """The sizes the guards refuse, in words: ``1..16``, ``33 and up``, ``20..29``."""
    runs: list[str] = []
    start: int | None = None
    first = min(found, key=lambda b: min(b.refused, b.accepted), default=None)
    if first is not None and first.refused < first.accepted and first.refused > 1:
        start = 1  # the scan began refused: sizes from 1 up to the first flip
    for b in sorted(found, key=lambda b: min(b.refused, b.accepted)):
        if b.refused > b.accepted:
            start = b.refused
        else:
            lo = start if start is not None else 1
            runs.append(f"{lo}..{b.refused}" if lo != b.refused else str(lo))
            start = None
    if start is not None:
        runs.append(f"{start} and up")
    return ", ".join(runs)

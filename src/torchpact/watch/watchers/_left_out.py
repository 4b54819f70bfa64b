"""Trainable parameters that no stepped optimizer holds (the optimizer watcher's TP451): the optimizers the script's
frames hold, and the names of the left-out parameters grouped for the report, by module and by module class.
"""

from __future__ import annotations

import sys
from typing import Any

from torchpact.watch.frames import is_user_file

KIND_GROUP = 3            # this many left-out modules of one class are reported together


def optimizer_params() -> set[int]:
    """Ids of the parameters of every optimizer the user's frames hold (stepped or not)."""
    import torch

    ids: set[int] = set()
    seen_scopes: set[int] = set()
    frame = sys._getframe(1)
    while frame is not None:
        if is_user_file(frame.f_code.co_filename):
            scopes = [frame.f_locals, frame.f_globals]
            this = frame.f_locals.get("self")
            if this is not None and isinstance(getattr(this, "__dict__", None), dict):
                scopes.append(this.__dict__)
            for scope in scopes:
                if id(scope) in seen_scopes:
                    continue
                seen_scopes.add(id(scope))
                for value in list(scope.values()):
                    if isinstance(value, torch.optim.Optimizer):
                        ids |= {id(p) for group in value.param_groups for p in group["params"]}
        frame = frame.f_back
    return ids


def group_by_module(affected: list[str], others: list[str]) -> list[tuple[str, list[str]]]:
    """Names grouped under the largest module prefix that holds no name of ``others``."""
    out: list[tuple[str, list[str]]] = []
    covered: set[str] = set()
    for name in sorted(affected):
        if name in covered:
            continue
        parts = name.split(".")
        best: str | None = None
        for i in range(len(parts) - 1, -1, -1):
            prefix = ".".join(parts[:i])
            dotted = prefix + "." if prefix else ""
            if any(o.startswith(dotted) for o in others):
                break
            best = prefix
        if best is None:  # its own module has other trainable parameters
            subject, members = name, [name]
        else:
            dotted = best + "." if best else ""
            subject, members = best, [n for n in affected if n.startswith(dotted)]
        covered.update(members)
        out.append((subject, members))
    return out


def group_by_kind(groups: list[tuple[str, list[str]]], root: Any, names: Any) -> list[tuple[str, list[str], list[str]]]:
    """``groups`` as (subject, parameters, []), except that ``KIND_GROUP`` or more groups that are each a
    whole module of the same class (every BatchNorm of a ResNet) become one (class name, parameters,
    module names)."""
    by_name = {names.module(m): m for m in root.modules()}
    kinds: dict[str, list[tuple[str, list[str]]]] = {}
    for subject, members in groups:
        module = by_name.get(subject) if subject else None
        if module is not None and module is not root:
            kinds.setdefault(type(module).__name__, []).append((subject, members))
    merged = {kind for kind, items in kinds.items() if len(items) >= KIND_GROUP}
    out: list[tuple[str, list[str], list[str]]] = []
    for kind in merged:
        items = kinds[kind]
        out.append((kind, [n for _, members in items for n in members], [subject for subject, _ in items]))
    done = {subject for kind in merged for subject, _ in kinds[kind]}
    out.extend((subject, members, []) for subject, members in groups if subject not in done)
    return out

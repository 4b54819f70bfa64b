"""Common PyTorch advice, checked against the installed torch (``torchpact facts``).

A fact is one claim and the experiment that checks it: a module
``torchpact/facts/catalogue/<area>/<id>.py`` with ``CLAIM``, ``EXPECTED`` (the verdict on the supported
torch), ``REQUIRES`` and a ``run()`` that prints its evidence and returns a verdict. The id and area
are the module's file and folder names; modules are discovered, never listed by hand. Importing the
catalogue does not import torch (experiments import it inside ``run()``), so ``torchpact rule`` can
show a fact's claim on machines without torch.

Running is done by :mod:`torchpact.facts.runner` (one fresh process per fact, with a time limit).

Writing a fact: copy a module of the catalogue. ``CLAIM`` is the advice as people state it, true or
not; ``run()`` imports torch itself, prints its evidence — facts observed, not timings or addresses,
so that the evidence is the same on every run — and returns ``"true"``, ``"false"`` or ``"partly"``
from what it observed, never a constant. ``REQUIRES`` is ``"cpu"`` (default), ``"cuda"``,
``"multi-gpu"`` or ``"distributed-cpu"`` (use :func:`torchpact.facts.ranks.on_ranks`); ``TIMEOUT_S``
raises the default time limit. A rule that rests on the fact names it in its ``facts``. Then
regenerate docs/facts.md: ``python -m torchpact.facts.docs docs/facts.md``.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import signal
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from types import ModuleType

SUPPORTED_TORCH = "2.13"
"""The torch whose behaviour ``EXPECTED`` describes (and docs/facts.md records)."""

VERDICTS = ("true", "false", "partly")
"""What an experiment may return."""

# What a run may report instead of a verdict.
NEEDS_CUDA, NEEDS_GPUS, NEEDS_DISTRIBUTED = "needs CUDA", "needs several GPUs", "needs torch.distributed"
FAILED, TIMED_OUT = "failed", "timed out"
NOT_RUN = (NEEDS_CUDA, NEEDS_GPUS, NEEDS_DISTRIBUTED)

REQUIREMENTS = ("cpu", "cuda", "multi-gpu", "distributed-cpu")
"""``REQUIRES`` values: plain CPU; one CUDA device; two or more; two local gloo processes on CPU."""

DEFAULT_TIMEOUT_S = 60.0

AREAS = ("memory", "autograd", "numerics", "training", "data", "distributed", "export", "compile", "security")
"""The catalogue's folders, in the order facts are shown (the rule categories' order)."""


class CatalogueError(Exception):
    """A malformed fact module: a bug in torchpact, caught by the tests."""


@dataclass(frozen=True)
class Fact:
    """One claim of the catalogue, read from its module without running it."""

    id: str
    area: str
    claim: str
    expected: str
    requires: str
    timeout_s: float
    module: str

    def load(self) -> ModuleType:
        return importlib.import_module(self.module)

    @property
    def path(self) -> Path:
        return Path(inspect.getfile(self.load()))

    def code(self) -> str:
        """The experiment's source: what ``torchpact facts ID`` prints and docs/facts.md shows."""
        return self.path.read_text(encoding="utf-8")


def how_it_ended(exit_code: int | None) -> str:
    """A process's end in words: ``exit code 1``, ``killed by SIGKILL``, or ``still running`` (None)."""
    if exit_code is None:
        return "still running"
    if exit_code < 0:
        name = signal.Signals(-exit_code).name if -exit_code in signal.valid_signals() else f"signal {-exit_code}"
        return f"killed by {name}"
    return f"exit code {exit_code}"


def fact_from_module(name: str) -> Fact:
    """The fact defined by the module ``name`` (``<package>.<area>.<id>``), read without running it."""
    module = importlib.import_module(name)
    area, slug = module.__name__.rsplit(".", 2)[-2:]
    fact_id = slug.replace("_", "-")
    missing = [name for name in ("CLAIM", "EXPECTED", "run") if not hasattr(module, name)]
    if missing:
        raise CatalogueError(f"{module.__name__}: missing {', '.join(missing)}")
    requires = getattr(module, "REQUIRES", "cpu")
    if module.EXPECTED not in VERDICTS:
        raise CatalogueError(f"{fact_id}: EXPECTED must be one of {VERDICTS}, not {module.EXPECTED!r}")
    if requires not in REQUIREMENTS:
        raise CatalogueError(f"{fact_id}: REQUIRES must be one of {REQUIREMENTS}, not {requires!r}")
    return Fact(id=fact_id, area=area, claim=" ".join(module.CLAIM.split()), expected=module.EXPECTED,
                requires=requires, timeout_s=float(getattr(module, "TIMEOUT_S", DEFAULT_TIMEOUT_S)),
                module=module.__name__)


@lru_cache(maxsize=1)
def all_facts() -> tuple[Fact, ...]:
    """Every fact of the catalogue, sorted by area (in ``AREAS`` order) then id."""
    import torchpact.facts.catalogue as package

    found: dict[str, Fact] = {}
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        if info.ispkg or info.name.rsplit(".", 1)[-1].startswith("_"):
            continue
        if info.name.count(".") != package.__name__.count(".") + 2 or info.name.split(".")[-2] not in AREAS:
            raise CatalogueError(f"{info.name}: a fact lives in catalogue/<area>/<id>.py, area one of {AREAS}")
        fact = fact_from_module(info.name)
        if fact.id in found:
            raise CatalogueError(f"fact id {fact.id} is used twice ({found[fact.id].module}, {fact.module})")
        found[fact.id] = fact
    return tuple(sorted(found.values(), key=lambda f: (AREAS.index(f.area), f.id)))


def fact_by_id(fact_id: str) -> Fact | None:
    return next((f for f in all_facts() if f.id == fact_id), None)


def claim_of(fact_id: str) -> str | None:
    """The claim of a fact id, or None when the catalogue has no such fact."""
    fact = fact_by_id(fact_id)
    return fact.claim if fact is not None else None


def rules_by_fact() -> dict[str, list[str]]:
    """Fact id -> codes of the lint rules whose ``facts`` name it (rules import no torch)."""
    from torchpact.lint.registry import all_rules

    out: dict[str, list[str]] = {}
    for rule in all_rules():
        for fact_id in rule.facts:
            out.setdefault(fact_id, []).append(rule.code)
    return out

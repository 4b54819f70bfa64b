"""The catalogue: well-formed, linked to the rules, and every verdict as expected on this torch."""

from __future__ import annotations

import subprocess
import sys
import time

import torch

from torchpact.facts import AREAS, NEEDS_CUDA, NEEDS_GPUS, all_facts, fact_by_id, rules_by_fact
from torchpact.facts.runner import run_facts
from torchpact.lint.registry import all_rules

# Claims of issue #7 with the verdicts established on torch 2.13.
ISSUE_7 = {
    "detach-shares-storage": "true",
    "cpu-of-cpu-tensor-is-same-object": "true",
    "data-write-changes-backward": "true",
    "where-keeps-requires-grad": "true",
    "inplace-method-on-grad-leaf-raises": "true",
    "train-mode-keeps-requires-grad": "true",
    "no-grad-is-thread-local": "true",
    "optimizer-before-ddp-wrap": "true",
    "dtype-conversion-after-ddp-wrap-stops-all-reduce": "true",
    "find-unused-parameters-costs-several-times": "false",
    "jit-script-cannot-loop-over-range-n": "false",
    "onnx-export-of-script-module-works": "false",
    "default-mode-uses-cuda-graphs": "false",
    "batchnorm-to-identity-keeps-outputs": "false",
    "memory-summary-defragments": "false",
    "frame-1080p-fp32-is-24mib": "true",
}


def test_the_catalogue_covers_the_areas_and_the_claims_of_the_issue():
    facts = all_facts()
    assert len(facts) >= 30
    per_area = {area: [f for f in facts if f.area == area] for area in AREAS}
    for area in ("memory", "autograd", "distributed", "export", "compile"):
        assert len(per_area[area]) >= 4, area
    for fact_id, verdict in ISSUE_7.items():
        fact = fact_by_id(fact_id)
        assert fact is not None, fact_id
        assert fact.expected == verdict, fact_id
    assert len({f.claim for f in facts}) == len(facts)


def test_importing_the_catalogue_imports_no_torch():
    code = ("import sys; from torchpact.facts import all_facts; all_facts(); "
            "assert 'torch' not in sys.modules, 'the catalogue imported torch'")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_every_fact_a_rule_names_is_in_the_catalogue():
    known = {f.id for f in all_facts()}
    unknown = {r.code: [f for f in r.facts if f not in known] for r in all_rules()}
    assert {code: ids for code, ids in unknown.items() if ids} == {}
    assert set(rules_by_fact()) <= known


def test_every_cpu_verdict_is_the_expected_one_on_this_torch():
    # The verdicts are the subject here, not the experiments' speed: a fact's own limit (60-90 s) can be
    # passed on a machine at load 20, so the test gives every experiment the same generous one.
    start = time.monotonic()
    outcomes = run_facts(all_facts(), timeout_s=600)
    seconds = time.monotonic() - start
    wrong = []
    for o in outcomes:
        f = o.fact
        if f.requires == "cuda" and not torch.cuda.is_available():
            expected = NEEDS_CUDA
        elif f.requires == "multi-gpu" and torch.cuda.device_count() < 2:
            expected = NEEDS_GPUS
        else:
            expected = f.expected
            if not o.evidence.strip():
                wrong.append(f"{f.id}: no evidence printed")
        if o.verdict != expected:
            wrong.append(f"{f.id}: {o.verdict}, expected {expected}\n{o.evidence}")
    assert not wrong, "\n".join(wrong)
    print(f"{len(outcomes)} facts in {seconds:.1f}s")

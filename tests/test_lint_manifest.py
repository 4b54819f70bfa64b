"""The rules' manifest (lint/manifest.py) says of every rule exactly what the rule class declares, and
lint imports a rule's module only when a file gives the rule something to check."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from torchpact.lint import write_manifest
from torchpact.lint.registry import FILTER_DEFAULTS, all_rules, rule_specs


def test_the_manifest_is_up_to_date():
    with open(write_manifest.path(), encoding="utf-8") as fh:
        written = fh.read()
    assert written == write_manifest.render(), (
        "lint/manifest.py is stale: run `python -m torchpact.lint.write_manifest` (or `make docs`)")


def test_each_spec_has_its_rule_s_attributes_and_makes_that_rule():
    classes = all_rules()
    specs = rule_specs()
    assert [s.code for s in specs] == [r.code for r in classes]
    for spec, cls in zip(specs, classes, strict=True):
        assert spec.rule_class() is cls
        assert type(spec()) is cls
        assert (spec.category, spec.nodes) == (cls.category, cls.nodes)
        for name in FILTER_DEFAULTS:
            assert getattr(spec, name) == getattr(cls, name), (cls.code, name)


def _imported_rules(tmp_path, text: str, *args: str) -> set[str]:
    """The rule modules a `torchpact lint` of one file imports, in a fresh interpreter."""
    (tmp_path / "one.py").write_text(textwrap.dedent(text))
    script = textwrap.dedent(f"""\
        import sys
        from torchpact.cli import main
        main(["lint", "--no-cache", "one.py", *{list(args)!r}])
        print(sorted(m.rpartition(".")[2] for m in sys.modules
                     if m.startswith("torchpact.lint.rules.") and m.count(".") == 4))
        """)
    out = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, check=True)
    return set(eval(out.stdout.strip().splitlines()[-1]))


def test_a_file_without_torch_imports_no_rule(tmp_path):
    assert _imported_rules(tmp_path, "import numpy as np\nprint(np.load('x.npy'))\n") == set()


def test_one_file_imports_only_the_rules_it_gives_nodes_to(tmp_path):
    imported = _imported_rules(tmp_path, """\
        import torch
        state = torch.load("model.pt", weights_only=False)
        """)
    assert "load_with_full_pickle" in imported  # TP951: the file's finding
    assert "deprecated_torchscript" not in imported  # nothing of torch.jit here
    assert len(imported) < len(all_rules()) // 2


def test_a_rule_named_by_select_alone_is_imported_alone(tmp_path):
    imported = _imported_rules(tmp_path, """\
        import torch
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            total += loss
            loss.backward()
        """, "--select", "TP101")
    assert imported == {"graph_accumulated_across_iterations"}

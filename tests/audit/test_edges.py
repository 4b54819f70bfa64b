"""export-check at the edges of the input distribution against ground truth computed with plain torch
(``ground_truth.py``) at sizes chosen from each model's documented range, never from torchpact's
variants. The models (``edge_targets.py``) carry the three shapes export-check used to miss: a trace
wrong only past a size threshold above twice the example, an exported program whose guards refuse
small images that eager takes, and a time-major GRU whose axes position does not name.
"""

from __future__ import annotations

from functools import cache

import pytest

pytest.importorskip("onnxruntime")

from tests.audit import edge_targets as E  # noqa: E402
from tests.audit import ground_truth as G  # noqa: E402
from tests.audit.util import export_report, marker_line  # noqa: E402
from torchpact.findings import Severity  # noqa: E402

EDGES = E.__file__
HEAVY = {"four_strides", "time_major_gru", "scaled_positions"}


@cache
def report(func):
    return export_report(func, paths=G.PATHS, strict_too=False, file="edge_targets.py")


@cache
def truth(func, path):
    return G.truth(func, path)


def _findings(r, code, subject_dim=None):
    return [f for f in r.findings if f.code == code and (subject_dim is None or f"({subject_dim}," in f.message)]


@pytest.mark.parametrize("func", [pytest.param(f, marks=pytest.mark.heavy) if f in HEAVY else f for f in E.RANGES])
def test_every_path_verdict_agrees_with_plain_torch_at_sizes_of_its_own(func):
    r = report(func)
    for path in G.PATHS:
        t = truth(func, path)
        got = r.paths[path].status
        expected = {"ok": "ok", "broken": "mismatch", "failed": "failed"}[t["verdict"]]
        assert got == expected, (path, t, r.paths[path].reason)
        if t["verdict"] == "broken":  # the user is told, at warning or above
            assert [f for f in r.findings if f.severity >= Severity.WARNING], path


@pytest.mark.heavy
def test_trace_wrong_past_twice_the_example_is_found_at_the_line_torch_warned_at():
    t = truth("scaled_positions", "trace")
    assert t["verdict"] == "broken" and {"seq=95", "seq=96"} <= set(t["sizes"])  # past max_cached=40 only
    assert all(v == "ok" for k, v in t["sizes"].items() if int(k.split("=")[1]) <= 40)
    r = report("scaled_positions")
    f = _findings(r, "TP751")
    assert len(f) == 1 and f[0].severity is Severity.ERROR
    assert f[0].path.endswith("edge_targets.py") and f[0].line == marker_line("CACHE_LINE", path=_edges())
    assert "seq=41" in f[0].message and "seq_len > self.max_cached" in f[0].message  # chosen past the branch


@pytest.mark.heavy
def test_guards_that_refuse_small_images_are_read_for_height_and_width():
    t = truth("four_strides", "export")
    assert t["verdict"] == "broken" and {"height=1", "height=2", "width=1", "width=2"} <= set(t["sizes"])
    r = report("four_strides")
    assert r.dims.smallest == {"batch": 1, "height": 1, "width": 1}  # eager takes a 1x1 image
    for dim in ("height", "width"):
        f = _findings(r, "TP752", dim)
        assert len(f) == 1 and "sizes 1..16:" in f[0].message and "range_constraints" in f[0].message
    statuses = {v.name: v.status for v in r.paths["export"].variants}
    assert statuses["height=16"] == "error" and statuses["height=17"] == "ok"  # both sides of the bound
    assert any("0/1 specialisation" in f.message for f in _findings(r, "TP752"))


@pytest.mark.heavy
def test_time_major_gru_axes_are_named_by_the_module_not_by_position():
    batch = G.batch_axes("time_major_gru")
    assert batch == [1]  # ground truth: entries along dim 1 are independent; dim 0 is a recurrence
    r = report("time_major_gru")
    assert r.dims.of_leaf(0) == {0: "time", 1: "batch"}
    assert "batch_first=False" in r.dims.layout["time"]
    f = _findings(r, "TP752")
    assert len(f) == 1 and "x.shape[0] (time, marked Dim.AUTO)" in f[0].message
    assert "fixes the time length an nn.LSTM / nn.GRU / nn.RNN runs over" in f[0].fix


def test_a_harmless_size_branch_is_an_info_finding_with_both_sides_run():
    assert truth("harmless_branch", "trace")["verdict"] == "ok"
    r = report("harmless_branch")
    f = _findings(r, "TP751")
    assert len(f) == 1 and f[0].severity is Severity.INFO and f[0].line == marker_line("HARMLESS_LINE", path=_edges())
    assert "(batch=64, batch=65)" in f[0].message and "matched eager there" in f[0].message
    # the exported program's guard on the same line refuses 65 and up, which eager takes
    assert truth("harmless_branch", "export")["verdict"] == "broken"
    assert "refuses sizes 65 and up" in _findings(r, "TP752")[0].message


def test_smallest_size_is_searched_not_assumed():
    r = report("wide_kernel")
    assert r.dims.smallest["length"] == E.RANGES["wide_kernel"]["x"][2][1] == 5
    assert {"length=1", "length=2"} <= set(r.invalid_variants)
    f = _findings(r, "TP752")
    assert len(f) == 1 and "refuses length=5 where eager accepts it" in f[0].message
    assert "0/1 specialisation" in f[0].message and "backed_size_oblivious=True" in f[0].fix


def _edges():
    from pathlib import Path

    return Path(EDGES)

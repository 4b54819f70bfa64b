"""TP752: what torch.export did to a dim marked ``Dim.AUTO`` that eager takes at other sizes: fixed
it to the example's size, or bounded it (guards that refuse sizes eager accepts), with what the ONNX
model built on the same program does at those sizes."""

from __future__ import annotations

from typing import Any

from torchpact.audit import _common as C
from torchpact.audit.export.checks import EXPORT_SPECIALISED
from torchpact.audit.export.results import FAILED, OK, PathResult, VariantResult
from torchpact.findings import Finding, Severity

def _rnn_fix() -> str:
    """The fix for a time length torch.export fixed through a recurrent module, on the torch this check ran on."""
    import torch

    return (f"torch.export (on torch {torch.__version__}, where this check saw it) fixes the time length an "
            "nn.LSTM / nn.GRU / nn.RNN runs over, whatever the dynamic_shapes say: pad sequences to one length, or "
            "export one program per length you serve")
ZERO_ONE = "pytorch/pytorch#146046, #157621"


def _along(results: list[VariantResult], name: str) -> list[VariantResult]:
    return [v for v in results if v.name.startswith(name + "=")]


def _onnx_text(onnx: PathResult | None, name: str, refused: list[str]) -> tuple[str, bool]:
    """What the ONNX model does at the sizes along ``name``, and whether it is silently wrong there."""
    if onnx is None:
        return "", False
    broke = _along(onnx.broken(), name)
    rejected = [v.name for v in broke if v.status == "error"]
    wrong = [v for v in broke if v.status != "error"]
    text = f"; the ONNX model rejects {', '.join(rejected)}" if rejected else ""
    ok = [v.name for v in (onnx.variants if onnx.status != FAILED else []) if v.name in refused and v.status == OK]
    if ok:
        text += f"; the ONNX model run in onnxruntime accepts {', '.join(ok)} and matches eager"
    if wrong:
        errs = [v.max_abs_err for v in wrong if v.max_abs_err is not None]
        text += (f"; the ONNX model accepts {', '.join(v.name for v in wrong)} but returns wrong results ("
                 + (f"max abs err {max(errs):.3g})" if errs else f"{wrong[0].problem})"))
    return text, bool(wrong)


def export_findings(export: PathResult, onnx: PathResult | None, rnn: bool = False) -> list[Finding]:
    """TP752 per dimension the exported program fixed or bounded; ``rnn``: the model runs a recurrent module."""
    out = []
    strict_ok = export.detail.get("strict", {}).get("status") == OK
    for item in export.detail.get("specialised", []):
        src = C.source_line(item.get("path"), item.get("line"))
        broke = [v.name for v in _along(export.broken(), item["name"])]
        onnx_text, wrong = _onnx_text(onnx, item["name"], broke)
        zero_one = (f" (torch.export's 0/1 specialisation: an example size of {item['size']} is never kept "
                    f"dynamic, {ZERO_ONE})") if item["size"] in (0, 1) else ""
        message = (f"torch.export silently fixed {item['input']}.shape[{item['dim']}] ({item['name']}, marked "
                   f"Dim.AUTO) to the example's {item['size']}" + zero_one
                   + (f" because of this line (`{src}`)" if src else "")
                   + (f"; the exported program rejects {', '.join(broke)}" if broke else "")
                   + onnx_text
                   + ("; torch.export.export(..., strict=True) kept it dynamic" if strict_ok else ""))
        fix = ("give an example with a size of 2 or more along this dim" if zero_one else
               _rnn_fix() if rnn and item["name"] in ("time", "seq", "length") else
               "remove the size-specific code, or mark the dimension Dim.STATIC if one size is intended")
        out.append(C.finding(EXPORT_SPECIALISED, message, severity=Severity.ERROR if wrong else None,
                             path=item.get("path"), line=item.get("line"),
                             subject=f"{item['input']}.shape[{item['dim']}]", fix=fix))
    for item in export.detail.get("bounded", []):
        finding = _bounded_finding(item, export, onnx)
        if finding is not None:
            out.append(finding)
    return out


def _bounded_finding(item: dict[str, Any], export: PathResult, onnx: PathResult | None) -> Finding | None:
    """TP752 for a dim whose guards refuse sizes eager accepts; None when no such size was run (the
    bound is then the model's own: eager refuses past it too)."""
    refused = [v.name for v in _along(export.broken(), item["name"]) if v.status == "error"]
    if not refused:
        return None
    export.explained.update(refused)
    zero_one = [b for b in item["bounds"] if b["zero_one"]]
    guards = list(dict.fromkeys(g for b in item["bounds"] for g in b["guards"]))
    src = C.source_line(item.get("path"), item.get("line"))
    onnx_text, wrong = _onnx_text(onnx, item["name"], refused)
    oblivious = export.detail.get("size_oblivious") or {}
    message = (f"torch.export's guard{'s' * (len(guards) != 1)} on {item['input']}.shape[{item['dim']}] "
               f"({item['name']}, marked Dim.AUTO) refuse{'s' * (len(guards) == 1)} sizes {item['refused']}: "
               + ", ".join(f"`{g}`" for g in guards[:3])
               + (f" (added at this line: `{src}`)" if src else "")
               + ("" if item.get("range_shows_it") else
                  f", which range_constraints ({item.get('range_constraints')}) does not show")
               + f": the exported program refuses {', '.join(refused)} where eager accepts "
               + ("it" if len(refused) == 1 else "them")
               + (f". This is torch.export's 0/1 specialisation: it assumed a size the model computes from "
                  f"this dim is never 1 ({ZERO_ONE})" if zero_one else "")
               + onnx_text)
    if zero_one and oblivious.get("status") == OK:
        import torch

        fix = ("export under torch.fx.experimental._config.patch(backed_size_oblivious=True) (experimental on "
               f"torch {torch.__version__}): torchpact exported this model so and the program took "
               f"{', '.join(oblivious['sizes'])} and matched eager there")
    elif zero_one and oblivious:
        fix = ("serve only sizes the program takes (pad or bucket the inputs), or export a second program from an "
               f"example inside the refused sizes; exporting under backed_size_oblivious=True did not help here "
               f"({oblivious.get('error') or 'it differs from eager at ' + str(oblivious.get('at'))})")
    elif zero_one:
        fix = ("export under torch.fx.experimental._config.patch(backed_size_oblivious=True) (experimental), or "
               "pad inputs past the refused sizes")
    else:
        fix = ("make the size-dependent branch a tensor op or torch.cond, or export one program per side of the "
               "bound and pick it by size")
    return C.finding(EXPORT_SPECIALISED, message, severity=Severity.ERROR if wrong else None, path=item.get("path"),
                     line=item.get("line"), subject=f"{item['input']}.shape[{item['dim']}]", fix=fix)

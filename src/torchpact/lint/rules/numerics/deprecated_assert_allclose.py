from __future__ import annotations

from torchpact.findings import Category, Severity
from torchpact.lint.rules._api import ApiUse


class DeprecatedAssertAllclose(ApiUse):
    """`torch.testing.assert_allclose` is used instead of `torch.testing.assert_close`.

    ## What it does
    Flags uses and imports of `torch.testing.assert_allclose` (TorchFix TOR101).

    ## Why is this bad?
    On torch 2.13 it warns `torch.testing.assert_allclose() is deprecated since 1.12 and will be
    removed in a future release. Please use torch.testing.assert_close() instead.`

    ## Fix safety
    No autofix: `assert_close` also checks that dtype, device and layout match and uses
    dtype-dependent default tolerances, so a test that passed may start failing (for a reason
    worth knowing). Pass `check_dtype=False` where mixing dtypes is intended.
    """

    code = "TP327"
    category = Category.NUMERICS
    severity = Severity.WARNING
    message = "`torch.testing.assert_allclose` is deprecated since torch 1.12 and warns on torch 2.13"
    fix_hint = ("use `torch.testing.assert_close(actual, expected)` "
                "(add `check_dtype=False` if dtypes differ on purpose)")
    triggers = ("assert_allclose",)
    names = {"torch.testing.assert_allclose": None}

    valid = ["""
import torch
torch.testing.assert_close(out, expected)
np.testing.assert_allclose(a, b)
"""]
    invalid = ["""
import torch
torch.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-6)
"""]

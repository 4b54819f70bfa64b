from __future__ import annotations

from torchpact.findings import Category, Severity
from torchpact.lint.rule import Invalid
from torchpact.lint.rules._api import ApiUse

RENAMED = {f"functorch.{name}": f"torch.func.{name}" for name in (
    "vmap", "grad", "grad_and_value", "vjp", "jvp", "jacrev", "jacfwd", "hessian", "functionalize")}
REPLACED = {
    "functorch.make_functional": "torch.func.functional_call(model, params, args)",
    "functorch.make_functional_with_buffers": "torch.func.functional_call(model, (params, buffers), args)",
    "functorch.combine_state_for_ensemble": "torch.func.stack_module_state(models)",
}


class DeprecatedFunctorchApi(ApiUse):
    """A `functorch.*` transform is used instead of its `torch.func` equivalent.

    ## What it does
    Flags uses and imports of `functorch.vmap`, `grad`, `grad_and_value`, `vjp`, `jvp`, `jacrev`,
    `jacfwd`, `hessian`, `functionalize`, `make_functional(_with_buffers)` and
    `combine_state_for_ensemble` (TorchFix TOR101 / TOR103, with its autofix).

    ## Why is this bad?
    functorch was merged into torch as `torch.func`. On torch 2.13 each `functorch.*` call warns
    `FutureWarning: We've integrated functorch into PyTorch. As the final step of the
    integration, functorch.vmap is deprecated as of PyTorch 2.0 and will be deleted in a future
    version of PyTorch >= 2.3.`

    ## Fix safety
    `from functorch import vmap, grad` becomes `from torch.func import vmap, grad`: the
    deprecated functions only warn and call those (the proof compares results).
    `make_functional` and `combine_state_for_ensemble` have no drop-in replacement
    (`torch.func.functional_call` / `stack_module_state` take the parameters explicitly) and are
    reported without a fix, as are uses through `import functorch`.
    """

    code = "TP212"
    category = Category.AUTOGRAD
    severity = Severity.WARNING
    message = "`functorch` is deprecated since torch 2.0: it warns on torch 2.13 and will be deleted"
    fix_hint = "use the same function from `torch.func`"
    triggers = ("functorch",)
    needs_torch_import = False
    fixable = True
    names = {**RENAMED, **dict.fromkeys(REPLACED)}

    valid = ["""
from torch.func import vmap, grad, functional_call
import functorch.experimental.control_flow
per_sample = vmap(grad(loss_fn), in_dims=(None, 0, 0))
"""]
    invalid = [
        Invalid("""
from functorch import vmap, grad as g
per_sample = vmap(g(loss_fn), in_dims=(None, 0, 0))
""", fixed="""
from torch.func import vmap, grad as g
per_sample = vmap(g(loss_fn), in_dims=(None, 0, 0))
""", count=2),
        Invalid("""
import functorch
fmodel, params = functorch.make_functional(model)
jac = functorch.jacrev(f)(x)
""", count=2),
    ]

    def describe(self, qn: str) -> str | None:
        return f"`{qn}` is deprecated since torch 2.0: it warns on torch 2.13 and will be deleted"

    def hint(self, qn: str) -> str | None:
        return f"use `{RENAMED[qn]}`" if qn in RENAMED else f"use `{REPLACED[qn]}`"

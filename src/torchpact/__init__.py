"""torchpact: catches the bugs PyTorch does not tell you about.

Public facade: :func:`lint_paths`, :func:`watch`, :func:`export_check`, :class:`Finding`, :class:`Severity`,
:class:`Category`.
"""

from __future__ import annotations

from torchpact.findings import Category, Finding, Severity

__version__ = "0.1.0"


def lint_paths(paths=None, config=None, **kwargs):
    """Lint files and folders; see :func:`torchpact.lint.lint_paths`."""
    from torchpact.lint import lint_paths as _lint_paths

    return _lint_paths(paths, config, **kwargs)


def export_check(spec, **kwargs):
    """export-check of ``"FILE.py:FUNC"`` / ``"package.module:FUNC"``; see :mod:`torchpact.audit.export`."""
    from torchpact.audit.export import export_check as _export_check
    from torchpact.audit.target import load_target

    return _export_check(load_target(spec), **kwargs)


def __getattr__(name):
    # ``torchpact.watch(...)``: the watch package is callable (see torchpact/watch/__init__.py);
    # importing it lazily keeps ``import torchpact`` free of torch.
    if name == "watch":
        import torchpact.watch as watch_package

        return watch_package
    raise AttributeError(name)


__all__ = ["Category", "Finding", "Severity", "export_check", "lint_paths", "watch", "__version__"]

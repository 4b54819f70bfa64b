"""torchpact: catches the bugs PyTorch does not tell you about.

Public facade: :func:`lint_paths`, :func:`watch`, :class:`Finding`, :class:`Severity`, :class:`Category`.
"""

from __future__ import annotations

from torchpact.findings import Category, Finding, Severity

__version__ = "0.1.0"


def lint_paths(paths=None, config=None, **kwargs):
    """Lint files and folders; see :func:`torchpact.lint.lint_paths`."""
    from torchpact.lint import lint_paths as _lint_paths

    return _lint_paths(paths, config, **kwargs)


def __getattr__(name):
    # ``torchpact.watch(...)``: the watch package is callable (see torchpact/watch/__init__.py);
    # importing it lazily keeps ``import torchpact`` free of torch.
    if name == "watch":
        import torchpact.watch as watch_package

        return watch_package
    raise AttributeError(name)


__all__ = ["Category", "Finding", "Severity", "lint_paths", "watch", "__version__"]

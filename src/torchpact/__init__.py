"""torchpact: catches the bugs PyTorch does not tell you about.

Public facade: :func:`lint_paths`, :class:`Finding`, :class:`Severity`, :class:`Category`.
"""

from __future__ import annotations

from torchpact.findings import Category, Finding, Severity

__version__ = "0.1.0"


def lint_paths(paths=None, config=None, **kwargs):
    """Lint files and folders; see :func:`torchpact.lint.lint_paths`."""
    from torchpact.lint import lint_paths as _lint_paths

    return _lint_paths(paths, config, **kwargs)


__all__ = ["Category", "Finding", "Severity", "lint_paths", "__version__"]

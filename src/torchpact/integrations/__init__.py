"""Where users already are: callbacks that attach torchpact's watchers to a framework's training loop.

- :mod:`torchpact.integrations.lightning` — ``TorchpactCallback`` for PyTorch Lightning's ``Trainer``;
- :mod:`torchpact.integrations.transformers` — ``TorchpactCallback`` for Hugging Face's ``Trainer``.

Each imports its framework; this package imports neither.
"""

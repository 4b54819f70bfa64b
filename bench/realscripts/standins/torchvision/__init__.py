"""Stand-in for torchvision: synthetic datasets, the transforms pytorch/examples uses, no image files.

The PyPI torchvision wheel does not load against the CPU build of torch 2.13 ("operator
torchvision::nms does not exist"), and the bench runs offline: the upstream scripts import this
package instead (it comes first on their PYTHONPATH).
"""

from . import datasets, transforms, utils  # noqa: F401

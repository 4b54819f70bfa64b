"""The parts of the ``nonfinite`` watcher (``watchers/nonfinite.py``, which only routes the callbacks).

- ``checks``: TP351 and TP352, their user documentation.
- ``values``: 0-d sums without a host sync, read together.
- ``recorder``: the tensors entering and leaving each module call of a recorded forward.
- ``forward``: the first module whose output turned NaN/+inf.
- ``backward``: the hooked activation gradients, and the first module whose backward turned them bad.
- ``opsearch``: the op: the culprit re-run under a dispatch mode, or the risky calls in its source.
- ``stepcheck``: the cheap check of every step's gradients.
- ``report``: findings in words.
"""

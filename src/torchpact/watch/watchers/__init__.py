"""Runtime watchers, one per file. Discovered by ``torchpact.watch.watcher_classes``.

Every ``torchpact run`` imports all of them before the script starts, so their records are plain
classes (or ``NamedTuple`` when immutable), not ``@dataclass``: a dataclass costs ~0.7 ms at import
(it compiles its generated methods with ``exec``), which for the 14 records here was a third of the
watchers' import time.
"""

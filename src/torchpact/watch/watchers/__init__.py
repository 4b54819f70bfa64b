"""Runtime watchers, one per file. Discovered by ``torchpact.watch.watcher_classes``.

Every ``torchpact run`` imports all of them (but ``OFF_BY_DEFAULT``) before the script starts, so their records are
plain classes (or ``NamedTuple`` when immutable), not ``@dataclass``: a dataclass costs ~0.7 ms at import
(it compiles its generated methods with ``exec``), which for the 14 records here was a third of the
watchers' import time.
"""

# Modules whose watchers are off by default (run only when named, as ``--profile`` does): a default run
# does not import them (step_profile and its profiler parsing were 1.5 ms of every run's start-up).
OFF_BY_DEFAULT = frozenset({"step_profile"})

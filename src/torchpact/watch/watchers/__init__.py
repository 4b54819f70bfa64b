"""Runtime watchers, one per file. Discovered by ``torchpact.watch.watcher_classes``."""

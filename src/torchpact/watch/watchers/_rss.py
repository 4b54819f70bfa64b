"""The resident set size of this process, for the watchers that follow host memory."""

from __future__ import annotations

import os


class Rss:
    """Resident set size of this process, read with one ``pread`` of ``/proc/self/statm`` kept open: opening
    the file at each read costs a tiny model's sampled step about 50 µs (measured in place, torch 2.13 CPU)."""

    def __init__(self) -> None:
        self._fd: int | None = None
        self._pid = -1
        self._page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096

    def __call__(self) -> int | None:
        try:
            if self._fd is None or self._pid != os.getpid():
                self._fd = os.open("/proc/self/statm", os.O_RDONLY)
                self._pid = os.getpid()
            return int(os.pread(self._fd, 128, 0).split()[1]) * self._page
        except (OSError, ValueError, IndexError):
            return None

    def close(self) -> None:
        if self._fd is not None and self._pid == os.getpid():
            try:
                os.close(self._fd)
            except OSError:
                pass
        self._fd = None

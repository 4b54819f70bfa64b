"""The host-memory reading behind TP151: file-backed pages (which the kernel evicts and re-reads under
memory pressure) move the total resident size but not the anonymous figure the leak check follows."""

import mmap
import sys

import pytest

from torchpact.watch.watchers._rss import Rss

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/statm is Linux's")

MIB = 1 << 20


def test_file_pages_move_total_rss_but_not_anonymous(tmp_path):
    path = tmp_path / "blob"
    path.write_bytes(b"\1" * (32 * MIB))
    total, anonymous = Rss(), Rss(anonymous=True)
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as view:
        t0, a0 = total(), anonymous()
        assert sum(view[i] for i in range(0, len(view), mmap.PAGESIZE)) == len(view) // mmap.PAGESIZE
        t1, a1 = total(), anonymous()
    assert t1 - t0 >= 24 * MIB
    assert abs(a1 - a0) < 8 * MIB


def test_anonymous_memory_counts_in_both():
    total, anonymous = Rss(), Rss(anonymous=True)
    # a fresh private anonymous mapping, as malloc makes (a shared one counts as shmem): memory freed by earlier
    # tests and kept by malloc would already be resident
    with mmap.mmap(-1, 32 * MIB, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS) as block:
        t0, a0 = total(), anonymous()
        for offset in range(0, len(block), mmap.PAGESIZE):
            block[offset] = 1
        t1, a1 = total(), anonymous()
    assert t1 - t0 >= 24 * MIB and a1 - a0 >= 24 * MIB

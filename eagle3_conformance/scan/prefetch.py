"""Read-ahead of the shard files into the page cache while the scan works on the current one."""

from __future__ import annotations

import os
from pathlib import Path

PREFETCH = 2
"""How many shard files the prefetch thread may read ahead of the scan."""

class Prefetcher:
    """A daemon thread that asks the kernel to read upcoming shard files into the page cache
    before the memory-mapped pass faults on them, staying at most ``ahead`` files ahead of the
    consumer.

    On Linux it calls ``posix_fadvise(POSIX_FADV_WILLNEED)`` on each file: the kernel starts
    asynchronous read-ahead of the pages not yet cached and skips the cached ones, so a warm
    cache costs nothing (reading the file with ``readinto``, as before, copied every byte once
    more: 2.5x slower warm on 2 cores, no faster cold; benchmarks/bench_check_data.py). Where
    ``posix_fadvise`` is missing (macOS) it reads the file in large ``readinto`` calls instead."""

    def __init__(self, paths: list[Path], ahead: int = PREFETCH, chunk: int = 8 << 20):
        import threading

        self.paths = paths
        self.ahead = ahead
        self.chunk = chunk
        self.current = 0
        self.cv = threading.Condition()
        self.stop = False
        self.thread = threading.Thread(target=self._run, name="conformance-prefetch", daemon=True)
        if ahead > 0 and paths:
            self.thread.start()

    def _run(self) -> None:
        advise = hasattr(os, "posix_fadvise")
        view = memoryview(bytearray(0 if advise else self.chunk))  # read into: without fadvise only
        for j, p in enumerate(self.paths):
            with self.cv:
                while not self.stop and j > self.current + self.ahead:
                    self.cv.wait()
                if self.stop:
                    return
                if j < self.current:
                    continue  # the consumer is already past it
            try:
                if advise:
                    fd = os.open(p, os.O_RDONLY)
                    try:
                        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
                    finally:
                        os.close(fd)
                    continue
                with open(p, "rb", buffering=0) as f:
                    while f.readinto(view):
                        if self.stop:
                            return
            except OSError:
                continue  # the scan reports unreadable files itself

    def advance(self, i: int) -> None:
        """The consumer now works on file ``i``."""
        with self.cv:
            self.current = i
            self.cv.notify()

    def close(self) -> None:
        with self.cv:
            self.stop = True
            self.cv.notify()

"""A dataset's files in or out of the page cache, for the cold runs of bench_check_data.py: evicted one file
at a time (``posix_fadvise DONTNEED``, leaving a shared machine's other cached files alone) or the whole cache
dropped (root), and the share still resident read back with ``mincore``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional


def drop_caches() -> bool:
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def dataset_files(ds: dict) -> list[Path]:
    return sorted(p for p in Path(ds["dir"]).rglob("*") if p.is_file())


def evict(ds: dict) -> bool:
    """The dataset's own files out of the page cache (``fdatasync`` then ``POSIX_FADV_DONTNEED`` per
    file): a cold read of them, leaving the rest of a shared machine's cache alone."""
    if not hasattr(os, "posix_fadvise"):
        return False
    for p in dataset_files(ds):
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    return True


def resident_share(ds: dict) -> Optional[float]:
    """The share of the dataset's pages in the page cache (``mincore`` of each file mapped), None
    where it cannot be read."""
    import ctypes
    import mmap

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                              ctypes.c_long]
        libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    except (OSError, AttributeError):
        return None
    total = resident = 0
    for p in dataset_files(ds):
        size = p.stat().st_size
        if not size:
            continue
        pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
        fd = os.open(p, os.O_RDONLY)
        try:
            addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
            if addr in (None, ctypes.c_void_p(-1).value):
                return None
            vec = (ctypes.c_ubyte * pages)()
            ok = libc.mincore(addr, size, vec) == 0
            libc.munmap(addr, size)
            if not ok:
                return None
        finally:
            os.close(fd)
        total += pages
        resident += pages - bytes(vec).count(0)
    return resident / total if total else None


def make_cold(how: str, ds: dict) -> bool:
    return evict(ds) if how == "fadvise" else drop_caches() if how == "drop_caches" else False

"""The check-data progress bar (samples/s, GB/s on stderr) and byte counts in words: console
matters, so they live with the command line, not in the library."""

from __future__ import annotations

import time
from typing import Optional


def human_bytes(n: float) -> str:
    """``n`` bytes in decimal human units: ``512 B``, ``3.2 KB``, ``41.0 MB``, ``1.25 GB``, ``2.00 TB``."""
    n = float(n)
    if n < 1e3:
        return f"{n:.0f} B"
    for unit, scale in (("KB", 1e3), ("MB", 1e6), ("GB", 1e9)):
        if n < scale * 1e3:
            v = n / scale
            return f"{v:.{2 if v < 10 else 1}f} {unit}"
    return f"{n / 1e12:.2f} TB"


class Progress:
    """A rich progress bar with samples/s and GB/s on stderr; a no-op when disabled."""

    def __init__(self, enabled: bool, total: Optional[int]):
        self.enabled = enabled
        self.total = total
        self.done = 0
        self.nbytes = 0
        self.t0 = time.perf_counter()

    def __enter__(self):
        if self.enabled:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self.p = Progress(TextColumn("check-data"), BarColumn(), MofNCompleteColumn(),
                              TextColumn("{task.fields[rate]}"), TimeElapsedColumn(), TimeRemainingColumn(),
                              console=Console(stderr=True), transient=False)
            self.p.start()
            self.task = self.p.add_task("scan", total=self.total, rate="")
        return self

    def advance(self, ns: int, nb: int) -> None:
        self.done += ns
        self.nbytes += nb
        if self.enabled:
            dt = max(time.perf_counter() - self.t0, 1e-9)
            self.p.update(self.task, advance=ns,
                          rate=f"{self.done / dt:.1f} samples/s  {human_bytes(self.nbytes / dt)}/s")

    def __exit__(self, *exc):
        if self.enabled:
            self.p.stop()
        return False

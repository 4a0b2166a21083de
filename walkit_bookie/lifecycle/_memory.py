"""Give memory back to the system after a burst.

glibc keeps what big answers and entries freed (reads of 4 MiB entries from disk, adds of big
entries) in its heaps for reuse: after an attack that queued hundreds of MiB of answers, a
bookie stayed at 2.1 GB resident fifteen minutes later, though nothing held that memory. Every
``interval`` seconds, ``malloc_trim(0)`` hands the free pages back (in a worker thread: it walks
every arena) if the resident size grew by ``growth`` bytes since the last trim, or if the bytes
the bookie holds in buffers (``held``: queued answers, adds in flight, partial frames) fell by
``growth`` from their highest since then (memory freed after a trim that found it still in use).
Where there is no ``malloc_trim`` (not glibc) or no ``/proc``, this does nothing.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable
from typing import final

import anyio
import anyio.to_thread

from walkit.shared import get_logger

log = get_logger(__name__)

MiB = 1024 * 1024


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL(None)  # the C library this process runs on
    except OSError:
        return None
    trim = getattr(libc, "malloc_trim", None)
    if trim is None:
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim  # type: ignore[no-any-return]


def resident_bytes() -> int:
    """This process's resident size (0 where ``/proc`` is missing)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


@final
class MemoryReturn:
    """Trims the C heap after the resident size grew (see the module); ``returned_bytes``
    counts what the trims gave back."""

    def __init__(
        self,
        *,
        interval: float = 10.0,
        growth: int = 64 * MiB,
        held: Callable[[], int] = lambda: 0,
    ) -> None:
        self.interval = interval
        self.growth = growth
        self.held = held
        self.trims = 0
        self.returned_bytes = 0
        self._trim = _malloc_trim()
        self._held_peak = 0  # the most ``held`` seen since the last trim

    async def run(self) -> None:
        if self._trim is None or not (low := resident_bytes()):
            return
        while True:
            await anyio.sleep(self.interval)
            low = await self.check(low)

    async def check(self, low: int) -> int:
        """Trim if the resident size is ``growth`` above ``low`` (the size after the last
        trim, or the least seen since), or ``held`` fell by ``growth`` from its peak since the
        last trim; returns the new low mark."""
        now = resident_bytes()
        held = self.held()
        self._held_peak = max(self._held_peak, held)
        freed = self._held_peak - held
        if self._trim is None or (now - low < self.growth and freed < self.growth):
            return min(low, now)
        await anyio.to_thread.run_sync(self._trim, 0)
        after = resident_bytes()
        self.trims += 1
        self.returned_bytes += max(0, now - after)
        self._held_peak = held
        log.debug("memory_returned", resident_before=now, resident_after=after)
        return after

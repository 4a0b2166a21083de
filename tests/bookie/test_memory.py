"""Memory freed after a burst goes back to the system (glibc keeps it otherwise)."""

from __future__ import annotations

import pytest

from walkit_bookie.lifecycle._memory import MemoryReturn, MiB, resident_bytes

pytestmark = pytest.mark.skipif(
    MemoryReturn()._trim is None or not resident_bytes(),
    reason="needs glibc's malloc_trim and /proc",
)


async def test_memory_freed_after_a_burst_is_returned() -> None:
    await MemoryReturn(growth=0).check(0)  # what earlier tests freed would absorb the burst
    memory = MemoryReturn(growth=32 * MiB)
    low = resident_bytes()
    # 64 MiB of 64 KiB answers, each followed by a small object that stays: the heap cannot
    # shrink from its top, so glibc keeps the freed pages until trimmed.
    burst, kept = [], []
    for i in range(1000):
        burst.append(b"a" * (64 * 1024))
        kept.append(b"k" * 1000 + b"%d" % i)
    del burst
    held = resident_bytes()
    assert held - low >= 40 * MiB, (held - low) / MiB  # (so the test can fail)
    new_low = await memory.check(low)
    assert memory.trims == 1
    assert memory.returned_bytes >= 40 * MiB, memory.returned_bytes / MiB
    assert new_low <= held - 40 * MiB
    assert len(kept) == 1000


async def test_no_trim_without_growth() -> None:
    memory = MemoryReturn(growth=64 * MiB)
    low = resident_bytes()
    assert await memory.check(low) <= low + 64 * MiB
    assert memory.trims == 0

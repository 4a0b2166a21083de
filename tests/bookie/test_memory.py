"""Memory freed after a burst goes back to the system (glibc keeps it otherwise)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from walkit_bookie.lifecycle._memory import MemoryReturn, MiB, resident_bytes

pytestmark = pytest.mark.skipif(
    MemoryReturn()._trim is None or not resident_bytes(),
    reason="needs glibc's malloc_trim and /proc",
)

# Run in a fresh process: what earlier tests freed in this one would absorb the burst.
_BURST = """
import json, trio
from walkit_bookie.lifecycle._memory import MemoryReturn, MiB, resident_bytes

async def main():
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
    untrimmed = await MemoryReturn(growth=held).check(low)  # below its growth: no trim
    after = resident_bytes()
    new_low = await memory.check(low)
    print(json.dumps({"low": low, "held": held, "after_no_trim": after, "untrimmed": untrimmed,
                      "new_low": new_low, "trims": memory.trims,
                      "returned": memory.returned_bytes, "kept": len(kept)}))

trio.run(main)
"""


def test_memory_freed_after_a_burst_is_returned() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _BURST], capture_output=True, text=True, timeout=60, check=True
    )
    r = json.loads(out.stdout)
    assert r["held"] - r["low"] >= 48 * MiB, r  # the freed burst is still resident
    assert r["after_no_trim"] >= r["held"] - 4 * MiB, r  # and stays without a trim
    assert r["untrimmed"] == r["low"]
    assert r["trims"] == 1
    assert r["returned"] >= 48 * MiB, r
    assert r["new_low"] <= r["low"] + 16 * MiB, r


async def test_buffers_freed_after_a_trim_are_trimmed_again() -> None:
    """A trim while the burst's buffers were still in use returns little; once the bookie
    lets them go (its held bytes fall by ``growth`` from their peak) the next look trims."""
    held = [200 * MiB]
    memory = MemoryReturn(growth=64 * MiB, held=lambda: held[0])
    low = resident_bytes()
    low = await memory.check(low)
    assert memory.trims == 0  # nothing grew, nothing freed yet
    held[0] = 150 * MiB
    low = await memory.check(low)
    assert memory.trims == 0  # 50 MiB freed: under growth
    held[0] = 100 * MiB
    low = await memory.check(low)
    assert memory.trims == 1  # 100 MiB below the peak
    low = await memory.check(low)
    assert memory.trims == 1  # the peak starts again from the trim

"""A process that offloads a log and SIGKILLs itself at one step (tests/lake/test_processes.py):
``python -m tests.lake._offloader METADATA_URL LOG LAKE_URI STEP``."""

from __future__ import annotations

import os
import signal
import sys
import time

import trio

from walkit import Client, Log
from walkit.log._offload import offload


async def main(url: str, name: str, lake: str, step: str) -> None:
    async with Client.connect(url, wall_clock=time.time) as client:
        log = await Log.open(client, name, create=False, offload_to=lake, offload_deletion_lag=0)

        async def hook(at: str, _ledger_id: int) -> None:
            if at == step:
                os.kill(os.getpid(), signal.SIGKILL)

        await offload(log, hook=hook)


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4])

"""The ``consumer`` option of streaming reads: a query's progress as a durable consumer of its
log (``walkit.log._consumers``), so that ``walkit log consumers`` shows its lag like any other
consumer's and retention keeps what it has not processed.

The query starts at the consumer's position (registered at ``startingPosition`` if it does not
exist yet) when it has no checkpoint, and each micro-batch's ``commit()`` moves the consumer to
the batch's end offset: every record before it is processed. Spark's checkpoint stays what a
restarted query resumes from; commits only move forward, so the two agree.
"""

from __future__ import annotations

from walkit._core.log_position import LogPosition
from walkit.log import Log
from walkit.log._consumers import commit_consumer
from walkit.spark._connect import Connection, connect

__all__ = ["commit_progress", "register"]


async def register(conn: Connection, log: str, name: str, start: LogPosition) -> LogPosition:
    """Create consumer ``name`` of ``log`` at ``start`` unless it exists; where it resumes."""
    async with connect(conn) as client:
        if conn.password is None:
            handle = await Log.open(client, log, create=False)
        else:
            handle = await Log.open(client, log, create=False, password=conn.password)
        return await handle.consumer(name, start=start).register()


async def commit_progress(conn: Connection, log: str, name: str, end: LogPosition) -> None:
    """Everything before ``end`` (a micro-batch's end offset) is processed."""
    async with connect(conn) as client:
        await commit_consumer(client._context, log, name, end)

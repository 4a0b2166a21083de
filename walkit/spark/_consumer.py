"""The ``consumer`` option of streaming reads: a query's progress as a durable consumer of its
log (``walkit.log._consumers``), so that ``walkit log consumers`` shows its lag like any other
consumer's and retention keeps what it has not processed.

The query starts at the consumer's position (registered at ``startingPosition`` if it does not
exist yet) when it has no checkpoint, and each micro-batch's ``commit()`` moves the consumer to
the batch's end offset: every record before it is processed. Spark's checkpoint stays what a
restarted query resumes from; commits only move forward, so the two agree. A query restarted
from its checkpoint never asks for its initial offset, so a consumer missing at a commit (the
option added to a query that has a checkpoint, or the consumer deleted meanwhile) is created
there, as a Pulsar consumer that subscribes again creates its subscription.
"""

from __future__ import annotations

from walkit._core.log_position import LogPosition
from walkit.client import Client, client_services
from walkit.errors import NoSuchConsumerError
from walkit.log import Log
from walkit.log._consumers import commit_consumer
from walkit.spark._connect import Connection, connect

__all__ = ["commit_progress", "register"]


async def _open(client: Client, conn: Connection, log: str) -> Log:
    if conn.password is None:
        return await Log.open(client, log, create=False)
    return await Log.open(client, log, create=False, password=conn.password)


async def register(conn: Connection, log: str, name: str, start: LogPosition) -> LogPosition:
    """Create consumer ``name`` of ``log`` at ``start`` unless it exists; where it resumes."""
    async with connect(conn) as client:
        return await (await _open(client, conn, log)).consumer(name, start=start).register()


async def commit_progress(conn: Connection, log: str, name: str, end: LogPosition) -> bool:
    """Everything before ``end`` (a micro-batch's end offset) is processed; True when the
    consumer did not exist and was created at ``end``."""
    async with connect(conn) as client:
        try:
            await commit_consumer(client_services(client).context, log, name, end)
        except NoSuchConsumerError:
            await (await _open(client, conn, log)).consumer(name, start=end).register()
            return True
        return False

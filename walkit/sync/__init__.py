"""walkit for threaded programs: the async API's names and guarantees, as blocking calls.

::

    import walkit.sync

    with walkit.sync.Client.connect(url) as client:
        with walkit.sync.Log.open(client, "orders") as log:
            with log.writer() as writer:
                pos = writer.append(b"order 1")      # durable when it returns; any thread
            for record in log.reader(start=pos, timeout=1.0):
                print(record.position, record.payload)

Each client runs an event loop (asyncio by default) in a daemon thread of its own and drives
the async client there; every call blocks its thread until done, and every object may be used
from many threads at once. A writer's appends from concurrent threads share entries as
concurrent tasks' do. See docs/log.md, "Which API?", for threads, forking and shutdown.
"""

from walkit.sync._client import Client, LedgerReader, LedgerWriter
from walkit.sync._election import LeaderElection
from walkit.sync._log import Log, LogConsumer, LogReader, LogWriter, Snapshot
from walkit.sync._replica import Leader, Replica
from walkit.sync._thread import Backend

__all__ = [
    "Backend",
    "Client",
    "Leader",
    "LeaderElection",
    "LedgerReader",
    "LedgerWriter",
    "Log",
    "LogConsumer",
    "LogReader",
    "LogWriter",
    "Replica",
    "Snapshot",
]

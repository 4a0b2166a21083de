"""The async side of the Spark readers: metadata on the driver, entries on the executors.

Spark calls the readers synchronously. The driver's planning runs one event loop per call
(:func:`walkit.spark._run.run`). An executor task reads its partition in an event loop on a
thread of its own with one client (:func:`read_chunks`, through an AnyIO portal): that loop
fetches the next chunk of entries from the bookies (pipelined reads) while the task's thread
turns the previous one into an Arrow batch for Spark.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from typing import Final, final

import anyio
import attrs
from anyio.streams.memory import MemoryObjectSendStream

from walkit._core.ledger_metadata import LedgerMetadata
from walkit._core.log_metadata import LogMetadata
from walkit._core.log_position import LogPosition
from walkit._core.record_set import HEADER_SIZE, read_header, uses_record_sets
from walkit._core.types import Entry
from walkit._logging import get_logger
from walkit.client import Client, client_services
from walkit.errors import (
    CorruptEntryError,
    NoSuchLedgerError,
    NoSuchLogError,
    UnauthorizedAccessError,
)
from walkit.ledger import LedgerReader
from walkit.ledger._context import check_password
from walkit.log import Log
from walkit.log._passwords import ledger_log, log_password
from walkit.log._store import read_log
from walkit.spark._connect import Connection, connect
from walkit.spark._read_plan import LedgerView, Range
from walkit.spark._run import portal, raise_one

log = get_logger(__name__)

__all__ = [
    "Chunk",
    "LogState",
    "ledger_state",
    "log_state",
    "position_at",
    "read_chunks",
    "record_counts",
]

#: Most entries fetched by one read call of an executor (one Arrow batch).
CHUNK_ENTRIES: Final = 8192
#: Entries of a range's first read call; later calls aim at CHUNK_BYTES from the entries'
#: sizes so far (entries of record-set ledgers hold up to 64 KiB of records each).
FIRST_CHUNK_ENTRIES: Final = 256
#: Bytes of entries one read call aims at.
CHUNK_BYTES: Final = 8 * 1024 * 1024
#: Chunks read ahead of the one Spark is consuming.
PREFETCH: Final = 2
#: The name of an executor's reading thread.
READ_THREAD: Final = "walkit-spark-read"
#: Most entries of one read call when counting records on the driver.
COUNT_CHUNK_ENTRIES: Final = 64
#: Rounds of "the ledger list changed under us" before planning gives up.
_PLAN_ROUNDS: Final = 10


class _Passwords:
    """The password to read each ledger with: the ``password`` option when given, else the one
    stored with the log that the ledger belongs to (its ``walkit.log`` tag), else empty."""

    def __init__(self, client: Client, conn: Connection) -> None:
        self._client = client
        self._given = conn.password
        self._by_log: dict[str, bytes] = {}

    async def of_log(self, name: str) -> bytes:
        if self._given is not None:
            return self._given
        if name not in self._by_log:
            self._by_log[name] = await log_password(self._client, name)
        return self._by_log[name]

    async def of_ledger(self, md: LedgerMetadata) -> bytes:
        if self._given is not None:
            return self._given
        name = ledger_log(md)
        return b"" if name is None else await self.of_log(name)


def _check_password(md: LedgerMetadata, password: bytes, what: str) -> None:
    try:
        check_password(md, password)
    except UnauthorizedAccessError:
        raise UnauthorizedAccessError(
            f"walkit: wrong password for {what} (ledger {md.ledger_id}): check the option "
            "'password'"
        ) from None


async def _last_readable(client: Client, md: LedgerMetadata, password: bytes) -> int:
    """The last entry of a closed ledger, or the LAC of an open one as a reader that does
    not fence sees it."""
    if md.is_closed:
        return md.last_entry_id
    reader = await client.open_ledger(md.ledger_id, password=password)
    return reader.last_add_confirmed


@final
@attrs.frozen
class LogState:
    """The log's metadata and its ledgers from ``from_seq`` on, as the planner needs them."""

    metadata: LogMetadata
    ledgers: tuple[LedgerView, ...]


async def log_state(conn: Connection, name: str, from_seq: int) -> LogState:
    """Read the log and the state of its ledgers from sequence number ``from_seq`` on."""
    async with connect(conn) as client:
        return await _log_state(client, conn, name, from_seq)


async def _log_state(client: Client, conn: Connection, name: str, from_seq: int) -> LogState:
    context = client_services(client).context
    for _round in range(_PLAN_ROUNDS):
        try:
            md, _version = await context.retry_metadata(
                functools.partial(read_log, context.store, name)
            )
        except NoSuchLogError:
            raise NoSuchLogError(
                f"walkit: no log named {name!r} (the path of load) in {client!r}"
            ) from None
        views: list[LedgerView] = []
        try:
            for ledger in md.ledgers:
                if ledger.seq < from_seq and ledger != md.last:
                    continue  # (the last one tells where ``latest`` is)
                lake = md.lake_ledger(ledger.ledger_id)
                if lake is not None:
                    # Offloaded: its records are read from the lake's files (closed, whole),
                    # whether or not the bookies still hold their copy.
                    views.append(
                        LedgerView(
                            ledger.seq,
                            ledger.ledger_id,
                            True,
                            lake.entries - 1,
                            True,
                            ledger.schema,
                            lake,
                        )
                    )
                    continue
                lmd = await client.ledger_metadata(ledger.ledger_id)
                password = conn.password if conn.password is not None else md.config.password
                _check_password(lmd, password, f"log {name!r}")
                last = await _last_readable(client, lmd, password)
                views.append(
                    LedgerView(
                        ledger.seq,
                        ledger.ledger_id,
                        lmd.is_closed,
                        last,
                        uses_record_sets(lmd.custom_metadata),
                        ledger.schema,
                    )
                )
        except NoSuchLedgerError:
            continue  # truncated or dropped since the list was read: read it again
        return LogState(md, tuple(views))
    raise NoSuchLedgerError(f"walkit: the ledgers of log {name!r} kept changing while planning")


async def position_at(conn: Connection, name: str, timestamp: int) -> LogPosition:
    """The position of the log's first record at or after ``timestamp`` (ms since the epoch;
    :meth:`walkit.Log.position_at`): where ``startingTimestamp`` starts a read."""
    async with connect(conn) as client:
        if conn.password is None:  # the log's own (stored) password
            opening = Log.open(client, name, create=False)
        else:
            opening = Log.open(client, name, create=False, password=conn.password)
        try:
            log = await opening
        except NoSuchLogError:
            raise NoSuchLogError(
                f"walkit: no log named {name!r} (the path of load) in {client!r}"
            ) from None
        return await log.position_at(timestamp)


async def ledger_state(
    conn: Connection, ledgers: str | tuple[int, ...]
) -> list[tuple[LedgerMetadata, int]]:
    """The metadata and last readable entry of each ledger asked for (``"all"``: every
    ledger of the cluster; ledgers deleted meanwhile are left out of ``all``)."""
    async with connect(conn) as client:
        passwords = _Passwords(client, conn)
        wanted = await client.list_ledgers() if isinstance(ledgers, str) else list(ledgers)
        result: list[tuple[LedgerMetadata, int]] = []
        for ledger_id in wanted:
            try:
                md = await client.ledger_metadata(ledger_id)
            except NoSuchLedgerError:
                if ledgers == "all":
                    continue
                raise NoSuchLedgerError(
                    f"walkit: option 'ledgers' names ledger {ledger_id}, which does not exist"
                ) from None
            password = await passwords.of_ledger(md)
            _check_password(md, password, "the option 'ledgers'")
            result.append((md, await _last_readable(client, md, password)))
        return result


async def record_counts(
    conn: Connection,
    ranges: Sequence[Range],
    max_records: int,
    lake_properties: Sequence[tuple[str, str]] = (),
) -> list[list[int] | None]:
    """The records of each entry of ``ranges`` (None for a ledger of one record per entry),
    read from the bookies (an offloaded ledger's from its data files) until ``max_records`` records are counted: what the driver needs to
    end a micro-batch at ``maxRecordsPerTrigger`` records. The entries are read whole (a
    bookie has no header-only read), so this reads what the micro-batch will hold once more.
    A ledger deleted meanwhile ends the count there (the next plan meets the truncation)."""
    counts: list[list[int] | None] = []
    budget = max_records
    async with connect(conn) as client:
        passwords = _Passwords(client, conn)
        for rng in ranges:
            if budget <= 0:
                break
            if rng.lake is not None:  # offloaded: counted from its files' entry ids
                from walkit.spark._read_lake import file_io, lake_entry_counts

                if not rng.lake.files:
                    counts.append([0] * rng.count)
                    continue
                io = file_io(dict(lake_properties), rng.lake.files[0])
                try:
                    found = await anyio.to_thread.run_sync(lake_entry_counts, rng, io)
                except FileNotFoundError:
                    break
                counts.append(found)
                budget -= sum(found) - (min(rng.first_slot, found[0]) if found else 0)
                continue
            if not rng.record_sets:
                counts.append(None)
                budget -= rng.count
                continue
            try:
                md = await client.ledger_metadata(rng.ledger_id)
                password = await passwords.of_ledger(md)
                reader = await client.open_ledger(rng.ledger_id, password=password)
            except NoSuchLedgerError:
                break
            entry_counts: list[int] = []
            counts.append(entry_counts)
            first = rng.first
            while first <= rng.last and budget > 0:
                last = min(rng.last, first + min(COUNT_CHUNK_ENTRIES, budget) - 1)
                for entry in await reader.read(first, last):
                    if len(entry.payload) < HEADER_SIZE:
                        raise CorruptEntryError(
                            f"walkit: entry {entry.entry_id} of ledger {rng.ledger_id} is "
                            f"{len(entry.payload)} bytes: too short for a record set"
                        )
                    total = read_header(entry.payload)[2]
                    entry_counts.append(total)
                    budget -= total - (rng.first_slot if entry.entry_id == rng.first else 0)
                    if budget <= 0:
                        break
                first = last + 1
    return counts


# --- executors -----------------------------------------------------------------------------


@final
@attrs.frozen
class Chunk:
    """Entries ``first..`` of one range, in order."""

    range: Range
    entries: Sequence[Entry]


def read_chunks(
    conn: Connection,
    ranges: Sequence[Range],
    *,
    on_missing: Callable[[Range], None] | None = None,
    chunk_entries: int = CHUNK_ENTRIES,
) -> Iterator[Chunk]:
    """The entries of ``ranges``, in order, in chunks, read by an event loop on a thread of its
    own (an AnyIO portal) while the calling thread consumes the previous chunks. At most
    PREFETCH chunks wait for the consumer (and one more in the reading task's hand); a consumer
    that stops early (closes the generator) cancels the read and ends the thread.
    ``on_missing(range)`` is called for a range whose ledger no longer exists (it raises to fail
    the read, or returns to skip the range); without it NoSuchLedgerError is raised."""
    send, receive = anyio.create_memory_object_stream[Chunk](PREFETCH)
    with portal(READ_THREAD) as loop, raise_one():
        done = loop.start_task_soon(_produce, conn, ranges, send, on_missing, chunk_entries)
        try:
            while True:
                try:
                    chunk = loop.call(receive.receive)
                except anyio.EndOfStream:  # the task ended: its error, or the last chunk
                    done.result()
                    return
                yield chunk
        finally:
            done.cancel()
            loop.call(receive.close)


async def _produce(
    conn: Connection,
    ranges: Sequence[Range],
    send: MemoryObjectSendStream[Chunk],
    on_missing: Callable[[Range], None] | None,
    chunk_entries: int,
) -> None:
    async with send, connect(conn) as client:
        passwords = _Passwords(client, conn)
        for rng in ranges:
            try:
                md = await client.ledger_metadata(rng.ledger_id)
                password = await passwords.of_ledger(md)
                reader = await client.open_ledger(rng.ledger_id, password=password)
            except NoSuchLedgerError:
                if on_missing is None:
                    raise
                on_missing(rng)
                continue
            await _read_range(reader, rng, send, chunk_entries)


async def _read_range(
    reader: LedgerReader, rng: Range, send: MemoryObjectSendStream[Chunk], chunk_entries: int
) -> None:
    first = rng.first
    size = min(chunk_entries, FIRST_CHUNK_ENTRIES)
    while first <= rng.last:
        last = min(rng.last, first + size - 1)
        entries = await reader.read(first, last)
        # The next call's size from this one's entries: about CHUNK_BYTES per call.
        got = sum(len(entry.payload) for entry in entries)
        size = max(1, min(chunk_entries, CHUNK_BYTES * len(entries) // max(got, 1)))
        # Waits while PREFETCH chunks wait for the consumer: the memory bound.
        await send.send(Chunk(rng, entries))
        first = last + 1

"""Replicated state machines on a log: apply records in order, snapshot, restore, take over.

::

    replica = Replica(log, machine, snapshot_every=10_000)
    await replica.recover()                  # latest snapshot, then the log after it
    async with replica.lead() as leader:     # take the log over, catch up, then submit
        result = await leader.submit(b"command")

A standby runs ``await replica.follow()`` (apply records as they come) and, to take over,
cancels it and enters ``replica.lead()``: the takeover fences the old leader, and the standby
applies every record before its own first position before it accepts a command.

On a typed log (``Log.open(client, name, schema=T)``) commands are ``T`` values: the leader
submits them, and every replica's machine applies the value decoded from what the log holds
(the leader's too, so that all replicas apply the same value).

Commands are applied in log order, exactly once per replica: a submitted command is applied
after every command appended before it (by this leader or an earlier one), and only once it is
durable. If an append fails (fenced, no bookies ...), that command *may* still be in the log,
so this leader stops applying: it and every later submit raise, and the replica's state stays
at the last record it applied. Entering ``lead()`` or ``follow()`` again continues from there.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any, Generic, Protocol, final

import anyio
import anyio.abc
import anyio.lowlevel
from typing_extensions import TypeVar

from walkit._core.log_position import LogPosition
from walkit._logging import get_logger
from walkit.errors import (
    ConfigurationError,
    DuplicateRecordError,
    InvalidArgumentError,
    WalkitError,
)
from walkit.log import Log, LogRecord, LogTruncatedError, LogWriter
from walkit.log._reader import _make_record
from walkit.log._values import RecordValues, V

log = get_logger(__name__)

__all__ = ["Leader", "Replica", "StateMachine"]


#: A machine's commands: bytes, or a typed log's values.
C = TypeVar("C", default=bytes, contravariant=True)


class StateMachine(Protocol[C]):
    """What a replica drives. ``apply`` must be deterministic: every replica applies the same
    commands in the same order and must end in the same state. ``StateMachine[T]`` takes a
    typed log's ``T`` values as commands (``StateMachine``: bytes)."""

    def apply(self, command: C, position: LogPosition) -> Any:
        """Apply one command; the return value goes back to whoever submitted it."""

    def snapshot(self) -> bytes | Iterable[bytes]:
        """The whole state, as bytes, or as an iterable of chunks (called between two applies).

        A leader consumes an iterable a chunk at a time, between its other work, while applies
        go on: the iterable must read a copy of the state taken during the call (a generator
        over a list made here), not the live state. A large state encoded that way does not
        stall the leader (hashicorp/raft's ``FSMSnapshot.Persist`` runs beside ``Apply`` for
        the same reason)."""

    def restore(self, data: bytes) -> None:
        """Replace the whole state with a snapshot's bytes."""


@final
class Replica(Generic[V]):
    """One copy of a state machine, kept up to date from a log (see the module docs).

    ``snapshot_every``: a leader saves a snapshot after this many applied records (None:
    never by itself; :meth:`Leader.snapshot` saves one on demand). ``snapshot_ratio``: also
    wait until the records applied since the last snapshot hold this many times its size in
    bytes, so that a large state is not written again for a little log (LogCabin's
    ``snapshotRatio``). ``truncate``: after a snapshot, the leader truncates the log at the
    oldest snapshot still kept, so the log always covers every kept snapshot.
    """

    def __init__(
        self,
        log: Log[V],
        machine: StateMachine[V],
        *,
        snapshot_every: int | None = 10_000,
        snapshot_ratio: float | None = None,
        truncate: bool = True,
    ) -> None:
        if snapshot_every is not None and (
            isinstance(snapshot_every, bool)
            or not isinstance(snapshot_every, int)
            or snapshot_every < 1
        ):
            raise ConfigurationError(
                f"snapshot_every must be an int >= 1 or None, not {snapshot_every!r}"
            )
        if snapshot_ratio is not None and (
            isinstance(snapshot_ratio, bool)
            or not isinstance(snapshot_ratio, int | float)
            or not 0 < snapshot_ratio < float("inf")
        ):
            raise ConfigurationError(
                f"snapshot_ratio must be a number > 0 or None, not {snapshot_ratio!r}"
            )
        self.log = log
        self.machine = machine
        self.snapshot_every = snapshot_every
        self.snapshot_ratio = snapshot_ratio
        self.truncate = truncate
        #: The position of the last record applied (EARLIEST before any).
        self.applied_position = LogPosition.EARLIEST
        #: Records applied by this replica (replayed ones included; a restore does not count).
        self.applied_count = 0
        self._since_snapshot = 0
        #: Payload bytes applied since the last snapshot, and that snapshot's size (None: none
        #: known), for ``snapshot_ratio``.
        self._since_snapshot_bytes = 0
        self._snapshot_size: int | None = None
        self._recovered = False
        self._busy = False
        #: Set (and replaced) when a record is applied while someone waits in wait_applied:
        #: an Event per applied record would cost more than the apply of a small command.
        self._progress = anyio.Event()
        self._waited = False

    def __repr__(self) -> str:
        return f"Replica(log={self.log.name!r}, applied={self.applied_position})"

    @property
    def next_position(self) -> LogPosition:
        """Where the next record to apply is looked for."""
        if self.applied_position == LogPosition.EARLIEST:
            return LogPosition.EARLIEST
        return self.applied_position.next()

    async def wait_applied(self, position: LogPosition) -> None:
        """Return once this replica has applied the record at ``position`` (or a later one):
        read-your-writes on a follower, given the position a leader's write got."""
        while self.applied_position < position:
            self._waited = True
            await self._progress.wait()

    # --- catching up -----------------------------------------------------------------------

    async def recover(self) -> None:
        """Restore the latest snapshot, then apply the records after it that are readable now.
        Raises LogTruncatedError if the log was truncated past the latest snapshot."""
        with self._exclusive():
            await self._restore()
            await self._catch_up(end=None, follow=False)

    async def follow(self) -> None:
        """Apply new records as they are appended, until cancelled (a standby)."""
        with self._exclusive():
            if not self._recovered:
                await self._restore()
            await self._catch_up(end=None, follow=True)

    @contextlib.asynccontextmanager
    async def lead(self) -> AsyncIterator[Leader[V]]:
        """Take the log over (fencing the previous leader), apply every record before this
        writer's first position, then yield a :class:`Leader`. Leaving the block closes the
        writer (after a snapshot being saved has finished)."""
        with self._exclusive():
            if not self._recovered:
                await self._restore()
            writer = await self.log.writer()
            body_error: BaseException | None = None
            leader: Leader[V] | None = None
            try:
                await self._catch_up(end=writer.first_position, follow=True)
                async with anyio.create_task_group() as tasks:
                    leader = Leader(self, writer, tasks)
                    try:
                        yield leader
                    except BaseException as exc:  # re-raised below, unwrapped
                        body_error = exc
                        tasks.cancel_scope.cancel()
                    finally:
                        leader._stopped = True
            except BaseException as exc:
                body_error = exc
            if body_error is not None:
                await writer.__aexit__(type(body_error), body_error, body_error.__traceback__)
                raise body_error
            try:
                await writer.close()
            except WalkitError as exc:
                if leader is None or leader._error is None:
                    raise
                # Already reported to a submit (fenced, say): leaving the block is fine.
                log.info("leader_close_failed", log=self.log.name, error=str(exc))

    # --- internals -------------------------------------------------------------------------

    @contextlib.contextmanager
    def _exclusive(self) -> Any:
        if self._busy:
            raise InvalidArgumentError(
                "this replica is already following or leading: stop that first"
            )
        self._busy = True
        try:
            yield
        finally:
            self._busy = False

    async def _restore(self, *, force: bool = False) -> None:
        if self._recovered and not force:
            return
        snap = await self.log.latest_snapshot()
        if snap is not None:
            self.machine.restore(await snap.read())
            self._snapshot_size = snap.size
            self.applied_position = snap.position
            self._progress.set()
            self._progress = anyio.Event()
            log.info("replica_restored", log=self.log.name, position=str(snap.position))
        elif force:
            raise LogTruncatedError(
                f"log {self.log.name} was truncated past this replica and has no snapshot"
            )
        self._since_snapshot = 0
        self._since_snapshot_bytes = 0
        self._recovered = True

    async def _catch_up(self, *, end: LogPosition | None, follow: bool) -> None:
        for _attempt in range(3):
            try:
                await self._replay(end=end, follow=follow)
                return
            except LogTruncatedError as exc:
                # We fell behind the truncation point: start again from the latest snapshot.
                log.warning("replica_fell_behind", log=self.log.name, error=str(exc))
                await self._restore(force=True)
        raise LogTruncatedError(f"log {self.log.name}: kept falling behind its truncation point")

    async def _replay(self, *, end: LogPosition | None, follow: bool) -> None:
        reader = self.log.reader(self.next_position, end=end, follow=follow, skip_truncated=False)
        async for record in reader:
            self._apply(record)

    def _apply(self, record: LogRecord[V]) -> Any:
        position = record.position
        result = self.machine.apply(record.value, position)
        self.applied_position = position
        self.applied_count += 1
        self._since_snapshot += 1
        self._since_snapshot_bytes += len(record.payload)
        if self._waited:
            self._waited = False
            self._progress.set()
            self._progress = anyio.Event()
        return result


@final
class Leader(Generic[V]):
    """The replica's handle while it owns the log (from :meth:`Replica.lead`)."""

    def __init__(
        self, replica: Replica[V], writer: LogWriter[V], tasks: anyio.abc.TaskGroup
    ) -> None:
        self._replica = replica
        self._writer = writer
        self._tasks = tasks
        typed = writer._typed
        #: A typed log's schema, and how the leader's own records give their value.
        self._typed = typed
        self._values: RecordValues | None = None
        if typed is not None:
            self._values = typed.values_of_writer(writer._roller.ledger.schema)
        self._issued = 0
        self._turn = 0
        self._waiting: dict[int, anyio.Event] = {}
        self._finished: set[int] = set()
        self._error: WalkitError | None = None
        self._snapshotting = False
        self._stopped = False

    @property
    def writer(self) -> LogWriter[V]:
        return self._writer

    async def submit(
        self, command: V, *, producer_id: str | None = None, sequence: int | None = None
    ) -> Any:
        """Append ``command`` and, once it is durable and every earlier command is applied,
        apply it; returns what the machine's ``apply`` returned.

        With ``producer_id``/``sequence`` the append is idempotent (see
        :meth:`walkit.log.LogWriter.append`): a command already in the log raises
        DuplicateRecordError (its ``position`` says where) and is not applied again.
        """
        return (await self._submit([command], batch=False, tag=(producer_id, sequence)))[0]

    async def submit_batch(self, commands: Sequence[V], *, flush: bool = False) -> list[Any]:
        """Several commands, appended together (pipelined) and applied in order. ``flush``:
        their entry goes at once, beside those in flight (see ``LogWriter.append_batch``): a
        group commit that does not wait for the one before it."""
        return await self._submit(list(commands), batch=True, flush=flush)

    async def snapshot(self) -> None:
        """Save a snapshot of the current state now (and truncate, if the replica does)."""
        self._check()
        replica = self._replica
        await self._save(replica.applied_position, replica.machine.snapshot())

    # --- internals -------------------------------------------------------------------------

    def _check(self) -> None:
        if self._error is not None:
            raise type(self._error)(*self._error.args)
        if self._stopped:
            raise InvalidArgumentError("the leader's block was left")

    async def _submit(
        self,
        commands: list[Any],
        *,
        batch: bool,
        tag: tuple[str | None, int | None] = (None, None),
        flush: bool = False,
    ) -> list[Any]:
        self._check()
        typed = self._typed
        # A typed command is checked before it takes a ticket (InvalidArgumentError: nothing
        # is written), and applied as the log holds it.
        payloads = None if typed is None else [typed.encode(c) for c in commands]
        ticket = self._issued
        self._issued += 1
        # No checkpoint between taking the ticket and entering the append: tickets follow
        # positions.
        try:
            if batch:
                positions = await self._writer.append_batch(commands, flush=flush)
            else:
                positions = [
                    await self._writer.append(commands[0], producer_id=tag[0], sequence=tag[1])
                ]
        except (InvalidArgumentError, DuplicateRecordError):
            self._done(ticket)  # nothing was written
            raise
        except BaseException as exc:
            self._fail(exc)
            self._done(ticket)
            raise
        try:
            await self._wait_turn(ticket)
        except BaseException as exc:  # durable but not applied: later ones must not be either
            self._fail(exc)
            self._done(ticket)
            raise
        try:
            self._check()
            replica = self._replica
            values = self._values
            if payloads is None:
                payloads = [bytes(cmd) for cmd in commands]
            results = [
                replica._apply(
                    _make_record(
                        (
                            pos.ledger_seq,
                            pos.entry_id,
                            pos.slot,
                            payload,
                            None,
                            None,
                            None,
                            None,
                            values,
                        )
                    )
                )
                for pos, payload in zip(positions, payloads, strict=True)
            ]
            self._maybe_snapshot()
            return results
        finally:
            self._done(ticket)

    def _fail(self, exc: BaseException) -> None:
        """Stop applying: the log may hold a command this replica did not apply."""
        if self._error is None:
            self._error = (
                exc
                if isinstance(exc, WalkitError)
                else WalkitError(f"a command was interrupted ({type(exc).__name__})")
            )
            log.warning("leader_failed", log=self._replica.log.name, error=repr(exc))

    async def _wait_turn(self, ticket: int) -> None:
        if self._turn == ticket:
            await anyio.lowlevel.checkpoint()
            return
        event = self._waiting.setdefault(ticket, anyio.Event())
        await event.wait()

    def _done(self, ticket: int) -> None:
        """``ticket`` is finished (applied, refused or failed): let the next one go."""
        self._finished.add(ticket)
        while self._turn in self._finished:
            self._finished.discard(self._turn)
            self._turn += 1
        event = self._waiting.pop(self._turn, None)
        if event is not None:
            event.set()

    def _maybe_snapshot(self) -> None:
        replica = self._replica
        every = replica.snapshot_every
        if every is None or replica._since_snapshot < every or self._snapshotting:
            return
        ratio, size = replica.snapshot_ratio, replica._snapshot_size
        if ratio is not None and size is not None and replica._since_snapshot_bytes < ratio * size:
            return
        data = replica.machine.snapshot()  # the state exactly at applied_position
        try:
            self._tasks.start_soon(self._save_quietly, replica.applied_position, data)
        except RuntimeError:  # the leader's block is ending
            return
        self._snapshotting = True

    async def _save_quietly(self, pos: LogPosition, data: bytes | Iterable[bytes]) -> None:
        try:
            await self._save(pos, data)
        except WalkitError as exc:
            log.warning("replica_snapshot_failed", log=self._replica.log.name, error=str(exc))
        finally:
            self._snapshotting = False

    async def _save(self, pos: LogPosition, data: bytes | Iterable[bytes]) -> None:
        replica = self._replica
        replica._since_snapshot = 0
        replica._since_snapshot_bytes = 0
        owner = replica.log
        saved = await owner.save_snapshot(pos, _cooperative(data))
        replica._snapshot_size = saved.size
        if replica.truncate:
            kept = await owner.snapshots()
            if kept:
                await self._writer.truncate(kept[0].position)
        log.info("replica_snapshot_saved", log=owner.name, position=str(pos))


def _cooperative(data: object) -> bytes | AsyncIterator[bytes]:
    """A machine's snapshot as ``save_snapshot`` takes it: an iterable of chunks is made in
    turns, one chunk each, so other tasks run between them."""
    if isinstance(data, bytes):
        return data
    if isinstance(data, bytearray | memoryview):
        return bytes(data)
    if isinstance(data, str) or not isinstance(data, Iterable):
        raise InvalidArgumentError(
            f"a snapshot must be bytes or an iterable of bytes, not {type(data).__name__}"
        )
    parts: Iterable[object] = data

    async def chunks() -> AsyncIterator[bytes]:
        it = iter(parts)
        while True:
            try:
                chunk = next(it)
            except StopIteration:
                return
            except Exception as exc:  # the machine's bug: this snapshot fails, not the leader
                raise InvalidArgumentError(
                    f"the state machine's snapshot raised {type(exc).__name__}: {exc}"
                ) from exc
            if not isinstance(chunk, bytes | bytearray | memoryview):
                raise InvalidArgumentError(
                    f"snapshot chunks must be bytes, not {type(chunk).__name__}"
                )
            yield bytes(chunk)
            await anyio.lowlevel.checkpoint()

    return chunks()

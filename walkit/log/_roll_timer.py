"""Rolls by time: a writer's current ledger is rolled once it is ``roll_interval`` seconds old
and holds a record, even when no append comes (Pulsar's
``managedLedgerMaxLedgerRolloverTimeMinutes``).

Retention by age counts closed ledgers only (a ledger's age is the creation time of the next
one), so without this a quiet log keeps its records in one open ledger forever and never ages
out. An empty ledger is not rolled (that would only cost a ledger): its clock starts again, so
a record waits at most about ``roll_interval`` in an open ledger whenever it arrives. A quiet
log also gets a retention pass once per interval, which drops what aged out meanwhile.

The clock is the event loop's (a simulation's MockClock); the roll itself is the writer's
ordinary roll (:meth:`TimedWriter.roll_aged`), through the same gate appends queue on.
"""

from __future__ import annotations

from typing import Protocol

import anyio

from walkit.errors import WalkitError

__all__ = ["TimedWriter", "roll_by_time"]


class TimedWriter(Protocol):
    """What :func:`roll_by_time` needs of a log writer (its :class:`~walkit.log._roll.LedgerRoller`)."""

    def stopped(self) -> bool:
        """Closing, closed, fenced or failed: no more rolls."""
        ...

    #: The loop time the current ledger's age counts from.
    roll_clock_from: float

    @property
    def holds_records(self) -> bool:
        """Whether the current ledger holds an acknowledged record."""
        ...

    async def roll_aged(self) -> None:
        """Roll now (through the writer's gate); a failed roll is retried later."""
        ...

    def quiet(self) -> None:
        """The ledger is old and empty: run retention in the background."""
        ...


async def roll_by_time(writer: TimedWriter, interval: float, retry_delay: float) -> None:
    """Roll ``writer``'s ledgers every ``interval`` seconds of age until it stops (cancel to
    end it sooner). Never raises a walkit error: appends report what went wrong."""
    while not writer.stopped():
        started = writer.roll_clock_from
        await anyio.sleep_until(started + interval)
        if writer.stopped():
            return
        if writer.roll_clock_from != started:
            continue  # rolled meanwhile (by size): the new ledger's clock runs
        if not writer.holds_records:
            writer.roll_clock_from = anyio.current_time()
            writer.quiet()
            continue
        try:
            await writer.roll_aged()
        except WalkitError:
            return  # fenced, or the log was deleted: the writer's appends say so
        if writer.roll_clock_from == started and not writer.stopped():
            await anyio.sleep(retry_delay)  # the roll failed; the writer tries it again

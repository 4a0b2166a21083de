"""A bookie never replaces a stored entry with other bytes; the same bytes are an idempotent
success. This closes the hole where anyone who knew a ledger's (public) master key could rewrite
acknowledged records with a RECOVERY add."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

import walkit
from tests._cluster import process_cluster
from tests.bookie._helpers import config, connect, packet, payload_for, running_bookie
from walkit._core.digest import DigestManager, master_key
from walkit._core.distribution import write_set
from walkit._core.wire import AddFlag, AddRequest, AddResponse, ReadLacFlag, StatusCode
from walkit.errors import EntryExistsError, error_for_code

RECOVERY = AddFlag.RECOVERY


async def test_other_bytes_are_refused_same_bytes_are_idempotent(tmp_path: Path) -> None:
    async with running_bookie(config([tmp_path / "d"])) as (bookie, bid), connect(bid) as c:
        for e in range(3):
            assert (await c.add(1, e, payload_for(1, e), lac=e - 1)).status is StatusCode.OK
        # A plain add and a recovery add of other bytes, before and after fencing.
        assert (await c.add(1, 1, b"forged", lac=0)).status is StatusCode.ENTRY_EXISTS
        assert (await c.read_lac(1, flags=ReadLacFlag.FENCE)).status is StatusCode.OK
        forged = await c.add(1, 2, b"pay mallory 9999 EUR", lac=1, flags=RECOVERY)
        assert forged.status is StatusCode.ENTRY_EXISTS
        # A different LAC in the header is other bytes too.
        assert (await c.add(1, 0, payload_for(1, 0), lac=0, flags=RECOVERY)).status is (
            StatusCode.ENTRY_EXISTS
        )
        # The bytes a writer or a recovery sends again are a success, and nothing changes.
        same = await c.add(1, 2, payload_for(1, 2), lac=1, flags=RECOVERY)
        assert same.status is StatusCode.OK
        for e in range(3):
            assert (await c.read(1, e)).packet == packet(1, e, payload_for(1, e), e - 1)
        assert bookie.handler.stats.adds_refused_rewrite == 3
        assert bookie.handler.stats.adds_idempotent == 1
        # Entries past the last stored one are new, as before.
        new = await c.add(1, 3, b"recovered", lac=1, flags=RECOVERY)
        assert new.status is StatusCode.OK


async def test_entries_on_disk_are_checked_too(tmp_path: Path) -> None:
    """After a checkpoint the entries are out of the write cache: the add looks on disk."""
    cfg = config([tmp_path / "d"])
    async with running_bookie(cfg) as (bookie, bid), connect(bid) as c:
        for e in range(4):
            await c.add(7, e, payload_for(7, e), lac=e - 1)
        await bookie.storage.checkpoint()
        assert bookie.storage.cached_entry(7, 2) is None
        assert (await c.add(7, 2, b"forged", lac=1, flags=RECOVERY)).status is (
            StatusCode.ENTRY_EXISTS
        )
        assert (await c.add(7, 2, payload_for(7, 2), lac=1)).status is StatusCode.OK
        # A hole below the last entry (striping) is not stored here: it is written.
        await c.add(8, 0, b"a")
        await c.add(8, 2, b"c", lac=0)
        await bookie.storage.checkpoint()
        assert (await c.add(8, 1, b"b", lac=0, flags=RECOVERY)).status is StatusCode.OK
        assert (await c.read(8, 1)).packet == packet(8, 1, b"b", 0)
    # And after a restart (journal replay, then the entry logs).
    async with running_bookie(cfg) as (_, bid), connect(bid) as c:
        assert (await c.add(7, 3, b"forged", lac=2, flags=RECOVERY)).status is (
            StatusCode.ENTRY_EXISTS
        )
        assert (await c.read(7, 3)).packet == packet(7, 3, payload_for(7, 3), 2)


async def test_two_adds_of_one_entry_in_flight_cannot_both_land(tmp_path: Path) -> None:
    async with running_bookie(config([tmp_path / "d"])) as (_, bid), connect(bid) as c:
        first = c.add_request(3, 0, b"genuine")
        second = c.add_request(3, 0, b"forged", flags=RECOVERY)
        again = c.add_request(3, 0, b"genuine")
        answers = await c.call_many([first, second, again])
        statuses = [a.status for a in answers if isinstance(a, AddResponse)]
        assert statuses == [StatusCode.OK, StatusCode.ENTRY_EXISTS, StatusCode.OK]
        assert (await c.read(3, 0)).packet == packet(3, 0, b"genuine")


async def test_two_adds_of_one_hole_in_flight_cannot_both_land(tmp_path: Path) -> None:
    """Holes below the last entry go through the disk lookup: the first add of a hole is stored
    while the second one's lookup runs in a thread, and that lookup, which found nothing on
    disk, must not make the second one "absent" too (an acknowledged entry was overwritten)."""
    count = 300
    async with running_bookie(config([tmp_path / "d"])) as (bookie, bid), connect(bid) as c:
        assert (await c.add(4, count, b"last")).status is StatusCode.OK
        requests = []
        for e in range(count):
            requests.append(c.add_request(4, e, b"genuine-%d" % e))
            requests.append(c.add_request(4, e, b"forged-%d" % e, flags=RECOVERY))
        answers = await c.call_many(requests)
        statuses = [a.status for a in answers if isinstance(a, AddResponse)]
        assert statuses == [StatusCode.OK, StatusCode.ENTRY_EXISTS] * count
        for e in range(count):
            assert (await c.read(4, e)).packet == packet(4, e, b"genuine-%d" % e)
        assert bookie.handler.stats.adds_refused_rewrite == count


def test_the_status_maps_to_its_error() -> None:
    error = error_for_code(int(StatusCode.ENTRY_EXISTS), "x")
    assert isinstance(error, EntryExistsError)
    assert not error.retryable


@pytest.mark.processes
async def test_a_stranger_cannot_rewrite_an_acknowledged_log_record(tmp_path: Path) -> None:
    """The probe's attack, replayed on real bookie processes: a RECOVERY add of a forged entry,
    with a valid CRC32C, sent to every bookie of the entry's write set. Logs now get a random
    password, so a stranger with the old public (empty) password is refused outright; even one
    who learnt the log's password cannot replace the acknowledged entry."""
    url = f"sqlite:///{tmp_path / 'metadata.db'}"
    with process_cluster(url, tmp_path, 3):
        async with walkit.Client.connect(url) as client:
            log = await walkit.Log.open(client, "payments")
            async with log.writer() as writer:
                pos = await writer.append(b"pay alice 20 EUR")
                await writer.append(b"pay bob 5 EUR")
            ledger_id = next(
                ll.ledger_id for ll in (await log.metadata()).ledgers if ll.seq == pos.ledger_seq
            )
            md = await client.ledger_metadata(ledger_id)
            password = log.options.password
            assert password != b""
            forged = DigestManager(ledger_id, md.digest, password).encode(
                pos.entry_id, -1, 20, b"pay mallory 9999 EUR"
            )
            ensemble = md.ensemble_for(pos.entry_id)
            slots = write_set(pos.entry_id, md.ensemble_size, md.write_quorum)
            for bookie in (ensemble[slot] for slot in slots):
                async with connect(bookie) as raw:
                    for key, status in (
                        (master_key(b""), StatusCode.UNAUTHORIZED_ACCESS),
                        (master_key(password), StatusCode.ENTRY_EXISTS),
                    ):
                        for flags in (AddFlag.NONE, RECOVERY):
                            answer = await raw.call(
                                AddRequest(
                                    raw.next_id(), ledger_id, pos.entry_id, key, forged, flags
                                )
                            )
                            assert isinstance(answer, AddResponse)
                            assert answer.status is status, (bookie, key, flags)
            with trio.fail_after(30):
                records = [r async for r in _read_all(log, 2)]
            assert [r.payload for r in records] == [b"pay alice 20 EUR", b"pay bob 5 EUR"]


async def _read_all(log: walkit.Log, count: int) -> AsyncIterator[walkit.LogRecord]:
    n = 0
    async for rec in log.reader(walkit.LogPosition.EARLIEST):
        yield rec
        n += 1
        if n == count:
            return

"""Ledgers keep their password in their metadata, and autorecovery rereplicates them with it
(in-process bookies, memory metadata; rereplication from it: test_rereplicator.py, and on real processes
test_processes.py).

A ledger whose creator opted out (``store_password=False``) stays marked, said once, until an
operator gives the password; a ledger written before ledgers kept it is rereplicated as it was then
(b"", its log's password, the operator's).
"""

from __future__ import annotations

import base64
import json
import logging
import random
from pathlib import Path
from typing import Any

import pytest
import trio

from tests._release_0_1 import ledger_metadata_bytes
from tests.autorecovery.test_rereplicator import FAST, HANG_GUARD, read_all
from tests.client.conftest import cluster, connect
from walkit import BookieId, Log
from walkit.autorecovery import (
    AutorecoveryOptions,
    ReplicationWorker,
    RereplicationOutcome,
    rereplicate_bookie,
)
from walkit.client import Client
from walkit.errors import ConfigurationError, InvalidArgumentError, UnauthorizedAccessError
from walkit.metadata import UnderreplicationManager, ledger_path


async def stored_doc(client: Client, ledger_id: int) -> dict[str, object]:
    """The ledger's node as the metadata store holds it."""
    node = await client.metadata_store.get(ledger_path(ledger_id))
    doc: dict[str, object] = json.loads(node.value)
    return doc


async def write(
    client: Client, password: bytes, *, digest: str = "crc32c", store_password: bool = True
) -> tuple[int, list[bytes]]:
    lw = await client.create_ledger(
        3, 3, 2, digest=digest, password=password, store_password=store_password
    )
    payloads = [b"%s entry %d " % (password, i) * (1 + i % 5) for i in range(30)]
    await lw.append_batch(payloads)
    await lw.close()
    return lw.id, payloads


async def read_back(client: Client, written: dict[int, tuple[bytes, list[bytes]]]) -> None:
    for lid, (password, payloads) in written.items():
        await read_all(client, {lid: payloads}, password)


async def test_create_ledger_keeps_the_password_unless_told_not_to(
    memory_url: str, tmp_path: Path
) -> None:
    async with cluster(memory_url, tmp_path, 3), connect(memory_url) as client:
        kept = await client.create_ledger(3, 2, 2, password=b"pw")
        assert kept.metadata.has_password and kept.metadata.password == b"pw"
        assert base64.b64decode(str((await stored_doc(client, kept.id))["password"])) == b"pw"
        out = await client.create_ledger(3, 2, 2, password=b"pw", store_password=False)
        assert not out.metadata.has_password
        assert "password" not in await stored_doc(client, out.id)
        # A stored password opens nothing by itself: opens still check the one given.
        with pytest.raises(UnauthorizedAccessError):
            await client.open_ledger(kept.id, password=b"wrong")
        for bad in ("yes", 1, None):
            with pytest.raises(InvalidArgumentError, match="store_password must be a bool"):
                await client.create_ledger(3, 2, 2, store_password=bad)  # type: ignore[arg-type]


async def test_a_logs_ledgers_follow_the_logs_choice(memory_url: str, tmp_path: Path) -> None:
    """Data, snapshot and staged ledgers alike, whichever handle creates them: the choice is
    the log's, fixed when it is created."""
    async with cluster(memory_url, tmp_path, 3), connect(memory_url) as client:
        with pytest.raises(ConfigurationError, match="needs the log's own password"):
            Log.open(client, "refused", store_password=False)
        with pytest.raises(ConfigurationError, match="must be a bool"):
            Log.open(client, "refused", store_password="no", password=b"own")  # type: ignore[arg-type]

        async def ledgers_of(name: str, **options: Any) -> list[int]:
            async with Log.open(client, name, **options) as log:
                async with log.writer() as writer:
                    position = await writer.append(b"record")
                await log.save_snapshot(position, b"state")
                staged = await log.stage_ledger("job", 0)
                await staged.close()
                md = await log.metadata()
                return [*sorted(md.ledger_ids()), staged.id]

        kept = await ledgers_of("kept", password=b"own")
        generated = await ledgers_of("generated")
        out = await ledgers_of("out", password=b"own", store_password=False)
        # A second handle that says nothing follows the log's choice.
        out += await ledgers_of("out", password=b"own")
        assert len(kept) == len(generated) == 3 and len(set(out)) > 3
        for lid in kept:
            assert (await client.ledger_metadata(lid)).password == b"own"
        async with Log.open(client, "generated") as log:
            stored = log.options.password
        assert stored and len(stored) == 32
        for lid in generated:
            assert (await client.ledger_metadata(lid)).password == stored
        for lid in out:
            assert not (await client.ledger_metadata(lid)).has_password
        with pytest.raises(ConfigurationError, match="exists with store_password=False"):
            await Log.open(client, "out", password=b"own", store_password=True)
        with pytest.raises(ConfigurationError, match="exists with store_password=True"):
            await Log.open(client, "kept", password=b"own", store_password=False)


async def mark_all(client: Client, ledgers: list[int], lost: BookieId) -> None:
    urm = UnderreplicationManager(client.metadata_store)
    await urm.ensure_paths()
    for lid in ledgers:
        await urm.mark(lid, [lost])


async def test_an_opted_out_ledger_stays_marked_and_says_so_once(
    memory_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="walkit")
    with trio.fail_after(HANG_GUARD):
        async with cluster(memory_url, tmp_path, 4) as bookies, connect(memory_url) as client:
            lid, payloads = await write(client, b"own", store_password=False)
            lost = (await client.ledger_metadata(lid)).fragments[0][1][0]
            await bookies.stop(bookies.index_of(lost))
            await mark_all(client, [lid], lost)
            worker = ReplicationWorker(client, name="w", options=FAST, rng=random.Random(1))
            for _ in range(3):
                assert await worker.run_once() == 0
            assert worker.outcomes == {RereplicationOutcome.NEEDS_PASSWORD: 3}
            urm = UnderreplicationManager(client.metadata_store)
            assert await urm.list_ids() == [lid]  # the marker stays, free for the next pass
            said = [
                r
                for r in caplog.records
                if "rereplication_needs_password" in r.getMessage() and r.levelno >= logging.INFO
            ]
            assert len(said) == 1 and said[0].levelno == logging.WARNING  # once, not per pass
            message = said[0].getMessage()
            assert f"ledger_id={lid}" in message and "its password is needed" in message
            assert "store_password=False" in message and "walkit recover" in message
            # The operator gives it: the next worker that knows it rereplicates the ledger.
            knowing = ReplicationWorker(
                client,
                name="k",
                options=AutorecoveryOptions(passwords=[b"own"], poll_interval=0.2),
            )
            assert await knowing.run_once() == 1
            assert await urm.list_ids() == []
            # The first worker forgets it said so: a later loss would be said again.
            assert lid in worker.rereplicator.last_problem
            assert await worker.run_once() == 0
            assert worker.rereplicator.last_problem == {}
            assert lost not in (await client.ledger_metadata(lid)).all_bookies()
            await read_all(client, {lid: payloads}, b"own")


async def test_ledgers_written_before_passwords_were_kept_are_rereplicated_as_before(
    memory_url: str, tmp_path: Path
) -> None:
    """Metadata as 0.1.0 wrote it (no password key), written through the store: b"" and a
    log's generated password are found as before; a password of the ledger's own waits for
    the operator, as before."""
    with trio.fail_after(HANG_GUARD):
        async with cluster(memory_url, tmp_path, 4) as bookies, connect(memory_url) as client:
            written: dict[int, tuple[bytes, list[bytes]]] = {}
            for password in (b"", b"own"):
                lid, payloads = await write(client, password)
                written[lid] = (password, payloads)
            async with Log.open(client, "old", ensemble_size=3, write_quorum=3) as log:
                async with log.writer() as writer:
                    await writer.append_batch([b"log record %d" % i for i in range(20)])
                log_password = log.options.password
                (log_ledger,) = (await log.metadata()).ledger_ids()
            reader = await client.open_ledger(log_ledger, password=log_password)
            log_entries = [e.payload for e in await reader.read(0, reader.last_add_confirmed)]
            written[log_ledger] = (log_password, log_entries)
            store = client.metadata_store
            for lid in written:
                md = await client.ledger_metadata(lid)
                node = await store.get(ledger_path(lid))
                await store.set(ledger_path(lid), ledger_metadata_bytes(md), node.version)
                assert not (await client.ledger_metadata(lid)).has_password
            # With 4 bookies and E = 3, the bookie of the log's ledger that no other lists
            # may differ: lose one that every ledger lists.
            common = set.intersection(
                *[(await client.ledger_metadata(lid)).all_bookies() for lid in written]
            )
            lost = min(common)
            await bookies.stop(bookies.index_of(lost))
            await mark_all(client, list(written), lost)
            worker = ReplicationWorker(client, name="w", options=FAST, rng=random.Random(2))
            assert await worker.run_once() == 2
            assert worker.outcomes == {
                RereplicationOutcome.REREPLICATED: 2,
                RereplicationOutcome.NEEDS_PASSWORD: 1,
            }
            own = next(lid for lid, (pw, _) in written.items() if pw == b"own")
            assert await UnderreplicationManager(store).list_ids() == [own]
            report = await rereplicate_bookie(
                client, lost, options=AutorecoveryOptions(passwords=[b"own"])
            )
            assert report.ok and report.rereplicated == [own], report.failed
            for lid in written:
                md = await client.ledger_metadata(lid)
                assert lost not in md.all_bookies() and not md.has_password
            await read_back(client, written)

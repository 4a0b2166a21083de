"""Fragments copied by their replacement (COPY_FRAGMENT): a rereplicator outside the replacement asks
it to copy the lost copies from the replicas itself, so the bytes do not pass through the
rereplicator. Real bookies in this process (disk storage, loopback TCP, memory metadata)."""

from __future__ import annotations

import logging
from pathlib import Path

import attrs
import pytest
import trio

from tests._log_events import log_event
from tests.autorecovery.test_rereplicator import UNLIMITED, read_all, write_ledgers
from tests.bookie._helpers import KEY, config, running_bookie
from tests.bookie._helpers import connect as raw_connect
from tests.client.conftest import cluster, connect
from tests.security.test_authorization import RULES, TOKENS, _refusal, as_principal
from walkit._core.digest import master_key
from walkit._core.wire import (
    MAX_COPY_SKIP,
    CopyFragmentRequest,
    CopyFragmentResponse,
    StatusCode,
    decode_message,
    encode_frame,
)
from walkit.autorecovery import rereplicate_bookie
from walkit.client import client_services
from walkit.errors import LocalProtocolError, RemoteProtocolError

HANG_GUARD = 60
SERVING = {"fragment_copies": True}


def test_copy_fragment_messages_round_trip_and_refuse_malformed_bodies() -> None:
    request = CopyFragmentRequest(7, 3, 100, 2, 110, 140, b"k" * 20, ("127.0.0.1:3181", "b:1"))
    body = encode_frame(request)[4:]
    assert decode_message(body) == request
    answer = CopyFragmentResponse(7, StatusCode.IO_ERROR, 3, 5, 4096, "why")
    assert decode_message(encode_frame(answer)[4:]) == answer
    bare = encode_frame(CopyFragmentRequest(7, 3, 0, 0, 0, 0, b""))[4:]
    too_many = bytearray(bare)
    too_many[-1] = MAX_COPY_SKIP + 1  # the count of names to skip
    for bad in [
        body[:-1],  # the last name cut short
        body + b"\0",  # bytes after the last name
        bare[:-1],  # the fixed fields cut
        bytes(too_many),
    ]:
        with pytest.raises(RemoteProtocolError):
            decode_message(bad)
    with pytest.raises(LocalProtocolError):
        encode_frame(CopyFragmentRequest(7, 3, 0, 0, 0, 0, b"", ("x",) * (MAX_COPY_SKIP + 1)))


async def test_recover_has_the_replacement_copy_the_fragments(
    memory_url: str, tmp_path: Path
) -> None:
    """The replacement reads the lost copies from the replicas and stores them: the rereplicator
    never reads an entry, and the replacement alone can serve them afterwards."""
    with trio.fail_after(HANG_GUARD):
        async with (
            cluster(memory_url, tmp_path, 3, options=SERVING) as bookies,
            connect(memory_url) as client,
        ):
            written = await write_ledgers(client, 3, 50, size=3000)
            ensemble = (await client.ledger_metadata(next(iter(written)))).fragments[0][1]
            free = await bookies.start(3)
            lost = ensemble[0]
            await bookies.stop(bookies.index_of(lost))
            replacement = bookies.objects[bookies.index_of(free)]
            stored_before = replacement.storage.stats.copies_stored
            async with connect(memory_url) as rereplicator_client:
                report = await rereplicate_bookie(rereplicator_client, lost, options=UNLIMITED)
                connected = {
                    c.bookie
                    for c in client_services(rereplicator_client).context.pool.connections()
                }
            assert report.ok and sorted(report.rereplicated) == sorted(written)
            assert report.entries == 3 * 50 and report.bytes > 3 * 50 * 3000
            assert report.entries_by_replacements == report.entries
            # The rereplicator talked to the replacement only: no entry was read through it.
            assert connected == {free}
            assert replacement.storage.stats.copies_stored - stored_before == 3 * 50
            for other in ensemble[1:]:
                await bookies.stop(bookies.index_of(other))
            async with connect(memory_url) as reader:
                await read_all(reader, written)


@pytest.mark.parametrize(
    ("serving", "password", "reason"),
    [(False, b"", "copies no fragments"), (True, b"pw", "password is needed")],
)
async def test_a_replacement_that_cannot_copy_a_fragment_gets_the_copies_sent(
    memory_url: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    serving: bool,
    password: bytes,
    reason: str,
) -> None:
    """A bookie without fragment copies (the option off, an older bookie), or one that cannot
    find the ledger's password (not kept in its metadata: only the operator gave it), refuses
    the request; the rereplicator copies through itself, and says why."""
    options = SERVING if serving else {}
    with trio.fail_after(HANG_GUARD):
        async with (
            cluster(memory_url, tmp_path, 4, options=options) as bookies,
            connect(memory_url) as client,
        ):
            written = await write_ledgers(client, 2, 30, password=password, store_password=False)
            lost = (await client.ledger_metadata(next(iter(written)))).fragments[0][1][0]
            await bookies.stop(bookies.index_of(lost))
            with caplog.at_level(logging.INFO, logger="walkit"):
                report = await rereplicate_bookie(
                    client, lost, options=attrs.evolve(UNLIMITED, passwords=[password])
                )
            assert report.ok and report.ledgers and report.entries == 30 * len(report.ledgers)
            assert report.entries_by_replacements == 0
            said = [r for r in caplog.records if "rereplication_relaying_copies" in r.msg]
            # Said once per replacement (later refusals are logged at debug).
            lines = [r.getMessage() for r in said]
            assert lines and all(reason in line for line in lines)
            assert len({line.split("bookie_id=")[1].split()[0] for line in lines}) == len(lines)
            await read_all(client, written, password)


async def test_bad_copy_fragment_requests_are_answered_clearly(
    memory_url: str, tmp_path: Path
) -> None:
    """Requests that do not match the metadata, or carry another master key, are refused with
    a reason; nothing is stored and the bookie serves on."""
    with (
        trio.fail_after(HANG_GUARD),
        log_event("walkit_bookie", "fragment_copies_on", count=4) as all_serving,
    ):
        async with (
            cluster(memory_url, tmp_path, 4, options=SERVING) as bookies,
            connect(memory_url) as client,
        ):
            written = await write_ledgers(client, 1, 20)
            (lid,) = written
            ensemble = (await client.ledger_metadata(lid)).fragments[0][1]
            outside = next(b for b in bookies.ids.values() if b not in ensemble)
            open_writer = await client.create_ledger(3, 3, 2)
            await open_writer.append(b"open")
            key = master_key(b"")
            await all_serving.wait()  # every bookie's copier is connected to the store
            target = bookies.objects[bookies.index_of(outside)]
            stored_before = target.storage.stats.copies_stored
            cases = [
                (CopyFragmentRequest(1, 999_999, 0, 0, 0, 5, key), "NO_SUCH_LEDGER", "no ledger"),
                (
                    CopyFragmentRequest(2, open_writer.id, 0, 0, 0, 0, key),
                    "BAD_REQUEST",
                    "not closed",
                ),
                (CopyFragmentRequest(3, lid, 1, 0, 0, 5, key), "BAD_REQUEST", "no fragment"),
                (CopyFragmentRequest(4, lid, 0, 3, 0, 5, key), "BAD_REQUEST", "position 3"),
                (CopyFragmentRequest(5, lid, 0, 0, 10, 25, key), "BAD_REQUEST", "not within"),
                (CopyFragmentRequest(6, lid, 0, 0, 5, 4, key), "BAD_REQUEST", "not within"),
                (
                    CopyFragmentRequest(7, lid, 0, 0, 0, 5, master_key(b"other")),
                    "UNAUTHORIZED_ACCESS",
                    "master key",
                ),
            ]
            async with raw_connect(outside) as c:
                for request, status, why in cases:
                    answer = await c.call(request)
                    assert isinstance(answer, CopyFragmentResponse), answer
                    assert answer.status.name == status and why in answer.text, answer
                    assert answer.entries == 0
            inside = ensemble[1]
            async with raw_connect(inside) as c:
                answer = await c.call(CopyFragmentRequest(8, lid, 0, 0, 0, 5, key))
                assert isinstance(answer, CopyFragmentResponse)
                assert answer.status is StatusCode.BAD_REQUEST and "ensemble" in answer.text
            assert target.storage.stats.copies_stored == stored_before
            # A good request copies the run asked for, and the bookie serves as before.
            async with raw_connect(outside) as c:
                answer = await c.call(CopyFragmentRequest(9, lid, 0, 0, 3, 7, key))
                assert isinstance(answer, CopyFragmentResponse)
                assert answer.status is StatusCode.OK and answer.entries == 5, answer
            assert target.storage.stats.copies_stored - stored_before == 5
            reader = await client.open_ledger(lid)
            got = await reader.read(0, reader.last_add_confirmed)
            assert [e.payload for e in got] == written[lid]


async def test_copy_fragment_requests_follow_the_fence_rules(tmp_path: Path) -> None:
    """A COPY_FRAGMENT request is a recovery add of its ledger: its owner and the principals
    of a fence rule may make it, others are refused before anything is looked up."""
    tokens = tmp_path / "tokens"
    tokens.write_text("".join(f"{p}:{t}\n" for p, t in TOKENS.items()))
    tokens.chmod(0o600)
    cfg = config([tmp_path / "d"], auth="token", auth_token_file=str(tokens), authorize=RULES)
    key = KEY  # the master key the helper's adds register
    async with running_bookie(cfg) as (_, bid):
        with trio.fail_after(20):
            async with as_principal(bid, "writer") as w:
                assert (await w.add(1, 0, b"zero")).status is StatusCode.OK
            async with as_principal(bid, "reader") as r:
                _refusal(
                    await r.call(CopyFragmentRequest(1, 1, 0, 0, 0, 0, key)), "fence", "reader"
                )
                _refusal(
                    await r.call(CopyFragmentRequest(2, 2, 0, 0, 0, 0, key)), "fence", "reader"
                )
            async with as_principal(bid, "operator") as o:
                # Allowed by the fence rule; this bookie (no metadata store) copies nothing.
                answer = await o.call(CopyFragmentRequest(3, 1, 0, 0, 0, 0, key))
                assert isinstance(answer, CopyFragmentResponse)
                assert answer.status is StatusCode.BAD_REQUEST
                assert "copies no fragments" in answer.text

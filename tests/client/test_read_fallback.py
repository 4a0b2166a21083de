"""Readers fall back to the next replica of the write set on a bad digest or a missing copy."""

from __future__ import annotations

from pathlib import Path

from tests.client.conftest import cluster, connect
from walkit._core.digest import HEADER_SIZE, DigestManager, master_key
from walkit._core.types import BookieId
from walkit._core.wire import AddRequest, AddResponse, StatusCode, WriteLacRequest
from walkit.client import Client, client_services

PASSWORD = b"fallback"


async def put(
    client: Client, bookie: BookieId, ledger_id: int, entry_id: int, packet: bytes
) -> None:
    resp = await client_services(client).context.call(
        bookie, lambda rid: AddRequest(rid, ledger_id, entry_id, master_key(PASSWORD), packet)
    )
    assert isinstance(resp, AddResponse) and resp.status is StatusCode.OK


async def test_bad_digest_and_missing_copy_go_to_the_next_replica(
    memory_url: str, tmp_path: Path
) -> None:
    async with cluster(memory_url, tmp_path, 3), connect(memory_url) as client:
        # The ledger's entries are written by hand, so each replica holds exactly what we say.
        lw = await client.create_ledger(3, 3, 2, password=PASSWORD)
        ensemble = lw.metadata.current_ensemble
        first, second, third = (
            ensemble[s] for s in client_services(client).context.read_order(ensemble, [0, 1, 2])
        )
        digest = DigestManager(lw.id, "crc32c", PASSWORD)
        good = [digest.encode(e, e - 1, 0, f"good-{e}".encode()) for e in range(3)]
        corrupt = good[0][:-1] + bytes([good[0][-1] ^ 0xFF])
        # Entry 0: the replica asked first has a corrupt copy.
        await put(client, first, lw.id, 0, corrupt)
        await put(client, second, lw.id, 0, good[0])
        await put(client, third, lw.id, 0, good[0])
        # Entry 1: the first two replicas do not have it.
        await put(client, third, lw.id, 1, good[1])
        # Entry 2: the first replica's copy has a damaged digest.
        damaged = bytearray(good[2])
        damaged[HEADER_SIZE] ^= 0x01
        await put(client, first, lw.id, 2, bytes(damaged))
        await put(client, second, lw.id, 2, good[2])
        for bookie in ensemble:
            await client_services(client).context.call(
                bookie, lambda rid: WriteLacRequest(rid, lw.id, 2, master_key(PASSWORD))
            )
        lr = await client.open_ledger(lw.id, password=PASSWORD)
        assert lr.last_add_confirmed == 2
        entries = await lr.read(0, 2)
        assert [e.payload for e in entries] == [b"good-0", b"good-1", b"good-2"]

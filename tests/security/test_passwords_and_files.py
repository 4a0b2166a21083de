"""Delete needs the password; password hashes are salted; stored files are private
(the parts without TLS)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import attrs
import pytest

from tests.bookie._helpers import config, connect, running_bookie
from tests.client.conftest import cluster
from tests.client.conftest import connect as client_connect
from walkit._core.ledger_metadata import legacy_password_hash, password_hash, password_matches
from walkit._core.wire import StatusCode
from walkit.client import client_services
from walkit.errors import InvalidArgumentError, UnauthorizedAccessError
from walkit.metadata import open_metadata_store

PW = b"correct horse"


async def test_delete_needs_the_password(memory_url: str, tmp_path: Path) -> None:
    async with cluster(memory_url, tmp_path, 3), client_connect(memory_url) as client:
        lw = await client.create_ledger(3, 2, 2, password=PW)
        await lw.append(b"keep me")
        await lw.close()
        for wrong in (b"", b"guess"):
            with pytest.raises(UnauthorizedAccessError):
                await client.delete_ledger(lw.id, password=wrong)
        assert lw.id in await client.list_ledgers()
        await client.delete_ledger(lw.id, password=PW)
        assert lw.id not in await client.list_ledgers()
        # A ledger made without a password is deleted without one (the old call).
        open_one = await client.create_ledger(3, 2, 2)
        await open_one.close()
        await client.delete_ledger(open_one.id)
        assert open_one.id not in await client.list_ledgers()


async def test_password_hashes_are_salted_and_old_ones_still_open(
    memory_url: str, tmp_path: Path
) -> None:
    async with cluster(memory_url, tmp_path, 3), client_connect(memory_url) as client:
        a = await client.create_ledger(3, 2, 2, password=PW)
        b = await client.create_ledger(3, 2, 2, password=PW)
        ha, hb = a.metadata.password_sha256, b.metadata.password_sha256
        assert ha.startswith("v2$") and hb.startswith("v2$") and ha != hb
        assert legacy_password_hash(PW) not in (ha, hb)
        await a.append(b"x")
        await a.close()
        # A ledger written before salting (format 1 hash) still opens with its password.
        context = client_services(client).context
        md, version = await context.ledgers.read(a.id)
        await context.ledgers.write(
            attrs.evolve(md, password_sha256=legacy_password_hash(PW)), version
        )
        reader = await client.open_ledger(a.id, password=PW)
        assert [e.payload for e in await reader.read(0, 0)] == [b"x"]
        with pytest.raises(UnauthorizedAccessError):
            await client.open_ledger(a.id, password=b"nope")
        with pytest.raises(UnauthorizedAccessError):
            await client.delete_ledger(a.id, password=b"nope")
        await client.delete_ledger(a.id, password=PW)
        await b.close()


def test_password_matching() -> None:
    salted = password_hash(PW, b"0123456789abcdef")
    assert password_matches(salted, PW)
    assert not password_matches(salted, PW + b"!")
    assert password_matches(legacy_password_hash(PW), PW)
    assert not password_matches(legacy_password_hash(PW), b"")
    for junk in ("", "v2$", "v2$zz$00", "v2$0011$", "abc", "v3$00$00"):
        assert not password_matches(junk, PW)
    with pytest.raises(InvalidArgumentError):
        password_hash(PW, b"short")


def _loose(root: Path) -> list[str]:
    """Everything under ``root`` that its group or others may read, write or enter."""
    found = []
    for path in [root, *root.rglob("*")]:
        if stat.S_IMODE(path.lstat().st_mode) & 0o077:
            found.append(f"{path.relative_to(root.parent)} {stat.S_IMODE(path.lstat().st_mode):o}")
    return found


def _modes(directory: Path) -> dict[str, int]:
    return {p.name: stat.S_IMODE(p.stat().st_mode) for p in directory.iterdir()}


async def test_sqlite_metadata_files_are_private(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        store = await open_metadata_store(f"sqlite://{tmp_path / 'meta.db'}")
        try:
            await store.create("/x", b"y")
            modes = _modes(tmp_path)
            assert "meta.db" in modes and "meta.db-wal" in modes
            assert set(modes.values()) == {0o600}, modes
        finally:
            await store.aclose()
    finally:
        os.umask(old)


async def test_bookie_data_dirs_and_files_are_private(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        journal, ledgers = tmp_path / "journal", tmp_path / "ledgers"
        ledgers.mkdir(mode=0o755)  # made by an operator with a loose umask: tightened
        cfg = config([journal, ledgers], checkpoint_interval=3600)
        async with running_bookie(cfg) as (bookie, bid):
            async with connect(bid) as c:
                for e in range(5):
                    assert (await c.add(1, e, b"secret")).status is StatusCode.OK
            await bookie.storage.checkpoint()
        assert _loose(journal) == [] and _loose(ledgers) == []
    finally:
        os.umask(old)

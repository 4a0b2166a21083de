"""The lake's failures reach users as walkit's errors naming the log, the ledger and the file,
never as pyiceberg's or pyarrow's, and without the catalog's secrets: an unreachable S3
endpoint (retryable), a data file deleted or truncated under the log (the process lives on,
the log's metadata is unchanged), catalog properties pyiceberg cannot load (at Log.open)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests._cluster import free_port
from tests.client.conftest import cluster, connect
from tests.lake._s3 import CREDENTIALS, s3_server
from walkit import Log
from walkit.errors import (
    ConfigurationError,
    CorruptEntryError,
    CorruptLakeFileError,
    LakeAccessError,
    LakeUnavailableError,
    NoSuchLogError,
)
from walkit.lake._table import lake_of

SECRET = "hunter2-not-to-be-printed"
BASE_MS = int(time.time() * 1000)


async def _fill(log: Log, records: int) -> list[bytes]:
    payloads = []
    async with log.writer() as w:
        for i in range(records):
            payloads.append(b"r%04d" % i)
            await w.append(payloads[-1], timestamp=BASE_MS + i)
    return payloads


async def test_offload_to_an_unreachable_s3_endpoint_is_retryable_and_changes_nothing(
    memory_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)  # (no instance-metadata lookups: the chain has keys)
    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    async with (
        cluster(memory_url, tmp_path, 1),
        connect(memory_url, wall_clock=time.time) as client,
    ):
        log = await Log.open(
            client,
            "orders",
            roll_entries=5,
            ensemble_size=1,
            write_quorum=1,
            ack_quorum=1,
            offload_to="s3://nowhere/lake",
            offload_catalog={
                "type": "sql",
                "uri": f"sqlite:///{tmp_path / 'catalog.db'}",
                "warehouse": "s3://nowhere/lake",
                "s3.endpoint": endpoint,
                "s3.region": "us-east-1",
                "s3.access-key-id": "testing",
                "s3.secret-access-key": SECRET,
            },
        )
        payloads = await _fill(log, 12)
        before = (await log.metadata()).to_json()
        with pytest.raises(LakeUnavailableError) as raised:
            await log.offload()
        error = raised.value
        assert error.retryable, error
        text = str(error)
        # (a pass first brings the table's columns up to date: the lake fails there, before
        # any ledger, so the error names the log and the lake's location)
        assert "log orders" in text and "s3://nowhere/lake" in text, text
        assert "127.0.0.1" in text and SECRET not in text, text
        assert error.__cause__ is None and error.__suppress_context__, error
        assert (await log.metadata()).to_json() == before
        assert [r.payload async for r in log.reader(follow=False)] == payloads


async def test_offload_with_credentials_s3_refuses_is_an_access_error(
    memory_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    async with (
        cluster(memory_url, tmp_path, 1),
        connect(memory_url, wall_clock=time.time) as client,
    ):
        with s3_server(authenticate=True) as endpoint:
            log = await Log.open(
                client,
                "orders",
                roll_entries=5,
                ensemble_size=1,
                write_quorum=1,
                ack_quorum=1,
                offload_to="s3://guarded/lake",
                offload_catalog={
                    "type": "sql",
                    "uri": f"sqlite:///{tmp_path / 'catalog.db'}",
                    "warehouse": "s3://guarded/lake",
                    "s3.endpoint": endpoint,
                    "s3.region": "us-east-1",
                    "s3.access-key-id": "AKIAUNKNOWN",
                    "s3.secret-access-key": SECRET,
                },
            )
            await _fill(log, 12)
            before = (await log.metadata()).to_json()
            with pytest.raises(LakeAccessError, match="refused access") as raised:
                await log.offload()
            assert not raised.value.retryable
            assert isinstance(raised.value, LakeUnavailableError)
            assert "log orders" in str(raised.value) and SECRET not in str(raised.value)
            assert (await log.metadata()).to_json() == before


async def test_a_deleted_or_truncated_data_file_is_a_clear_error_and_nothing_changes(
    memory_url: str, tmp_path: Path, lake_opts: dict[str, Any]
) -> None:
    async with (
        cluster(memory_url, tmp_path, 1),
        connect(memory_url, wall_clock=time.time) as client,
    ):
        log = await Log.open(
            client,
            "orders",
            roll_entries=5,
            ensemble_size=1,
            write_quorum=1,
            ack_quorum=1,
            offload_deletion_lag=0,
            **lake_opts,
        )
        payloads = await _fill(log, 23)
        assert await log.offload() == 4
        md = await log.metadata()
        lake = lake_of(log.name, log.options.offload_to, log.options.offload_catalog)
        assert lake is not None
        first, second = md.offloaded[0], md.offloaded[1]
        [gone] = first.files
        [cut] = second.files
        lake.io.delete(gone)
        with lake.io.new_output(cut).create(overwrite=True) as out:
            out.write(b"PAR1 not a whole file")
        before = md.to_json()

        with pytest.raises(CorruptLakeFileError) as raised:
            _ = [r async for r in log.reader(follow=False)]
        error = raised.value
        assert isinstance(error, CorruptEntryError) and not error.retryable
        assert error.file == gone and error.ledger_id == first.ledger_id, error
        text = str(error)
        assert f"log orders, ledger {first.ledger_id}, file {gone}" in text, text
        assert "missing" in text, text

        start = md.ledger_with_seq(md.ledgers[1].seq)
        assert start is not None
        from walkit import LogPosition

        with pytest.raises(CorruptLakeFileError, match="not the Parquet file") as raised:
            _ = [r async for r in log.reader(LogPosition(start.seq, 0), follow=False)]
        assert raised.value.file == cut and raised.value.ledger_id == second.ledger_id

        with pytest.raises(CorruptLakeFileError, match=f"ledger {first.ledger_id}"):
            await log.position_at(BASE_MS)

        # The process lives on: the rest of the log reads, and its metadata is as it was.
        after = LogPosition(md.ledgers[2].seq, 0)
        assert [r.payload async for r in log.reader(after, follow=False)] == payloads[10:]
        assert (await log.metadata()).to_json() == before


async def test_open_with_catalog_properties_pyiceberg_cannot_load(
    memory_url: str, tmp_path: Path
) -> None:
    lake = f"file://{tmp_path / 'lake'}"
    async with connect(memory_url) as client:
        for catalog, said in (
            ({"type": "nosuch", "token": SECRET}, "'nosuch' is not a valid CatalogType"),
            ({"uri": f"mysql://walkit:{SECRET}@db/lake"}, "mysql://walkit:***@db/lake"),
            ({"type": "sql", "s3.secret-access-key": SECRET}, "URI missing"),
        ):
            with pytest.raises(ConfigurationError, match="offload_catalog") as raised:
                await Log.open(client, "orders", offload_to=lake, offload_catalog=catalog)
            assert said in str(raised.value) and SECRET not in str(raised.value), raised.value
            assert raised.value.__cause__ is None
        with pytest.raises(NoSuchLogError):  # nothing was created
            await Log.open(client, "orders", create=False)

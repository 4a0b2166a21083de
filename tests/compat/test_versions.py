"""Every format says its version, and a reader refuses a version it does not know with an error
that says so (never a misreading): the bookie's journal, entry logs and index, the wire, record
sets and snapshots. Files written before a format carried its version read as version 1 (the
golden corpus, ``test_golden*.py``)."""

from __future__ import annotations

import struct
import uuid
from pathlib import Path

import lmdb
import pytest

from walkit._core import wire
from walkit._core.log_metadata import LogMetadata, SnapshotRecord
from walkit._core.log_position import LogPosition
from walkit._core.record_set import decode_record_set, encode_record_set
from walkit._core.types import BookieId
from walkit.errors import (
    BookieIOError,
    CorruptEntryError,
    InvalidMetadataError,
    UnsupportedVersionError,
)
from walkit_bookie._config import BookieConfig
from walkit_bookie.storage import DiskStorage
from walkit_bookie.storage._directio import BLOCK
from walkit_bookie.storage._entrylog import ENTRYLOG_DIR, EntryLogger
from walkit_bookie.storage._entrylog import file_format as entrylog_format
from walkit_bookie.storage._index import INDEX_DIR
from walkit_bookie.storage._journal import JournalWriter, LogMark, replay
from walkit_bookie.storage._journal import file_format as journal_format

BOOKIE = BookieId("127.0.0.1", 3181)


def test_journal_files_open_with_their_format(tmp_path: Path) -> None:
    writer = JournalWriter(tmp_path, 1, 1 << 30, preallocate=0)
    writer.write([b"record"])
    writer.close()
    data = next(tmp_path.glob("*.jnl")).read_bytes()
    assert data[:12] == struct.pack(">I4sI", 0, b"WJNL", 1)  # shaped like padding
    assert journal_format(data) == 1
    assert journal_format(b"\x00\x00\x00\x06\x12\x34\x56\x78record") == 1  # no header: 1
    assert [body for body, _ in replay(tmp_path, LogMark(0, 0))] == [b"record"]


def test_a_journal_of_an_unknown_format_is_refused(tmp_path: Path) -> None:
    future = struct.pack(">I4sI", 0, b"WJNL", 2) + bytes(BLOCK - 12)
    (tmp_path / "0000000000000001.jnl").write_bytes(future)
    with pytest.raises(BookieIOError, match=r"is format 2; this bookie reads \[1\]"):
        list(replay(tmp_path, LogMark(0, 0)))


def test_entry_log_files_open_with_their_format(tmp_path: Path) -> None:
    (tmp_path / ENTRYLOG_DIR).mkdir()
    logger = EntryLogger([tmp_path], 1 << 30)
    appended = logger.write([(1, 0, b"packet")])
    logger.close()
    data = next((tmp_path / ENTRYLOG_DIR).glob("*.log")).read_bytes()
    assert data[:8] == b"WELG" + struct.pack(">I", 1)
    assert entrylog_format(data) == 1 and entrylog_format(b"\x00\x00\x00\x06") == 1
    again = EntryLogger([tmp_path], 1 << 30)
    try:
        assert again.headers[appended.log_id] == BLOCK
        assert again.read(appended.locations[0][1], 1, 0) == b"packet"
    finally:
        again.close()


def test_an_entry_log_of_an_unknown_format_is_refused(tmp_path: Path) -> None:
    (tmp_path / ENTRYLOG_DIR).mkdir()
    (tmp_path / ENTRYLOG_DIR / "0000000000000001.log").write_bytes(
        b"WELG" + struct.pack(">I", 3) + bytes(BLOCK - 8)
    )
    with pytest.raises(BookieIOError, match="is format 3; this bookie reads"):
        EntryLogger([tmp_path], 1 << 30)


async def test_a_bookie_refuses_an_index_of_an_unknown_format_and_keeps_it(
    tmp_path: Path,
) -> None:
    data = tmp_path / "bookie"
    config = BookieConfig(data_dirs=(str(data),))
    instance = uuid.uuid4().hex
    storage = DiskStorage(config)
    await storage.open(BOOKIE, instance, instance_id_is_known=True)
    await storage.aclose()
    env = lmdb.open(str(data / INDEX_DIR), max_dbs=5)
    with env.begin(write=True) as txn:
        meta = env.open_db(b"meta", txn=txn)
        assert txn.get(b"format", db=meta) == b"1"  # recorded when the index was made
        txn.put(b"format", b"7", db=meta)
    env.close()
    storage = DiskStorage(config)
    with pytest.raises(BookieIOError, match=r"is format b'7'; this bookie reads \[1\]"):
        await storage.open(BOOKIE, instance, instance_id_is_known=True)
    env = lmdb.open(str(data / INDEX_DIR), max_dbs=5)
    with env.begin() as txn:
        assert txn.get(b"format", db=env.open_db(b"meta", txn=txn)) == b"7"  # left alone
    env.close()


def test_a_frame_of_an_unknown_protocol_version_is_refused() -> None:
    body = wire.encode_body(wire.AddResponse(1, wire.StatusCode.OK, 2, 3))
    assert wire.SUPPORTED_PROTOCOL_VERSIONS == {wire.PROTOCOL_VERSION} == {1}
    with pytest.raises(UnsupportedVersionError, match="protocol version 2, this side speaks 1"):
        wire.decode_message(b"\x02" + body[1:])


def test_a_record_set_of_an_unknown_version_is_refused() -> None:
    entry = encode_record_set([b"a", b"b"])
    assert decode_record_set(entry).records == [b"a", b"b"]
    with pytest.raises(CorruptEntryError, match=r"unknown version 3 \(this walkit reads 1, 2"):
        decode_record_set(b"\x03" + entry[1:])


def test_a_snapshot_says_its_format_only_past_the_first() -> None:
    snap = SnapshotRecord(LogPosition(1, 4), ledger_id=9, size=3, crc32c=5)
    md = LogMetadata(name="x", next_seq=2, snapshots=(snap,))
    assert "format" not in md.to_json()["snapshots"][0]  # format 1, as before the key
    again = LogMetadata.from_bytes("x", md.to_bytes())
    assert again.snapshots[0].version == 1
    future = md.to_bytes().replace(b'"time_ms":0}', b'"time_ms":0,"format":2}')
    with pytest.raises(InvalidMetadataError, match="is format 2; this walkit reads"):
        LogMetadata.from_bytes("x", future)

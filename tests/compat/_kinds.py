"""The byte-level formats of the golden corpus: for each, a canonical object is written by the
release's code as ``<case>.bin`` beside ``<case>.json``, a description of what it holds (plain
JSON: bytes as base64) and the format version it was written in.

Each :class:`Kind` knows, with today's code:

- ``read(data, description)``: read the golden bytes with today's reader and check they hold
  what the description says (AssertionError otherwise). Every later version must pass it.
- ``write(description)``: the bytes today's writer makes of the same object.
- ``version_of(data)``: the format version of bytes today's writer made.

``tests/compat/test_golden.py`` runs both directions; ``make_corpus.py`` writes new corpora.
"""

from __future__ import annotations

import base64
import enum
import json
import tempfile
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs

from walkit._core import wire
from walkit._core.digest import DigestType
from walkit._core.ledger_metadata import LedgerMetadata, LedgerState
from walkit._core.log_metadata import (
    LedgerConfig,
    LogLedger,
    LogMetadata,
    SinkMark,
    SnapshotRecord,
)
from walkit._core.log_position import LogPosition
from walkit._core.metadata_dump import MetadataDump, decode_dump, encode_dump
from walkit._core.record import Extras
from walkit._core.record_set import (
    Codec,
    ProducerTag,
    decode_record_set,
    encode_record_set,
    read_header,
)
from walkit._core.types import BookieId
from walkit.metadata._bookies import _parse_registration, _registration
from walkit_bookie.storage._cookie import Cookie
from walkit_bookie.storage._entrylog import ENTRYLOG_DIR, ENTRYLOG_FORMAT, EntryLogger
from walkit_bookie.storage._index import INDEX_FORMAT, LOCATION, RECORD_HEADER
from walkit_bookie.storage._journal import JOURNAL_FORMAT, JournalWriter, LogMark, replay
from walkit_bookie.storage._ledger import LedgerInfo

Description = dict[str, Any]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def unb64(text: str) -> bytes:
    return base64.b64decode(text, validate=True)


@attrs.frozen
class Kind:
    name: str
    read: Callable[[bytes, Description], None]
    write: Callable[[Description], bytes]
    version_of: Callable[[bytes], int]
    #: What a change of this format must raise (named in the failure message).
    version_name: str
    #: Whether today's writer makes the same bytes of the same object every time (a
    #: compressed record set depends on the compression library's version, say).
    stable: Callable[[Description], bool] = lambda _d: True


# --- wire frames ------------------------------------------------------------------------------

MESSAGES: Mapping[str, type[Any]] = {
    cls.__name__: cls
    for cls in (
        wire.AddRequest,
        wire.AddResponse,
        wire.ReadRequest,
        wire.ReadResponse,
        wire.ReadLacRequest,
        wire.ReadLacResponse,
        wire.WriteLacRequest,
        wire.WriteLacResponse,
        wire.ErrorResponse,
        wire.AuthRequest,
        wire.AuthResponse,
        wire.BatchReadRequest,
        wire.BatchReadResponse,
        wire.CopyFragmentRequest,
        wire.CopyFragmentResponse,
    )
}


def describe_value(value: Any) -> Any:
    if isinstance(value, bytes):
        return b64(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple):
        return [describe_value(v) for v in value]
    return value


def rebuild_value(kind: Any, value: Any) -> Any:
    if kind is bytes:
        return unb64(value)
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return kind(value)
    if typing.get_origin(kind) is tuple:
        item = typing.get_args(kind)[0]
        return tuple(rebuild_value(item, v) for v in value)
    return value


def describe_message(msg: Any) -> Description:
    fields = {f.name: describe_value(getattr(msg, f.name)) for f in attrs.fields(type(msg))}
    return {"type": type(msg).__name__, **fields}


def rebuild_message(description: Description) -> Any:
    cls = MESSAGES[description["type"]]
    hints = typing.get_type_hints(cls)
    return cls(
        **{
            name: rebuild_value(hints[name], value)
            for name, value in description.items()
            if name != "type"
        }
    )


def _read_frame(data: bytes, description: Description) -> None:
    decoder = wire.FrameDecoder()
    decoder.feed(data)
    body = decoder.next_frame()
    assert body is not None and decoder.buffered == 0, "not exactly one frame"
    assert describe_message(wire.decode_message(body)) == description


WIRE = Kind(
    name="wire",
    read=_read_frame,
    write=lambda d: wire.encode_frame(rebuild_message(d)),
    version_of=lambda data: data[4],
    version_name="walkit._core.wire.PROTOCOL_VERSION",
)


# --- record sets ------------------------------------------------------------------------------

_CODECS = {0: "none", 1: "zstd", 2: "lz4"}


def _record_set_description(records: list[bytes], producers: Any, codec: str) -> Description:
    return {
        "records": [b64(r) for r in records],
        "producers": None
        if producers is None
        else [None if p is None else [p.producer_id, p.sequence] for p in producers],
        "codec": codec,
    }


def _extras(description: Description) -> list[Extras | None] | None:
    """The keys, headers and own timestamps of a description's records (version 2; absent
    from what 0.1.0 described): per record None or [key, [[name, value]...], timestamp]."""
    given = description.get("extras")
    if given is None:
        return None
    out: list[Extras | None] = []
    for item in given:
        if item is None:
            out.append(None)
            continue
        key, headers, timestamp = item
        out.append(
            (
                None if key is None else unb64(key),
                None if headers is None else tuple((n, unb64(v)) for n, v in headers),
                timestamp,
            )
        )
    return out


def _read_record_set(data: bytes, description: Description) -> None:
    decoded = decode_record_set(data)
    codec = _CODECS[read_header(data)[1] & 0x07]
    assert _record_set_description(decoded.records, decoded.producers, codec) == {
        k: description[k] for k in ("records", "producers", "codec")
    }
    entry_time = description.get("timestamp")
    extras = _extras(description) or [None] * len(decoded.records)
    for slot, given in enumerate(extras):
        key, headers, own = given or (None, None, None)
        assert decoded.key(slot) == key
        assert decoded.record_headers(slot) == headers
        assert decoded.record_timestamp(slot) == (entry_time if own is None else own)


def _write_record_set(description: Description) -> bytes:
    producers = description["producers"]
    return encode_record_set(
        [unb64(r) for r in description["records"]],
        producers=None
        if producers is None
        else [None if p is None else ProducerTag(p[0], p[1]) for p in producers],
        codec=Codec(description["codec"]),
        timestamp=description.get("timestamp"),
        extras=_extras(description),
    )


RECORD_SET = Kind(
    name="record_set",
    read=_read_record_set,
    write=_write_record_set,
    version_of=lambda data: data[0],
    version_name="walkit._core.record_set.VERSION",
    stable=lambda d: d["codec"] == "none",
)


# --- ledger and log metadata ------------------------------------------------------------------


def describe_ledger(md: LedgerMetadata) -> Description:
    return {
        "ledger_id": md.ledger_id,
        "ensemble_size": md.ensemble_size,
        "write_quorum": md.write_quorum,
        "ack_quorum": md.ack_quorum,
        "fragments": [[first, [str(b) for b in ensemble]] for first, ensemble in md.fragments],
        "state": md.state.value,
        "last_entry_id": md.last_entry_id,
        "length": md.length,
        "digest": md.digest.value,
        "password_sha256": md.password_sha256,
        "custom_metadata": {k: b64(v) for k, v in sorted(md.custom_metadata.items())},
        "ctime_ms": md.ctime_ms,
        # Fields added after 0.1.0: described only when set, as the objects of older corpora
        # do not have them.
        **({} if md.password is None else {"password": b64(md.password)}),
    }


def rebuild_ledger(d: Description) -> LedgerMetadata:
    return LedgerMetadata(
        ledger_id=d["ledger_id"],
        ensemble_size=d["ensemble_size"],
        write_quorum=d["write_quorum"],
        ack_quorum=d["ack_quorum"],
        fragments=tuple(
            (first, tuple(BookieId.parse(b) for b in ensemble))
            for first, ensemble in d["fragments"]
        ),
        state=LedgerState(d["state"]),
        last_entry_id=d["last_entry_id"],
        length=d["length"],
        digest=DigestType(d["digest"]),
        password_sha256=d["password_sha256"],
        custom_metadata={k: unb64(v) for k, v in d["custom_metadata"].items()},
        ctime_ms=d["ctime_ms"],
        password=None if d.get("password") is None else unb64(d["password"]),
    )


def _read_ledger(data: bytes, description: Description) -> None:
    md = LedgerMetadata.from_bytes(description["ledger_id"], data)
    assert describe_ledger(md) == description


LEDGER_METADATA = Kind(
    name="ledger_metadata",
    read=_read_ledger,
    write=lambda d: rebuild_ledger(d).to_bytes(),
    version_of=lambda data: int(json.loads(data)["format"]),
    version_name="walkit._core.ledger_metadata.FORMAT_VERSION",
)


def describe_log(md: LogMetadata) -> Description:
    return {
        "name": md.name,
        "config": {
            "ensemble_size": md.config.ensemble_size,
            "write_quorum": md.config.write_quorum,
            "ack_quorum": md.config.ack_quorum,
            "digest": md.config.digest.value,
            "password_hex": md.config.password_hex,
            **({} if md.config.store_password else {"store_password": False}),
        },
        "next_seq": md.next_seq,
        "ledgers": [[lg.seq, lg.ledger_id] for lg in md.ledgers],
        "truncated": str(md.truncated),
        "snapshots": [
            [str(s.position), s.ledger_id, s.size, s.crc32c, s.time_ms] for s in md.snapshots
        ],
        "ctime_ms": md.ctime_ms,
        "sinks": [[m.query_id, m.batch_id] for m in md.sinks],
    }


def rebuild_log(d: Description) -> LogMetadata:
    config = d["config"]
    return LogMetadata(
        name=d["name"],
        config=LedgerConfig(
            ensemble_size=config["ensemble_size"],
            write_quorum=config["write_quorum"],
            ack_quorum=config["ack_quorum"],
            digest=DigestType(config["digest"]),
            password_hex=config["password_hex"],
            store_password=config.get("store_password", True),
        ),
        next_seq=d["next_seq"],
        ledgers=tuple(LogLedger(seq, ledger_id) for seq, ledger_id in d["ledgers"]),
        truncated=LogPosition.parse(d["truncated"]),
        snapshots=tuple(
            SnapshotRecord(LogPosition.parse(p), lid, size, crc, t)
            for p, lid, size, crc, t in d["snapshots"]
        ),
        ctime_ms=d["ctime_ms"],
        sinks=tuple(SinkMark(q, b) for q, b in d["sinks"]),
    )


def _read_log(data: bytes, description: Description) -> None:
    assert describe_log(LogMetadata.from_bytes(description["name"], data)) == description


LOG_METADATA = Kind(
    name="log_metadata",
    read=_read_log,
    write=lambda d: rebuild_log(d).to_bytes(),
    version_of=lambda data: int(json.loads(data)["format"]),
    version_name="walkit._core.log_metadata.FORMAT_VERSION",
)


# --- bookie registration and cookie -----------------------------------------------------------


def _read_registration(data: bytes, description: Description) -> None:
    doc = _parse_registration(data)
    found = {
        "bookie_id": doc["bookie_id"],
        "network_location": doc["network_location"],
        "read_only": doc["read_only"],
        "info": {
            k: v
            for k, v in doc.items()
            if k not in ("format", "bookie_id", "network_location", "read_only")
        },
    }
    assert found == description


REGISTRATION = Kind(
    name="registration",
    read=_read_registration,
    write=lambda d: _registration(
        BookieId.parse(d["bookie_id"]), d["network_location"], d["read_only"], d["info"]
    ),
    version_of=lambda data: int(json.loads(data)["format"]),
    version_name="walkit.metadata._bookies.REGISTRATION_FORMAT",
)


def _describe_cookie(cookie: Cookie) -> Description:
    return {
        "bookie_id": cookie.bookie_id,
        "instance_id": cookie.instance_id,
        "data_dirs": list(cookie.data_dirs),
        "layout_version": cookie.layout_version,
    }


COOKIE = Kind(
    name="cookie",
    read=lambda data, d: _check(_describe_cookie(Cookie.from_bytes(data, "golden")), d),
    write=lambda d: Cookie(
        d["bookie_id"], d["instance_id"], tuple(d["data_dirs"]), d["layout_version"]
    ).to_bytes(),
    version_of=lambda data: int(json.loads(data)["layout_version"]),
    version_name="walkit_bookie.storage._cookie.LAYOUT_VERSION",
)


def _check(found: Any, expected: Any) -> None:
    assert found == expected, f"{found!r} != {expected!r}"


# --- the bookie's files -----------------------------------------------------------------------


def _describe_info(info: LedgerInfo) -> Description:
    return {
        "master_key": b64(info.master_key),
        "fenced": info.fenced,
        "lac": info.lac,
        "explicit_lac": info.explicit_lac,
        "last_entry": info.last_entry,
    }


LEDGER_STATE = Kind(
    name="ledger_state",
    read=lambda data, d: _check(_describe_info(LedgerInfo.from_bytes(data)), d),
    write=lambda d: LedgerInfo(
        unb64(d["master_key"]), d["fenced"], d["lac"], d["explicit_lac"], d["last_entry"]
    ).to_bytes(),
    version_of=lambda _data: INDEX_FORMAT,
    version_name="walkit_bookie.storage._index.INDEX_FORMAT",
)

LOG_MARK = Kind(
    name="log_mark",
    read=lambda data, d: _check(attrs.asdict(LogMark.from_bytes(data)), d),
    write=lambda d: LogMark(d["file_id"], d["offset"]).to_bytes(),
    version_of=lambda _data: INDEX_FORMAT,
    version_name="walkit_bookie.storage._index.INDEX_FORMAT",
)


_JOURNAL_FILE = "0000000000000001.jnl"


def _read_journal(data: bytes, description: Description) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / _JOURNAL_FILE).write_bytes(data)
        bodies = [body for body, _mark in replay(Path(tmp), LogMark(1, 0))]
    found = [describe_message(wire.decode_message(body)) for body in bodies]
    assert found == description["records"]


def _write_journal(description: Description) -> bytes:
    bodies = [wire.encode_body(rebuild_message(r)) for r in description["records"]]
    with tempfile.TemporaryDirectory() as tmp:
        writer = JournalWriter(Path(tmp), 1, 1 << 30, preallocate=0)
        start = writer.offset
        end = writer.write(bodies).offset
        writer.close()
        return (Path(tmp) / _JOURNAL_FILE).read_bytes()[start:end]


JOURNAL_GROUP = Kind(
    name="journal_group",
    read=_read_journal,
    write=_write_journal,
    version_of=lambda _data: JOURNAL_FORMAT,
    version_name="walkit_bookie.storage._journal.JOURNAL_FORMAT",
)

_ENTRYLOG_ID = 1


def _read_entrylog(data: bytes, description: Description) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / ENTRYLOG_DIR
        directory.mkdir()
        (directory / f"{_ENTRYLOG_ID:016x}.log").write_bytes(data)
        logger = EntryLogger([Path(tmp)], 1 << 30)
        try:
            for ledger_id, entry_id, packet, offset in description["entries"]:
                location = LOCATION.pack(_ENTRYLOG_ID, offset, len(unb64(packet)))
                assert logger.read(location, ledger_id, entry_id) == unb64(packet)
        finally:
            logger.close()


def _write_entrylog(description: Description) -> bytes:
    entries = [(lid, eid, unb64(packet)) for lid, eid, packet, _offset in description["entries"]]
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / ENTRYLOG_DIR).mkdir()
        logger = EntryLogger([Path(tmp)], 1 << 30)
        appended = logger.write(entries)
        logger.close()
        offsets = [LOCATION.unpack(location)[1] for _key, location in appended.locations]
        # The records, from the first one's header on (a file may open with a header block:
        # its format, not a record).
        start = offsets[0] - RECORD_HEADER
        relative = [offset - start for offset in offsets]
        assert relative == [e[3] for e in description["entries"]], "entries moved in the file"
        path = Path(tmp) / ENTRYLOG_DIR / f"{appended.log_id:016x}.log"
        return path.read_bytes()[start:]


ENTRYLOG_RECORDS = Kind(
    name="entrylog_records",
    read=_read_entrylog,
    write=_write_entrylog,
    version_of=lambda _data: ENTRYLOG_FORMAT,
    version_name="walkit_bookie.storage._entrylog.ENTRYLOG_FORMAT",
)


# --- metadata dumps ---------------------------------------------------------------------------


def describe_dump(dump: MetadataDump) -> Description:
    return {
        "nodes": [[path, b64(value)] for path, value in dump.nodes],
        "counters": dict(dump.counters),
        "source": dump.source,
        "walkit_version": dump.walkit_version,
    }


def rebuild_dump(d: Description) -> MetadataDump:
    return MetadataDump(
        nodes=tuple((path, unb64(value)) for path, value in d["nodes"]),
        counters=d["counters"],
        source=d["source"],
        walkit_version=d["walkit_version"],
    )


METADATA_DUMP = Kind(
    name="metadata_dump",
    read=lambda data, d: _check(describe_dump(decode_dump(data)), d),
    write=lambda d: encode_dump(rebuild_dump(d)),
    version_of=lambda data: int(json.loads(data.partition(b"\n")[0])["version"]),
    version_name="walkit._core.metadata_dump.DUMP_VERSION",
)


KINDS: Mapping[str, Kind] = {
    kind.name: kind
    for kind in (
        WIRE,
        RECORD_SET,
        LEDGER_METADATA,
        LOG_METADATA,
        REGISTRATION,
        COOKIE,
        LEDGER_STATE,
        LOG_MARK,
        JOURNAL_GROUP,
        ENTRYLOG_RECORDS,
        METADATA_DUMP,
    )
}

__all__ = ["KINDS", "Description", "Kind", "b64", "describe_message", "unb64"]

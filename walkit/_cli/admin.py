"""Admin commands: bookies, ledgers, ledger show/read, simpletest."""

from __future__ import annotations

import argparse
import base64
import time
from typing import Any, TextIO

from walkit._cli._connect import connect_options
from walkit._cli.output import bytes_as_text, emit, emit_record
from walkit._core.ledger_metadata import LedgerMetadata
from walkit.errors import NoSuchLedgerError


def _md_record(md: LedgerMetadata) -> dict[str, Any]:
    return {
        "ledger_id": md.ledger_id,
        "state": md.state.value,
        "ensemble_size": md.ensemble_size,
        "write_quorum": md.write_quorum,
        "ack_quorum": md.ack_quorum,
        "last_entry_id": md.last_entry_id if md.is_closed else None,
        "length": md.length if md.is_closed else None,
        "digest": md.digest.value,
        "password_stored": md.has_password,  # never the password itself
        "fragments": {str(first): [str(b) for b in ensemble] for first, ensemble in md.fragments},
        "custom_metadata": {k: bytes_as_text(v) for k, v in md.custom_metadata.items()},
        "ctime_ms": md.ctime_ms,
    }


async def bookies(url: str, args: argparse.Namespace, out: TextIO) -> int:
    from walkit.metadata import list_bookies, open_metadata_store

    async with await open_metadata_store(url) as store:
        listing = await list_bookies(store)
    rows = [
        {"bookie": str(b), "state": state, "location": info.network_location}
        for state, group in (("writable", listing.writable), ("readonly", listing.readonly))
        for b, info in sorted(group.items())
    ]
    emit(rows, ["bookie", "state", "location"], as_json=args.json, out=out)
    return 0


async def ledgers(url: str, args: argparse.Namespace, out: TextIO) -> int:
    from walkit.metadata import LedgerManager, open_metadata_store

    async with await open_metadata_store(url) as store:
        manager = LedgerManager(store)
        rows = []
        for ledger_id in await manager.list_ids():
            try:
                md, _ = await manager.read(ledger_id)
            except NoSuchLedgerError:
                continue  # deleted while we listed
            record = _md_record(md)
            record["ensemble"] = [str(b) for b in md.current_ensemble]
            rows.append(record)
    emit(
        rows,
        [
            "ledger_id",
            "state",
            "ensemble_size",
            "write_quorum",
            "ack_quorum",
            "last_entry_id",
            "ensemble",
        ],
        as_json=args.json,
        out=out,
    )
    return 0


async def ledger_show(url: str, args: argparse.Namespace, out: TextIO) -> int:
    from walkit.metadata import LedgerManager, open_metadata_store

    async with await open_metadata_store(url) as store:
        md, version = await LedgerManager(store).read(args.ledger_id)
    record = _md_record(md)
    record["version"] = version
    if args.json:
        emit_record(record, as_json=True, out=out)
        return 0
    fragments = record.pop("fragments")
    custom = record.pop("custom_metadata")
    emit_record(record, as_json=False, out=out)
    out.write("\ncustom metadata:\n")
    emit(
        [{"key": k, "value": v} for k, v in sorted(custom.items())],
        ["key", "value"],
        as_json=False,
        out=out,
    )
    out.write("\nfragments:\n")
    emit(
        _fragment_rows(md, fragments),
        ["first_entry", "last_entry", "bookies"],
        as_json=False,
        out=out,
    )
    return 0


def _fragment_rows(md: LedgerMetadata, fragments: dict[str, list[str]]) -> list[dict[str, Any]]:
    """One row per fragment; its last entry is the next one's first - 1 (or the ledger's last
    entry once CLOSED; open-ended while the ledger is being written)."""
    firsts = [int(first) for first in fragments]
    rows = []
    for index, first in enumerate(firsts):
        if index + 1 < len(firsts):
            last: int | None = firsts[index + 1] - 1
        else:
            last = md.last_entry_id if md.is_closed else None
        rows.append(
            {
                "first_entry": first,
                "last_entry": "(open)" if last is None else last if last >= first else "(none)",
                "bookies": fragments[str(first)],
            }
        )
    return rows


async def ledger_read(url: str, args: argparse.Namespace, out: TextIO) -> int:
    from walkit.client import Client

    async with Client.connect(url, **connect_options(args)) as client:
        reader = await client.open_ledger(
            args.ledger_id, password=args.password.encode(), recovery=False
        )
        last = reader.last_add_confirmed if args.last is None else args.last
        entries = await reader.read(args.first, last) if last >= args.first else []
    rows = [
        {"entry_id": e.entry_id, "size": len(e.payload), "payload": _printable(e.payload)}
        for e in entries
    ]
    emit(rows, ["entry_id", "size", "payload"], as_json=args.json, out=out)
    return 0


def _printable(payload: bytes) -> str:
    try:
        text = payload.decode("utf-8")
        if text.isprintable():
            return text if len(text) <= 60 else text[:57] + "..."
    except UnicodeDecodeError:
        pass
    return (
        "base64:" + base64.b64encode(payload[:45]).decode() + ("..." if len(payload) > 45 else "")
    )


async def simpletest(url: str, args: argparse.Namespace, out: TextIO) -> int:
    from walkit.client import Client

    payloads = [
        (f"simpletest-{i}-".encode() + b"x" * args.size)[: args.size] for i in range(args.entries)
    ]
    async with Client.connect(url, **connect_options(args)) as client:
        started = time.perf_counter()
        writer = await client.create_ledger(
            ensemble_size=args.ensemble,
            write_quorum=args.write_quorum,
            ack_quorum=args.ack_quorum,
            password=b"simpletest",
        )
        await writer.append_batch(payloads)
        await writer.close()
        wrote = time.perf_counter() - started
        reader = await client.open_ledger(writer.id, password=b"simpletest")
        entries = await reader.read(0, reader.last_add_confirmed)
        ok = [e.payload for e in entries] == payloads
        await client.delete_ledger(writer.id, password=b"simpletest")
    record = {
        "ledger_id": writer.id,
        "entries": args.entries,
        "entry_size": args.size,
        "quorums": f"E={args.ensemble} Qw={args.write_quorum} Qa={args.ack_quorum}",
        "write_seconds": round(wrote, 3),
        "entries_per_second": round(args.entries / wrote) if wrote > 0 else None,
        "read_back": "ok" if ok else "MISMATCH",
    }
    emit_record(record, as_json=args.json, out=out)
    return 0 if ok else 1

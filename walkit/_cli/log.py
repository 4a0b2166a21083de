"""``walkit log list | show NAME | tail NAME [--from POS] [--follow]``."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any, TextIO

from walkit._cli.admin import _printable
from walkit._cli.output import emit, emit_record
from walkit._core.log_metadata import LogMetadata
from walkit._core.log_position import LogPosition
from walkit.errors import InvalidMetadataError, NoSuchLedgerError, WalkitError


def position_arg(text: str) -> LogPosition:
    """argparse type for ``--from``: SEQ:ENTRY, earliest or latest."""
    try:
        return LogPosition.parse(text)
    except WalkitError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_parsers(sub: Any, with_metadata: Any) -> None:
    """Register ``log list|show|tail`` under the ``walkit`` command's subparsers."""
    log = sub.add_parser("log", help="inspect logs (list, show, tail)")
    log_sub = log.add_subparsers(dest="log_command", required=True, metavar="ACTION")
    with_metadata(log_sub.add_parser("list", help="list logs"))
    show = with_metadata(log_sub.add_parser("show", help="print a log's metadata and ledgers"))
    show.add_argument("name")
    tail = with_metadata(log_sub.add_parser("tail", help="print a log's records"))
    tail.add_argument("name")
    tail.add_argument(
        "--from",
        dest="start",
        metavar="POS",
        type=position_arg,
        default=LogPosition.EARLIEST,
        help="first position: SEQ:ENTRY, earliest (default) or latest",
    )
    tail.add_argument(
        "--follow", "-f", action="store_true", help="keep printing new records (Ctrl-C stops)"
    )
    tail.add_argument(
        "--password",
        default=None,
        help="the log's ledger password (default: the one stored with the log)",
    )


def handler(args: argparse.Namespace) -> Any:
    return {"list": log_list, "show": log_show, "tail": log_tail}[args.log_command]


def _summary(md: LogMetadata) -> dict[str, Any]:
    latest = md.latest_snapshot
    return {
        "name": md.name,
        "ledgers": len(md.ledgers),
        "first_seq": md.ledgers[0].seq if md.ledgers else None,
        "last_seq": md.ledgers[-1].seq if md.ledgers else None,
        "truncated": str(md.truncated),
        "snapshots": len(md.snapshots),
        "latest_snapshot": str(latest.position) if latest else None,
    }


async def log_list(url: str, args: argparse.Namespace, out: TextIO) -> int:
    from walkit.log import list_logs, read_log
    from walkit.metadata import open_metadata_store

    rows: list[dict[str, Any]] = []
    async with await open_metadata_store(url) as store:
        for name in await list_logs(store):
            try:
                md, _version = await read_log(store, name)
            except InvalidMetadataError as exc:
                rows.append({"name": name, "error": str(exc)})
                continue
            except WalkitError:
                continue  # deleted while we listed
            rows.append(_summary(md))
    columns = ["name", "ledgers", "first_seq", "last_seq", "truncated", "snapshots"]
    emit(rows, [*columns, "latest_snapshot"], as_json=args.json, out=out)
    return 0


async def log_show(url: str, args: argparse.Namespace, out: TextIO) -> int:
    from walkit.log import read_log
    from walkit.metadata import LedgerManager, open_metadata_store

    async with await open_metadata_store(url) as store:
        md, version = await read_log(store, args.name)
        manager = LedgerManager(store)
        ledgers: list[dict[str, Any]] = []
        for lg in md.ledgers:
            row: dict[str, Any] = {"seq": lg.seq, "ledger_id": lg.ledger_id}
            try:
                lmd, _ = await manager.read(lg.ledger_id)
                row.update(
                    state=lmd.state.value,
                    last_entry_id=lmd.last_entry_id if lmd.is_closed else None,
                    length=lmd.length if lmd.is_closed else None,
                    ensemble=[str(b) for b in lmd.current_ensemble],
                )
            except NoSuchLedgerError:
                row["state"] = "MISSING"
            ledgers.append(row)
    snapshots = [s.to_json() for s in md.snapshots]
    record: dict[str, Any] = {
        "name": md.name,
        "version": version,
        "config": md.config.to_json(),
        "next_seq": md.next_seq,
        "truncated": str(md.truncated),
        "ctime_ms": md.ctime_ms,
    }
    if args.json:
        emit_record({**record, "ledgers": ledgers, "snapshots": snapshots}, as_json=True, out=out)
        return 0
    cfg = md.config
    record["config"] = (
        f"E={cfg.ensemble_size} Qw={cfg.write_quorum} Qa={cfg.ack_quorum} {cfg.digest.value}"
    )
    emit_record(record, as_json=False, out=out)
    out.write("\nledgers:\n")
    emit(
        ledgers,
        ["seq", "ledger_id", "state", "last_entry_id", "length", "ensemble"],
        as_json=False,
        out=out,
    )
    out.write("\nsnapshots:\n")
    emit(snapshots, ["position", "ledger_id", "size", "crc32c", "time_ms"], as_json=False, out=out)
    return 0


async def log_tail(url: str, args: argparse.Namespace, out: TextIO) -> int:
    from walkit.client import Client
    from walkit.log import Log

    async with Client.connect(url, placement=args.placement, wall_clock=time.time) as client:
        secret = {} if args.password is None else {"password": args.password.encode()}
        log = await Log.open(client, args.name, create=False, **secret)
        if not args.json:
            out.write(f"{'POSITION':<14}  {'SIZE':>8}  PAYLOAD\n")
            out.flush()
        async for rec in log.reader(args.start, follow=args.follow):
            if args.json:  # one JSON object per line: the stream may not end
                line = json.dumps(
                    {
                        "position": str(rec.position),
                        "size": len(rec.payload),
                        "payload": _printable(rec.payload),
                    }
                )
                out.write(line + "\n")
            else:
                out.write(
                    f"{rec.position!s:<14}  {len(rec.payload):>8}  {_printable(rec.payload)}\n"
                )
            out.flush()
    return 0

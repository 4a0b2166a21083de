"""``walkit log list | show NAME | schema NAME | tail NAME [--from POS | --since TIME] [--follow] |
retain NAME ... | offload NAME --to URI | delete NAME [--yes] | gc [NAME] [--grace SECONDS] [--dry-run] |
consumers NAME | consumer delete NAME CONSUMER``."""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from typing import Any, TextIO

from walkit._cli._args import argument_type
from walkit._cli._connect import connect_options
from walkit._cli.admin import _printable
from walkit._cli.log_schema import RecordValueText, add_schema_parser, log_schema
from walkit._cli.output import emit, emit_record, time_text
from walkit._core.log_metadata import LogMetadata, check_log_name
from walkit._core.log_position import LogPosition
from walkit._core.options import SECONDS, count
from walkit.errors import ConfigurationError, InvalidMetadataError, NoSuchLedgerError, WalkitError


def position_arg(text: str) -> LogPosition:
    """argparse type for ``--from``: SEQ:ENTRY, earliest or latest."""
    try:
        return LogPosition.parse(text)
    except WalkitError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def time_arg(text: str) -> int:
    """argparse type for ``--since``: milliseconds since the epoch, or an ISO 8601 time (UTC
    unless it names its offset)."""
    stripped = text.strip()
    if stripped.isdigit():
        return int(stripped)
    try:
        moment = datetime.datetime.fromisoformat(stripped)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"bad time {text!r}: expected milliseconds since the epoch or an ISO 8601 time "
            "such as 2024-05-01T09:00:00Z"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    ms = int(moment.timestamp() * 1000)
    if ms < 0:
        raise argparse.ArgumentTypeError(f"bad time {text!r}: before 1970")
    return ms


def add_parsers(sub: Any, with_metadata: Any) -> None:
    """Register ``log list|show|tail`` under the ``walkit`` command's subparsers."""
    log = sub.add_parser(
        "log",
        help="inspect and maintain logs (list, show, schema, tail, retain, delete, gc, consumers)",
    )
    log_sub = log.add_subparsers(dest="log_command", required=True, metavar="ACTION")
    with_metadata(log_sub.add_parser("list", help="list logs"))
    show = with_metadata(log_sub.add_parser("show", help="print a log's metadata and ledgers"))
    show.add_argument("name")
    tail = with_metadata(log_sub.add_parser("tail", help="print a log's records"))
    tail.add_argument("name")
    first = tail.add_mutually_exclusive_group()
    first.add_argument(
        "--from",
        dest="start",
        metavar="POS",
        type=position_arg,
        default=LogPosition.EARLIEST,
        help="first position: SEQ:ENTRY, earliest (default) or latest",
    )
    first.add_argument(
        "--since",
        metavar="TIME",
        type=time_arg,
        default=None,
        help="start at the first record timestamped TIME or later: ISO 8601 (UTC unless it "
        "says otherwise, e.g. 2024-05-01T09:00:00Z) or milliseconds since the epoch",
    )
    tail.add_argument(
        "--follow", "-f", action="store_true", help="keep printing new records (Ctrl-C stops)"
    )
    tail.add_argument(
        "--password",
        default=None,
        help="the log's ledger password (default: the one stored with the log)",
    )

    add_schema_parser(log_sub, with_metadata)
    _add_maintenance(log_sub, with_metadata)
    _add_consumers(log_sub, with_metadata)


def _add_consumers(log_sub: Any, with_metadata: Any) -> None:
    password_help = "the log's ledger password (default: the one stored with the log)"
    consumers = with_metadata(
        log_sub.add_parser(
            "consumers", help="list a log's durable consumers with their positions and lags"
        )
    )
    consumers.add_argument("name")
    consumers.add_argument("--password", default=None, help=password_help)
    consumer = log_sub.add_parser("consumer", help="maintain one durable consumer (delete)")
    consumer_sub = consumer.add_subparsers(dest="consumer_command", required=True, metavar="ACTION")
    delete = with_metadata(
        consumer_sub.add_parser(
            "delete", help="delete a consumer: retention no longer keeps records for it"
        )
    )
    delete.add_argument("name", metavar="LOG")
    delete.add_argument("consumer", metavar="NAME")


#: The kinds of ``LogOptions.retain_records``/``retain_bytes`` and ``retain_age``/``orphan_gc_grace``
#: (named here rather than read from LogOptions, which would load the log package, and the
#: client with it, for every command).
_count = argument_type(count(0))
_seconds = argument_type(SECONDS)


def _add_maintenance(log_sub: Any, with_metadata: Any) -> None:
    password_help = "the log's ledger password (default: the one stored with the log)"
    retain = with_metadata(
        log_sub.add_parser(
            "retain",
            help="truncate a log at its retention point (whole ledgers) and delete what is "
            "behind it",
        )
    )
    retain.add_argument("name")
    retain.add_argument("--records", type=_count, help="keep at least this many records")
    retain.add_argument("--bytes", type=_count, help="keep at least this many payload bytes")
    retain.add_argument(
        "--age", type=_seconds, metavar="SECONDS", help="keep records younger than this"
    )
    retain.add_argument(
        "--dry-run", action="store_true", help="print what would go, change nothing"
    )
    retain.add_argument("--password", default=None, help=password_help)
    offload = with_metadata(
        log_sub.add_parser(
            "offload",
            help="offload a log's closed ledgers to its lake (an Iceberg table) now; see "
            "docs/lake.md",
        )
    )
    offload.add_argument("name")
    offload.add_argument(
        "--to", required=True, metavar="URI", help="the lake: file:///abs/dir or s3://bucket/prefix"
    )
    offload.add_argument(
        "--catalog",
        default=None,
        metavar="JSON",
        help="the pyiceberg catalog's properties as a JSON object (default for file://DIR: a "
        "SQL catalog in DIR/catalog.db)",
    )
    offload.add_argument(
        "--deletion-lag",
        type=_seconds,
        default=3600.0,
        metavar="SECONDS",
        help="delete the bookies' copies of ledgers offloaded this long ago (default: 3600)",
    )
    offload.add_argument("--password", default=None, help=password_help)
    delete = with_metadata(
        log_sub.add_parser("delete", help="delete a log with its ledgers and snapshots")
    )
    delete.add_argument("name")
    delete.add_argument(
        "--yes", action="store_true", help="really delete (without it: print what would go)"
    )
    delete.add_argument("--password", default=None, help=password_help)
    gc = with_metadata(
        log_sub.add_parser(
            "gc", help="delete ledgers tagged with a log that the log does not list (orphans)"
        )
    )
    gc.add_argument("name", nargs="?", default=None, help="only this log's (default: every log's)")
    gc.add_argument(
        "--grace",
        type=_seconds,
        default=3600.0,
        metavar="SECONDS",
        help="only ledgers created this long ago or more (default: 3600)",
    )
    gc.add_argument("--dry-run", action="store_true", help="print the orphans, delete nothing")
    gc.add_argument("--password", default=None, help=password_help)


def handler(args: argparse.Namespace) -> Any:
    return {
        "list": log_list,
        "show": log_show,
        "tail": log_tail,
        "schema": log_schema,
        "retain": log_retain,
        "offload": log_offload,
        "delete": log_delete,
        "gc": log_gc,
        "consumers": log_consumers,
        "consumer": log_consumer_delete,
    }[args.log_command]


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
            if md.schemas:  # a typed log's: the schema version of the ledger's records
                row["schema"] = lg.schema or None
            lake = md.lake_ledger(lg.ledger_id)
            row["where"] = (
                "bookies" if lake is None else "lake" if lake.bookies_deleted else "lake+bookies"
            )
            try:
                lmd, _ = await manager.read(lg.ledger_id)
                row.update(
                    state=lmd.state.value,
                    last_entry_id=lmd.last_entry_id if lmd.is_closed else None,
                    length=lmd.length if lmd.is_closed else None,
                    ensemble=[str(b) for b in lmd.current_ensemble],
                )
            except NoSuchLedgerError:
                row["state"] = "CLOSED" if lake is not None else "MISSING"
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
    columns = ["seq", "ledger_id", "where", "state", "last_entry_id", "length", "ensemble"]
    if md.schemas:
        columns.insert(2, "schema")
    emit(ledgers, columns, as_json=False, out=out)
    out.write("\nsnapshots:\n")
    emit(snapshots, ["position", "ledger_id", "size", "crc32c", "time_ms"], as_json=False, out=out)
    return 0


async def log_tail(url: str, args: argparse.Namespace, out: TextIO) -> int:
    from walkit.client import Client
    from walkit.log import Log

    async with Client.connect(url, **connect_options(args)) as client:
        secret = {} if args.password is None else {"password": args.password.encode()}
        log = await Log.open(client, args.name, create=False, **secret)
        start = args.start if args.since is None else await log.position_at(args.since)
        md = await log.metadata()
        # A typed log's records show their values, as JSON (walkit._cli.log_schema).
        values = RecordValueText(log, md) if md.schemas else None
        if not args.json:
            what = "PAYLOAD" if values is None else "VALUE"
            out.write(f"{'POSITION':<14}  {'TIME':<24}  {'KEY':<12}  {'SIZE':>8}  {what}\n")
            out.flush()
        async for rec in log.reader(start, follow=args.follow):
            key = None if rec.key is None else _printable(rec.key)
            value, problem = (None, None) if values is None else await values.value(rec)
            if args.json:  # one JSON object per line: the stream may not end
                headers = rec.headers
                line = json.dumps(
                    {
                        "position": str(rec.position),
                        "timestamp": rec.timestamp,
                        "time": time_text(rec.timestamp),
                        "key": key,
                        "headers": None
                        if headers is None
                        else [[name, _printable(value)] for name, value in headers],
                        "size": len(rec.payload),
                        "payload": _printable(rec.payload),
                        **(
                            {}
                            if values is None
                            else {
                                "schema_version": rec.schema_version,
                                "value": value,
                                **({} if problem is None else {"value_error": problem}),
                            }
                        ),
                    }
                )
                out.write(line + "\n")
            else:
                when = time_text(rec.timestamp) or "-"
                shown = _printable(rec.payload)
                if values is not None and rec.schema_version is not None:
                    shown = (
                        f"(does not decode: {problem}) {shown}"
                        if problem is not None
                        else json.dumps(value, ensure_ascii=False)
                    )
                out.write(
                    f"{rec.position!s:<14}  {when:<24}  {key or '-':<12}  {len(rec.payload):>8}  "
                    f"{shown}\n"
                )
            out.flush()
    return 0


async def log_retain(url: str, args: argparse.Namespace, out: TextIO) -> int:
    from walkit.client import Client
    from walkit.log import Log

    if args.records is None and args.bytes is None and args.age is None:
        raise ConfigurationError("give at least one of --records, --bytes, --age")
    async with Client.connect(url, **connect_options(args)) as client:
        secret = {} if args.password is None else {"password": args.password.encode()}
        log = await Log.open(client, args.name, create=False, **secret)
        result = await log.apply_retention(
            retain_records=args.records,
            retain_bytes=args.bytes,
            retain_age=args.age,
            dry_run=args.dry_run,
        )
    record = {
        "name": args.name,
        "dry_run": args.dry_run,
        "truncated": None if result.truncated is None else str(result.truncated),
        "ledgers": [lg.ledger_id for lg in result.dropped],
        "records": result.records,
        "bytes": result.size,
    }
    emit_record(record, as_json=args.json, out=out)
    return 0


async def log_offload(url: str, args: argparse.Namespace, out: TextIO) -> int:
    from walkit.client import Client
    from walkit.log import Log

    async with Client.connect(url, **connect_options(args)) as client:
        secret = {} if args.password is None else {"password": args.password.encode()}
        catalog = None
        if args.catalog is not None:
            from walkit.log._options import CATALOG

            try:
                catalog = CATALOG.from_text(args.catalog)
            except ValueError as exc:
                raise ConfigurationError(f"--catalog: {exc}") from None
        log = await Log.open(
            client,
            args.name,
            create=False,
            offload_to=args.to,
            offload_catalog=catalog,
            offload_deletion_lag=args.deletion_lag,
            **secret,
        )
        done = await log.offload()
        md = await log.metadata()
    record = {
        "name": args.name,
        "offloaded": done,
        "in_lake": len(md.offloaded),
        "bookie_copies_deleted": sum(1 for x in md.offloaded if x.bookies_deleted),
    }
    emit_record(record, as_json=args.json, out=out)
    return 0


async def log_delete(url: str, args: argparse.Namespace, out: TextIO) -> int:
    from walkit.client import Client
    from walkit.log import Log, read_log

    async with Client.connect(url, **connect_options(args)) as client:
        if not args.yes:
            md, _version = await read_log(client.metadata_store, args.name)
            ids = [lg.ledger_id for lg in md.ledgers] + [s.ledger_id for s in md.snapshots]
            emit_record(
                {"name": args.name, "deleted": False, "ledgers": ids}, as_json=args.json, out=out
            )
            print(
                f"walkit: log {args.name} not deleted: pass --yes to delete it and its "
                f"{len(ids)} ledger(s)",
                file=sys.stderr,
            )
            return 1
        password = None if args.password is None else args.password.encode()
        ids = await Log.delete(client, args.name, password=password)
    emit_record({"name": args.name, "deleted": True, "ledgers": ids}, as_json=args.json, out=out)
    return 0


async def log_gc(url: str, args: argparse.Namespace, out: TextIO) -> int:
    from walkit.client import Client
    from walkit.log import Log

    if args.name is not None:
        check_log_name(args.name)
    async with Client.connect(url, **connect_options(args)) as client:
        password = None if args.password is None else args.password.encode()
        orphans = await Log.collect_orphans(
            client, args.name, grace=args.grace, dry_run=args.dry_run, password=password
        )
    rows = [
        {
            "ledger_id": o.ledger_id,
            "log": o.log,
            "kind": o.kind,
            "ctime_ms": o.ctime_ms,
            "deleted": o.deleted,
            "error": o.error,
        }
        for o in orphans
    ]
    emit(
        rows,
        ["ledger_id", "log", "kind", "ctime_ms", "deleted", "error"],
        as_json=args.json,
        out=out,
    )
    return 1 if any(o.error for o in orphans) else 0


async def log_consumers(url: str, args: argparse.Namespace, out: TextIO) -> int:
    from walkit.client import Client
    from walkit.log import Log

    async with Client.connect(url, **connect_options(args)) as client:
        secret = {} if args.password is None else {"password": args.password.encode()}
        log = await Log.open(client, args.name, create=False, **secret)
        infos = await log.consumers()
    rows = [
        {
            "name": info.name,
            "position": None if info.position is None else str(info.position),
            "behind": info.behind,
            "lag_records": info.lag.records,
            "lag_bytes": info.lag.size,
            "lag_entries": info.lag.entries,
            "exact": info.lag.exact,
            "mtime_ms": info.mtime_ms,
            "error": info.error,
        }
        for info in infos
    ]
    columns = ["name", "position", "behind", "lag_records", "lag_bytes", "lag_entries", "exact"]
    if any(info.error for info in infos):
        columns.append("error")
    emit(rows, columns, as_json=args.json, out=out)
    return 1 if any(info.error for info in infos) else 0


async def log_consumer_delete(url: str, args: argparse.Namespace, out: TextIO) -> int:
    from walkit.client import Client
    from walkit.log import Log

    async with Client.connect(url, **connect_options(args)) as client:
        log = await Log.open(client, args.name, create=False)
        await log.delete_consumer(args.consumer)
    emit_record(
        {"log": args.name, "consumer": args.consumer, "deleted": True}, as_json=args.json, out=out
    )
    return 0

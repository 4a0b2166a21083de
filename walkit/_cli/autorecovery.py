"""Rereplication commands (BookKeeper's listunderreplicated, recover, decommissionbookie,
autorecovery and lostbookierecoverydelay)::

    walkit underreplicated [--json]
    walkit recover BOOKIE [--password PW ...]
    walkit bookie decommission BOOKIE [--password PW ...]
    walkit autorecovery status | enable | disable | delay SECONDS
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, TextIO

from walkit._cli._args import argument_type, given
from walkit._cli.output import emit, emit_record
from walkit._core.options import BYTE_RATE_LIMIT, RATE_LIMIT, SECONDS
from walkit._core.types import BookieId
from walkit.errors import InvalidArgumentError


def bookie_arg(text: str) -> BookieId:
    try:
        return BookieId.parse(text)
    except InvalidArgumentError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_parsers(sub: Any, with_metadata: Any) -> None:
    """Register the commands under the ``walkit`` command's subparsers."""
    with_metadata(sub.add_parser("underreplicated", help="list ledgers marked under-replicated"))

    def with_passwords(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument("bookie", type=bookie_arg, help="the bookie, as host:port")
        p.add_argument(
            "--password",
            action="append",
            default=[],
            help="a ledger password to try (repeatable; the password a ledger's metadata keeps, "
            "b'' and the passwords stored with logs are always tried)",
        )
        # AutorecoveryOptions' entries_per_second and bytes_per_second (their kinds; the
        # class would load the client for every command), given or not: see recover().
        for flag, kind in (
            ("--entries-per-second", RATE_LIMIT),
            ("--bytes-per-second", BYTE_RATE_LIMIT),
        ):
            p.add_argument(
                flag,
                type=argument_type(kind),
                default=argparse.SUPPRESS,
                metavar=kind.metavar,
                help="copy rate limit (0: none; default: autorecovery's)",
            )
        return p

    with_passwords(
        with_metadata(
            sub.add_parser(
                "recover",
                help="rereplicate every ledger that lists a bookie, now (foreground)",
            )
        )
    )
    bookie = sub.add_parser("bookie", help="bookie administration")
    bookie_sub = bookie.add_subparsers(dest="bookie_command", required=True, metavar="ACTION")
    with_passwords(
        with_metadata(
            bookie_sub.add_parser(
                "decommission",
                help="rereplicate a stopped bookie's ledgers, then remove its cookie",
            )
        )
    )
    auto = sub.add_parser("autorecovery", help="show or change the autorecovery settings")
    auto_sub = auto.add_subparsers(dest="autorecovery_command", required=True, metavar="ACTION")
    with_metadata(auto_sub.add_parser("status", help="settings, auditor and marked ledgers"))
    with_metadata(
        auto_sub.add_parser("enable", help="let the auditor mark and workers rereplicate")
    )
    with_metadata(auto_sub.add_parser("disable", help="stop marking and rereplicating"))
    delay = with_metadata(
        auto_sub.add_parser("delay", help="set the lost-bookie delay (seconds) at run time")
    )
    delay.add_argument(
        "seconds", type=argument_type(SECONDS, "delay")
    )  # BookieConfig.lost_bookie_delay's kind


def handler(args: argparse.Namespace) -> Any:
    if args.command == "underreplicated":
        return underreplicated
    if args.command in ("recover", "bookie"):
        return recover
    return autorecovery


async def underreplicated(url: str, args: argparse.Namespace, out: TextIO) -> int:
    from walkit.autorecovery._passwords import PASSWORD_NEEDED
    from walkit.metadata import UnderreplicationManager, open_metadata_store

    async with await open_metadata_store(url) as store:
        urm = UnderreplicationManager(store)
        rows: list[dict[str, Any]] = [
            {
                "ledger_id": marker.ledger_id,
                "missing": [str(b) for b in marker.missing],
                "locked_by": await urm.lock_owner(marker.ledger_id),
                "needs_password": await _needs_password(store, marker.ledger_id),
            }
            for marker in await urm.markers()
        ]
    emit(rows, ["ledger_id", "missing", "locked_by"], as_json=args.json, out=out)
    if not args.json:
        needy = [row["ledger_id"] for row in rows if row["needs_password"]]
        if needy:
            out.write("\n")
        for ledger_id in needy:
            out.write(f"ledger {ledger_id}: {PASSWORD_NEEDED}\n")
    return 0


async def _needs_password(store: Any, ledger_id: int) -> bool | None:
    """Whether autorecovery cannot find the ledger's password by itself (None: the ledger is
    gone, or its metadata or its log's is unreadable). The bookies' own ``passwords`` are not
    known here: a ledger they know the password of is rereplicated, and leaves the list."""
    import functools

    from walkit.autorecovery._passwords import known_password
    from walkit.errors import InvalidMetadataError, NoSuchLedgerError
    from walkit.log._passwords import stored_log_password
    from walkit.metadata import LedgerManager

    try:
        md, _version = await LedgerManager(store).read(ledger_id)
        found = await known_password(md, (), functools.partial(stored_log_password, store))
    except (NoSuchLedgerError, InvalidMetadataError):
        return None
    return found is None


class _Progress:
    """A progress bar on stderr (one line per ledger when stderr is not a terminal)."""

    def __init__(self, what: str, stream: TextIO) -> None:
        self.what = what
        self.stream = stream
        self.tty = stream.isatty()
        self.entries = 0
        self.bytes = 0

    def entry(self, entries: int, size: int) -> None:
        self.entries += entries
        self.bytes += size

    def ledger(self, done: int, total: int, ledger_id: int) -> None:
        width = 30
        filled = width * done // max(total, 1)
        bar = "#" * filled + "-" * (width - filled)
        line = (
            f"{self.what}: [{bar}] {done}/{total} ledgers, {self.entries} entries, "
            f"{self.bytes / 1048576:.1f} MiB (ledger {ledger_id})"
        )
        if self.tty:
            self.stream.write("\r" + line + ("\n" if done == total else ""))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


async def recover(url: str, args: argparse.Namespace, out: TextIO) -> int:

    from walkit._cli._connect import connect_options
    from walkit.autorecovery import AutorecoveryOptions, decommission_bookie, rereplicate_bookie
    from walkit.client import Client

    options = AutorecoveryOptions(
        passwords=[p.encode() for p in args.password], **given(args, AutorecoveryOptions)
    )
    decommission = args.command == "bookie"
    progress = _Progress("decommission" if decommission else "recover", sys.stderr)
    async with Client.connect(url, **connect_options(args)) as client:
        run = decommission_bookie if decommission else rereplicate_bookie
        report = await run(
            client, args.bookie, options=options, on_ledger=progress.ledger, on_entry=progress.entry
        )
    record: dict[str, Any] = {
        "bookie": str(report.bookie),
        "ledgers": len(report.ledgers),
        "healed": len(report.rereplicated),
        "failed": len(report.failed),
        "entries_copied": report.entries,
        "bytes_copied": report.bytes,
        "copied_by_replacements": report.entries_by_replacements,
    }
    if decommission:
        record["decommissioned"] = report.ok
    if args.json:
        record["failures"] = {str(k): v for k, v in report.failed.items()}
        emit_record(record, as_json=True, out=out)
    else:
        emit_record(record, as_json=False, out=out)
        for ledger_id, why in sorted(report.failed.items()):
            out.write(f"ledger {ledger_id}: {why}\n")
    return 0 if report.ok else 1


async def autorecovery(url: str, args: argparse.Namespace, out: TextIO) -> int:
    from walkit.metadata import UnderreplicationManager, open_metadata_store
    from walkit.metadata._underreplication import AUDITOR_PATH

    action = args.autorecovery_command
    async with await open_metadata_store(url) as store:
        urm = UnderreplicationManager(store)
        if action == "enable":
            settings = await urm.update_settings(enabled=True)
        elif action == "disable":
            settings = await urm.update_settings(enabled=False)
        elif action == "delay":
            settings = await urm.update_settings(lost_bookie_delay=args.seconds)
        else:
            settings = await urm.settings()
        marked = len(await urm.list_ids())
        auditor = await _auditor(store, AUDITOR_PATH)
    emit_record(
        {
            "enabled": settings.enabled,
            "lost_bookie_delay": settings.lost_bookie_delay,
            "auditor": auditor,
            "underreplicated_ledgers": marked,
        },
        as_json=args.json,
        out=out,
    )
    return 0


async def _auditor(store: Any, path: str) -> str | None:
    """What the elected auditor advertises (its bookie id), or None."""
    import json

    from walkit.errors import NoSuchNodeError

    try:
        raw = (await store.get(path)).value
    except NoSuchNodeError:
        return None
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return str(raw.decode("utf-8", "replace"))
    if isinstance(doc, dict) and "advertise" in doc:
        return str(doc["advertise"])
    return str(doc)

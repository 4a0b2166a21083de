"""``walkit cluster check [--timeout SECONDS] [--lake URI] [--lake-catalog JSON] [--json]``:
write an entry through every writable bookie and read it back (BookKeeper's ``bookiesanity``
and health check, for the whole cluster), and check that every lake the logs offload to is
reachable (``walkit._cli.cluster_lake``).

For each bookie registered as writable, a ledger with E = Qw = Qa = 1 placed on that bookie
alone (:class:`PinnedPlacement`: no other bookie, no replacement), one entry appended and read
back, the ledger deleted. The checks run at once, each within ``--timeout``; each bookie's
append and read latency, or its error, is reported, then each lake's. The exit status is 1
when a check failed (or no bookie is writable), else 0. Read-only bookies are listed, not
written to.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Mapping, Sequence, Set
from typing import Any, Final, TextIO, final

import anyio

from walkit._cli import cluster_lake
from walkit._cli._connect import connect_options, describe_error
from walkit._cli.output import emit, emit_record
from walkit._core.types import BookieId, BookieInfo
from walkit.errors import InvalidArgumentError, NotEnoughBookiesError, WalkitError
from walkit.placement import EnsemblePlacementPolicy

#: The custom metadata key naming the bookie a check ledger is placed on.
BOOKIE_KEY: Final = "walkit.cluster_check.bookie"
#: What check ledgers carry in ``application`` (to find any left over by a killed check).
APPLICATION: Final = b"walkit cluster check"
PASSWORD: Final = b"walkit-cluster-check"
DEFAULT_TIMEOUT: Final = 10.0


@final
class PinnedPlacement(EnsemblePlacementPolicy):
    """Places a ledger of one bookie on the bookie its custom metadata names (``BOOKIE_KEY``),
    and never replaces it: a check ledger whose bookie fails must fail, not move."""

    def on_cluster_changed(
        self, writable: Set[BookieInfo] | Set[BookieId], readonly: Set[BookieInfo] | Set[BookieId]
    ) -> set[BookieId]:
        return set()

    def new_ensemble(
        self,
        ensemble_size: int,
        write_quorum: int,
        ack_quorum: int,
        exclude: Set[BookieId] = frozenset(),
        custom_metadata: Mapping[str, bytes] | None = None,
    ) -> list[BookieId]:
        named = (custom_metadata or {}).get(BOOKIE_KEY)
        if ensemble_size != 1 or named is None:
            raise InvalidArgumentError(
                f"a cluster check ledger has one bookie, named in {BOOKIE_KEY!r}"
            )
        bookie = BookieId.parse(named.decode())
        if bookie in exclude:
            raise NotEnoughBookiesError(f"bookie {bookie} did not answer")
        return [bookie]

    def replace_bookie(
        self,
        ensemble_size: int,
        write_quorum: int,
        ack_quorum: int,
        current_ensemble: Sequence[BookieId],
        bookie_to_replace: BookieId,
        exclude: Set[BookieId] = frozenset(),
        custom_metadata: Mapping[str, bytes] | None = None,
    ) -> BookieId:
        raise NotEnoughBookiesError(f"bookie {bookie_to_replace} failed a write")

    def reorder_read_sequence(
        self,
        ensemble: Sequence[BookieId],
        write_set: Sequence[int],
        failure_history: Mapping[BookieId, float],
    ) -> list[int]:
        return list(write_set)


def add_parsers(sub: Any, with_metadata: Any) -> None:
    cluster = sub.add_parser("cluster", help="check the whole cluster")
    cluster_sub = cluster.add_subparsers(dest="cluster_command", required=True, metavar="ACTION")
    check = with_metadata(
        cluster_sub.add_parser(
            "check",
            help="write and read an entry through every writable bookie; check the lakes",
            description="Write one entry through each writable bookie (a ledger with "
            "E=Qw=Qa=1 placed on it), read it back and delete the ledger; report each "
            "bookie's latency or error. Then check each lake the logs offload to (storage "
            "takes a write, the catalog and the logs' tables load). Exit status 1 when a "
            "bookie or a lake fails.",
        )
    )
    cluster_lake.add_arguments(check)
    check.add_argument(
        "--timeout",
        type=_timeout,
        default=DEFAULT_TIMEOUT,
        help=f"seconds each bookie's check may take (default {DEFAULT_TIMEOUT:g})",
    )


def _timeout(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not 0 < value <= 3600:
        raise argparse.ArgumentTypeError(f"expected seconds between 0 and 3600, got {text!r}")
    return value


async def _check_one(client: Any, bookie: BookieId, timeout: float) -> dict[str, Any]:
    """Write one entry through ``bookie`` and read it back: a row of the report."""
    row: dict[str, Any] = {
        "bookie": str(bookie),
        "state": "writable",
        "ok": False,
        "write_ms": None,
        "read_ms": None,
        "error": None,
    }
    payload = b"walkit cluster check of " + str(bookie).encode()
    ledger_id: int | None = None
    entries: Sequence[Any] = ()
    try:
        # (the wall clock for the latencies: uvloop's loop clock counts whole milliseconds)
        with anyio.move_on_after(timeout) as deadline:
            writer = await client.create_ledger(
                1,
                1,
                1,
                password=PASSWORD,
                custom_metadata={BOOKIE_KEY: str(bookie).encode(), "application": APPLICATION},
            )
            ledger_id = writer.id
            started = time.perf_counter()
            await writer.append(payload)
            row["write_ms"] = round((time.perf_counter() - started) * 1000, 3)
            await writer.close()
            reader = await client.open_ledger(ledger_id, password=PASSWORD)
            started = time.perf_counter()
            entries = await reader.read(0, 0)
            row["read_ms"] = round((time.perf_counter() - started) * 1000, 3)
        if deadline.cancelled_caught:
            row["error"] = f"no answer within {timeout:g} s"
        elif [e.payload for e in entries] != [payload]:
            row["error"] = "read back other bytes than were written"
        else:
            row["ok"] = True
    except WalkitError as exc:
        row["error"] = describe_error(exc)
    finally:
        if ledger_id is not None:
            with anyio.move_on_after(timeout, shield=True) as cleanup:
                try:
                    await client.delete_ledger(ledger_id, password=PASSWORD)
                except WalkitError as exc:
                    row["cleanup_error"] = f"ledger {ledger_id} not deleted: {exc}"
            if cleanup.cancelled_caught:
                row["cleanup_error"] = f"ledger {ledger_id} not deleted within {timeout:g} s"
    return row


async def check(url: str, args: argparse.Namespace, out: TextIO) -> int:
    from walkit.client import Client
    from walkit.metadata import list_bookies, open_metadata_store

    timeout = float(args.timeout)
    async with await open_metadata_store(url) as store:
        listing = await list_bookies(store)
        lakes = await cluster_lake.check_lakes(store, args, timeout)
    rows: list[dict[str, Any]] = []
    options = dict(connect_options(args), placement=PinnedPlacement())
    if listing.writable:
        async with Client.connect(
            url,
            add_timeout=timeout,
            read_timeout=timeout,
            connect_timeout=timeout,
            speculative_read_timeout=None,
            **options,
        ) as client:
            found: dict[BookieId, dict[str, Any]] = {}

            async def one(bookie: BookieId) -> None:
                found[bookie] = await _check_one(client, bookie, timeout)

            async with anyio.create_task_group() as nursery:
                for bookie in sorted(listing.writable):
                    nursery.start_soon(one, bookie)
            rows = [found[b] for b in sorted(found)]
    for bookie in sorted(listing.readonly):
        rows.append({"bookie": str(bookie), "state": "read_only", "ok": None, "error": None})
    failed = [r for r in rows if r["ok"] is False]
    lakes_failed = [r for r in lakes if r["ok"] is False]
    ok = bool(listing.writable) and not failed and not lakes_failed
    if args.json:
        report = {"ok": ok, "checked": len(listing.writable), "failed": len(failed)}
        emit_record({**report, "bookies": rows, "lakes": lakes}, as_json=True, out=out)
        return 0 if ok else 1
    for row in rows:
        row["status"] = {True: "ok", False: "FAILED", None: "not checked"}[row["ok"]]
    columns = ["bookie", "state", "status", "write_ms", "read_ms", "error"]
    emit(rows, columns, as_json=False, out=out)
    if listing.writable:
        passed = len(listing.writable) - len(failed)
        out.write(f"{passed} of {len(listing.writable)} writable bookies passed\n")
    else:
        out.write("no writable bookie is registered\n")
    if lakes:
        out.write("\n")
        columns = ["lake", "logs", "status", "ms", "error"]
        emit(cluster_lake.lake_rows_text(lakes), columns, as_json=False, out=out)
        passed = sum(1 for r in lakes if r["ok"])
        out.write(f"{passed} of {len(lakes)} lakes reachable\n")
    return 0 if ok else 1

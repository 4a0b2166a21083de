"""A replication audit on Spark: for every ledger, which entries lack a copy on which bookie of
their write set.

    python examples/spark/replication_audit.py --metadata URL [--ledgers all|12,15]
        [--password PW] [--chunk 5000] [--master local[2]]

The driver reads every ledger's metadata (its fragments, and the end of an open ledger as a
reader sees it: no fencing) and cuts the entries into chunks. Spark runs the chunks in
parallel: each task connects to the bookies itself and asks every bookie of each entry's write
set for its copy with a plain (non-fencing) read, checking the digest. The result is a table
of copies that are missing, corrupt (bad digest) or unreachable (the bookie did not answer),
grouped by ledger and bookie, then a summary line. Exit status: 0 when every copy is there,
1 otherwise (so a cron job can alert).

An entry lacks a copy when, for example, a bookie lost its disk, or when a writer in the
``when_ack_quorum_lost`` ensemble-change mode went on with an ack quorum while a bookie of
its write set was down.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import trio
from _session import by_value, cli_parse, cli_parser, session

import walkit
from walkit._core.distribution import write_set
from walkit._core.types import BookieId
from walkit.log import ledger_password

#: Entries one Spark task checks at most.
DEFAULT_CHUNK = 5000
#: Copies asked for at once by one task.
IN_FLIGHT = 128
#: Seconds a bookie has to answer one read.
READ_TIMEOUT = 5.0

RESULT_SCHEMA = (
    "ledger_id long, bookie string, state string, entry_id long, copies long, detail string"
)


# --- the driver: which entries are where ---------------------------------------------------


async def plan(url: str, ledgers: str, password: bytes | None, chunk: int) -> list[dict[str, Any]]:
    """The work units: ranges of entries of one fragment of one ledger, each with the password
    to check its digests with (``password``, else the one its log stored)."""
    units: list[dict[str, Any]] = []
    async with walkit.Client.connect(url) as client:
        ids = await client.list_ledgers() if ledgers == "all" else parse_ids(ledgers)
        for ledger_id in ids:
            try:
                md = await client.ledger_metadata(ledger_id)
            except walkit.errors.NoSuchLedgerError:
                continue  # deleted since it was listed
            pw = password if password is not None else await ledger_password(client, md)
            if md.is_closed:
                last = md.last_entry_id
            else:  # an open ledger: up to its LAC, as a reader sees it (nothing is fenced)
                reader = await client.open_ledger(ledger_id, password=pw)
                last = reader.last_add_confirmed
            starts = [first for first, _ in md.fragments]
            for n, (first, ensemble) in enumerate(md.fragments):
                end = min(last, starts[n + 1] - 1 if n + 1 < len(starts) else last)
                for lo in range(first, end + 1, chunk):
                    units.append(
                        {
                            "ledger_id": ledger_id,
                            "first": lo,
                            "last": min(end, lo + chunk - 1),
                            "ensemble": [str(b) for b in ensemble],
                            "ensemble_size": md.ensemble_size,
                            "write_quorum": md.write_quorum,
                            "digest": md.digest.value,
                            "password": pw.hex(),
                        }
                    )
    return units


def parse_ids(text: str) -> list[int]:
    try:
        return sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise SystemExit(f"--ledgers must be all or ledger ids like 12,15, not {text!r}") from None


# --- the executors: ask the bookies --------------------------------------------------------


async def check_units(url: str, units: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Ask every bookie of every entry's write set for its copy; one row per bad copy, and
    one row per (unit, bookie) counting the good ones."""
    from walkit._core.digest import DigestManager
    from walkit._core.wire import ReadRequest, ReadResponse, StatusCode
    from walkit.client import client_services
    from walkit.errors import DigestMismatchError, WalkitError

    rows: list[dict[str, Any]] = []
    limiter = trio.CapacityLimiter(IN_FLIGHT)
    async with walkit.Client.connect(url) as client:
        pool = client_services(client).context.pool

        async def probe(
            unit: dict[str, Any],
            digest: DigestManager,
            entry_id: int,
            bookie: str,
            ok: dict[str, int],
        ) -> None:
            ledger_id = unit["ledger_id"]
            async with limiter:
                try:
                    conn = pool.get(BookieId.parse(bookie))
                    answer = await conn.call(
                        lambda rid: ReadRequest(rid, ledger_id, entry_id), READ_TIMEOUT
                    )
                except WalkitError as exc:
                    rows.append(bad(ledger_id, bookie, "unreachable", entry_id, str(exc)))
                    return
            status = getattr(answer, "status", None)
            if status in (StatusCode.NO_SUCH_ENTRY, StatusCode.NO_SUCH_LEDGER):
                rows.append(bad(ledger_id, bookie, "missing", entry_id, status.name))
            elif status != StatusCode.OK or not isinstance(answer, ReadResponse):
                rows.append(bad(ledger_id, bookie, "unreachable", entry_id, str(status)))
            else:
                try:
                    digest.verify(answer.packet, expected_entry_id=entry_id)
                except DigestMismatchError as exc:
                    rows.append(bad(ledger_id, bookie, "corrupt", entry_id, str(exc)))
                    return
                ok[bookie] = ok.get(bookie, 0) + 1

        for unit in units:
            digest = DigestManager(
                unit["ledger_id"], unit["digest"], bytes.fromhex(unit["password"])
            )
            ensemble = list(unit["ensemble"])
            ok: dict[str, int] = {}
            async with trio.open_nursery() as nursery:
                for entry_id in range(unit["first"], unit["last"] + 1):
                    for index in write_set(entry_id, unit["ensemble_size"], unit["write_quorum"]):
                        nursery.start_soon(probe, unit, digest, entry_id, ensemble[index], ok)
            for bookie, count in ok.items():
                rows.append(
                    {
                        "ledger_id": unit["ledger_id"],
                        "bookie": bookie,
                        "state": "ok",
                        "entry_id": -1,
                        "copies": count,
                        "detail": "",
                    }
                )
    return rows


def bad(ledger_id: int, bookie: str, state: str, entry_id: int, detail: str) -> dict[str, Any]:
    return {
        "ledger_id": ledger_id,
        "bookie": bookie,
        "state": state,
        "entry_id": entry_id,
        "copies": 1,
        "detail": detail,
    }


def check_partition(url: str) -> Any:
    """The function each Spark task runs over its work units (one ``trio.run``)."""

    def run(units: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        todo = list(units)
        if todo:
            yield from trio.run(check_units, url, todo)

    return run


# --- the report ----------------------------------------------------------------------------


def ranges(ids: list[int]) -> str:
    """``[1, 2, 3, 7]`` -> ``"1-3,7"``."""
    spans: list[list[int]] = []
    for i in sorted(ids):
        if spans and i == spans[-1][1] + 1:
            spans[-1][1] = i
        else:
            spans.append([i, i])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def audit(
    spark: Any,
    url: str,
    ledgers: str = "all",
    password: bytes | None = None,
    chunk: int = DEFAULT_CHUNK,
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Run the audit; returns (problem rows, summary). A problem row: ledger_id, bookie,
    state (missing/corrupt/unreachable), copies, entries (sorted list)."""
    from pyspark.sql import functions as F

    by_value(__name__)
    units = trio.run(plan, url, ledgers, password, chunk)
    summary = {
        "ledgers": len({u["ledger_id"] for u in units}),
        "entries": sum(u["last"] - u["first"] + 1 for u in units),
        "copies": 0,
        "missing": 0,
        "corrupt": 0,
        "unreachable": 0,
    }
    if not units:
        return [], summary
    slices = max(1, min(len(units), spark.sparkContext.defaultParallelism * 2))
    rows = spark.sparkContext.parallelize(units, slices).mapPartitions(check_partition(url))
    df = spark.createDataFrame(rows, RESULT_SCHEMA)
    grouped = (
        df.groupBy("ledger_id", "bookie", "state")
        .agg(
            F.sum("copies").alias("copies"),
            F.sort_array(F.collect_list("entry_id")).alias("entries"),
        )
        .orderBy("ledger_id", "bookie", "state")
        .collect()
    )
    problems = []
    for row in grouped:
        summary["copies"] += row["copies"]
        if row["state"] != "ok":
            summary[row["state"]] += row["copies"]
            problems.append(
                {
                    "ledger_id": row["ledger_id"],
                    "bookie": row["bookie"],
                    "state": row["state"],
                    "copies": row["copies"],
                    "entries": list(row["entries"]),
                }
            )
    return problems, summary


def print_report(problems: list[dict[str, Any]], summary: dict[str, int]) -> None:
    header = f"{'ledger':>8}  {'bookie':<22} {'state':<12} {'copies':>7}  entries"
    print(header)
    print("-" * len(header))
    for p in problems:
        print(
            f"{p['ledger_id']:>8}  {p['bookie']:<22} {p['state']:<12} {p['copies']:>7}  {ranges(p['entries'])}"
        )
    if not problems:
        print("(every entry has a copy on every bookie of its write set)")
    print(
        f"audited {summary['ledgers']} ledgers, {summary['entries']} entries, "
        f"{summary['copies']} copies: {summary['missing']} missing, "
        f"{summary['corrupt']} corrupt, {summary['unreachable']} unreachable"
    )


def main(argv: list[str] | None = None) -> int:
    parser = cli_parser(
        __doc__, "the ledgers' password (mac digests; default: the one each ledger's log stored)"
    )
    parser.add_argument("--ledgers", default="all", help="all, or ledger ids like 12,15")
    parser.add_argument("--chunk", type=int, default=DEFAULT_CHUNK, help="entries per Spark task")
    args = cli_parse(parser, argv)
    if args.chunk < 1:
        parser.error("--chunk must be >= 1")
    spark, own = session(args.master, "walkit-replication-audit")
    try:
        problems, summary = audit(
            spark,
            args.metadata,
            args.ledgers,
            None if args.password is None else args.password.encode(),
            args.chunk,
        )
    finally:
        if own:
            spark.stop()
    print_report(problems, summary)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

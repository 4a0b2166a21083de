"""Export a walkit log to Parquet with Spark, as a batch job or as a streaming job.

    python examples/spark/export_parquet.py --metadata URL --log orders --out DIR
    python examples/spark/export_parquet.py --metadata URL --log orders --out DIR \\
        --stream --checkpoint CKPT [--trigger available-now|"10 seconds"]

Batch: every record readable now (closed ledgers and the open ledger's confirmed entries; the
writer is not fenced) is written to DIR as Parquet, replacing what was there. Columns: the
walkit reader's ``log, position, ledger_seq, ledger_id, entry_id, slot, payload``.

Streaming: the records after the last exported one go to DIR, exactly once: the checkpoint
holds the last exported log position and Spark's Parquet sink commits files per micro-batch.
With ``--trigger available-now`` (the default) the job exports what is there and stops (run it
from cron); with a processing-time trigger it tails the log until Ctrl-C. ``--start`` picks the
first position of a new export (earliest by default).
"""

from __future__ import annotations

import sys
from typing import Any

from _session import cli_parse, cli_parser, session


def _options(url: str, password: str | None) -> dict[str, str]:
    """The data source's options: a password only when given (else the log's stored one)."""
    return {"metadata": url} if password is None else {"metadata": url, "password": password}


def export_batch(spark: Any, url: str, log: str, out: str, password: str | None = None) -> int:
    """Write the log's records to ``out``; returns how many."""
    df = spark.read.format("walkit").options(**_options(url, password)).load(log)
    df.write.mode("overwrite").parquet(out)
    count: int = spark.read.parquet(out).count()
    return count


def export_stream(
    spark: Any,
    url: str,
    log: str,
    out: str,
    checkpoint: str,
    *,
    trigger: str = "available-now",
    start: str = "earliest",
    password: str | None = None,
) -> Any:
    """Start the streaming export; returns the query (stopped already with available-now)."""
    stream = (
        spark.readStream.format("walkit")
        .options(**_options(url, password))
        .option("startingPosition", start)
        .load(log)
    )
    writer = (
        stream.writeStream.format("parquet")
        .option("path", out)
        .option("checkpointLocation", checkpoint)
    )
    if trigger == "available-now":
        query = writer.trigger(availableNow=True).start()
        query.awaitTermination()
    else:
        query = writer.trigger(processingTime=trigger).start()
    if query.exception() is not None:
        raise SystemExit(f"the export failed: {query.exception()}")
    return query


def main(argv: list[str] | None = None) -> int:
    parser = cli_parser(__doc__, "the log's password (default: the one stored with it)")
    parser.add_argument("--log", required=True, help="the log to export")
    parser.add_argument("--out", required=True, help="the Parquet directory")
    parser.add_argument("--stream", action="store_true", help="export as a streaming job")
    parser.add_argument("--checkpoint", help="the streaming job's checkpoint directory")
    parser.add_argument(
        "--trigger", default="available-now", help='available-now, or an interval ("10 seconds")'
    )
    parser.add_argument("--start", default="earliest", help="first position of a new stream")
    args = cli_parse(parser, argv)
    if args.stream and not args.checkpoint:
        parser.error("--stream needs --checkpoint DIR (where the exported position is kept)")
    spark, own = session(args.master, "walkit-export-parquet")
    try:
        if not args.stream:
            count = export_batch(spark, args.metadata, args.log, args.out, args.password)
            print(f"exported {count} records of log {args.log} to {args.out}")
            return 0
        query = export_stream(
            spark,
            args.metadata,
            args.log,
            args.out,
            args.checkpoint,
            trigger=args.trigger,
            start=args.start,
            password=args.password,
        )
        if args.trigger != "available-now":
            print(f"exporting log {args.log} to {args.out} every {args.trigger}; Ctrl-C stops")
            try:
                query.awaitTermination()
            except KeyboardInterrupt:
                query.stop()
        total = spark.read.parquet(args.out).count()
        new = sum(p["numInputRows"] for p in query.recentProgress)
        print(f"exported {new} new records of log {args.log}; {args.out} holds {total}")
        return 0
    finally:
        if own:
            spark.stop()


if __name__ == "__main__":
    sys.exit(main())

"""Log metadata format 4 (a log with offloaded ledgers): the golden file reads, and today's
writer writes the same bytes."""

from __future__ import annotations

from pathlib import Path

from walkit._core.log_metadata import FORMAT_VERSION_LAKE, LogMetadata

GOLDEN = Path(__file__).resolve().parent / "lake" / "log_metadata_v4.json"


def test_format_4_reads_and_writes_the_same_bytes() -> None:
    data = GOLDEN.read_bytes()
    md = LogMetadata.from_bytes("orders", data)
    assert md.format == FORMAT_VERSION_LAKE == 4
    (lake,) = md.offloaded
    assert (lake.ledger_id, lake.records, lake.bookies_deleted) == (10, 100, True)
    assert md.to_bytes() == data

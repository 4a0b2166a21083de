"""Write a small lake for the golden corpus: ``python tests/compat/make_lake.py NAME``.

Run it from the repository root. It runs three in-process bookies on memory metadata, writes a
log ``orders`` (records with keys, headers, producer tags and timestamps; then typed records
of two schema versions), offloads every ledger but the empty last one to a ``file://`` lake at
``/walkit-golden/NAME`` (Iceberg metadata names files by absolute URIs: a fixed root that
names nothing of the machine, mapped to a copy when read, see ``_moved_io.py``), and copies to
``tests/compat/lake/NAME/``:

- ``lake/``: the lake's directory (the SQL catalog ``catalog.db``, the table ``orders/`` with
  its metadata and Parquet data files);
- ``metadata.dump``: the metadata exported (the log's node lists the offloaded files), less
  the bookies' cookies;
- ``expected.json``: the lake format, and every record as written (position, timestamp, key,
  headers, payload, producer tag, schema version and value).

It refuses to touch a directory that exists: a golden lake is what later versions must keep
reading. To write one with older code (``lake_v1``, lake format 1), run this file with that
code first on the path: ``mkdir /tmp/old; git archive <commit> walkit walkit_bookie tests |
tar -x -C /tmp/old; PYTHONPATH=/tmp/old python tests/compat/make_lake.py lake_v1``
(``lake_v1`` was written so from the commit before lake format 2).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import attrs
import trio

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.append(str(REPO))  # (after PYTHONPATH: older code given there comes first)

from tests.client.conftest import cluster, connect  # noqa: E402
from walkit import Log, LogPosition, Record  # noqa: E402
from walkit._core.metadata_dump import encode_dump  # noqa: E402
from walkit.metadata import export_metadata, forget_memory_tree, open_metadata_store  # noqa: E402

HERE = Path(__file__).resolve().parent / "lake"
#: Where a golden lake is written (and what its files' URIs say).
ROOT = "/walkit-golden"
#: 2026-01-01T00:00:00Z: the records' timestamps, one day.
BASE_MS = 1_767_225_600_000


@dataclasses.dataclass
class OrderV1:
    id: int
    user: str
    amount: float


@dataclasses.dataclass
class OrderV2:
    id: int
    user: str
    amount: float
    region: str = "eu"
    tags: list[str] = dataclasses.field(default_factory=list)


def _row(
    position: LogPosition,
    record: Record,
    *,
    producer: tuple[str, int] | None = None,
    version: int | None = None,
    value: Any = None,
) -> dict[str, Any]:
    return {
        "position": str(position),
        "timestamp": record.timestamp,
        "key": None if record.key is None else record.key.hex(),
        "headers": None
        if record.headers is None
        else [[name, data.hex()] for name, data in record.headers],
        "payload": record.payload.hex() if version is None else None,
        "producer": None if producer is None else list(producer),
        "schema_version": version,
        "value": None if value is None else dataclasses.asdict(value),
    }


async def write_log(url: str, work: Path, lake_uri: str) -> list[dict[str, Any]]:
    """Write and offload the golden log; returns its records as expected.json lists them."""
    rows: list[dict[str, Any]] = []
    opts: dict[str, Any] = {
        "roll_entries": 3,
        "offload_to": lake_uri,
        "offload_after": 10**9,  # (only the explicit offload below)
        "offload_deletion_lag": 0,
    }
    async with cluster(url, work, 3), connect(url, wall_clock=time.time) as client:
        plain = await Log.open(client, "orders", **opts)
        async with plain.writer() as w:
            first = Record(b"plain-0", key=b"k0", headers=(("h", b"\x00v"),), timestamp=BASE_MS)
            rows.append(
                _row(
                    await w.append(
                        first.payload, key=first.key, headers=first.headers, timestamp=BASE_MS
                    ),
                    first,
                )
            )
            tagged = Record(b"plain-1", timestamp=BASE_MS + 1)
            at = await w.append(
                tagged.payload, timestamp=BASE_MS + 1, producer_id="teller", sequence=1
            )
            rows.append(_row(at, tagged, producer=("teller", 1)))
            batch = [
                Record(b"plain-2", key=b"k2", timestamp=BASE_MS + 2),
                Record(b"", headers=(("a", b"1"), ("b", b"")), timestamp=BASE_MS + 3),
                Record(b"plain-4", timestamp=BASE_MS + 4),
            ]
            for n, at in enumerate(await w.append_batch(batch, producer_id="teller", sequence=2)):
                rows.append(_row(at, batch[n], producer=("teller", 2 + n)))
            empty_key = Record(b"plain-5", key=b"", timestamp=BASE_MS + 5)
            at = await w.append(empty_key.payload, key=b"", timestamp=BASE_MS + 5)
            rows.append(_row(at, empty_key))
        v1 = await Log.open(client, "orders", schema=OrderV1, **opts)
        async with v1.writer() as w:
            for i in range(4):
                value = OrderV1(i, f"user-{i}", i + 0.25)
                record = Record(key=f"o{i}".encode(), timestamp=BASE_MS + 10 + i)
                at = await w.append(value, key=record.key, timestamp=record.timestamp)
                rows.append(_row(at, record, version=1, value=OrderV2(i, f"user-{i}", i + 0.25)))
        v2 = await Log.open(client, "orders", schema=OrderV2, **opts)
        async with v2.writer() as w:
            for i in range(4):
                typed = OrderV2(10 + i, "ann", 1.5, region="us", tags=["x", str(i)])
                record = Record(timestamp=BASE_MS + 20 + i)
                at = await w.append(typed, timestamp=record.timestamp)
                rows.append(_row(at, record, version=2, value=typed))
        async with v2.writer():  # a new writer: the ledgers before its own are all closed
            pass
        await v2.offload()
        md = await v2.metadata()
        assert len(md.offloaded) == len(md.ledgers) - 1, md
        assert sum(x.records for x in md.offloaded) == len(rows)
    return rows


async def make(name: str, root: Path) -> tuple[list[dict[str, Any]], bytes]:
    """Write the golden log with its lake at ``root``; its records and metadata export."""
    url = f"memory://golden-lake-{name}"
    with tempfile.TemporaryDirectory() as work:
        try:
            rows = await write_log(url, Path(work), f"file://{root}")
            async with await open_metadata_store(url) as store:
                dump = (await export_metadata(store)).dump
            # (not the bookies' cookies: they name the bookies' temporary data directories)
            kept = tuple(n for n in dump.nodes if not n[0].startswith("/bookies/cookies/"))
            dump = attrs.evolve(dump, nodes=kept)
        finally:
            forget_memory_tree(f"golden-lake-{name}")
    return rows, encode_dump(dump)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("name", help="the golden lake's directory name, e.g. lake_v2")
    args = parser.parse_args(argv)
    out = HERE / args.name
    if out.exists():
        raise SystemExit(f"{out} exists: a golden lake is never rewritten")
    import walkit
    from walkit._core.lake import LAKE_FORMAT

    print(f"walkit from {Path(walkit.__file__).parent}, lake format {LAKE_FORMAT}")
    root = Path(ROOT) / args.name
    shutil.rmtree(root, ignore_errors=True)
    rows, dump = trio.run(make, args.name, root)
    out.mkdir(parents=True)
    shutil.copytree(root, out / "lake")
    (out / "metadata.dump").write_bytes(dump)
    expected = {"root": f"file://{root}", "lake_format": LAKE_FORMAT, "records": rows}
    (out / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")
    shutil.rmtree(root)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()

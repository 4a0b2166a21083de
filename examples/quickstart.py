"""Create a ledger on a running cluster, write to it, read it back, and say what happened.

python examples/quickstart.py sqlite:///path/to/metadata.db   (or $WALKIT_METADATA)
"""

from __future__ import annotations

import os
import sys

import trio

import walkit


async def main(url: str) -> None:
    async with walkit.Client.connect(url) as client:
        writer = await client.create_ledger(
            ensemble_size=3, write_quorum=2, ack_quorum=2, password=b"demo"
        )
        print(
            f"created ledger {writer.id} on bookies {[str(b) for b in writer.metadata.current_ensemble]}"
        )
        first = await writer.append(b"hello, walkit")
        ids = await writer.append_batch([f"record {i}".encode() for i in range(9)])
        print(
            f"appended entries {first}..{ids[-1]}; last add confirmed = {writer.last_add_confirmed}"
        )
        await writer.close()
        md = await client.ledger_metadata(writer.id)
        print(f"closed ledger {writer.id}: state {md.state.value}, last entry {md.last_entry_id}")

        reader = await client.open_ledger(writer.id, password=b"demo")
        for entry in await reader.read(0, reader.last_add_confirmed):
            print(f"  read entry {entry.entry_id}: {entry.payload.decode()}")
        print(f"{len(await client.list_ledgers())} ledger(s) in the cluster; the demo worked.")


if __name__ == "__main__":
    target = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("WALKIT_METADATA", "")
    if not target:
        sys.exit("usage: quickstart.py METADATA_URL (or set WALKIT_METADATA)")
    # walkit logs through the standard logging module and is silent below WARNING unless the
    # application configures logging (logging.basicConfig(level=logging.INFO) shows its events).
    trio.run(main, target)

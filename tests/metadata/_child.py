"""A separate process for the multi-process metadata tests.

python _child.py ephemeral URL PATH   -- create an ephemeral node, print READY, wait forever
python _child.py ids URL COUNT        -- print COUNT ids from next_id("ledger"), then exit
"""

from __future__ import annotations

import sys

import trio

from walkit.metadata import open_metadata_store


async def main(action: str, url: str, arg: str) -> None:
    store = await open_metadata_store(url)
    if action == "ephemeral":
        await store.create(arg, b"child", ephemeral=True)
        print("READY", flush=True)
        await trio.sleep_forever()
    elif action == "ids":
        print("READY", flush=True)
        ids = [await store.next_id("ledger") for _ in range(int(arg))]
        print("IDS", *ids, flush=True)
        await store.aclose()
    else:
        raise SystemExit(f"unknown action {action}")


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2], sys.argv[3])

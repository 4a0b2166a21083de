"""The cluster's top-level layout and its instance id.

::

    /cluster/instanceid     32 hex digits (uuid4), written once by the first user
    /cluster/layout         {"format": 1, "ledgers": "hierarchical"}
    /ledgers/...            ledger metadata (see _ledgers)
    /bookies/available/<host:port>   ephemeral, JSON (see _bookies)
    /bookies/readonly/<host:port>    ephemeral, JSON
    /bookies/cookies/<host:port>     persistent, JSON
    /logs/<name>            reserved for the log API
    /idgen/<name>           id counters on zk (sqlite and memory keep them apart from the tree)
"""

from __future__ import annotations

import json
import random
import re
import uuid

from walkit.errors import InvalidMetadataError, NodeExistsError, NoSuchNodeError
from walkit.metadata._store import MetadataStore

INSTANCE_ID_PATH = "/cluster/instanceid"
LAYOUT_PATH = "/cluster/layout"
LAYOUT_FORMAT = 1
LEDGERS_PATH = "/ledgers"
BOOKIES_AVAILABLE_PATH = "/bookies/available"
BOOKIES_READONLY_PATH = "/bookies/readonly"
BOOKIES_COOKIES_PATH = "/bookies/cookies"
LOGS_PATH = "/logs"
#: Where the zk driver keeps its id counters (``next_id``), one decimal node per counter.
ID_COUNTERS_PATH = "/idgen"

_DIRECTORIES = (
    LEDGERS_PATH,
    BOOKIES_AVAILABLE_PATH,
    BOOKIES_READONLY_PATH,
    BOOKIES_COOKIES_PATH,
    LOGS_PATH,
)
_INSTANCE_ID = re.compile(r"[0-9a-f]{32}")


async def ensure_cluster(store: MetadataStore, *, rng: random.Random | None = None) -> str:
    """Return the cluster instance id, initializing an empty store first (race-safe).

    Any number of processes may call this at once on a fresh store: exactly one instance id
    wins and all of them return it. ``rng`` makes the id reproducible (simulations).
    """
    try:
        return _parse_instance_id((await store.get(INSTANCE_ID_PATH)).value)
    except NoSuchNodeError:
        pass
    await _check_or_write_layout(store)
    for path in _DIRECTORIES:  # before the id: once the id exists, the layout is complete
        if await store.exists(path) is None:
            try:
                await store.create(path, b"")
            except NodeExistsError:
                pass
    fresh = (uuid.UUID(int=rng.getrandbits(128), version=4) if rng else uuid.uuid4()).hex
    try:
        await store.create(INSTANCE_ID_PATH, fresh.encode("ascii"))
        return fresh
    except NodeExistsError:  # someone else initialized it first
        return _parse_instance_id((await store.get(INSTANCE_ID_PATH)).value)


async def _check_or_write_layout(store: MetadataStore) -> None:
    doc = {"format": LAYOUT_FORMAT, "ledgers": "hierarchical"}
    try:
        await store.create(LAYOUT_PATH, json.dumps(doc).encode())
        return
    except NodeExistsError:
        pass
    raw = (await store.get(LAYOUT_PATH)).value
    try:
        found = json.loads(raw)
        fmt = found["format"]
    except (ValueError, TypeError, KeyError):
        raise InvalidMetadataError(f"{LAYOUT_PATH} holds {raw[:80]!r}, not a layout") from None
    if fmt != LAYOUT_FORMAT:
        raise InvalidMetadataError(
            f"cluster layout format {fmt!r} is not supported (this walkit knows {LAYOUT_FORMAT})"
        )


def _parse_instance_id(raw: bytes) -> str:
    text = raw.decode("ascii", errors="replace").strip()
    if not _INSTANCE_ID.fullmatch(text):
        raise InvalidMetadataError(f"{INSTANCE_ID_PATH} holds {raw[:80]!r}, not an instance id")
    return text

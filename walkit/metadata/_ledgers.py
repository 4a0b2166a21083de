"""Ledger metadata in the hierarchical layout of BookKeeper's ledger managers (BookKeeper's concepts
guide).

An id below 10^10 is written as 10 digits and split 2/4/4 (HierarchicalLedgerManager)::

    ledger 1           -> /ledgers/00/0000/L0001
    ledger 1234567890  -> /ledgers/12/3456/L7890

Larger ids (up to 2^63 - 1) are written as 19 digits and split 3/4/4/4/4, as BookKeeper's
LongHierarchicalLedgerManager does::

    ledger 10^10       -> /ledgers/000/0000/0010/0000/L0000

The first level tells them apart (2 digits or 3), so both live under ``/ledgers`` and
``list_ids`` walks both. Each directory holds at most 10,000 children. The node's value is
``LedgerMetadata.to_bytes()`` (JSON) and its version is the CAS version.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import final

import attrs

from walkit._core.ledger_metadata import LedgerMetadata
from walkit.errors import InvalidArgumentError, NoSuchLedgerError, NoSuchNodeError
from walkit.metadata._cluster import LEDGERS_PATH
from walkit.metadata._store import MetadataStore, WatchEvent

MAX_LEDGER_ID = 2**63 - 1
_SHORT_LIMIT = 10**10
_FOUR = re.compile(r"\d{4}")
_LEAF = re.compile(r"L\d{4}")


def _check_id(ledger_id: object) -> int:
    if not isinstance(ledger_id, int) or isinstance(ledger_id, bool):
        raise InvalidArgumentError(f"ledger id must be an int, not {ledger_id!r}")
    if not 0 <= ledger_id <= MAX_LEDGER_ID:
        raise InvalidArgumentError(f"ledger id {ledger_id} is outside 0 .. 2^63-1")
    return ledger_id


def ledger_path(ledger_id: int) -> str:
    """The metadata path of a ledger (see the module docs for the layout)."""
    ledger_id = _check_id(ledger_id)
    if ledger_id < _SHORT_LIMIT:
        d = f"{ledger_id:010d}"
        return f"{LEDGERS_PATH}/{d[0:2]}/{d[2:6]}/L{d[6:10]}"
    d = f"{ledger_id:019d}"
    return f"{LEDGERS_PATH}/{d[0:3]}/{d[3:7]}/{d[7:11]}/{d[11:15]}/L{d[15:19]}"


def ledger_id_from_path(path: str) -> int | None:
    """The inverse of :func:`ledger_path`; None for a path that is not a ledger's."""
    prefix = LEDGERS_PATH + "/"
    if not path.startswith(prefix):
        return None
    parts = path[len(prefix) :].split("/")
    if not parts or not _LEAF.fullmatch(parts[-1]):
        return None
    middle = parts[1:-1]
    if not all(_FOUR.fullmatch(p) for p in middle):
        return None
    if len(parts) == 3 and re.fullmatch(r"\d{2}", parts[0]):
        value = int("".join([parts[0], *middle, parts[-1][1:]]))
    elif len(parts) == 5 and re.fullmatch(r"\d{3}", parts[0]):
        value = int("".join([parts[0], *middle, parts[-1][1:]]))
        if value < _SHORT_LIMIT or value > MAX_LEDGER_ID:
            return None
    else:
        return None
    return value


@final
@attrs.frozen
class LedgerManager:
    """Reads and writes ledger metadata in a MetadataStore; every update is a CAS."""

    store: MetadataStore

    async def create(self, metadata: LedgerMetadata) -> int:
        """Store a new ledger's metadata; NodeExistsError if the id is taken. Returns version 0."""
        return await self.store.create(ledger_path(metadata.ledger_id), metadata.to_bytes())

    async def read(self, ledger_id: int) -> tuple[LedgerMetadata, int]:
        """The ledger's metadata and version; NoSuchLedgerError, InvalidMetadataError."""
        path = ledger_path(ledger_id)
        try:
            found = await self.store.get(path)
        except NoSuchNodeError:
            raise NoSuchLedgerError(f"ledger {ledger_id} does not exist") from None
        return LedgerMetadata.from_bytes(ledger_id, found.value), found.version

    async def write(self, metadata: LedgerMetadata, version: int) -> int:
        """CAS the metadata at ``version``; MetadataVersionError if it changed meanwhile."""
        try:
            return await self.store.set(
                ledger_path(metadata.ledger_id), metadata.to_bytes(), version
            )
        except NoSuchNodeError:
            raise NoSuchLedgerError(f"ledger {metadata.ledger_id} does not exist") from None

    async def delete(self, ledger_id: int, version: int | None = None) -> None:
        """Delete the ledger's metadata (only at ``version`` if given)."""
        try:
            await self.store.delete(ledger_path(ledger_id), version)
        except NoSuchNodeError:
            raise NoSuchLedgerError(f"ledger {ledger_id} does not exist") from None

    async def exists(self, ledger_id: int) -> bool:
        return await self.store.exists(ledger_path(ledger_id)) is not None

    async def list_ids(self) -> list[int]:
        """Every ledger id, sorted (walks the directory levels; ignores foreign nodes)."""
        found: list[int] = []
        for top in await self._children(LEDGERS_PATH):
            if re.fullmatch(r"\d{2}", top):
                depth = 1
            elif re.fullmatch(r"\d{3}", top):
                depth = 3
            else:
                continue
            await self._walk(f"{LEDGERS_PATH}/{top}", depth, found)
        return sorted(found)

    async def _walk(self, path: str, depth: int, found: list[int]) -> None:
        for name in await self._children(path):
            if depth > 0:
                if _FOUR.fullmatch(name):
                    await self._walk(f"{path}/{name}", depth - 1, found)
            elif (ledger_id := ledger_id_from_path(f"{path}/{name}")) is not None:
                found.append(ledger_id)

    async def _children(self, path: str) -> list[str]:
        try:
            return await self.store.children(path)
        except NoSuchNodeError:  # not initialized yet, or removed under us
            return []

    def watch(self, ledger_id: int) -> AsyncIterator[WatchEvent]:
        """Events for the ledger's metadata node (CHANGED, DELETED); re-read after each."""
        return self.store.watch(ledger_path(ledger_id))

    async def new_ledger_id(self) -> int:
        """A fresh ledger id (positive, never handed out before by this store)."""
        ledger_id = await self.store.next_id("ledger")
        return _check_id(ledger_id)

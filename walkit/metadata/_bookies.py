"""Bookie registration (ephemeral), the bookie lists, and cookies (persistent).

::

    /bookies/available/<host:port>   ephemeral; the bookie is up and writable
    /bookies/readonly/<host:port>    ephemeral; the bookie is up and read-only
    /bookies/cookies/<host:port>     persistent; the bookie's cookie (JSON object)

A registration's value is JSON::

    {"format": 1, "bookie_id": "127.0.0.1:3181", "network_location": "/region/rack" or null,
     "read_only": false, "walkit_version": "0.1.0", ...whatever the bookie adds via ``info``}
"""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import AsyncIterator, Mapping
from typing import Any, final

import anyio
import attrs

from walkit._core.types import BookieId, BookieInfo
from walkit._logging import get_logger
from walkit._version import __version__
from walkit.errors import (
    InvalidArgumentError,
    InvalidMetadataError,
    NodeExistsError,
    NoSuchNodeError,
)
from walkit.metadata._cas import lost_race
from walkit.metadata._cluster import (
    BOOKIES_AVAILABLE_PATH,
    BOOKIES_COOKIES_PATH,
    BOOKIES_READONLY_PATH,
)
from walkit.metadata._store import MetadataStore, WatchEvent, WatchEventKind

logger = get_logger(__name__)

REGISTRATION_FORMAT = 1
_RESERVED = frozenset({"format", "bookie_id", "network_location", "read_only"})


@final
@attrs.frozen
class BookieList:
    """The registered bookies, by mode. A bookie caught in both (mid-switch) is read-only."""

    writable: dict[BookieId, BookieInfo] = attrs.Factory(dict)
    readonly: dict[BookieId, BookieInfo] = attrs.Factory(dict)


def _bookie_id(bookie_id: BookieId | str) -> BookieId:
    return bookie_id if isinstance(bookie_id, BookieId) else BookieId.parse(bookie_id)


def _check_location(location: object) -> str | None:
    if location is None:
        return None
    if not isinstance(location, str) or not location.startswith("/") or location.endswith("/"):
        raise InvalidArgumentError(
            f"network location must look like /region/rack, not {location!r}"
        )
    return location


def registration_path(bookie_id: BookieId | str, *, read_only: bool = False) -> str:
    base = BOOKIES_READONLY_PATH if read_only else BOOKIES_AVAILABLE_PATH
    return f"{base}/{_bookie_id(bookie_id)}"


def cookie_path(bookie_id: BookieId | str) -> str:
    return f"{BOOKIES_COOKIES_PATH}/{_bookie_id(bookie_id)}"


def _registration(
    bookie_id: BookieId, location: str | None, read_only: bool, info: Mapping[str, Any]
) -> bytes:
    doc: dict[str, Any] = {"walkit_version": __version__}
    doc.update({k: v for k, v in info.items() if k not in _RESERVED})
    doc.update(
        format=REGISTRATION_FORMAT,
        bookie_id=str(bookie_id),
        network_location=location,
        read_only=read_only,
    )
    try:
        return json.dumps(doc, sort_keys=True).encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise InvalidArgumentError(f"bookie registration info is not JSON: {exc}") from None


def _parse_registration(raw: bytes) -> dict[str, Any]:
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise InvalidMetadataError(f"bookie registration is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise InvalidMetadataError("bookie registration is not a JSON object")
    return doc


async def _close(events: AsyncIterator[WatchEvent]) -> None:
    aclose = getattr(events, "aclose", None)
    if aclose is not None:
        await aclose()


async def _wait_gone(store: MetadataStore, path: str) -> None:
    """Return once ``path`` does not exist (a stale ephemeral of a dead session expires)."""
    while True:
        events = store.watch(path)
        try:
            if await store.exists(path) is None:
                return
            logger.info("bookie_waiting_for_stale_registration", path=path)
            async for event in events:
                if event.kind in (WatchEventKind.DELETED, WatchEventKind.SESSION_EXPIRED):
                    break
            else:
                return  # the store closed; the next call says so
        finally:
            await _close(events)


async def register_bookie(
    store: MetadataStore,
    bookie_id: BookieId | str,
    *,
    network_location: str | None = None,
    read_only: bool = False,
    info: Mapping[str, Any] | None = None,
    stale_timeout: float = 30.0,
) -> None:
    """Register a running bookie: an ephemeral node that vanishes with the store's session.

    A registration left by this bookie's previous (crashed) session is waited for until it
    expires, at most ``stale_timeout`` seconds; if it is still there, NodeExistsError (another
    live bookie uses this id). ``info`` adds JSON fields (start time, HTTP port, ...).
    """
    bookie = _bookie_id(bookie_id)
    location = _check_location(network_location)
    data = _registration(bookie, location, bool(read_only), info or {})
    path = registration_path(bookie, read_only=read_only)
    other = registration_path(bookie, read_only=not read_only)
    with anyio.move_on_after(stale_timeout):
        while True:
            await _wait_gone(store, other)
            try:
                await store.create(path, data, ephemeral=True)
                logger.info("bookie_registered", bookie=str(bookie), read_only=read_only)
                return
            except NodeExistsError:
                await _wait_gone(store, path)
    raise NodeExistsError(
        f"bookie {bookie} is already registered ({path} or {other} exists): another bookie "
        f"with this id is running, or its old session did not expire within {stale_timeout:g} s"
    )


async def set_bookie_read_only(
    store: MetadataStore,
    bookie_id: BookieId | str,
    read_only: bool,
    *,
    network_location: str | None = None,
) -> None:
    """Move this session's registration to the other list (register if it had none).

    The new node is created before the old one is deleted, so the bookie never disappears.
    The registration's other fields are kept; ``network_location`` replaces the old one if given.
    """
    bookie = _bookie_id(bookie_id)
    location = _check_location(network_location)
    source = registration_path(bookie, read_only=not read_only)
    target = registration_path(bookie, read_only=read_only)
    old_version = await store.exists(source)
    doc = await _registration_doc(store, source if old_version is not None else target)
    if location is None and isinstance(doc.get("network_location"), str):
        location = doc["network_location"]
    data = _registration(bookie, location, bool(read_only), doc)
    try:
        await store.create(target, data, ephemeral=True)
    except NodeExistsError:
        current = await store.get(target)
        await store.set(target, data, current.version)
    if old_version is not None:
        # Gone or changed meanwhile: either way it is no longer ours to delete.
        with contextlib.suppress(NoSuchNodeError):
            await lost_race(functools.partial(store.delete, source, old_version))
    logger.info("bookie_mode_changed", bookie=str(bookie), read_only=read_only)


async def _registration_doc(store: MetadataStore, path: str) -> dict[str, Any]:
    try:
        return _parse_registration((await store.get(path)).value)
    except (NoSuchNodeError, InvalidMetadataError):
        return {}


async def list_bookies(store: MetadataStore) -> BookieList:
    """The registered bookies right now (writable and read-only), with their locations."""
    writable = await _read_list(store, BOOKIES_AVAILABLE_PATH, read_only=False)
    readonly = await _read_list(store, BOOKIES_READONLY_PATH, read_only=True)
    for bookie in readonly:
        writable.pop(bookie, None)
    return BookieList(writable=writable, readonly=readonly)


async def _read_list(
    store: MetadataStore, base: str, *, read_only: bool
) -> dict[BookieId, BookieInfo]:
    try:
        names = await store.children(base)
    except NoSuchNodeError:
        return {}
    out: dict[BookieId, BookieInfo] = {}
    for name in names:
        try:
            bookie = BookieId.parse(name)
        except InvalidArgumentError:
            logger.warning("bookie_registration_ignored", path=f"{base}/{name}", reason="bad id")
            continue
        try:
            raw = (await store.get(f"{base}/{name}")).value
        except NoSuchNodeError:
            continue  # it left while we looked
        location: str | None = None
        try:
            found = _parse_registration(raw).get("network_location")
            location = _check_location(found)
        except (InvalidMetadataError, InvalidArgumentError) as exc:
            logger.warning("bookie_registration_unreadable", path=f"{base}/{name}", error=str(exc))
        out[bookie] = BookieInfo(bookie, network_location=location, read_only=read_only)
    return out


def watch_bookies(store: MetadataStore) -> AsyncIterator[WatchEvent]:
    """Events whenever a bookie joins, leaves or switches mode; call ``list_bookies`` after each.

    It ends when the store closes (after SESSION_EXPIRED if the session is lost).
    """
    return store.watch_many([(BOOKIES_AVAILABLE_PATH, True), (BOOKIES_READONLY_PATH, True)])


# --- cookies -----------------------------------------------------------------------------


async def read_cookie(
    store: MetadataStore, bookie_id: BookieId | str
) -> tuple[dict[str, Any], int] | None:
    """The bookie's stored cookie and its version, or None if it has none."""
    path = cookie_path(bookie_id)
    try:
        found = await store.get(path)
    except NoSuchNodeError:
        return None
    try:
        doc = json.loads(found.value.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise InvalidMetadataError(f"cookie at {path} is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise InvalidMetadataError(f"cookie at {path} is not a JSON object")
    return doc, found.version


async def write_cookie(
    store: MetadataStore,
    bookie_id: BookieId | str,
    cookie: Mapping[str, Any],
    version: int | None = None,
) -> int:
    """Create the cookie (``version`` None; NodeExistsError if there is one) or CAS it."""
    path = cookie_path(bookie_id)
    try:
        data = json.dumps(dict(cookie), sort_keys=True).encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise InvalidArgumentError(f"cookie is not JSON: {exc}") from None
    if version is None:
        return await store.create(path, data)
    return await store.set(path, data, version)


async def delete_cookie(
    store: MetadataStore, bookie_id: BookieId | str, version: int | None = None
) -> None:
    """Delete the cookie (only at ``version`` if given); NoSuchNodeError if there is none."""
    await store.delete(cookie_path(bookie_id), version)

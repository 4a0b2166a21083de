"""Under-replication markers, the workers' locks on them, and the autorecovery settings.

BookKeeper's LedgerUnderreplicationManager, on any MetadataStore driver::

    /underreplication/ledgers/<ledger id>   persistent; JSON {"format": 1, "missing": [bookies]}
    /underreplication/locks/<ledger id>     ephemeral; JSON {"format": 1, "owner": "..."}
    /underreplication/config                persistent; JSON {"format": 1, "enabled": true,
                                                              "lost_bookie_delay": 30.0}
    /underreplication/auditor               the auditor's election (walkit.recipes)

A marker says which bookies a ledger is missing (those it lists but that are gone). A lock is
an ephemeral node of the worker's metadata session: it vanishes when the worker closes, crashes
or loses its session (ZooKeeper's session timeout, sqlite's and memory's session lease), so a
crashed worker never holds a ledger for ever. A marker is removed at the version the worker read:
if the auditor added a bookie to it meanwhile, the removal fails and the marker stays.
"""

from __future__ import annotations

import functools
import json
import math
import random
from collections.abc import AsyncIterator, Iterable
from typing import Any, final

import attrs

from walkit._core.types import BookieId
from walkit._logging import get_logger
from walkit.errors import (
    InvalidArgumentError,
    InvalidMetadataError,
    NodeExistsError,
    NoSuchNodeError,
)
from walkit.metadata._cas import Decision, cas_update, create_or_set, lost_race, read_or_absent
from walkit.metadata._store import MetadataStore, WatchEvent

log = get_logger(__name__)

UNDERREPLICATION_PATH = "/underreplication"
MARKERS_PATH = f"{UNDERREPLICATION_PATH}/ledgers"
LOCKS_PATH = f"{UNDERREPLICATION_PATH}/locks"
CONFIG_PATH = f"{UNDERREPLICATION_PATH}/config"
AUDITOR_PATH = f"{UNDERREPLICATION_PATH}/auditor"

FORMAT = 1
#: BookKeeper's lostBookieRecoveryDelay defaults to 0; a short pause rides out a bookie restart.
DEFAULT_LOST_BOOKIE_DELAY = 30.0
_CAS_ATTEMPTS = 20


@final
@attrs.frozen
class UnderreplicatedLedger:
    """A marker: ``ledger_id`` lists ``missing`` bookies that are gone."""

    ledger_id: int
    missing: tuple[BookieId, ...]


@final
@attrs.frozen
class AutorecoveryClusterSettings:
    """The cluster's autorecovery settings, stored in the metadata and changeable at run time
    (``walkit autorecovery enable|disable|delay``); each process's own tuning is its
    :class:`~walkit.autorecovery.AutorecoveryOptions`."""

    enabled: bool = True
    #: Seconds a bookie must stay unregistered before its ledgers are marked.
    lost_bookie_delay: float = DEFAULT_LOST_BOOKIE_DELAY


def check_delay(value: object) -> float:
    """A lost-bookie delay in seconds: a finite number >= 0."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgumentError(f"lost bookie delay must be a number of seconds, not {value!r}")
    if not math.isfinite(value) or value < 0:
        raise InvalidArgumentError(f"lost bookie delay must be >= 0 seconds, not {value!r}")
    return float(value)


def _check_ledger_id(ledger_id: object) -> int:
    if not isinstance(ledger_id, int) or isinstance(ledger_id, bool) or ledger_id < 0:
        raise InvalidArgumentError(f"ledger id must be a non-negative int, not {ledger_id!r}")
    return ledger_id


def _dump(doc: dict[str, Any]) -> bytes:
    return json.dumps({"format": FORMAT, **doc}, sort_keys=True).encode("utf-8")


def _load(raw: bytes, path: str) -> dict[str, Any]:
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise InvalidMetadataError(f"{path} is not JSON: {exc}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise InvalidMetadataError(f"{path} is not a format-{FORMAT} JSON object")
    return doc


def _parse_marker(ledger_id: int, raw: bytes, path: str) -> UnderreplicatedLedger:
    doc = _load(raw, path)
    missing = doc.get("missing")
    if not isinstance(missing, list):
        raise InvalidMetadataError(f"{path}: 'missing' is not a list")
    try:
        bookies = tuple(sorted({BookieId.parse(str(b)) for b in missing}, key=str))
    except InvalidArgumentError as exc:
        raise InvalidMetadataError(f"{path}: {exc}") from None
    return UnderreplicatedLedger(ledger_id, bookies)


def _parse_settings(raw: bytes) -> AutorecoveryClusterSettings:
    doc = _load(raw, CONFIG_PATH)
    enabled = doc.get("enabled", True)
    if not isinstance(enabled, bool):
        raise InvalidMetadataError(f"{CONFIG_PATH}: 'enabled' is not a boolean")
    try:
        delay = check_delay(doc.get("lost_bookie_delay", DEFAULT_LOST_BOOKIE_DELAY))
    except InvalidArgumentError as exc:
        raise InvalidMetadataError(f"{CONFIG_PATH}: {exc}") from None
    return AutorecoveryClusterSettings(enabled, delay)


def _marker_bytes(missing: Iterable[BookieId]) -> bytes:
    return _dump({"missing": sorted({str(b) for b in missing})})


@final
@attrs.frozen
class UnderreplicationManager:
    """Markers, locks and settings in one MetadataStore (this store's session owns the locks)."""

    store: MetadataStore
    #: Jitters the pauses after lost compare-and-set races (inject a seeded one to replay).
    rng: random.Random = attrs.field(factory=random.Random, kw_only=True)

    # --- markers -----------------------------------------------------------------------

    @staticmethod
    def marker_path(ledger_id: int) -> str:
        return f"{MARKERS_PATH}/{_check_ledger_id(ledger_id)}"

    @staticmethod
    def lock_path(ledger_id: int) -> str:
        return f"{LOCKS_PATH}/{_check_ledger_id(ledger_id)}"

    async def mark(self, ledger_id: int, missing: Iterable[BookieId]) -> bool:
        """Mark ``ledger_id`` as missing ``missing`` (merged into an existing marker).

        Returns True if the marker was created or grew, False if it already said as much.
        """
        wanted = {b if isinstance(b, BookieId) else BookieId.parse(b) for b in missing}
        if not wanted:
            raise InvalidArgumentError("an under-replication marker needs at least one bookie")
        path = self.marker_path(ledger_id)

        def decide(raw: bytes | None) -> Decision[bytes, set[BookieId] | None]:
            current: set[BookieId] = set()
            if raw is not None:
                try:
                    current = set(_parse_marker(ledger_id, raw, path).missing)
                except InvalidMetadataError as exc:
                    log.warning("underreplication_marker_unreadable", path=path, error=str(exc))
            if raw is not None and wanted <= current:
                return Decision(None)
            return Decision(current | wanted, _marker_bytes(current | wanted))

        _raw, _version, marked = await cas_update(
            f"ledger {ledger_id}: under-replication marker",
            read=functools.partial(read_or_absent, self.store, path),
            write=functools.partial(create_or_set, self.store, path),
            decide=decide,
            rng=self.rng,
            rounds=_CAS_ATTEMPTS,
        )
        if marked is None:
            return False
        log.info(
            "ledger_marked_underreplicated",
            ledger_id=ledger_id,
            missing=sorted(str(b) for b in marked),
        )
        return True

    async def read(self, ledger_id: int) -> tuple[UnderreplicatedLedger, int] | None:
        """The ledger's marker and its version, or None if it is not marked."""
        path = self.marker_path(ledger_id)
        try:
            found = await self.store.get(path)
        except NoSuchNodeError:
            return None
        return _parse_marker(ledger_id, found.value, path), found.version

    async def list_ids(self) -> list[int]:
        """The marked ledger ids, sorted (foreign nodes are ignored)."""
        try:
            names = await self.store.children(MARKERS_PATH)
        except NoSuchNodeError:
            return []
        return sorted(int(n) for n in names if n.isdigit())

    async def markers(self) -> list[UnderreplicatedLedger]:
        """Every marker (unreadable ones are logged and skipped)."""
        out: list[UnderreplicatedLedger] = []
        for ledger_id in await self.list_ids():
            try:
                found = await self.read(ledger_id)
            except InvalidMetadataError as exc:
                log.warning(
                    "underreplication_marker_unreadable", ledger_id=ledger_id, error=str(exc)
                )
                continue
            if found is not None:
                out.append(found[0])
        return out

    async def remove(self, ledger_id: int, version: int | None = None) -> bool:
        """Drop the marker (only at ``version`` if given). False if it changed or is gone."""
        try:
            if await lost_race(
                functools.partial(self.store.delete, self.marker_path(ledger_id), version)
            ):
                return False
        except NoSuchNodeError:
            return False
        log.info("underreplication_marker_removed", ledger_id=ledger_id)
        return True

    def watch(self) -> AsyncIterator[WatchEvent]:
        """Events when markers come or go; call :meth:`list_ids` after each."""
        return self.store.watch(MARKERS_PATH, children=True)

    async def ensure_paths(self) -> None:
        """Create the directories (idempotent; watches need them to exist)."""
        for path in (MARKERS_PATH, LOCKS_PATH):
            if await self.store.exists(path) is None:
                try:
                    await self.store.create(path, b"")
                except NodeExistsError:
                    pass

    # --- locks -------------------------------------------------------------------------

    async def try_lock(self, ledger_id: int, owner: str) -> bool:
        """Take the ledger's lock as an ephemeral node of this session; False if it is held."""
        try:
            await self.store.create(
                self.lock_path(ledger_id), _dump({"owner": str(owner)}), ephemeral=True
            )
        except NodeExistsError:
            return False
        return True

    async def unlock(self, ledger_id: int) -> None:
        """Release the lock (nothing if it is already gone)."""
        try:
            await self.store.delete(self.lock_path(ledger_id))
        except NoSuchNodeError:
            pass

    async def lock_owner(self, ledger_id: int) -> str | None:
        """Who holds the ledger's lock, or None."""
        path = self.lock_path(ledger_id)
        try:
            doc = _load((await self.store.get(path)).value, path)
        except NoSuchNodeError:
            return None
        except InvalidMetadataError:
            return "?"
        return str(doc.get("owner", "?"))

    # --- settings ----------------------------------------------------------------------

    async def settings(self) -> AutorecoveryClusterSettings:
        """The current settings (the defaults when none were ever stored)."""
        return (await self._settings())[0]

    async def _settings(self) -> tuple[AutorecoveryClusterSettings, int | None]:
        try:
            found = await self.store.get(CONFIG_PATH)
        except NoSuchNodeError:
            return AutorecoveryClusterSettings(), None
        return _parse_settings(found.value), found.version

    async def update_settings(
        self, *, enabled: bool | None = None, lost_bookie_delay: float | None = None
    ) -> AutorecoveryClusterSettings:
        """Change some settings (compare-and-set); returns the new ones."""
        if enabled is not None and not isinstance(enabled, bool):
            raise InvalidArgumentError(f"enabled must be True or False, not {enabled!r}")
        delay = None if lost_bookie_delay is None else check_delay(lost_bookie_delay)

        def decide(raw: bytes | None) -> Decision[bytes, AutorecoveryClusterSettings]:
            current = AutorecoveryClusterSettings() if raw is None else _parse_settings(raw)
            new = AutorecoveryClusterSettings(
                current.enabled if enabled is None else enabled,
                current.lost_bookie_delay if delay is None else delay,
            )
            data = _dump({"enabled": new.enabled, "lost_bookie_delay": new.lost_bookie_delay})
            return Decision(new, data)

        _raw, _version, new = await cas_update(
            "autorecovery settings",
            read=functools.partial(read_or_absent, self.store, CONFIG_PATH),
            write=functools.partial(create_or_set, self.store, CONFIG_PATH),
            decide=decide,
            rng=self.rng,
            rounds=_CAS_ATTEMPTS,
        )
        log.info(
            "autorecovery_settings_changed",
            enabled=new.enabled,
            lost_bookie_delay=new.lost_bookie_delay,
        )
        return new

    async def init_settings(self, lost_bookie_delay: float) -> None:
        """Store the settings with this delay unless some are stored already (first bookie)."""
        data = _dump({"enabled": True, "lost_bookie_delay": check_delay(lost_bookie_delay)})
        try:
            await self.store.create(CONFIG_PATH, data)
        except NodeExistsError:
            pass

    def watch_settings(self) -> AsyncIterator[WatchEvent]:
        return self.store.watch(CONFIG_PATH)

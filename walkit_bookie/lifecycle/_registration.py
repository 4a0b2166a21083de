"""A bookie's presence in the metadata store: cluster id, cookie, registration, mode."""

from __future__ import annotations

import functools
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, final

import anyio
import anyio.abc

from walkit._core.backoff import Backoff, Jitter
from walkit._core.types import BookieId
from walkit.errors import (
    ClientClosedError,
    CookieError,
    MetadataStoreError,
    NodeExistsError,
    NoSuchNodeError,
    SessionExpiredError,
    WalkitError,
)
from walkit.metadata import (
    INSTANCE_ID_PATH,
    MetadataStore,
    WatchEvent,
    WatchEventKind,
    ensure_cluster,
    open_metadata_store,
    read_cookie,
    register_bookie,
    registration_path,
    set_bookie_read_only,
    write_cookie,
)
from walkit.shared import collapse, get_logger, pause
from walkit_bookie._config import BookieConfig
from walkit_bookie.storage import LAYOUT_VERSION

log = get_logger(__name__)

ModeSource = Callable[[], tuple[bool, anyio.Event]]
StoreOpener = Callable[[], Awaitable[MetadataStore]]

_BACKOFF_MIN = 0.1


@final
class Registration:
    """The bookie's session with the metadata store.

    ``store`` is the store in use now: the one given, or after its session was lost, one that
    ``reopen`` opened (default: ``open_metadata_store(store.url)``). Stores opened here are
    closed here; the one given stays the caller's.
    """

    def __init__(
        self,
        store: MetadataStore,
        config: BookieConfig,
        *,
        reopen: StoreOpener | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.store = store
        self._reopen: StoreOpener = reopen or functools.partial(open_metadata_store, store.url)
        self._rng = rng if rng is not None else random.Random()
        #: Pauses while the store cannot be reached (equal jitter: some wait, never none).
        self._backoff = Backoff(
            first=min(_BACKOFF_MIN, config.metadata_retry_max),
            cap=config.metadata_retry_max,
            jitter=Jitter.EQUAL,
        )
        self._opened: list[MetadataStore] = []
        self._started = False
        #: Whether the current session holds the registration.
        self.registered = False
        #: Stores used so far (1 + the sessions opened after losing one), registrations redone.
        self.sessions = 1
        self.reregistrations = 0
        self._config = config
        self._instance_id = ""
        self._stored: dict[str, Any] | None = None
        self._bookie_id: BookieId | None = None
        self._read_only = False
        #: Extra JSON fields for the registration (the HTTP admin port, ...).
        self.info: dict[str, Any] = {}

    async def cluster_instance_id(self) -> str:
        self._instance_id = await ensure_cluster(self.store)
        return self._instance_id

    async def check_cookie(self, bookie_id: BookieId, local: BookieId | None) -> None:
        """Compare the store's cookie for this bookie with the local storage (before opening)."""
        found = await read_cookie(self.store, bookie_id)
        self._stored = None if found is None else found[0]
        if self._stored is None:
            return
        if local is None:
            raise CookieError(
                f"the metadata store has a cookie for bookie {bookie_id} but its data dirs "
                f"{list(self._config.data_dirs)} have none: they were wiped or replaced; "
                "refusing to start (an operator who means it deletes the cookie in the store)"
            )
        dirs = self._stored.get("data_dirs")
        if dirs is not None and list(dirs) != list(self._config.data_dirs):
            raise CookieError(
                f"the metadata store's cookie for bookie {bookie_id} lists data dirs {dirs}, "
                f"but the bookie was started with {list(self._config.data_dirs)}"
            )
        stored_instance = self._stored.get("instance_id")
        if stored_instance is not None and stored_instance != self._instance_id:
            raise CookieError(
                f"the metadata store's cookie for bookie {bookie_id} names cluster "
                f"{stored_instance}, but the store is cluster {self._instance_id}"
            )

    async def store_cookie(self, bookie_id: BookieId, config: BookieConfig) -> None:
        """Write the cookie to the store if it has none (after the local one was checked)."""
        if self._stored is not None:
            return
        cookie = {
            "layout_version": LAYOUT_VERSION,
            "bookie_id": str(bookie_id),
            "instance_id": self._instance_id,
            "data_dirs": list(config.data_dirs),
        }
        try:
            await write_cookie(self.store, bookie_id, cookie)
        except NodeExistsError:
            pass

    @property
    def instance_id(self) -> str | None:
        return self._instance_id or None

    async def run(
        self,
        bookie_id: BookieId,
        mode: ModeSource,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Register, then follow the bookie's mode (writable / read-only) until cancelled.

        When the store's session is lost (SESSION_EXPIRED, SessionExpiredError), open a new
        store and register again (in the mode of the moment), retrying with exponential
        backoff. Errors of the first registration are the caller's (the bookie cannot start).
        """
        self._bookie_id = bookie_id
        error = await self._session(mode, task_status)
        while True:
            self.registered = False
            log.warning(
                "metadata_session_lost",
                bookie_id=str(bookie_id),
                url=self.store.url,
                error=None if error is None else str(error),
            )
            attempt = 0
            while True:
                try:
                    await self._replace_store()
                    error = await self._session(mode, None if self._started else task_status)
                except (WalkitError, OSError) as exc:  # a store we could not open or use
                    error = exc
                if self.registered:
                    break  # a session that registered, then ended: start over
                report = functools.partial(
                    _report_retry,
                    log.warning,
                    "metadata_reregistration_failed",
                    bookie_id=str(bookie_id),
                    error=None if error is None else str(error),
                )
                await pause(self._backoff, attempt, self._rng, before=report)
                attempt += 1

    async def _replace_store(self) -> None:
        store = await self._reopen()
        try:
            instance_id = await ensure_cluster(store)
            if instance_id != self._instance_id:
                raise CookieError(
                    f"the metadata store {store.url} is now cluster {instance_id}, not "
                    f"{self._instance_id}: not registering there"
                )
        except BaseException:
            with anyio.CancelScope(shield=True):
                await _close_quietly(store)
            raise
        old, self.store = self.store, store
        if old in self._opened:
            self._opened.remove(old)
            await _close_quietly(old)
        self._opened.append(store)
        self.sessions += 1

    async def _session(
        self, mode: ModeSource, task_status: anyio.abc.TaskStatus[None] | None
    ) -> BaseException | None:
        """Register through the current store and follow the mode until its session is lost;
        return the error that ended it (None: an expiry event)."""
        assert self._bookie_id is not None
        store = self.store
        bookie_id = self._bookie_id
        error: BaseException | None = None
        # Armed before registering: any watch ends with SESSION_EXPIRED when the session goes.
        events = store.watch(INSTANCE_ID_PATH)
        try:
            async with anyio.create_task_group() as nursery:
                nursery.start_soon(_until_session_lost, events, nursery.cancel_scope)
                try:
                    read_only, changed = mode()
                    await register_bookie(
                        store,
                        bookie_id,
                        network_location=self._config.network_location,
                        read_only=read_only,
                        info=self.info,
                    )
                    self._read_only = read_only
                    self.registered = True
                    if self._started:
                        self.reregistrations += 1
                        log.info(
                            "bookie_reregistered", bookie_id=str(bookie_id), read_only=read_only
                        )
                    if task_status is not None:
                        self._started = True
                        task_status.started()
                    await self._follow_mode(store, mode, changed)
                except SessionExpiredError as exc:
                    error = exc
                except (WalkitError, OSError) as exc:
                    if not self._started:
                        raise
                    error = exc
                nursery.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            raise collapse(group) from None
        finally:
            with anyio.CancelScope(shield=True):
                await _close_events(events)
        return error

    async def _follow_mode(
        self, store: MetadataStore, mode: ModeSource, changed: anyio.Event
    ) -> None:
        assert self._bookie_id is not None
        attempt = 0
        while True:
            await changed.wait()
            read_only, changed = mode()
            while read_only != self._read_only:
                try:
                    await set_bookie_read_only(
                        store,
                        self._bookie_id,
                        read_only,
                        network_location=self._config.network_location,
                    )
                    self._read_only = read_only
                    attempt = 0
                except SessionExpiredError:
                    raise
                except MetadataStoreError as exc:  # disconnected: try again, with backoff
                    report = functools.partial(
                        _report_retry,
                        log.error,
                        "bookie_mode_not_registered",
                        read_only=read_only,
                        error=str(exc),
                    )
                    await pause(self._backoff, attempt, self._rng, before=report)
                    attempt += 1
                    read_only, changed = mode()

    async def aclose(self) -> None:
        """Remove the registration now (it would also vanish with the store's session), and
        close the stores this object opened."""
        if self._bookie_id is not None and self.registered:
            path = registration_path(self._bookie_id, read_only=self._read_only)
            try:
                with anyio.move_on_after(2):
                    await self.store.delete(path)
            except (NoSuchNodeError, MetadataStoreError, ClientClosedError) as exc:
                log.debug("unregister_failed", path=path, error=str(exc))
        for store in self._opened:
            await _close_quietly(store)
        self._opened.clear()


def _report_retry(emit: Callable[..., Any], event: str, seconds: float, **fields: Any) -> None:
    """Log a coming pause (``pause(before=...)``): its length as ``retry_in``."""
    emit(event, **fields, retry_in=round(seconds, 3))


async def _until_session_lost(events: AsyncIterator[WatchEvent], scope: anyio.CancelScope) -> None:
    try:
        async for event in events:
            if event.kind is WatchEventKind.SESSION_EXPIRED:
                break
    except WalkitError:
        pass
    # The session expired, or the store was closed under us: either way this session is over.
    scope.cancel()


async def _close_events(events: AsyncIterator[WatchEvent]) -> None:
    aclose = getattr(events, "aclose", None)
    if aclose is not None:
        try:
            await aclose()
        except WalkitError:
            pass


async def _close_quietly(store: MetadataStore) -> None:
    try:
        await store.aclose()
    except (WalkitError, OSError) as exc:
        log.debug("metadata_store_close_failed", url=store.url, error=str(exc))

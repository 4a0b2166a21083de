"""A bookie's presence in the metadata store: cluster id, cookie, registration, mode."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, final

import structlog
import trio

from walkit._core.types import BookieId
from walkit.errors import CookieError, MetadataStoreError, NodeExistsError, NoSuchNodeError
from walkit.metadata import (
    MetadataStore,
    ensure_cluster,
    read_cookie,
    register_bookie,
    registration_path,
    set_bookie_read_only,
    write_cookie,
)
from walkit_bookie._config import BookieConfig
from walkit_bookie._cookie import LAYOUT_VERSION

log = structlog.get_logger()

ModeSource = Callable[[], tuple[bool, trio.Event]]


@final
class Registration:
    def __init__(self, store: MetadataStore, config: BookieConfig) -> None:
        self._store = store
        self._config = config
        self._instance_id = ""
        self._stored: dict[str, Any] | None = None
        self._bookie_id: BookieId | None = None
        self._read_only = False
        #: Extra JSON fields for the registration (the HTTP admin port, ...).
        self.info: dict[str, Any] = {}

    async def cluster_instance_id(self) -> str:
        self._instance_id = await ensure_cluster(self._store)
        return self._instance_id

    async def check_cookie(self, bookie_id: BookieId, local: BookieId | None) -> None:
        """Compare the store's cookie for this bookie with the local storage (before opening)."""
        found = await read_cookie(self._store, bookie_id)
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
            await write_cookie(self._store, bookie_id, cookie)
        except NodeExistsError:
            pass

    async def run(
        self,
        bookie_id: BookieId,
        mode: ModeSource,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Register, then follow the bookie's mode (writable / read-only) until cancelled."""
        self._bookie_id = bookie_id
        read_only, changed = mode()
        await register_bookie(
            self._store,
            bookie_id,
            network_location=self._config.network_location,
            read_only=read_only,
            info=self.info,
        )
        self._read_only = read_only
        task_status.started()
        while True:
            await changed.wait()
            read_only, changed = mode()
            if read_only == self._read_only:
                continue
            try:
                await set_bookie_read_only(
                    self._store,
                    bookie_id,
                    read_only,
                    network_location=self._config.network_location,
                )
                self._read_only = read_only
            except MetadataStoreError as exc:
                log.error("bookie_mode_not_registered", read_only=read_only, error=str(exc))

    async def aclose(self) -> None:
        """Remove the registration now (it would also vanish with the store's session)."""
        if self._bookie_id is None:
            return
        path = registration_path(self._bookie_id, read_only=self._read_only)
        try:
            with trio.move_on_after(2):
                await self._store.delete(path)
        except (NoSuchNodeError, MetadataStoreError) as exc:
            log.debug("unregister_failed", path=path, error=str(exc))

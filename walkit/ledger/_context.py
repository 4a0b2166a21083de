"""What a client's ledger handles (and the recovery driver) share: ``ClientContext``.

One per client. Everything here is plain: the metadata store and its LedgerManager, the bookie
connection pool (with the failure history), the placement policy, the options, the injected
random generator, the event loop, and the task group that runs handles' background tasks.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar, final

import anyio
import anyio.abc
import attrs

from walkit._core.backoff import Backoff
from walkit._core.digest import DigestManager, master_key
from walkit._core.ledger_metadata import LedgerMetadata, password_matches
from walkit._core.recovery import RecoveryRules
from walkit._core.types import BookieId
from walkit._core.wire import Request, Response, StatusCode
from walkit._loop import EventLoop
from walkit._retry import retry
from walkit.errors import (
    MetadataStoreError,
    UnauthorizedAccessError,
    WalkitError,
    error_for_code,
)
from walkit.ledger._metrics import ClientMetrics
from walkit.ledger._options import ClientOptions
from walkit.metadata import LedgerManager, MetadataStore
from walkit.net._pool import ConnectionPool
from walkit.placement import EnsemblePlacementPolicy

__all__ = ["ClientContext", "check_password", "status_error"]

T = TypeVar("T")


#: Pauses while the metadata store is unreachable.
METADATA_BACKOFF = Backoff(first=0.05, cap=1.0)


def status_error(status: int, what: str) -> WalkitError:
    """The walkit error for a bookie's non-OK status, with context."""
    try:
        name = StatusCode(status).name
    except ValueError:
        name = str(status)
    return error_for_code(status, f"{what}: {name}")


def check_password(metadata: LedgerMetadata, password: bytes) -> None:
    """Refuse a password that does not match the one the ledger was created with."""
    if not isinstance(password, bytes | bytearray):
        raise UnauthorizedAccessError(
            f"ledger {metadata.ledger_id}: password must be bytes, not {type(password).__name__}"
        )
    if metadata.password_sha256 and not password_matches(metadata.password_sha256, bytes(password)):
        raise UnauthorizedAccessError(f"ledger {metadata.ledger_id}: wrong password")


@final
@attrs.define(eq=False)
class ClientContext:
    """The internals one client's handles share (also what the recovery driver gets).

    - ``ledgers.read(id) -> (metadata, version)``; ``ledgers.write(md, version)`` is the CAS
      (MetadataVersionError when it lost).
    - ``pool.get(bookie)`` is the shared connection; ``conn.call(build, timeout)`` sends
      ``build(request_id)`` and returns the response (any status), raising BookieTimeoutError /
      BookieUnavailableError; ``conn.send(...)`` is the callback form (many in flight).
    - ``pool.failure_history`` feeds ``read_order``.
    - ``digest_manager(md, password)`` and ``master_key(password)`` build and check packets.
    """

    store: MetadataStore
    ledgers: LedgerManager
    pool: ConnectionPool
    placement: EnsemblePlacementPolicy
    options: ClientOptions
    rng: random.Random
    #: The event loop the client runs on (its clock, its fast waits).
    loop: EventLoop
    #: Runs handles' background tasks (explicit LAC, ensemble changes); tasks must not raise.
    task_group: anyio.abc.TaskGroup
    #: What recovery applies (always both fixes; tests inject one turned off).
    recovery_rules: RecoveryRules = attrs.field(factory=RecoveryRules)
    #: Where the client's metrics go (None: the client keeps none).
    metrics: ClientMetrics | None = None

    # --- metadata --------------------------------------------------------------------------

    async def read_metadata(self, ledger_id: int) -> tuple[LedgerMetadata, int]:
        """The ledger's metadata and version (NoSuchLedgerError if it does not exist)."""
        return await self.ledgers.read(ledger_id)

    async def retry_metadata(self, op: Callable[[], Awaitable[T]]) -> T:
        """Run a metadata operation, retrying while the store is unreachable."""
        return await retry(
            op,
            attempts=self.options.metadata_retries + 1,
            backoff=METADATA_BACKOFF,
            rng=self.rng,
            retry_on=lambda exc: isinstance(exc, MetadataStoreError) and exc.retryable,
        )

    # --- entries ---------------------------------------------------------------------------

    @staticmethod
    def digest_manager(metadata: LedgerMetadata, password: bytes) -> DigestManager:
        return DigestManager(metadata.ledger_id, metadata.digest, bytes(password))

    @staticmethod
    def master_key(password: bytes) -> bytes:
        return master_key(bytes(password))

    # --- bookies ---------------------------------------------------------------------------

    async def call(
        self, bookie: BookieId, build: Callable[[int], Request], timeout: float | None = None
    ) -> Response:
        """One request to one bookie, awaited (any status comes back; errors raise)."""
        conn = self.pool.get(bookie)
        return await conn.call(build, self.options.read_timeout if timeout is None else timeout)

    def read_order(self, ensemble: Sequence[BookieId], write_set: Sequence[int]) -> list[int]:
        """The order in which to ask the write set's bookies (placement policy + failures)."""
        order = self.placement.reorder_read_sequence(ensemble, write_set, self.pool.failure_history)
        if sorted(order) != sorted(write_set):  # a policy bug must not lose replicas
            return list(write_set)
        return list(order)

    def read_lac_order(self, ensemble: Sequence[BookieId], write_set: Sequence[int]) -> list[int]:
        order = self.placement.reorder_read_lac_sequence(
            ensemble, write_set, self.pool.failure_history
        )
        if sorted(order) != sorted(write_set):
            return list(write_set)
        return list(order)

"""Rereplicating one marked ledger: the replication worker's job, also run by ``walkit recover``.

The caller holds the ledger's lock. Steps (see docs/autorecovery.md):

1. Read the marker and the ledger's metadata; decide (:func:`walkit._core.rereplication.next_action`).
2. The ledger's password: the one its metadata keeps, else one this rereplicator knows; none: the
   marker stays and a warning says so, once (``RereplicationOutcome.NEEDS_PASSWORD``).
   An OPEN ledger is left to its writer for the grace period, then fenced and recovered
   (opened with recovery, which closes it).
3. The placement policy picks a replacement for each (fragment, lost bookie); none valid: the
   marker stays and a warning says why.
4. Every entry of each affected fragment is copied to its replacement (digests checked).
5. The bookie swap is CASed into the metadata; a lost CAS plans again (copies are idempotent).
6. The marker is dropped at the version read in step 1 (if the auditor added a bookie
   meanwhile, it stays and the ledger is rereplicated again).
"""

from __future__ import annotations

import enum
import functools
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, final

import anyio

from walkit._core.digest import DigestManager, master_key
from walkit._core.ledger_metadata import LedgerMetadata
from walkit._core.rereplication import (
    Action,
    FragmentGap,
    NoReplacement,
    choose_replacements,
    copied_by_replacement,
    gaps_for,
    next_action,
    prefer_local,
    with_replacements,
)
from walkit._core.types import BookieId
from walkit._logging import get_logger
from walkit.autorecovery._copy import LocalCopies, RateLimiter, TargetFailedError, copy_fragment
from walkit.autorecovery._metrics import AutorecoveryMetrics
from walkit.autorecovery._options import AutorecoveryOptions
from walkit.autorecovery._passwords import PASSWORD_NEEDED, known_password
from walkit.autorecovery._remote_copy import copy_at_target
from walkit.client import client_services
from walkit.errors import InvalidMetadataError, NoSuchLedgerError, RereplicationError
from walkit.log._passwords import log_password
from walkit.metadata import Decision, UnderreplicationManager, cas_update

if TYPE_CHECKING:
    from walkit.client import Client

log = get_logger(__name__)

__all__ = ["RereplicationOutcome", "Rereplicator"]

_ROUNDS = 10


class RereplicationOutcome(enum.Enum):
    #: Copied, swapped, marker dropped. The value is the ``outcome`` label of the
    #: ``walkit_autorecovery_ledgers`` metric, kept for dashboards.
    REREPLICATED = "healed"
    NOTHING = "nothing"  # no marker, or the ledger no longer lists a lost bookie
    GONE = "gone"  # the ledger was deleted: marker dropped
    WAITING = "waiting"  # open, within the writer's grace period
    NO_REPLACEMENT = "no_replacement"  # the placement policy has no valid bookie: marker stays
    DEFERRED = "deferred"  # no copy would go to this worker's own bookie: left for now
    NEEDS_PASSWORD = "needs_password"  # nobody stored or gave its password: marker stays
    HEALED = "healed"  # deprecated alias of REREPLICATED (goes in the next release)


@final
class Rereplicator:
    """Rereplicates marked ledgers through one client (its placement policy and connections).

    ``local``: the bookie this rereplicator runs in. Where the placement policy's choice for a
    fragment is in the same rack as this bookie, and this bookie is not in the fragment, this
    bookie takes the copy itself, stored without the network (BookKeeper's replication
    workers copy to their own bookie).
    """

    def __init__(
        self,
        client: Client,
        options: AutorecoveryOptions | None = None,
        metrics: AutorecoveryMetrics | None = None,
        *,
        local: LocalCopies | None = None,
    ) -> None:
        self.client = client
        #: The client's internals (placement, pool, metadata store, randomness).
        self._context = client_services(client).context
        self.local = local
        self.options = options or AutorecoveryOptions()
        self.metrics = metrics or AutorecoveryMetrics()
        self.urm = UnderreplicationManager(client.metadata_store, rng=self._context.rng)
        self.limiter = RateLimiter(self.options.entries_per_second, self.options.bytes_per_second)
        #: When this rereplicator first found each ledger open (the grace period runs from there).
        self.open_since: dict[int, float] = {}
        #: The last reason a ledger could not be rereplicated (for status output).
        self.last_problem: dict[int, str] = {}
        #: Replacements that did not copy a fragment themselves (said once each).
        self._copied_here_for: set[BookieId] = set()

    async def find_password(self, md: LedgerMetadata) -> bytes | None:
        """The ledger's password: the one its metadata keeps, else b"", one of this rereplicator's
        ``passwords`` or its log's; None when none of them is it."""
        return await known_password(
            md, self.options.passwords, functools.partial(log_password, self.client)
        )

    async def password_for(self, md: LedgerMetadata) -> bytes:
        """:meth:`find_password`, raising RereplicationError when it is unknown."""
        password = await self.find_password(md)
        if password is None:
            raise RereplicationError(f"ledger {md.ledger_id}: {PASSWORD_NEEDED}")
        return password

    def _forget(self, ledger_id: int) -> None:
        """Drop what this rereplicator remembers of a ledger that is no longer marked."""
        self.open_since.pop(ledger_id, None)
        self.last_problem.pop(ledger_id, None)

    def forget_unmarked(self, marked: Iterable[int]) -> None:
        """Drop what this rereplicator remembers of ledgers not in ``marked`` (rereplicated elsewhere, or
        deleted): if one is marked again, its problems are news again and are said again."""
        keep = set(marked)
        for ledger_id in {*self.open_since, *self.last_problem} - keep:
            self._forget(ledger_id)

    def _password_unknown(self, ledger_id: int) -> RereplicationOutcome:
        # Said once per ledger (until it is rereplicated): every pass of every worker tries it again.
        said = self.last_problem.get(ledger_id) == PASSWORD_NEEDED
        self.last_problem[ledger_id] = PASSWORD_NEEDED
        (log.debug if said else log.warning)(
            "rereplication_needs_password", ledger_id=ledger_id, reason=PASSWORD_NEEDED
        )
        return RereplicationOutcome.NEEDS_PASSWORD

    def _with_local(
        self,
        chosen: dict[tuple[int, int], BookieId],
        gaps: list[FragmentGap],
        avoid: set[BookieId],
    ) -> dict[tuple[int, int], BookieId]:
        policy = self._context.placement
        location_of = getattr(policy, "location_of", None)
        writable = getattr(policy, "writable_bookies", None)
        if self.local is None or location_of is None or writable is None:
            return chosen  # no local bookie, or a policy that does not say where bookies are
        return prefer_local(
            chosen,
            gaps,
            self.local.bookie_id,
            writable=writable(),
            location_of=location_of,
            avoid=avoid,
        )

    async def _copied_by_target(
        self,
        md: LedgerMetadata,
        gap: FragmentGap,
        target: BookieId,
        key: bytes,
        lost: set[BookieId],
        progress: Callable[[int, int], None] | None,
    ) -> bool:
        """Have ``target`` copy ``gap`` from the replicas itself, when the copies are not
        rate-limited and ``target`` is not this rereplicator's own bookie; False: copy them here."""
        options = self.options
        if not copied_by_replacement(
            options.copies_by_replacement,
            options.entries_per_second is not None or options.bytes_per_second is not None,
            target,
            None if self.local is None else self.local.bookie_id,
        ):
            return False
        context = self._context
        why = await copy_at_target(
            context, md, gap, target, key=key, skip=lost, metrics=self.metrics, progress=progress
        )
        if why is None:
            return True
        said = target in self._copied_here_for
        self._copied_here_for.add(target)
        (log.debug if said else log.info)(
            "rereplication_relaying_copies",
            ledger_id=md.ledger_id,
            bookie_id=str(target),
            reason=why,
        )
        return False

    async def _swap_bookies(
        self,
        md: LedgerMetadata,
        version: int,
        chosen: Mapping[tuple[int, int], BookieId],
        old: Mapping[tuple[int, int], BookieId],
    ) -> bool:
        """Put the replacements that hold the copies in the ledger's fragments; False when a
        fragment no longer lists the bookie it replaces (the ledger changed: plan again)."""

        def decide(current: LedgerMetadata) -> Decision[LedgerMetadata, bool]:
            try:
                return Decision(True, with_replacements(current, chosen, old))
            except InvalidMetadataError:
                return Decision(False)

        context = self._context
        _md, _version, swapped = await cas_update(
            f"ledger {md.ledger_id}: rereplication",
            read=functools.partial(context.read_metadata, md.ledger_id),
            write=context.ledgers.write,
            decide=decide,
            rng=context.rng,
            current=(md, version),
        )
        return swapped

    def _no_replacement(self, ledger_id: int, chosen: NoReplacement) -> RereplicationOutcome:
        """No bookie can take a lost copy: say so (once per ledger and reason, as passes
        repeat every poll interval) and leave the marker for a later pass."""
        reason = (
            f"no valid replacement for {chosen.gap.bookie} in fragment "
            f"{chosen.gap.first_entry}: {chosen.reason}"
        )
        said = self.last_problem.get(ledger_id) == reason
        self.last_problem[ledger_id] = reason
        (log.debug if said else log.warning)(
            "rereplication_no_replacement",
            ledger_id=ledger_id,
            bookie_id=str(chosen.gap.bookie),
            first_entry=chosen.gap.first_entry,
            reason=chosen.reason,
        )
        return RereplicationOutcome.NO_REPLACEMENT

    async def _copy_gaps(
        self,
        md: LedgerMetadata,
        gaps: Sequence[FragmentGap],
        chosen: Mapping[tuple[int, int], BookieId],
        password: bytes,
        lost: set[BookieId],
        progress: Callable[[int, int], None] | None,
    ) -> None:
        """Store each gap's entries on its chosen replacement: copied by the replacement
        itself where it can, else read from the surviving copies and written here. Raises
        TargetFailedError for a replacement that could not store them."""
        digests = DigestManager(md.ledger_id, md.digest, password)
        key = master_key(password)
        for gap in gaps:
            target = chosen[(gap.first_entry, gap.index)]
            if await self._copied_by_target(md, gap, target, key, lost, progress):
                continue
            await copy_fragment(
                self._context,
                md,
                gap,
                target,
                key=key,
                digests=digests,
                limiter=self.limiter,
                window=self.options.window,
                skip=lost,
                metrics=self.metrics,
                progress=progress,
                local=self.local,
            )

    def _rereplicated(
        self,
        ledger_id: int,
        gaps: Sequence[FragmentGap],
        chosen: Mapping[tuple[int, int], BookieId],
    ) -> None:
        log.info(
            "ledger_rereplicated",
            ledger_id=ledger_id,
            replaced={str(g.bookie): str(chosen[(g.first_entry, g.index)]) for g in gaps},
            fragments=len({g.first_entry for g in gaps}),
            to_this_bookie=sum(
                1 for b in chosen.values() if self.local and b == self.local.bookie_id
            ),
        )
        self.last_problem.pop(ledger_id, None)

    async def rereplicate(
        self,
        ledger_id: int,
        *,
        progress: Callable[[int, int], None] | None = None,
        local_only: bool = False,
    ) -> RereplicationOutcome:
        """Rereplicate ``ledger_id`` (the caller holds its lock). Raises RereplicationError when this
        attempt failed (the marker stays; another attempt may succeed).

        ``local_only``: return DEFERRED, copying nothing, when no copy would go to this
        rereplicator's own bookie (it is in the ledger's ensemble, say): a worker of a bookie that
        can take the copies stores them without a network hop, for about half the CPU."""
        context = self._context
        started = anyio.current_time()
        #: Replacements that failed to store copies in this attempt (not offered again).
        unusable: set[BookieId] = set()
        for _ in range(_ROUNDS):
            found = await self.urm.read(ledger_id)
            if found is None:
                self._forget(ledger_id)  # rereplicated elsewhere
                return RereplicationOutcome.NOTHING
            marker, marker_version = found
            try:
                md, version = await context.read_metadata(ledger_id)
            except NoSuchLedgerError:
                await self.urm.remove(ledger_id, marker_version)
                self._forget(ledger_id)
                return RereplicationOutcome.GONE
            lost = set(marker.missing)
            now = anyio.current_time()
            action = next_action(
                md,
                lost,
                open_since=self.open_since.get(ledger_id),
                now=now,
                grace=self.options.grace_period,
            )
            if action is Action.DONE:
                if await self.urm.remove(ledger_id, marker_version):
                    self._forget(ledger_id)
                    return RereplicationOutcome.NOTHING
                continue
            if action is Action.WAIT:
                self.open_since.setdefault(ledger_id, now)
                log.info(
                    "rereplication_waiting_for_writer",
                    ledger_id=ledger_id,
                    grace_period=self.options.grace_period,
                )
                return RereplicationOutcome.WAITING
            password = await self.find_password(md)
            if password is None:
                return self._password_unknown(ledger_id)
            if action is Action.RECOVER:
                log.info("rereplication_recovering_open_ledger", ledger_id=ledger_id)
                await self.client.open_ledger(ledger_id, password=password, recovery=True)
                continue
            gaps = gaps_for(md, lost)
            chosen = choose_replacements(context.placement, md, gaps, avoid=lost | unusable)
            if isinstance(chosen, NoReplacement):
                return self._no_replacement(ledger_id, chosen)
            chosen = self._with_local(chosen, gaps, lost | unusable)
            if local_only and (self.local is None or self.local.bookie_id not in chosen.values()):
                return RereplicationOutcome.DEFERRED
            try:
                await self._copy_gaps(md, gaps, chosen, password, lost, progress)
            except TargetFailedError as exc:
                unusable.add(exc.target)
                log.info(
                    "rereplication_replacement_failed",
                    ledger_id=ledger_id,
                    bookie_id=str(exc.target),
                    error=str(exc),
                )
                continue  # plan again without it (copies made so far are harmless)
            old = {(g.first_entry, g.index): g.bookie for g in gaps}
            if not await self._swap_bookies(md, version, chosen, old):
                continue  # the ledger changed meanwhile: plan again (copies are idempotent)
            self._rereplicated(ledger_id, gaps, chosen)
            if await self.urm.remove(ledger_id, marker_version):
                self._forget(ledger_id)
                self.metrics.rereplicated(anyio.current_time() - started)
                return RereplicationOutcome.REREPLICATED
        raise RereplicationError(
            f"ledger {ledger_id}: its metadata or marker kept changing while rereplicating it"
        )

    async def heal(
        self,
        ledger_id: int,
        *,
        progress: Callable[[int, int], None] | None = None,
        local_only: bool = False,
    ) -> RereplicationOutcome:
        """Deprecated: :meth:`rereplicate` (goes in the next release)."""
        warnings.warn(
            "Rereplicator.heal is deprecated: use .rereplicate", DeprecationWarning, stacklevel=2
        )
        return await self.rereplicate(ledger_id, progress=progress, local_only=local_only)

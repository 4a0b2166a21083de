"""Liveness and readiness of a running bookie, as orchestrators ask for them separately
(etcd's ``/livez`` and ``/readyz``; Kubernetes' liveness and readiness probes).

- Live: the bookie's event loop answers, and its journal has not been stuck for long
  (``LIVENESS_JOURNAL_STALL``): a bookie that fails this will not recover by itself, and a
  restart is the remedy an orchestrator has.
- Ready: it can take writes now: its metadata session is up (the store answered a read of its
  registration within ``METADATA_TIMEOUT``), it is registered in the mode it is in, it is
  writable (there is no option to run a bookie read-only on purpose, so read-only is always an
  accident: a full disk, a failed checkpoint), and its journal is neither failing (the last
  write failed) nor stalled (a record has waited over ``JOURNAL_STALL`` seconds).

A bookie whose event loop is blocked answers neither: a probe's timeout is then the verdict.
That happens when a journal write on the event loop does not return (small groups are written
inline; see ``journal_thread_min_bytes``).
"""

from __future__ import annotations

from typing import Any, final

import anyio
import attrs

from walkit.errors import MetadataStoreError, WalkitError
from walkit.metadata import MetadataStore, registration_path
from walkit.shared import current_loop
from walkit_bookie.server._metrics import AdminTarget

#: Readiness fails when a record has waited this long for the journal.
JOURNAL_STALL = 5.0
#: Liveness fails when a record has waited this long: the journal is stuck, not slow.
LIVENESS_JOURNAL_STALL = 60.0
#: How long readiness waits for the metadata store to answer a read (a probe answers within
#: about this, so give probes a timeout of 2 s or more).
METADATA_TIMEOUT = 1.0


@final
@attrs.frozen
class Check:
    """One named condition: whether it holds, and what was found."""

    name: str
    ok: bool
    detail: str


@final
@attrs.frozen
class Verdict:
    """The checks of a probe; it passes when every one does."""

    checks: tuple[Check, ...]

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def reasons(self) -> list[str]:
        """``name: detail`` of each failed check."""
        return [f"{c.name}: {c.detail}" for c in self.checks if not c.ok]

    def to_dict(self, bookie_id: object) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "status": "ok" if self.ok else "failed",
            "bookie_id": str(bookie_id),
            "checks": {c.name: {"ok": c.ok, "detail": c.detail} for c in self.checks},
        }
        if not self.ok:
            doc["reasons"] = self.reasons
        return doc


def journal_check(
    bookie: AdminTarget, now: float, stall_limit: float, *, failed_writes: bool = True
) -> Check:
    """Whether a record has waited over ``stall_limit`` seconds for the journal, and with
    ``failed_writes``, whether its last write failed (readiness: a full or failing disk;
    liveness leaves that out, a restart would not cure it)."""
    commits = bookie.handler.group_commit
    error = commits.last_error
    if failed_writes and error is not None:
        return Check(
            "journal",
            False,
            f"the last journal write failed ({error}); the next write that succeeds clears "
            "this (`walkit cluster check` writes one)",
        )
    waited = commits.stalled_for(now)
    if waited > stall_limit:
        return Check(
            "journal",
            False,
            f"a record has waited {waited:.1f} s for the journal (limit {stall_limit:g} s): "
            "a journal write has not returned, or writes wait for a checkpoint to make room "
            "in the write cache (a ledger disk that does not finish writes)",
        )
    return Check("journal", True, f"no record waiting over {stall_limit:g} s")


def liveness(bookie: AdminTarget, *, journal_stall: float = LIVENESS_JOURNAL_STALL) -> Verdict:
    return Verdict(
        (
            Check("event_loop", True, "answering"),
            journal_check(bookie, anyio.current_time(), journal_stall, failed_writes=False),
        )
    )


def _mode_check(bookie: AdminTarget) -> Check:
    if bookie.read_only:
        return Check(
            "writable", False, f"read-only ({', '.join(bookie.read_only_reasons)}), not by choice"
        )
    return Check("writable", True, "takes writes")


@final
class _Read:
    """One read of a registration node: set ``done`` once ``outcome`` is known."""

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.outcome: int | WalkitError | None = None


@final
class MetadataProbe:
    """Reads the bookie's registration for readiness probes, one read at a time.

    The read runs in a system task, so a probe waits for it at most its timeout while the read
    itself may go on (a ZooKeeper read without a connection waits for the store's operation
    timeout, ten seconds by default); probes that come meanwhile wait for the same read
    instead of piling up more.
    """

    def __init__(self) -> None:
        self._current: _Read | None = None

    async def read(self, store: MetadataStore, path: str, timeout: float) -> _Read | None:
        """The finished read (its ``outcome``: the node's version, None if absent, or the
        store's error), or None if it did not finish within ``timeout``."""
        current = self._current
        if current is None:
            current = self._current = _Read()
            read = current
            current_loop().spawn_system_task(
                lambda: self._run(store, path, read), name="walkit_bookie.metadata_probe"
            )
        with anyio.move_on_after(timeout):
            await current.done.wait()
            return current
        return None

    async def _run(self, store: MetadataStore, path: str, read: _Read) -> None:
        try:
            read.outcome = await store.exists(path)
        except WalkitError as exc:
            read.outcome = exc
        except Exception as exc:  # a system task must not raise: the probe reports it
            read.outcome = MetadataStoreError(f"{type(exc).__name__}: {exc}")
        finally:
            self._current = None
            read.done.set()


async def _metadata_checks(
    bookie: AdminTarget, probe: MetadataProbe, timeout: float
) -> list[Check]:
    session = bookie.registration
    if session is None:
        return [Check("metadata", True, "no metadata store: the bookie registers nowhere")]
    if not session.registered:
        return [
            Check(
                "metadata",
                False,
                "not registered: not yet, or the session was lost and the bookie is "
                "registering again",
            )
        ]
    mode = "read-only" if bookie.read_only else "writable"
    path = registration_path(str(bookie.bookie_id), read_only=bookie.read_only)
    read = await probe.read(session.store, path, timeout)
    if read is None:
        return [
            Check(
                "metadata",
                False,
                f"the metadata store did not answer a read within {timeout:g} s (the session "
                "is disconnected, or the store is down or overloaded)",
            )
        ]
    version = read.outcome
    if isinstance(version, WalkitError):
        return [Check("metadata", False, f"the metadata store failed a read: {version}")]
    answered = Check("metadata", True, "the session answers")
    if version is None:
        return [answered, Check("registered", False, f"no {mode} registration at {path}")]
    return [answered, Check("registered", True, f"registered as {mode} at {path}")]


async def readiness(
    bookie: AdminTarget,
    probe: MetadataProbe,
    *,
    journal_stall: float = JOURNAL_STALL,
    metadata_timeout: float = METADATA_TIMEOUT,
) -> Verdict:
    checks = await _metadata_checks(bookie, probe, metadata_timeout)
    checks.append(_mode_check(bookie))
    checks.append(journal_check(bookie, anyio.current_time(), journal_stall))
    return Verdict(tuple(checks))

"""The bookie's prometheus metrics, read from its own counters when scraped.

A custom collector: the request path pays nothing for metrics. :class:`AdminTarget` is what
the metrics and the admin endpoint read of a running bookie (a ``Bookie`` is one).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol, final

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from walkit.metadata import MetadataStore
from walkit_bookie._config import BookieConfig
from walkit_bookie.server._requests import RequestHandler
from walkit_bookie.storage import BookieStorage, GarbageCollector, GcReport


class MetadataSession(Protocol):
    """What the admin endpoint reads of the bookie's metadata registration."""

    @property
    def store(self) -> MetadataStore:
        """The store the current session is with."""
        ...

    @property
    def registered(self) -> bool: ...

    @property
    def reregistrations(self) -> int: ...


class AdminTarget(Protocol):
    """What the admin endpoint and the metrics read of a running bookie (a ``Bookie``)."""

    config: BookieConfig
    storage: BookieStorage
    handler: RequestHandler
    gc: GarbageCollector

    @property
    def bookie_id(self) -> object: ...

    @property
    def read_only(self) -> bool: ...

    @property
    def read_only_reasons(self) -> list[str]:
        """Why the bookie refuses writes (``disk_full``, ``disk_usage``...); empty if it
        does not."""
        ...

    @property
    def ledger_count(self) -> int: ...

    @property
    def memory_returned_bytes(self) -> int:
        """Bytes of freed memory handed back to the system after bursts."""
        ...

    @property
    def registration(self) -> MetadataSession | None: ...

    async def collect_garbage(self, compaction: str | None = None) -> GcReport: ...


@final
class BookieCollector(Collector):
    """Reads a bookie's counters at scrape time."""

    def __init__(self, bookie: AdminTarget) -> None:
        self._bookie = bookie

    def collect(self) -> Iterator[Metric]:
        bookie = self._bookie
        b = bookie.handler
        st = b.stats
        s = bookie.storage.stats
        usage = bookie.storage.entry_log_usage()
        counters = [
            ("requests", "Requests taken off the wire", st.requests),
            ("adds_answered", "Adds answered (any status)", st.adds_answered),
            (
                "adds_idempotent",
                "Adds of an entry already stored with the same bytes (answered OK, not rewritten)",
                st.adds_idempotent,
            ),
            (
                "adds_refused_rewrite",
                "Adds refused with ENTRY_EXISTS: other bytes for an entry already stored",
                st.adds_refused_rewrite,
            ),
            ("reads_answered", "Reads and LAC reads answered (any status)", st.reads_answered),
            ("journal_syncs", "Durable journal writes (one per group commit)", s.journal_syncs),
            ("journal_records", "Records written to the journal", s.journal_records),
            ("journal_bytes", "Bytes written to the journal (with padding)", s.journal_bytes),
            ("group_commits", "Group commits", b.group_commit.groups),
            ("checkpoints", "Completed checkpoints", s.checkpoints),
            ("entries_flushed", "Entries written to entry logs at checkpoints", s.entries_flushed),
            ("connections_opened", "Client connections accepted", st.connections_opened),
            (
                "connections_refused",
                "Client connections closed at once: max_connections were open",
                st.connections_refused,
            ),
            (
                "requests_refused",
                "Requests answered TOO_MANY_REQUESTS (per-connection or long-poll cap)",
                st.requests_refused,
            ),
            (
                "fences_of_unknown_ledgers",
                "Fences of ledgers this bookie held nothing of (each creates the ledger's state "
                "until garbage collection)",
                st.fences_of_unknown_ledgers,
            ),
            (
                "reads_refused_unsent",
                "Reads answered TOO_MANY_REQUESTS: their connection's answers are not being read",
                b.reads_refused_unsent,
            ),
            (
                "connections_timed_out",
                "Client connections closed for a timeout (first request, frame or send)",
                st.connections_timed_out,
            ),
            (
                "connections_evicted",
                "Idle client connections closed to make room while max_connections were open",
                st.connections_evicted,
            ),
            (
                "memory_returned_bytes",
                "Bytes of memory freed after bursts (big answers, big adds) that the bookie "
                "handed back to the system (glibc malloc_trim)",
                bookie.memory_returned_bytes,
            ),
            (
                "connections_evicted_unread",
                "Client connections closed because their peers took none of their answers "
                "while the bookie's queued answers were at max_unsent_bytes_total",
                st.connections_evicted_unread,
            ),
            (
                "claims_refused",
                "Adds and fences refused: the ledger was registered by another principal",
                b.access.claims_refused,
            ),
            (
                "bad_input_log_suppressed",
                "Warnings about bad input not logged (rate limit); counted in bad_input",
                b.bad_input.suppressed,
            ),
            ("gc_rounds", "Garbage collection rounds", bookie.gc.rounds),
            (
                "gc_skipped",
                "Rounds whose ledger part was skipped (metadata store error)",
                bookie.gc.skipped,
            ),
            (
                "gc_ledgers_deleted",
                "Ledgers forgotten because the metadata store no longer has them",
                bookie.gc.ledgers_deleted,
            ),
            ("minor_compactions", "Minor compaction passes", bookie.gc.minor_compactions),
            ("major_compactions", "Major compaction passes", bookie.gc.major_compactions),
            (
                "entry_logs_compacted",
                "Entry logs whose live entries were copied out, then removed",
                s.entry_logs_compacted,
            ),
            (
                "entry_logs_removed",
                "Entry logs removed because nothing in them was live",
                s.entry_logs_removed,
            ),
            (
                "compaction_entries_moved",
                "Entries copied by compaction",
                s.compaction_entries_moved,
            ),
            ("compaction_bytes_moved", "Bytes copied by compaction", s.compaction_bytes_moved),
            (
                "compaction_bytes_reclaimed",
                "Disk bytes given back by removing entry logs (minus what was copied out)",
                s.compaction_bytes_reclaimed,
            ),
            (
                "journal_write_failures",
                "Journal writes that failed (ENOSPC, EIO, EROFS...): their adds were refused",
                b.group_commit.failed_groups,
            ),
            (
                "metadata_reregistrations",
                "Registrations redone after the metadata session was lost",
                0 if bookie.registration is None else bookie.registration.reregistrations,
            ),
        ]
        for name, text, value in counters:
            yield CounterMetricFamily(f"walkit_bookie_{name}", text, value=value)
        bad = CounterMetricFamily(
            "walkit_bookie_bad_input",
            "Malformed frames and messages (and refused connections), by kind",
            labels=["kind"],
        )
        for kind, count in sorted(b.bad_input.counts.items()):
            bad.add_metric([kind], count)
        yield bad
        auth = CounterMetricFamily(
            "walkit_bookie_authentications",
            "Connections authenticated (ok) or refused for bad or missing credentials",
            labels=["outcome"],
        )
        auth.add_metric(["ok"], st.auth_ok)
        auth.add_metric(["refused"], st.auth_refused)
        yield auth
        unauthorized = CounterMetricFamily(
            "walkit_bookie_unauthorized",
            "Requests refused by the --authorize rules, by operation",
            labels=["op"],
        )
        for op, count in sorted(b.unauthorized.items()):
            unauthorized.add_metric([op], count)
        yield unauthorized
        gauges: list[tuple[str, str, float]] = [
            (
                "adds_in_flight",
                "Adds (and explicit LACs) accepted, not yet answered",
                st.adds_in_flight,
            ),
            (
                "reads_in_flight",
                "Reads (and long polls) accepted, not yet answered",
                st.reads_in_flight,
            ),
            ("connections", "Open client connections", st.connections),
            ("long_polls", "Long-poll LAC reads waiting", st.long_polls),
            (
                "stalled_connections",
                "Connections not read from while max_unsent_bytes of answers wait to be sent",
                st.stalled_connections,
            ),
            (
                "add_bytes_in_flight",
                "Bytes of the entries of the adds in flight",
                st.add_bytes_in_flight,
            ),
            (
                "unsent_bytes",
                "Bytes of answers queued over all connections, not yet taken by their peers",
                st.unsent_bytes,
            ),
            (
                "partial_frame_bytes",
                "Bytes of frames received in part, over all connections",
                st.partial_frame_bytes,
            ),
            (
                "receive_buffer_bytes",
                "Bytes of receive buffers held by open connections",
                st.receive_buffer_bytes,
            ),
            ("ledgers", "Ledgers this bookie holds state for", bookie.ledger_count),
            ("read_only", "1 when the bookie refuses writes", 1 if bookie.read_only else 0),
            (
                "disk_usage_ratio",
                "Highest used fraction of the data dirs' disks",
                bookie.storage.disk_usage(),
            ),
            ("entry_logs", "Entry log files", len(usage)),
            ("entry_log_bytes", "Bytes in entry log files", sum(u.size for u in usage)),
            (
                "entry_log_live_bytes",
                "Bytes of entry logs the index still points at",
                sum(u.live for u in usage),
            ),
            (
                "metadata_registered",
                "1 while the bookie is registered in the metadata store",
                1 if bookie.registration is not None and bookie.registration.registered else 0,
            ),
        ]
        for gauge, text, level in gauges:
            yield GaugeMetricFamily(f"walkit_bookie_{gauge}", text, value=float(level))
        writes = s.journal_write_seconds
        yield HistogramMetricFamily(
            "walkit_bookie_journal_write_seconds",
            "Seconds per journal write, its sync included (one per group commit)",
            buckets=writes.buckets(),
            sum_value=writes.sum,
        )

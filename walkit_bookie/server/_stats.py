"""What the bookie counts as it serves: one record of the request path's counters and
gauges. The request path only adds to it; the metrics collector (``_metrics.py``), ``/health``
and the memory return read it when asked (the path pays nothing for metrics)."""

from __future__ import annotations

from typing import final

__all__ = ["BookieStats"]


@final
class BookieStats:
    """Counters (only grow) and gauges (go up and down) of a bookie's request path."""

    __slots__ = (
        "add_bytes_in_flight",
        "adds_answered",
        "adds_idempotent",
        "adds_in_flight",
        "adds_refused_rewrite",
        "auth_ok",
        "auth_refused",
        "connections",
        "connections_evicted",
        "connections_evicted_unread",
        "connections_opened",
        "connections_refused",
        "connections_timed_out",
        "fences_of_unknown_ledgers",
        "long_polls",
        "partial_frame_bytes",
        "reads_answered",
        "reads_in_flight",
        "receive_buffer_bytes",
        "requests",
        "requests_refused",
        "stalled_connections",
        "unsent_bytes",
    )

    def __init__(self) -> None:
        #: Requests taken off the wire; adds (and explicit LACs) and reads answered.
        self.requests = 0
        self.adds_answered = 0
        self.reads_answered = 0
        #: Adds, explicit LACs and reads accepted but not yet answered, and the bytes of
        #: those adds' entries (held in memory until stored).
        self.adds_in_flight = 0
        self.add_bytes_in_flight = 0
        self.reads_in_flight = 0
        #: Long-poll LAC reads waiting (counted apart from ``reads_in_flight``).
        self.long_polls = 0
        #: Adds answered from the stored entry (same bytes), and refused (other bytes).
        self.adds_idempotent = 0
        self.adds_refused_rewrite = 0
        #: Fences of ledgers this bookie knew nothing of (they create the ledger's state).
        self.fences_of_unknown_ledgers = 0
        #: Requests answered TOO_MANY_REQUESTS (connection or long-poll caps).
        self.requests_refused = 0
        #: Client connections open, accepted, and closed at once (``max_connections``).
        self.connections = 0
        self.connections_opened = 0
        self.connections_refused = 0
        #: Client connections closed for a timeout (first request, frame or send), to make
        #: room for a new one at ``max_connections``, and because their peers took none of
        #: their answers while the total queued was at ``max_unsent_bytes_total``.
        self.connections_timed_out = 0
        self.connections_evicted = 0
        self.connections_evicted_unread = 0
        #: Connections not read from while ``max_unsent_bytes`` of their answers wait.
        self.stalled_connections = 0
        #: Bytes of answers queued over all connections, not yet taken by their peers; of
        #: receive buffers held by open connections; of frames received in part.
        self.unsent_bytes = 0
        self.receive_buffer_bytes = 0
        self.partial_frame_bytes = 0
        #: Connections authenticated, and refused (bad credentials or none).
        self.auth_ok = 0
        self.auth_refused = 0

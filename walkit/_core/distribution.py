"""Round-robin striping (BookKeeper's protocol document): which bookies of an ensemble store which
entry, and the response counts the protocol reasons with (the TLA+ protocol guide)."""

from __future__ import annotations


def write_set(entry_id: int, ensemble_size: int, write_quorum: int) -> list[int]:
    """Ensemble indexes that store ``entry_id``: Qw consecutive bookies from ``entry_id % E``."""
    start = entry_id % ensemble_size
    return [(start + i) % ensemble_size for i in range(write_quorum)]


def stores_entry(bookie_index: int, entry_id: int, ensemble_size: int, write_quorum: int) -> bool:
    """Whether the bookie at ``bookie_index`` is in the write set of ``entry_id``."""
    return (bookie_index - entry_id) % ensemble_size < write_quorum


def quorum_coverage(write_quorum: int, ack_quorum: int) -> int:
    """QC = (Qw - Qa) + 1: negative answers from a write set that prove an entry was never acked."""
    return write_quorum - ack_quorum + 1


def ensemble_coverage(ensemble_size: int, ack_quorum: int) -> int:
    """EC = (E - Qa) + 1: answers from an ensemble that leave no ack quorum unfenced."""
    return ensemble_size - ack_quorum + 1

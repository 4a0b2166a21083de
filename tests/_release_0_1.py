"""Ledger metadata as walkit 0.1.0 wrote it, for tests of ledgers written before a change.

:func:`ledger_metadata_bytes` is 0.1.0's ``LedgerMetadata.to_bytes``, key for key and in the
same order: what a 0.1.0 client left in the metadata store. It has no ``password`` key.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from walkit._core.ledger_metadata import LedgerMetadata

__all__ = ["ledger_metadata_bytes"]


def ledger_metadata_bytes(md: LedgerMetadata) -> bytes:
    doc: dict[str, Any] = {
        "format": 1,
        "ensemble_size": md.ensemble_size,
        "write_quorum": md.write_quorum,
        "ack_quorum": md.ack_quorum,
        "state": md.state.value,
        "last_entry_id": md.last_entry_id,
        "length": md.length,
        "digest": md.digest.value,
        "password_sha256": md.password_sha256,
        "fragments": [[first, [str(b) for b in ensemble]] for first, ensemble in md.fragments],
        "custom": {
            k: base64.b64encode(v).decode("ascii") for k, v in sorted(md.custom_metadata.items())
        },
        "ctime_ms": md.ctime_ms,
    }
    return json.dumps(doc, separators=(",", ":")).encode("utf-8")

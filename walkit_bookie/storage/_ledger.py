"""Per-ledger state a bookie keeps, and how journal records change it.

The journal holds the wire bodies of the requests that changed state (adds, fences, explicit
LACs), so applying a record at run time and replaying it after a crash is the same function.
"""

from __future__ import annotations

import enum
import struct
from typing import TypeGuard, final

import attrs

from walkit._core.digest import packet_lac
from walkit._core.wire import (
    AddRequest,
    ReadFlag,
    ReadLacFlag,
    ReadLacRequest,
    ReadRequest,
    Request,
    WriteLacRequest,
)
from walkit.errors import InvalidMetadataError

_STATE = struct.Struct(">BqqqB")  # flags, lac, explicit_lac, last_entry, key length


@final
@attrs.define(slots=True)
class LedgerInfo:
    """What a bookie knows of one ledger besides its entries."""

    master_key: bytes
    fenced: bool = False
    #: The highest LAC carried in the header of a stored entry.
    lac: int = -1
    #: The highest LAC set explicitly by the writer (WriteLacRequest).
    explicit_lac: int = -1
    #: The highest entry id stored here.
    last_entry: int = -1

    @property
    def last_add_confirmed(self) -> int:
        return max(self.lac, self.explicit_lac)

    def copy(self) -> LedgerInfo:
        return LedgerInfo(
            self.master_key, self.fenced, self.lac, self.explicit_lac, self.last_entry
        )

    def to_bytes(self) -> bytes:
        head = _STATE.pack(
            1 if self.fenced else 0,
            self.lac,
            self.explicit_lac,
            self.last_entry,
            len(self.master_key),
        )
        return head + self.master_key

    @classmethod
    def from_bytes(cls, data: bytes) -> LedgerInfo:
        try:
            flags, lac, explicit, last, key_len = _STATE.unpack_from(data, 0)
        except struct.error as exc:
            raise InvalidMetadataError(f"corrupt ledger state: {exc}") from exc
        key = bytes(data[_STATE.size : _STATE.size + key_len])
        if len(key) != key_len:
            raise InvalidMetadataError("corrupt ledger state: truncated master key")
        return cls(key, bool(flags & 1), lac, explicit, last)


class StoredEntry(enum.Enum):
    """What an add meets where the entry may already be stored."""

    ABSENT = "absent"  #: not stored: store it
    SAME = "same"  #: stored with the same bytes: an idempotent success, nothing to write
    OTHER = "other"  #: stored with other bytes: refused, acknowledged data is never rewritten


def stored_entry_decision(stored: bytes | None, packet: bytes) -> StoredEntry:
    """Decide an add of ``packet`` where ``stored`` (None: absent) may hold the entry.

    Writers encode an entry once and re-send those bytes after an ensemble change; recovery
    writes back the bytes it read. So a legitimate add never brings other bytes, and one that
    does would replace what a writer may have been acknowledged.
    """
    if stored is None:
        return StoredEntry.ABSENT
    return StoredEntry.SAME if stored == packet else StoredEntry.OTHER


def is_fence(request: Request) -> TypeGuard[ReadRequest | ReadLacRequest]:
    if type(request) is ReadLacRequest:
        return bool(request.flags & ReadLacFlag.FENCE)
    if type(request) is ReadRequest:
        return bool(request.flags & ReadFlag.FENCE)
    return False


def apply_request(ledgers: dict[int, LedgerInfo], request: Request) -> LedgerInfo | None:
    """Apply one journaled request to ``ledgers``; return the ledger it touched (None if none).

    Entries themselves are stored by the caller; this only keeps the per-ledger state.
    """
    info = ledgers.get(request.ledger_id)
    if type(request) is AddRequest:
        if info is None:
            info = ledgers[request.ledger_id] = LedgerInfo(request.master_key)
        lac = packet_lac(request.packet)
        if lac > info.lac:
            info.lac = lac
        if request.entry_id > info.last_entry:
            info.last_entry = request.entry_id
        return info
    if type(request) is WriteLacRequest:
        if info is None:
            info = ledgers[request.ledger_id] = LedgerInfo(request.master_key)
        if request.lac > info.explicit_lac:
            info.explicit_lac = request.lac
        return info
    if is_fence(request):
        key = request.master_key
        if info is None:
            info = ledgers[request.ledger_id] = LedgerInfo(key)
        info.fenced = True
        return info
    return None

"""Entry packets and their digests.

An entry travels and is stored as one *packet*::

    ledger_id u64 | entry_id i64 | lac i64 | length u64 | digest | payload

``lac`` is the writer's last-add-confirmed when the entry was sent and ``length`` is the ledger's
total payload length up to and including this entry (as in BookKeeper). The digest covers the
header and the payload: CRC32C (4 bytes), HMAC-SHA256 keyed by the ledger password ("mac",
32 bytes), or nothing ("none"). Bookies store packets as they are and read ``lac`` from the
header; only clients verify digests.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import struct
from typing import final

import attrs
import crc32c

from walkit.errors import DigestMismatchError, InvalidArgumentError, RemoteProtocolError

_HEADER = struct.Struct(">QqqQ")
HEADER_SIZE = _HEADER.size


class DigestType(enum.Enum):
    """How entries of a ledger are protected."""

    CRC32C = "crc32c"
    MAC = "mac"
    NONE = "none"

    @classmethod
    def parse(cls, value: str | DigestType) -> DigestType:
        if isinstance(value, DigestType):
            return value
        if not isinstance(value, str):
            # None is not "no digest": that is the explicit "none".
            raise InvalidArgumentError(
                f"digest must be one of {', '.join(repr(d.value) for d in cls)}, not {value!r}"
            )
        try:
            return cls(str(value).lower())
        except ValueError:
            names = ", ".join(d.value for d in cls)
            raise InvalidArgumentError(
                f"unknown digest type {value!r} (use one of {names})"
            ) from None

    @property
    def size(self) -> int:
        return _DIGEST_SIZES[self]


_DIGEST_SIZES = {DigestType.CRC32C: 4, DigestType.MAC: 32, DigestType.NONE: 0}


def master_key(password: bytes) -> bytes:
    """The key a bookie stores on a ledger's first add and checks on adds, fences and recovery."""
    return hashlib.sha256(b"walkit-master-key\x00" + password).digest()


def _mac_key(password: bytes) -> bytes:
    return hashlib.sha256(b"walkit-mac-key\x00" + password).digest()


@final
@attrs.frozen
class EntryHeader:
    """The fixed-size header of a packet, readable without the password."""

    ledger_id: int
    entry_id: int
    lac: int
    length: int


@final
class DigestManager:
    """Builds and verifies packets for one ledger."""

    __slots__ = ("_key", "_type", "ledger_id")

    def __init__(self, ledger_id: int, digest_type: DigestType | str, password: bytes) -> None:
        self.ledger_id = ledger_id
        self._type = DigestType.parse(digest_type)
        self._key = _mac_key(password) if self._type is DigestType.MAC else b""

    @property
    def digest_type(self) -> DigestType:
        return self._type

    def _digest(self, header: bytes, payload: bytes | memoryview) -> bytes:
        if self._type is DigestType.CRC32C:
            return struct.pack(">I", crc32c.crc32c(payload, crc32c.crc32c(header)))
        if self._type is DigestType.MAC:
            mac = hmac.new(self._key, header, hashlib.sha256)
            mac.update(payload)
            return mac.digest()
        return b""

    def encode(self, entry_id: int, lac: int, length: int, payload: bytes) -> bytes:
        """Build the packet for one entry."""
        header = _HEADER.pack(self.ledger_id, entry_id, lac, length)
        return b"".join((header, self._digest(header, payload), payload))

    def verify(
        self, packet: bytes, expected_entry_id: int | None = None
    ) -> tuple[EntryHeader, bytes]:
        """Check a packet and return its header and payload; raise DigestMismatchError if bad."""
        header = self.check(packet, expected_entry_id)
        return header, bytes(packet[HEADER_SIZE + self._type.size :])

    def check(self, packet: bytes, expected_entry_id: int | None = None) -> EntryHeader:
        """Check a packet and return its header, without copying its payload out (what a
        copier that forwards the packet whole needs); raise DigestMismatchError if bad."""
        size = self._type.size
        if len(packet) < HEADER_SIZE + size:
            raise DigestMismatchError(
                f"ledger {self.ledger_id}: packet of {len(packet)} bytes is too short"
            )
        view = memoryview(packet)
        header_bytes = packet[:HEADER_SIZE]
        digest = packet[HEADER_SIZE : HEADER_SIZE + size]
        if not hmac.compare_digest(digest, self._digest(header_bytes, view[HEADER_SIZE + size :])):
            raise DigestMismatchError(f"ledger {self.ledger_id}: digest mismatch")
        header = EntryHeader(*_HEADER.unpack(header_bytes))
        if header.ledger_id != self.ledger_id or (
            expected_entry_id is not None and header.entry_id != expected_entry_id
        ):
            raise DigestMismatchError(
                f"ledger {self.ledger_id}: packet is for ledger {header.ledger_id} "
                f"entry {header.entry_id}, expected entry {expected_entry_id}"
            )
        return header


def read_header(packet: bytes | memoryview) -> EntryHeader:
    """Read a packet's header without checking its digest (what a bookie does)."""
    if len(packet) < HEADER_SIZE:
        raise RemoteProtocolError(f"entry packet of {len(packet)} bytes is shorter than its header")
    return EntryHeader(*_HEADER.unpack_from(packet, 0))


# The LAC field of the header (ledger u64, entry i64, lac i64, length u64).
_LAC = struct.Struct(">q")
_LAC_OFFSET = 16


def packet_lac(packet: bytes) -> int:
    """The LAC in a packet's header, read alone: the bookie's hot path, for a packet already
    checked with :func:`read_header` (the tests check they agree)."""
    return int(_LAC.unpack_from(packet, _LAC_OFFSET)[0])

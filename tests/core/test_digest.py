"""Entry digests: ``check`` (no payload copy, what a copier uses) and ``verify`` agree, and both
refuse a packet changed anywhere, or meant for another entry or ledger."""

from __future__ import annotations

import pytest

from walkit._core.digest import HEADER_SIZE, DigestManager, DigestType
from walkit.errors import DigestMismatchError


@pytest.mark.parametrize("kind", [DigestType.CRC32C, DigestType.MAC])
def test_check_and_verify_agree_on_good_and_damaged_packets(kind: DigestType) -> None:
    digests = DigestManager(7, kind, b"secret")
    payload = bytes(range(256)) * 300
    packet = digests.encode(3, 2, len(payload), payload)
    header = digests.check(packet, 3)
    assert (header.ledger_id, header.entry_id, header.lac) == (7, 3, 2)
    assert digests.verify(packet, 3) == (header, payload)
    for at in (0, HEADER_SIZE, HEADER_SIZE + 4, len(packet) - 1):  # header, digest, payload
        damaged = bytearray(packet)
        damaged[at] ^= 0x01
        with pytest.raises(DigestMismatchError):
            digests.check(bytes(damaged), 3)
        with pytest.raises(DigestMismatchError):
            digests.verify(bytes(damaged), 3)
    with pytest.raises(DigestMismatchError, match="expected entry 4"):
        digests.check(packet, 4)
    with pytest.raises(DigestMismatchError):
        DigestManager(8, kind, b"secret").check(packet)  # another ledger's
    with pytest.raises(DigestMismatchError, match="too short"):
        digests.check(packet[:HEADER_SIZE])

"""Small value types shared by the client, the bookie and the metadata model."""

from __future__ import annotations

from typing import final

import attrs

from walkit.errors import InvalidArgumentError

#: Entry id that means "no entry" (an empty ledger's LAC and last entry id).
INVALID_ENTRY_ID = -1


@final
@attrs.frozen(order=True)
class BookieId:
    """A bookie's address; ``str(BookieId)`` is ``"host:port"``."""

    host: str
    port: int

    def __str__(self) -> str:
        if ":" in self.host:  # IPv6 literal
            return f"[{self.host}]:{self.port}"
        return f"{self.host}:{self.port}"

    @classmethod
    def parse(cls, text: str) -> BookieId:
        """Parse ``"host:port"`` (or ``"[v6]:port"``); raise InvalidArgumentError otherwise."""
        if not isinstance(text, str):
            raise InvalidArgumentError(f"bookie id must be a string, not {type(text).__name__}")
        host, sep, port_text = text.rpartition(":")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        if not sep or not host or not port_text.isdigit():
            raise InvalidArgumentError(f"bad bookie id {text!r}: expected host:port")
        port = int(port_text)
        if not 0 < port < 65536:
            raise InvalidArgumentError(f"bad bookie id {text!r}: port out of range")
        return cls(host, port)


@attrs.frozen
class BookieInfo:
    """What the client knows about a registered bookie.

    ``network_location`` is what the bookie registered (``walkit-bookie --network-location``);
    when it is None the policy asks its location resolver, then falls back to the default rack.
    """

    bookie_id: BookieId
    #: ``/region/rack`` as the bookie registered it, or None.
    network_location: str | None = None
    read_only: bool = False


@final
@attrs.frozen
class Entry:
    """One entry read from a ledger."""

    ledger_id: int
    entry_id: int
    payload: bytes

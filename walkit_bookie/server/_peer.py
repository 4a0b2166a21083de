"""Whom the bookie's request handling answers."""

from __future__ import annotations

from typing import Protocol

__all__ = ["Peer"]


class Peer(Protocol):
    """Whom the request handler answers: a client connection (``_connection.Connection``), or
    this bookie's own autorecovery worker storing copies in the same process
    (``_local.LocalCopyStore``)."""

    outstanding: int
    peer: str
    #: The peer's host address ("" if unknown).
    address: str
    principal: str | None
    #: Closed: answers sent to it are dropped.
    closed: bool

    @property
    def unsent(self) -> int:
        """Bytes of answers queued for this peer, not yet taken."""
        ...

    def send(self, frame: bytes) -> None: ...

    def send_parts(self, parts: tuple[bytes, ...]) -> None: ...

    def spawn(self, fn: object, *args: object) -> bool: ...

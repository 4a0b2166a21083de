"""Who may do what with the ledgers on a bookie with authentication on: each ledger's owner
(the principal that registered its master key here) and the ``--authorize`` rules."""

from __future__ import annotations

from collections.abc import Callable
from typing import final

from walkit._core.auth import Authorization
from walkit._core.wire import (
    AddFlag,
    AddRequest,
    BatchReadRequest,
    CopyFragmentRequest,
    ErrorResponse,
    Message,
    ReadFlag,
    ReadLacFlag,
    ReadLacRequest,
    ReadRequest,
    Request,
    StatusCode,
    WriteLacRequest,
    encode_frame,
)
from walkit_bookie.server._badinput import BadInputLog
from walkit_bookie.server._peer import Peer
from walkit_bookie.storage import LedgerInfo


@final
class LedgerAccess:
    """Checks each request of an authenticated connection (``allowed``); ``ledgers()`` is
    what the bookie knows of each ledger (for its master key)."""

    def __init__(
        self,
        authorization: Authorization | None,
        bad_input: BadInputLog,
        ledgers: Callable[[], dict[int, LedgerInfo]],
    ) -> None:
        #: Who may do what (None: every authenticated principal may do all).
        self.authorization = authorization
        self.bad_input = bad_input
        self._ledgers = ledgers
        #: Requests refused by the rules, by operation.
        self.unauthorized: dict[str, int] = {}
        #: Ledger id -> the principal that registered its master key here (its first add or
        #: fence since the bookie started; not persisted), and the adds and fences of other
        #: principals refused for it.
        self.claims: dict[int, str] = {}
        self.claims_refused = 0

    def allowed(self, conn: Peer, message: Message) -> bool:
        """With authentication on: whether the connection's principal may make this request;
        answers UNAUTHORIZED if not.

        - A ledger's adds and fences are for the principal that registered its key here (its
          first add or fence since the bookie started, or the first with its key for a ledger
          stored before; not persisted); the principals an explicit ``fence`` rule lists may
          also fence it and make recovery adds (operators recovering it). The owner needs no
          other rule for them. A COPY_FRAGMENT request is a recovery add of its ledger.
        - Otherwise the ``--authorize`` rules decide (no rule: every principal). Recovery adds
          count as fencing for them (or as adds).
        """
        principal = conn.principal or ""
        if isinstance(message, AddRequest):
            op = "fence" if message.flags & AddFlag.RECOVERY else "add"
        elif isinstance(message, WriteLacRequest):
            op = "add"
        elif isinstance(message, ReadRequest):
            op = "fence" if message.flags & ReadFlag.FENCE else "read"
        elif isinstance(message, ReadLacRequest):
            op = "fence" if message.flags & ReadLacFlag.FENCE else "read"
        elif isinstance(message, BatchReadRequest):
            return self._may_read(conn, message, principal)
        elif isinstance(message, CopyFragmentRequest):
            op = "fence"  # copies made here are recovery adds of the ledger
        else:
            return True
        if op == "read":
            return self._may_read(conn, message, principal)
        rules = self.authorization
        ledger_id = message.ledger_id
        owner = self.claims.get(ledger_id)
        if owner == principal:
            return True
        if owner is not None:
            fencers = None if rules is None else rules.rules.get("fence")
            if op == "fence" and fencers is not None and principal in fencers:
                return True
            self.claims_refused += 1
            self.bad_input.report(
                "claim_refused",
                peer=conn.peer,
                principal=principal,
                owner=owner,
                ledger_id=ledger_id,
            )
            why = (
                f"ledger {ledger_id} was registered on this bookie by principal {owner!r}; "
                f"principal {principal!r} may not {op} it (only its owner may, and the "
                "principals of a --authorize fence rule may fence and recover it)"
            )
            conn.send(
                encode_frame(ErrorResponse(message.request_id, StatusCode.UNAUTHORIZED_ACCESS, why))
            )
            return False
        recovery_add = op == "fence" and isinstance(message, AddRequest | CopyFragmentRequest)
        if (
            rules is not None
            and not rules.allows(op, principal)
            and not (recovery_add and rules.allows("add", principal))
        ):
            return self._unauthorized(conn, message, op, principal)
        info = self._ledgers().get(ledger_id)
        if info is None or info.master_key == message.master_key:
            self._claim(ledger_id, principal)
        return True

    def _may_read(self, conn: Peer, message: Request, principal: str) -> bool:
        rules = self.authorization
        if rules is None or rules.allows("read", principal):
            return True
        return self._unauthorized(conn, message, "read", principal)

    def _unauthorized(self, conn: Peer, message: Request, op: str, principal: str) -> bool:
        self.unauthorized[op] = self.unauthorized.get(op, 0) + 1
        self.bad_input.report(
            "unauthorized", peer=conn.peer, op=op, principal=principal, ledger_id=message.ledger_id
        )
        why = f"principal {principal!r} may not {op} on this bookie (its --authorize rules)"
        conn.send(
            encode_frame(ErrorResponse(message.request_id, StatusCode.UNAUTHORIZED_ACCESS, why))
        )
        return False

    def _claim(self, ledger_id: int, principal: str) -> None:
        claims = self.claims
        ledgers = self._ledgers()
        if len(claims) > 2 * len(ledgers) + 4096:  # forget deleted ledgers' claims
            self.claims = claims = {k: v for k, v in claims.items() if k in ledgers}
        claims[ledger_id] = principal

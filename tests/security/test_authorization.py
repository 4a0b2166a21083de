"""Authorization (``--authorize OP=PRINCIPAL,...``) on an in-process bookie over TCP, with
clients authenticated by shared tokens; and the rules' parsing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from tests.bookie._helpers import Client, config, connect, http_request, running_bookie
from walkit import TokenAuth
from walkit._core.auth import Authorization
from walkit._core.types import BookieId
from walkit._core.wire import (
    AddFlag,
    AddResponse,
    ErrorResponse,
    Message,
    ReadFlag,
    ReadRequest,
    StatusCode,
)
from walkit.errors import ConfigurationError
from walkit.net import AuthNetwork, TcpNetwork

TOKENS = {"writer": "writer-token-1", "reader": "reader-token-2", "operator": "op-token-3"}
RULES = ["add=writer", "read=writer,reader", "fence=operator", "admin=operator"]


def _gc_post(token: str) -> bytes:
    return (
        "POST /admin/gc HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Bearer {token}\r\nContent-Length: 0\r\n\r\n"
    ).encode()


NO_HANG = 20.0


def test_rules_parse() -> None:
    rules = Authorization.parse(
        ["add=writer", "read=writer, reader", "read=CN=orders,O=example", "admin=ops"]
    )
    assert rules.rules == {
        "add": frozenset({"writer"}),
        "read": frozenset({"writer", "reader", "CN=orders,O=example"}),
        "admin": frozenset({"ops"}),
    }
    assert rules.allows("add", "writer") and not rules.allows("add", "reader")
    assert rules.allows("read", "CN=orders,O=example")
    assert rules.allows("fence", "anybody")  # no rule: every authenticated principal
    assert not rules.allows("add", None)
    for bad, why in [
        ("delete=x", "the operations are"),
        ("add", "expected OP=PRINCIPAL"),
        ("add=", "expected OP=PRINCIPAL"),
        ("add=a,,b", "an empty principal"),
    ]:
        with pytest.raises(ConfigurationError, match=why):
            Authorization.parse([bad])


def test_authorize_needs_authentication(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="--authorize needs authentication"):
        config([tmp_path / "d"], authorize=["add=writer"])
    with pytest.raises(ConfigurationError, match="the operations are"):
        config([tmp_path / "d"], authorize=["write=writer"])


@asynccontextmanager
async def as_principal(bid: BookieId, name: str) -> AsyncIterator[Client]:
    network = AuthNetwork(TcpNetwork(), TokenAuth(token=TOKENS[name]))
    async with connect(bid, network) as client:
        yield client


def _refusal(message: Message, op: str, principal: str) -> None:
    assert isinstance(message, ErrorResponse), message
    assert message.status is StatusCode.UNAUTHORIZED_ACCESS
    assert f"principal {principal!r} may not {op}" in message.message


async def test_rules_refuse_each_operation_by_principal(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("".join(f"{p}:{t}\n" for p, t in TOKENS.items()))
    tokens.chmod(0o600)
    cfg = config(
        [tmp_path / "d"],
        auth="token",
        auth_token_file=str(tokens),
        authorize=RULES,
        http_port=0,
    )
    async with running_bookie(cfg) as (bookie, bid):
        with trio.fail_after(NO_HANG):
            await _scenario(bid)
        assert bookie.handler.unauthorized == {"fence": 1, "add": 1, "read": 1}
        assert bookie.handler.bad_input.counts["unauthorized"] == 3
        assert (
            bookie.handler.access.claims_refused
            == bookie.handler.bad_input.counts["claim_refused"]
            == 2
        )
        assert bookie.admin_address is not None
        status, body = await http_request(
            bookie.admin_address, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
        )
        text = body.decode()
        assert status == 200
        assert 'walkit_bookie_unauthorized_total{op="add"} 1.0' in text
        assert 'walkit_bookie_authentications_total{outcome="ok"} 3.0' in text
        assert "walkit_bookie_claims_refused_total 2.0" in text

        # Admin POSTs: the client token of a principal listed for "admin" (403 for another
        # principal's token, 401 for an unknown token).
        for name, expected in [("operator", 200), ("writer", 403), (None, 401)]:
            token = TOKENS[name] if name else "not-a-token"
            status, body = await http_request(bookie.admin_address, _gc_post(token))
            assert status == expected, body
        assert bookie.handler.unauthorized["admin"] == 1


async def _scenario(bid: BookieId) -> None:
    async with as_principal(bid, "writer") as w:
        assert (await w.add(1, 0, b"zero")).status is StatusCode.OK  # claims ledger 1
        assert (await w.add(1, 1, b"one", lac=0)).status is StatusCode.OK
        assert (await w.read(1, 0)).status is StatusCode.OK
        # Not listed for "fence": no fencing of a ledger it does not own...
        _refusal(await w.call(ReadRequest(w.next_id(), 5, 0, ReadFlag.FENCE)), "fence", "writer")
        # ...but its own ledgers it may fence (a takeover by the same application).
        assert (await w.add(3, 0, b"zero")).status is StatusCode.OK
        assert (await w.read(3, 0, fence=True)).status is StatusCode.OK
        # The refusal left the connection serving.
        assert (await w.add(1, 2, b"two", lac=1)).status is StatusCode.OK
    async with as_principal(bid, "reader") as r:
        _refusal(await r.call(r.add_request(2, 0, b"zero")), "add", "reader")
        _claimed(await r.call(r.add_request(1, 3, b"three")), "add", "reader")
        assert (await r.read(1, 0)).status is StatusCode.OK
        assert (await r.read_lac(1)).status is StatusCode.OK
    async with as_principal(bid, "operator") as o:
        _refusal(await o.call(ReadRequest(o.next_id(), 1, 0)), "read", "operator")
        _claimed(await o.call(o.add_request(1, 3, b"three")), "add", "operator")
        # Recovery of the writer's ledger: fence, then fenced reads and recovery adds.
        assert (await o.read(1, 2, fence=True)).status is StatusCode.OK
        recovery_add = o.add_request(1, 2, b"two", lac=1, flags=AddFlag.RECOVERY)
        answer = await o.call(recovery_add)
        assert isinstance(answer, AddResponse) and answer.status is StatusCode.OK


def _claimed(message: Message, op: str, principal: str) -> None:
    assert isinstance(message, ErrorResponse), message
    assert message.status is StatusCode.UNAUTHORIZED_ACCESS
    assert "registered on this bookie by principal 'writer'" in message.message
    assert f"principal {principal!r} may not {op} it" in message.message

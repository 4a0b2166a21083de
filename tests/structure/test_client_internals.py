"""The client's internals reach the layers above it through one declared interface.

The log, autorecovery, Spark and the lake need a client's connection pool, metadata store,
placement, options, randomness and ledger deletion. They get them as a
:class:`walkit.ledger.ClientServices` (``walkit/ledger/_client_services.py``), which the client
builds once and hands out through ``walkit.client.client_services``, never by reaching into
the client's private attributes (``client._context``) or into a log handle's private ledger
deletion (``_delete_ledgers``, ``_discard_ledger``: a log's ``LedgerCleanup``, from
``ClientServices.ledger_cleanup``, does that now).

An ``ast`` scan of walkit/, walkit_bookie/, examples/ and tests/ finds, outside the client's module and
the interface's:
- any private attribute (``_x``) read from an expression that names a client (``client``,
  ``self._client``, ``owner.client``, ``worker_client``, ...);
- any use of the names ``_delete_ledgers`` or ``_discard_ledger``.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

#: The modules that may touch a client's internals: the client's, and the interface's.
ALLOWED = ("walkit/client.py", "walkit/ledger/_client_services.py")
#: Where the scan looks.
SCANNED = ("walkit", "walkit_bookie", "examples", "tests")
#: An expression that names a client: ``client``, ``x.client``, ``self._client``, ``my_client``.
CLIENT = re.compile(r"(^|[._])client$", re.IGNORECASE)
#: A log handle's former private ledger deletion, now on ClientServices.
FORMER = ("_delete_ledgers", "_discard_ledger")


def reaches(source: str) -> list[str]:
    """``line: expression`` for every reach into a client's private state in ``source``."""
    found: list[tuple[int, int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Attribute):
            continue
        private = node.attr.startswith("_") and not node.attr.startswith("__")
        if (private and CLIENT.search(ast.unparse(node.value))) or node.attr in FORMER:
            found.append((node.lineno, node.col_offset, ast.unparse(node)))
    return [f"{line}: {text}" for line, _col, text in sorted(found)]


def test_nothing_outside_the_client_reaches_into_its_internals() -> None:
    offenders = {}
    for package in SCANNED:
        for path in sorted((REPO / package).rglob("*.py")):
            name = path.relative_to(REPO).as_posix()
            if name in ALLOWED:
                continue
            found = reaches(path.read_text(encoding="utf-8"))
            if found:
                offenders[name] = found
    assert offenders == {}, "use walkit.client.client_services(client) (a ClientServices)"
    assert reaches((REPO / "walkit/client.py").read_text(encoding="utf-8")), "the scan is blind"


def test_the_scan_finds_every_spelling() -> None:
    source = """
async def f(client, owner, self, healer_client):
    client._context.pool
    owner.client._context.rng
    self._client._context
    self.client._services
    healer_client._context.pool.connections()
    await owner._discard_ledger(lw)
    await owner._delete_ledgers([1], "empty")
    self._context.pool  # a ledger handle's own context: not a client's
    reads._context.pool  # nor is this
    client.options
    client.__class__
"""
    assert reaches(source) == [
        "3: client._context",
        "4: owner.client._context",
        "5: self._client._context",
        "6: self.client._services",
        "7: healer_client._context",
        "8: owner._discard_ledger",
        "9: owner._delete_ledgers",
    ]

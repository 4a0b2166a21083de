"""Sans-I/O protocol logic: pure, synchronous code with no event loop, no sockets and no clock.

Modules here decide *what* to send and *when* a quorum is reached; the AnyIO layers in
``walkit.ledger``, ``walkit.log`` and ``walkit_bookie`` only move bytes and wait.
"""

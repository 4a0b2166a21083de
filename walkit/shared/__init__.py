"""What walkit's bookie (``walkit_bookie``) shares with its client, by public names.

Not an API for applications: these are the pieces both processes run, declared here so that
the bookie reaches into no private module of the client (renaming one cannot break the
server). The bookie uses ``walkit`` through the pure protocol (``walkit._core``), the public
API (``walkit.errors``, ``walkit.metadata``, ``walkit.net``, ...) and this module, and nothing
else; ``tests/structure/test_private_imports.py`` holds it to that.

- logging: :func:`get_logger` (structlog bound to the standard ``logging`` module, silent
  below WARNING unless the application configures it), :func:`configure_cli_logging` and
  :data:`LOG_FORMATS` for the commands;
- error groups: :func:`collapse` (one walkit error out of a task group) and
  :func:`group_leaves`;
- the event loop beyond AnyIO: :func:`current_loop` (its clock, wake-ups, readiness waits,
  system tasks), :class:`ParkingLot` (tasks waiting for one condition) and
  :func:`run_event_loop` (a process's loop: :data:`EVENT_LOOPS`);
- :func:`pause` (the one retry backoff), :func:`read_private_text` (files holding secrets);
- the wire's fast paths: :class:`Receiver` (frames out of a socket's bytes) and
  :func:`direct_fd`, :func:`write_now`, :func:`unwritten` (sending without a copy when the
  socket has room);
- security: :func:`read_token_file` and :data:`CLIENT_AUTH_MODES`;
- the event loop a process runs on: :func:`run_event_loop` (``anyio.run`` on one of
  :data:`EVENT_LOOPS`; ``auto`` is uvloop when it imports, else asyncio: the bookie's
  ``--event-loop`` and the ``walkit`` command alike) and :func:`event_loop_name`;
- the ``bookie`` extra: :func:`missing_bookie_modules` and :func:`bookie_hint` (a client
  install says what to install instead of which import failed).

The command-line declarations both ``walkit`` and ``walkit-bookie`` use are in
:mod:`walkit.shared.cli`.
"""

from walkit._extras import bookie_hint, missing_bookie_modules
from walkit._groups import collapse
from walkit._groups import leaves as group_leaves
from walkit._logging import LOG_FORMATS, configure_cli_logging, get_logger
from walkit._loop import EVENT_LOOPS, ParkingLot, current_loop, event_loop_name
from walkit._loop import resolve as resolve_event_loop
from walkit._loop import run as run_event_loop
from walkit._private_file import read_private_text
from walkit._retry import pause
from walkit.net._auth import read_token_file
from walkit.net._direct import direct_fd, unwritten, write_now
from walkit.net._receive import Receiver
from walkit.net._tls import CLIENT_AUTH_MODES

__all__ = [
    "CLIENT_AUTH_MODES",
    "EVENT_LOOPS",
    "LOG_FORMATS",
    "ParkingLot",
    "Receiver",
    "bookie_hint",
    "collapse",
    "configure_cli_logging",
    "current_loop",
    "direct_fd",
    "event_loop_name",
    "get_logger",
    "group_leaves",
    "missing_bookie_modules",
    "pause",
    "read_private_text",
    "read_token_file",
    "resolve_event_loop",
    "run_event_loop",
    "unwritten",
    "write_now",
]

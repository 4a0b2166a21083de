"""The bookie's server room: client connections, request handling, and the HTTP admin endpoint.

It imports :mod:`walkit_bookie.storage`, never :mod:`walkit_bookie.lifecycle`: what the admin
endpoint needs of the running bookie is the :class:`AdminTarget` protocol.
"""

from walkit_bookie.server._admin import serve_admin
from walkit_bookie.server._admission import handle_stream
from walkit_bookie.server._badinput import BadInputLog
from walkit_bookie.server._connection import Connection
from walkit_bookie.server._metrics import AdminTarget, BookieCollector
from walkit_bookie.server._requests import RequestHandler

__all__ = [
    "AdminTarget",
    "BadInputLog",
    "BookieCollector",
    "Connection",
    "RequestHandler",
    "handle_stream",
    "serve_admin",
]

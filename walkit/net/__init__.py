"""The transport seam: how the client and the bookie reach each other.

Everything above this seam talks to a :class:`Network`; TCP is the real one and
``walkit.testing`` provides a simulated one with faults.
"""

from walkit.net._auth import AuthNetwork
from walkit.net._network import ClientStream, Network, StreamHandler, TcpNetwork
from walkit.net._tls import ClientAuth, TLSConfig, TlsNetwork, principal_of

__all__ = [
    "AuthNetwork",
    "ClientAuth",
    "ClientStream",
    "Network",
    "StreamHandler",
    "TLSConfig",
    "TcpNetwork",
    "TlsNetwork",
    "principal_of",
]

"""How every `walkit` subcommand connects: the metadata URL, the placement policy, and TLS
to the bookies (``--tls-ca/--tls-cert/--tls-key``, or the ``WALKIT_TLS_*`` variables that
``walkit sandbox --tls`` prints)."""

from __future__ import annotations

import argparse
import os
import time
from typing import Any, Final

from walkit.net import TLSConfig

__all__ = ["TLS_ENV", "add_tls_options", "connect_options"]

#: Option name -> environment variable giving its default.
TLS_ENV: Final = {
    "tls_ca": "WALKIT_TLS_CA",
    "tls_cert": "WALKIT_TLS_CERT",
    "tls_key": "WALKIT_TLS_KEY",
}


def add_tls_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("TLS to the bookies")
    group.add_argument(
        "--tls-ca", metavar="PEM", help="CA bundle that signs the bookies' certificates "
        "(turns TLS on); default $WALKIT_TLS_CA"
    )  # fmt: skip
    group.add_argument(
        "--tls-cert", metavar="PEM", help="client certificate, for bookies that ask for one; "
        "default $WALKIT_TLS_CERT"
    )  # fmt: skip
    group.add_argument(
        "--tls-key", metavar="PEM", help="the client certificate's key; default $WALKIT_TLS_KEY"
    )


def tls_config(args: argparse.Namespace) -> TLSConfig | None:
    """The TLS settings from the options or the environment (None: plain TCP)."""
    values = {
        name: getattr(args, name, None) or os.environ.get(env) or None
        for name, env in TLS_ENV.items()
    }
    if not any(values.values()):
        return None
    return TLSConfig(ca=values["tls_ca"], cert=values["tls_cert"], key=values["tls_key"])


def connect_options(args: argparse.Namespace) -> dict[str, Any]:
    """Keyword arguments of ``Client.connect`` for a subcommand's options."""
    return {
        "placement": getattr(args, "placement", "default"),
        "wall_clock": time.time,
        "tls": tls_config(args),
    }

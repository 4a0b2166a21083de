"""How every `walkit` subcommand connects: the metadata URL, the placement policy, and TLS
to the bookies (``--tls-ca/--tls-cert/--tls-key``, or the ``WALKIT_TLS_*`` variables that
``walkit sandbox --tls`` prints), and the token for bookies that authenticate clients
(``--auth-token-file`` or ``WALKIT_AUTH_TOKEN_FILE``)."""

from __future__ import annotations

import argparse
import os
import time
from typing import Any, Final

from walkit._core.auth import TokenAuth
from walkit.errors import AuthenticationError, WalkitError
from walkit.net import TLSConfig
from walkit.net._auth import read_token_file

__all__ = [
    "AUTH_TOKEN_ENV",
    "TLS_ENV",
    "add_tls_options",
    "connect_options",
    "describe_error",
    "read_token_file",
]

AUTH_TOKEN_ENV: Final = "WALKIT_AUTH_TOKEN_FILE"

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
    group.add_argument(
        "--auth-token-file", metavar="PATH", help="a file (mode 0600) holding the token for "
        "bookies started with --auth token; default $WALKIT_AUTH_TOKEN_FILE"
    )  # fmt: skip


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
        "auth": auth_config(args),
    }


def auth_config(args: argparse.Namespace) -> TokenAuth | None:
    """The token from ``--auth-token-file`` or the environment (None: no authentication)."""
    path = getattr(args, "auth_token_file", None) or os.environ.get(AUTH_TOKEN_ENV) or None
    return None if path is None else read_token_file(path)


def describe_error(exc: WalkitError) -> str:
    """``exc`` as a subcommand reports it. A bookie's refusal names the library's way to send
    a token; a command line user's way is an option of its own, so it is named too."""
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, AuthenticationError):
        text += f" (walkit commands: --auth-token-file PATH, or ${AUTH_TOKEN_ENV})"
    return text
